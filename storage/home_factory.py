"""Which `Home` a root names (`open_home`): the factory beside both implementations, so that
`storage.home` (the interface) imports neither of them; and `atomic_write` for a file outside
any home, through the home its path names."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Callable

from storage.home import Home
from storage.local import LocalHome


def open_home(root: Home | str | Path) -> Home:
    """The home at `root`: a local path, or a URL (gs://, s3://, ...) served by Beam."""
    if isinstance(root, Home):
        return root
    if "://" in str(root):
        from storage.url import UrlHome  # Beam only for URL homes: the hook reads without it
        return UrlHome(str(root))
    return LocalHome(root)


def atomic_write(location: Any, data: bytes | str | Callable[[IO[bytes]], None], durable: bool = True) -> None:
    """`Home.atomic_write` for a file outside any home (a spool, a cache, a marker)."""
    open_home(str(location)).atomic_write(location, data, durable)
