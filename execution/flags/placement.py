"""Library routing as a placement (Collage's backend placement, for XLA CPU).

Three repeated-enum flags say which fusion types go to YNNPACK, XNNPACK and oneDNN
(`LIBRARY_FLAGS`); a type in none of them is left to XLA's own emitters. A config does not set
those lists: it holds one `placement:<TYPE>` entry per fusion type moved away from the
compiler's default routing, naming its backend (`xla`, `ynn`, `xnn`, `onednn`). `as_flags`
turns the moves into the three lists (`routing`), starting from the compiler's default lists,
so a moved type is taken out of every list before it joins one: a type never sits in two lists,
and a type the table does not know stays where the compiler put it. A mutation of such a config
moves one fusion type to another backend. (The list flags themselves may still be set, by
`--set` or an old stored entry; moves apply on top of them.) `as_placement` is the inverse.
"""

from __future__ import annotations

from execution.flags.flag_table import (
    LIBRARY_FLAGS,
    PLACEMENT_PREFIX,
    XLA_BACKEND,
    CompilerConfig,
    FlagError,
    fusion_type_of,
    placement_key,
)


def default_backends(fusion_type: str, defaults: CompilerConfig) -> frozenset[str]:
    """The libraries the compiler's `defaults` route `fusion_type` to (empty: XLA's emitters)."""
    return frozenset(library for library, flag in LIBRARY_FLAGS.items()
                     if fusion_type in listed(defaults, flag))


def listed(config: CompilerConfig, flag: str) -> tuple[str, ...]:
    """The enum values repeated-enum flag `flag` holds in `config` (none where it is unset);
    FlagError where `config` gives it another kind of value."""
    value = config.get(flag, ())
    if not isinstance(value, tuple):
        raise FlagError(f"{flag}: {value!r} is not a list of enum values")
    return value


def routing(config: CompilerConfig, defaults: CompilerConfig) -> dict[str, tuple[str, ...]]:
    """The three library lists a config compiles with: its own lists where it sets them, else the
    compiler's `defaults`, with each placement move applied (the type out of every list, then
    into its backend's). Lists are sorted: their order means nothing to XLA."""
    lists = {flag: set(listed(config if flag in config else defaults, flag)) for flag in LIBRARY_FLAGS.values()}
    for name, backend in config.items():
        fusion_type = fusion_type_of(name)
        if fusion_type is None:
            continue
        for members in lists.values():
            members.discard(fusion_type)
        if backend != XLA_BACKEND:
            lists[LIBRARY_FLAGS[str(backend)]].add(fusion_type)
    return {flag: tuple(sorted(members)) for flag, members in lists.items()}


def as_flags(config: CompilerConfig, defaults: CompilerConfig) -> CompilerConfig:
    """`config` with its placement moves turned into the library list flags they imply (lists
    equal to the compiler's `defaults` left out): what XLA is given."""
    if not any(name.startswith(PLACEMENT_PREFIX) for name in config):
        return dict(config)
    flags = {name: value for name, value in config.items()
             if not name.startswith(PLACEMENT_PREFIX) and name not in LIBRARY_FLAGS.values()}
    for flag, members in routing(config, defaults).items():
        if set(members) != set(listed(defaults, flag)):
            flags[flag] = members
    return flags


def as_placement(config: CompilerConfig, defaults: CompilerConfig) -> CompilerConfig:
    """`config` with its library list flags turned into placement moves, relative to the
    compiler's `defaults`: the inverse of `as_flags`. A type the lists send to two libraries at
    once has no placement; such a config keeps its lists as they are."""
    if not any(name in LIBRARY_FLAGS.values() for name in config):
        return dict(config)
    lists = routing(config, defaults)
    moves: CompilerConfig = {}
    for fusion_type in sorted({t for members in lists.values() for t in members}
                              | {t for flag in LIBRARY_FLAGS.values() for t in listed(defaults, flag)}):
        backends = {library for library, flag in LIBRARY_FLAGS.items() if fusion_type in lists[flag]}
        if len(backends) > 1:
            return dict(config)
        if backends != default_backends(fusion_type, defaults):
            moves[placement_key(fusion_type)] = backends.pop() if backends else XLA_BACKEND
    others = {name: value for name, value in config.items()
              if name not in LIBRARY_FLAGS.values() and not name.startswith(PLACEMENT_PREFIX)}
    return {**others, **moves}
