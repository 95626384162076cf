"""Progress bars, the one way every stage makes them: drawn only where someone watches."""

from __future__ import annotations

from typing import Iterable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress_bar(iterable: Iterable[T] | None = None, *, desc: str, unit: str = "it",
                 total: int | None = None, initial: int = 0, enabled: bool = True) -> tqdm:
    """A tqdm bar over `iterable` (or one to update by hand, of `total` steps). `enabled` is the
    caller's wish (off under --json); where it is on, a stderr that is no terminal (a pipe, a log
    file) still turns the bar off (tqdm's `disable=None`), so bars never land in logs."""
    return tqdm(iterable, desc=desc, unit=unit, total=total, initial=initial,
                disable=None if enabled else True)
