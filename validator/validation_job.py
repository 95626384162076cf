"""The validator in the background: an APScheduler (3.x) interval job.

`add_validation_job` adds it to any scheduler the caller runs (`fdo scheduler`, `fdo serve
--validate-every`, or the blocking scheduler of `fdo validate` without `--once`). One run at a
time: the job is never run concurrently with itself (max_instances=1, missed runs coalesced),
and a run that finds another validation holding the home (a manual `fdo validate`) skips.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from storage.home import Home
from storage.home_factory import open_home
from validator.run import ValidatorBusy
from validator.validate import RunReport, ValidateSettings, validate

JOB_ID = "fdo-validate"
log = logging.getLogger("fdo.validator")


def add_validation_job(scheduler: Any, home: Home | str, minutes: float, budget_minutes: float | None,
                       toolchain: str | None = None, start_now: bool = True) -> Any:
    """Add (or replace) the interval job that validates `home` (local or a URL) every `minutes`,
    each run within `budget_minutes`, under `toolchain` (None: the interpreter running the
    scheduler); returns the APScheduler Job."""
    if minutes <= 0:
        raise ValueError(f"validation interval must be positive, not {minutes} minutes")
    first = datetime.datetime.now(datetime.UTC) if start_now else None
    return scheduler.add_job(
        run_scheduled_validation, "interval", minutes=minutes, id=JOB_ID, replace_existing=True,
        max_instances=1, coalesce=True, misfire_grace_time=None, name="fdo validate",
        kwargs={"home": str(home), "budget_minutes": budget_minutes, "toolchain": toolchain},
        **({"next_run_time": first} if first is not None else {}))


def run_scheduled_validation(home: str, budget_minutes: float | None,
                             toolchain: str | None = None) -> RunReport | None:
    """One scheduled run on the home at `home` (a path or a URL); None when another validation
    held the home."""
    try:
        report = validate(open_home(home), toolchain, ValidateSettings(budget_minutes=budget_minutes))
    except ValidatorBusy as busy:
        log.info("validation skipped: %s", busy)
        return None
    log.info("validation %s: %s", report.run_id, report.to_json())
    return report
