"""Real processes at known points of their work: waiting until they get there, and killing one
there (the resume tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execvp(sys.argv[1], sys.argv[1:])")


def kill_9_once_journaled(command: list[str], root: Path, pattern: str, lines: int,
                          timeout: float = 300) -> Path | None:
    """Start `command`, and `kill -9` it as soon as a journal `root.glob(pattern)` finds holds
    `lines` lines (or when it ends or `timeout` passes); returns that journal, if one got there."""
    journal, code = signal_once_journaled(command, root, pattern, lines, signal.SIGKILL, timeout)
    assert code == -signal.SIGKILL, "the process ended before it could be killed"
    return journal


def signal_once_journaled(command: list[str], root: Path, pattern: str, lines: int,
                          signum: int, timeout: float = 300) -> tuple[Path | None, int]:
    """Start `command`, and send it `signum` as soon as a journal `root.glob(pattern)` finds
    holds `lines` lines (or when it ends or `timeout` passes); returns that journal, if one got
    there, and the process's exit status."""
    # The child starts with SIGINT at its default action, as a terminal's job would: an
    # ignored SIGINT (a suite started in the background, or by a runner that ignores it) is
    # inherited across exec, and Python then installs no KeyboardInterrupt handler. A small
    # Python resets it and execs the command (a preexec_fn can deadlock a threaded parent).
    process = subprocess.Popen([sys.executable, "-c", SIGINT_DEFAULT, *command],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        found = list(root.glob(pattern))
        if found and len(found[0].read_text().splitlines()) >= lines:
            journal = found[0]
            break
        time.sleep(0.05)
    process.send_signal(signum)
    return journal, process.wait(timeout=timeout)


def wait_for(condition, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
