"""One process at a time: a lock file that the OS releases when its holder dies, so a crash never
leaves a stale lock behind (nightly runs, the scheduler, validation runs)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


class LockHeld(RuntimeError):
    """Another process holds the lock; the message names it and its pid."""


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, error: type[LockHeld] = LockHeld) -> Iterator[None]:
    """Hold `path` locked for the block, or raise `error` at once naming `what` holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise error(f"another {what} holds {path} (pid {handle.read().strip() or '?'})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
