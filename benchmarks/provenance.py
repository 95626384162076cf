"""What a benchmark records of where it ran: the CPU (which moves win differs by CPU), the
cores, the compiler, and the checkout's commit. Every script prints `describe()` first."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str | None:
    """The checkout's short commit, "+dirty" where tracked files have uncommitted changes; None
    where there is no git or no repository (a copy of the tree, as on a device machine)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not head:
        return None
    return f"{head}+dirty" if dirty else head


def describe() -> str:
    """One line: CPU, cores this process may use, jaxlib, commit."""
    from hlo.environment import cpu_model_name

    try:
        jaxlib = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        jaxlib = "not installed"
    return (f"machine: {cpu_model_name()}, {len(os.sched_getaffinity(0))} cores, jaxlib {jaxlib}, "
            f"commit {commit() or 'unknown'}")
