"""Patching JAX: the hook takes the place of JAX's compile function.

JAX lowers a jitted function to StableHLO and hands it to `jax._src.compiler.
compile_or_get_cached`. `route(compile)` puts a wrapper there that calls
`compile(original, *args, **kwargs)`, `original` being JAX's own function, never an earlier
wrapper (routing again replaces the route); `restore()` gives JAX its own back. The caller
serializes the two (delivery.hook does, under its install lock).
"""

from __future__ import annotations

import functools
from typing import Any, Callable


def route(compile: Callable[..., Any]) -> None:
    """Every JAX compile of the process goes through `compile(original, *args, **kwargs)`."""
    from jax._src import compiler

    original = getattr(compiler.compile_or_get_cached, "__wrapped__", compiler.compile_or_get_cached)

    @functools.wraps(original)
    def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
        return compile(original, *args, **kwargs)

    compiler.compile_or_get_cached = compile_or_get_cached


def restore() -> None:
    """JAX compiles with its own function again."""
    from jax._src import compiler

    compiler.compile_or_get_cached = getattr(compiler.compile_or_get_cached, "__wrapped__",
                                             compiler.compile_or_get_cached)
