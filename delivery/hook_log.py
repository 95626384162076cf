"""The hook's warnings: each kind of problem is logged once per hook, so a broken store or an
unwritable home does not flood the job's log (logger `fleet_fdo.hook`)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("fleet_fdo.hook")


class HookLog:
    """Warns of a problem the first time its kind comes up; every room of the hook shares one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def warn(self, message: str, kind: str) -> None:
        """Log `message` unless a problem of `kind` was logged before."""
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning("fleet-fdo hook: %s", message)
