"""Jobs that misbehave, for the sandbox tests (they run inside a worker process)."""

import os
import time


def crash() -> None:
    os.abort()


def hang() -> None:
    time.sleep(3600)


def allocate(gib: int) -> int:
    return len(bytearray(gib * 1024**3))


def echo(value: int) -> int:
    return value
