"""JAX's persistent compilation cache, keyed on the autotune results a compile was given.

JAX's persistent cache keys an executable on its compile options. jax 0.11 leaves the
per-fusion directory's path out of that key, and with it any trace of the results: the
executable built with them would be keyed as the default's. So where the persistent cache is on
(`persistent_cache_on`), a delivery is kept (`execution.autotune.per_fusion_directory.Delivery`)
and `CacheKeyed` adds the results' digest to the cache key through JAX's `cache_key.custom_hook`
for that compile alone: a compile of the same module with the same results hits, any other keys
apart (the default's, other results').
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from execution.autotune.results import AutotuneResults

# What JAX records in the compiling thread when its persistent cache hands back an executable.
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def persistent_cache_on() -> bool:
    """Whether JAX's persistent compilation cache is on in this process (its executables are
    then keyed on their compile options: a delivery is `kept`)."""
    from jax._src import compilation_cache

    return compilation_cache.is_persistent_cache_enabled()


class CacheKeyed:
    """A context manager around one compile (JAX's `compile_or_get_cached`, in this thread):
    JAX's persistent-cache key of that compile holds the digest of `results`, and on exit
    `from_cache` says whether JAX handed back an executable from that cache instead of
    compiling. Other compiles, in other threads or outside the block, keep JAX's own key: the
    digest goes through `jax._src.cache_key.custom_hook`, chained to whatever it was, which adds
    nothing outside such a block."""

    def __init__(self, results: AutotuneResults) -> None:
        self.mark = f"fleet-fdo autotune results {results.digest()}"
        self.from_cache = False
        self._outer: tuple[str | None, int] = (None, 0)

    def __enter__(self) -> "CacheKeyed":
        _watch_cache_keys()
        self._outer = (getattr(_compiling, "mark", None), getattr(_compiling, "hits", 0))
        _compiling.mark, _compiling.hits = self.mark, 0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.from_cache = _compiling.hits > 0
        _compiling.mark, _compiling.hits = self._outer


_compiling = threading.local()  # the CacheKeyed block this thread is in: its mark and hits


@functools.lru_cache(maxsize=None)
def _watch_cache_keys() -> None:
    """Chain `CacheKeyed`'s mark into JAX's cache key and count JAX's persistent-cache hits in
    the thread that compiles; once a process, on first use."""
    from jax._src import cache_key, monitoring

    previous = cache_key.custom_hook

    def custom_hook() -> str:
        mark = getattr(_compiling, "mark", None)
        return previous() if mark is None else previous() + mark

    def on_event(event: str, **_: Any) -> None:
        if event == CACHE_HIT_EVENT and getattr(_compiling, "mark", None) is not None:
            _compiling.hits += 1

    cache_key.custom_hook = custom_hook
    monitoring.register_event_listener(on_event)
