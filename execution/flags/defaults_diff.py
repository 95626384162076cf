"""A config against the installed compiler's defaults (as `execution.compile.compiler_defaults`
reads them): whether a value is the default (`is_default`), a config without its default
values (`without_defaults`: the same compile), and a config as a change on top of another
(`on_top_of`). A placement is compared by where the compiler routes its fusion type.
"""

from __future__ import annotations

from execution.flags.flag_table import XLA_BACKEND, CompilerConfig, FlagValue, fusion_type_of
from execution.flags.placement import default_backends


def is_default(name: str, value: FlagValue, defaults: CompilerConfig) -> bool:
    """Whether `value` is the compiler's default for flag `name` (repeated enums compare as
    sets: the order of a library's fusion types does not matter; a placement is the default
    when the compiler routes the type to that backend alone)."""
    fusion_type = fusion_type_of(name)
    if fusion_type is not None:
        backends = default_backends(fusion_type, defaults)
        return backends == ({value} if value != XLA_BACKEND else set())
    if name not in defaults:
        return False
    default = defaults[name]
    if isinstance(value, tuple) and isinstance(default, tuple):
        return set(value) == set(default)
    return value == default


def without_defaults(config: CompilerConfig, defaults: CompilerConfig) -> CompilerConfig:
    """`config` without the flags it sets to the compiler's `defaults`: the same compile."""
    return {name: value for name, value in config.items() if not is_default(name, value, defaults)}


def on_top_of(config: CompilerConfig, baseline: CompilerConfig,
              defaults: CompilerConfig) -> CompilerConfig | None:
    """`config` as a change to `baseline`: what `{**baseline, **change}` must hold to compile as
    `config` does (as `execution.evaluate.evaluate` compiles a candidate on top of its
    reference): `config`'s own settings, and the compiler's default for each key of `baseline`
    that `config` leaves out. None where such a default cannot be written: a flag the
    compiler's `defaults` do not hold, a fusion type they route to two libraries."""
    change = dict(config)
    for name in baseline.keys() - config.keys():
        fusion_type = fusion_type_of(name)
        if fusion_type is None:
            if name not in defaults:
                return None
            change[name] = defaults[name]
            continue
        backends = default_backends(fusion_type, defaults)
        if len(backends) > 1:
            return None
        change[name] = next(iter(backends), XLA_BACKEND)
    return change
