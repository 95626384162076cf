"""`fdo scheduler`: the daemon that runs the loop: `fdo nightly` on a cron, the validator on an
interval, with APScheduler.

- The jobs live in a persistent job store (SQLite under HOME/pipelines), so a restart, even
  after kill -9, picks up the schedule where it was, and a run missed while the daemon was down
  runs on restart if it is within the misfire grace time (several missed runs coalesce into one).
- One daemon per home (a lock file the OS drops if the process dies), one instance of each job
  at a time, and `fdo nightly` itself holds a lock, so a scheduled and a manual run never
  overlap.
- The nightly run is a child process (`fdo nightly`): a crash in it cannot take the daemon
  down, and a run cut short resumes at its stage next time. Each firing is appended to
  HOME/pipelines/scheduler-runs.jsonl, and the run's output to HOME/pipelines/logs/.
- SIGTERM or SIGINT: stop scheduling, stop the running child (it resumes next time), exit 0.
"""

from __future__ import annotations

import datetime
import json
import logging
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from storage.home import Home
from storage.home_factory import open_home

log = logging.getLogger("fleet_fdo.scheduler")
NIGHTLY_JOB = "nightly"
_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()


@dataclass(frozen=True)
class SchedulerSettings:
    """When to run what."""

    cron: str = "0 2 * * *"  # crontab: minute hour day month weekday (six fields: seconds first)
    misfire_grace_minutes: float = 360.0
    nightly_args: tuple[str, ...] = ()  # extra `fdo nightly` arguments (budgets, Beam flags)
    validate_every_minutes: float | None = None  # None: the validator runs only inside nightly
    validate_budget_minutes: float = 10.0


def parse_cron(text: str) -> CronTrigger:
    """A trigger from a crontab line (5 fields, or 6 with seconds first); ValueError if bad."""
    fields = text.split()
    if len(fields) == 5:
        return CronTrigger.from_crontab(text, timezone=datetime.UTC)
    if len(fields) == 6:
        second, minute, hour, day, month, weekday = fields
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=weekday, timezone=datetime.UTC)
    raise ValueError(f"cron {text!r}: expected 5 fields (or 6, seconds first)")


def run_scheduler(home: Home, settings: SchedulerSettings, stop: threading.Event | None = None) -> int:
    """Run the daemon on `home` (a local one) until SIGTERM/SIGINT (or `stop`); returns the
    exit code."""
    root = open_home(home).local("fdo scheduler")
    trigger = parse_cron(settings.cron)
    stop = stop or threading.Event()
    with open_home(root).lock(root / "pipelines" / "scheduler.lock", "fdo scheduler", wait=False):
        scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{root / 'pipelines' / 'scheduler.sqlite'}")},
            job_defaults={"coalesce": True, "max_instances": 1,
                          "misfire_grace_time": int(settings.misfire_grace_minutes * 60)},
            timezone=datetime.UTC)
        scheduler.start(paused=True)
        _schedule_nightly(scheduler, root, trigger, settings)
        if settings.validate_every_minutes:
            from validator.validation_job import add_validation_job

            add_validation_job(scheduler, str(root), settings.validate_every_minutes,
                               settings.validate_budget_minutes)
        scheduler.resume()
        nightly = scheduler.get_job(NIGHTLY_JOB)
        print(f"fdo scheduler: nightly on '{settings.cron}' (UTC), next run {nightly.next_run_time}; "
              f"job store {root / 'pipelines' / 'scheduler.sqlite'}", flush=True)
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
        stop.wait()
        scheduler.shutdown(wait=False)
        _stop_children()
    print("fdo scheduler: stopped", flush=True)
    return 0


def run_nightly_job(home: str, nightly_args: list[str]) -> int:
    """The scheduled job: `fdo nightly` for today, as a child process; returns its exit code."""
    command = [sys.executable, "-m", "pipelines.cli", "--home", home, "nightly", *nightly_args]
    fired = datetime.datetime.now(datetime.UTC)
    logs = Path(home) / "pipelines" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"nightly-{fired.date()}.log", "a") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    with _children_lock:
        _children.add(child)
    try:
        code = child.wait()
    finally:
        with _children_lock:
            _children.discard(child)
    record = {"fired_at": fired.isoformat(), "seconds": (datetime.datetime.now(datetime.UTC) - fired).total_seconds(),
              "exit_code": code, "args": nightly_args}
    with open(Path(home) / "pipelines" / "scheduler-runs.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")
    return code


def _schedule_nightly(scheduler: BackgroundScheduler, home: Path, trigger: CronTrigger,
                      settings: SchedulerSettings) -> None:
    """Keep the stored job (and its next run time) if its schedule is unchanged, so a restart
    neither skips nor repeats a run; otherwise store the new schedule."""
    args = [str(home), list(settings.nightly_args)]
    existing = scheduler.get_job(NIGHTLY_JOB)
    if existing is not None and str(existing.trigger) == str(trigger) and list(existing.args) == args:
        log.info("nightly job kept from the job store, next run %s", existing.next_run_time)
        return
    scheduler.add_job(run_nightly_job, trigger, args=args, id=NIGHTLY_JOB, replace_existing=True)


def _stop_children() -> None:
    with _children_lock:
        for child in _children:
            child.terminate()

