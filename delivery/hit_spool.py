"""The hit spool: each compile the hook handled, a `Hit` (ingest.tables) appended as one line to
the process's own spool file (ingest.hits: `$FDO_HOME/spool/hits/<host>-<pid>-<t>.jsonl`), which
`fdo ingest hits` lands once the process has ended."""

from __future__ import annotations

import datetime
import threading
from pathlib import Path

from delivery.compile_plan import Plan
from delivery.hook_log import HookLog
from ingest.hits import spool_path, to_line
from ingest.tables import Hit


def hit_of(plan: Plan, job_id: str, optimized_fingerprint: str | None, hook_seconds: float,
           compile_seconds: float) -> Hit:
    """The hit of a compile the hook planned as `plan` (and compiled, its outcome final): the
    entry's version and kind where it found one, its expected speedup where an entry served
    the compile, its config where the compile tried it."""
    found = plan.found
    return Hit(at=datetime.datetime.now(datetime.UTC), job_id=job_id, key=plan.key,
               fingerprint=plan.fingerprint, env_key=plan.env_key, module_name=plan.module_name,
               outcome=plan.outcome, kind=found.entry.kind if found is not None else None,
               config_version=found.version if found is not None else None,
               expected_speedup=plan.expected_speedup if plan.outcome.served else None,
               config=plan.config_text if plan.outcome.tried else None,
               optimized_fingerprint=optimized_fingerprint, reason=plan.reason,
               hook_seconds=hook_seconds, compile_seconds=compile_seconds)


class HitSpool:
    """The spool file of this process's hook; a spool that cannot be written is a warning."""

    def __init__(self, home: Path, log: HookLog) -> None:
        self.path = spool_path(home)
        self._log = log
        self._lock = threading.Lock()

    def append(self, hit: Hit) -> None:
        """Add `hit` to the spool, one line (ingest.hits.to_line), whole."""
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as handle:
                    handle.write(to_line(hit.to_row()))
        except OSError as exc:
            self._log.warn(f"cannot record hits in {self.path}: {exc}", "spool")
