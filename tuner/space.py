"""Search spaces as data: the allowlisted flags of a backend and the values each may take.

A space is built from the flag table (`tuner.flags.FLAGS`, the single allowlist the store and
the hook enforce too), keeping the flags of the platform that the installed compiler accepts
per executable. A config is a sparse mapping: flags left out keep the compiler's default, and
the empty config is the default itself.
"""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass

from tuner.flags import FLAGS, CompilerConfig, FlagSpec, FlagValue, to_json


@dataclass(frozen=True)
class Param:
    """One flag of a space and the values a search may give it."""

    name: str
    values: tuple[FlagValue, ...]


@dataclass(frozen=True)
class SearchSpace:
    """The params a search explores, in a stable order."""

    params: tuple[Param, ...]

    def size(self) -> int:
        """How many configs the space holds (every param at default or one of its values)."""
        total = 1
        for param in self.params:
            total *= len(param.values) + 1
        return total

    def param(self, name: str) -> Param:
        """The param called `name`."""
        return next(p for p in self.params if p.name == name)


def config_key(config: CompilerConfig) -> str:
    """A canonical text of a config: equal configs, equal keys."""
    return json.dumps(to_json(config), sort_keys=True, separators=(",", ":"))


def values_of(spec: FlagSpec) -> tuple[FlagValue, ...]:
    """The values a search may give a flag."""
    if spec.type == "bool":
        return (True, False)
    if spec.type == "int":
        return tuple(int(c) for c in spec.choices)
    if spec.type == "enum":
        return spec.choices
    if spec.type == "repeated_enum":  # every subset, the empty one included (clears the list)
        return tuple(combo for size in range(len(spec.choices) + 1)
                     for combo in itertools.combinations(spec.choices, size))
    return ()


def graph_space(platform: str = "cpu", accepted: frozenset[str] | None = None) -> SearchSpace:
    """The graph-level space of `platform`: per-executable flags with a finite domain, limited to
    `accepted` (the names the installed compiler takes; see `accepted_flags`) when given."""
    params = []
    for spec in FLAGS.values():
        if spec.platform != platform or spec.channel != "option":
            continue
        if accepted is not None and spec.name not in accepted:
            continue
        values = values_of(spec)
        if values:
            params.append(Param(spec.name, values))
    return SearchSpace(tuple(params))


@functools.lru_cache(maxsize=None)
def accepted_flags(platform: str = "cpu") -> frozenset[str]:
    """The table's flags of `platform` that the installed compiler accepts per executable
    (probed by compiling once per flag, so once per process)."""
    from tuner.compile import CompileError, check_options

    accepted = set()
    for spec in FLAGS.values():
        if spec.platform != platform or spec.channel != "option" or not values_of(spec):
            continue
        try:
            check_options({spec.name: values_of(spec)[0]})
        except CompileError:
            continue
        accepted.add(spec.name)
    return frozenset(accepted)
