"""The service's worker processes: where the work that can block or hold the interpreter runs,
away from the event loop that answers look-ups."""

from __future__ import annotations

import os
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_process

WORKER_NICE = 19  # background work: beside the server, a worker gets the CPU the server leaves
T = TypeVar("T")


class Processes:
    """Functions run in worker processes, one at a time, at a lower CPU priority (WORKER_NICE):
    the interpreter serving look-ups never holds its GIL for them, nor waits on what they wait
    on, and on a busy machine the scheduler runs it first."""

    def __init__(self) -> None:
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker process (picklable: module-level, plain arguments)."""
        if self._limiter is None:  # made on the event loop, which anyio needs running
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_process.run_sync(_lowly, function, args, limiter=self._limiter)


def _lowly(function: Callable[..., T], args: tuple[Any, ...]) -> T:
    """`function(*args)` at WORKER_NICE (set, not added: a worker runs many functions)."""
    os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)
    return function(*args)
