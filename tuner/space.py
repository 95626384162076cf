"""Search spaces as data: the allowlisted flags of a backend and the values each may take.

A space is built from the flag table (`execution.flags.FLAGS`, the single allowlist the store and
the hook enforce too), keeping the flags of the platform that the installed compiler accepts
(`accepted_flags`). A config is a sparse mapping: flags left out keep the compiler's default,
and the empty config is the default itself.

Library routing is searched as a placement (`execution.flags.placement`): one param per fusion type the
installed compiler knows (`execution.compile.library_fusion_types`), whose values are the backends
it may move to (XLA's own emitters and each library whose list flag the compiler accepts), its
default backend left out. So the search's most valuable moves on CPU, one fusion type to
another backend, are single mutations, not one subset among 32 of a list.

Graph level: every such param and flag (`graph_space`). A graph's platform picks the flags: a
GPU graph (environment platform "gpu") gets XLA:GPU's flags and no placements (which library
runs a dot is a flag there: Triton GEMM fusions against cuBLAS), a CPU graph the CPU space. Op
level (`op_space`, CPU): the knobs that act on one class of kernel (`OP_KNOBS`): the placement of
its fusion types and its codegen flags, small enough to search exhaustively.

What "accepted" means differs per channel. A compile-option override is checked by XLA, so a
flag is accepted when a compile with it succeeds. A backend extra option is never checked (XLA
ignores keys it does not know), so a compile proves nothing: such a flag is accepted only when
it is seen to act, when a small probe module (a matrix-vector product, where all three declared
CPU options act on jaxlib 0.10.2) compiles to different machine code (`execution.compile.
object_code`) with one of the flag's values than with none. A flag a new XLA dropped or renamed
thus leaves the spaces instead of being searched in vain. Both probes run once per process and
take about a second together.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Iterable

from execution.flags import (
    FLAGS,
    LIBRARY_FLAGS,
    PLACEMENT,
    XLA_BACKEND,
    CompilerConfig,
    FlagSpec,
    FlagValue,
    is_default,
    placement_key,
    to_json,
)
from vocabulary.flags import Channel, FlagType


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
    """The values a search may give a flag (library lists: none, they are searched as
    placements, see `placement_params`; other repeated enums: their declared `lists`)."""
    if spec.type == FlagType.BOOL:
        # A backend extra bool acts by its presence: false is the absent default
        # (execution.flags.channels).
        return (True,) if spec.channel == Channel.BACKEND_EXTRA else (True, False)
    if spec.type == FlagType.INT:
        return tuple(int(c) for c in spec.choices)
    if spec.type in (FlagType.ENUM, FlagType.PLACEMENT):
        return spec.choices
    if spec.type == FlagType.REPEATED_ENUM:
        return spec.lists
    return ()


def placement_params(fusion_types: Iterable[str], accepted: frozenset[str] | None,
                     defaults: CompilerConfig) -> list[Param]:
    """One param per fusion type: the backends it may move to, its default one left out.
    A library whose list flag is not `accepted` is no backend."""
    backends = [b for b in PLACEMENT.choices
                if b == XLA_BACKEND or accepted is None or LIBRARY_FLAGS[b] in accepted]
    params = []
    for fusion_type in fusion_types:
        name = placement_key(fusion_type)
        values = tuple(b for b in backends if not is_default(name, b, defaults))
        if values:
            params.append(Param(name, values))
    return params


def known_fusion_types(defaults: CompilerConfig) -> tuple[str, ...]:
    """The fusion types of the installed compiler, and any its default lists hold besides."""
    from execution.compile import library_fusion_types

    listed: set[str] = set()
    for flag in LIBRARY_FLAGS.values():
        value = defaults.get(flag, ())
        if isinstance(value, tuple):  # a library flag's value is the fusion types it lists
            listed.update(value)
    return tuple(sorted(set(library_fusion_types().values()) | listed))


def graph_space(platform: str = "cpu", accepted: frozenset[str] | None = None,
                defaults: CompilerConfig | None = None,
                fusion_types: Iterable[str] | None = None, device_count: int = 1) -> SearchSpace:
    """The graph-level space of `platform` (an environment's: "cpu" or "gpu"): on CPU the
    placement of each fusion type (`fusion_types`, the compiler's own by default), then the
    table's flags of the platform with a finite domain, limited to `accepted` (the names the
    installed compiler takes; see `accepted_flags`) when given, each without its value in the
    compiler's `defaults` (see execution.compile.compiler_defaults): that is the config without
    the flag, and would only be measured again as another program. A flag that acts only across
    more devices than `device_count` (`FlagSpec.min_devices`) is left out: the tuner compiles
    and measures every graph on one device."""
    defaults = defaults or {}
    params: list[Param] = []
    if platform == "cpu":
        types = known_fusion_types(defaults) if fusion_types is None else tuple(fusion_types)
        params += placement_params(types, accepted, defaults)
    for spec in FLAGS.values():
        if spec.platform != platform or spec.library or spec.min_devices > device_count:
            continue
        if accepted is not None and spec.name not in accepted:
            continue
        values = tuple(v for v in values_of(spec) if not is_default(spec.name, v, defaults))
        if values:
            params.append(Param(spec.name, values))
    return SearchSpace(tuple(params))


@dataclass(frozen=True)
class OpKnobs:
    """What XLA's CPU backend exposes for one class of kernel."""

    routing: tuple[str, ...]  # the fusion types whose placement decides which backend runs it
    codegen: tuple[str, ...]  # flags that change its generated code


# Per op class (see tuner.op_cut.op_class).
OP_KNOBS: dict[str, OpKnobs] = {
    "convolution": OpKnobs(("INDIVIDUAL_CONVOLUTION",), ("xla_cpu_prefer_vector_width",)),
    "dot": OpKnobs(("INDIVIDUAL_DOT", "DOT"),
                   ("xla_cpu_prefer_vector_width", "xla_llvm_dot_tiling_factor")),
    "reduce": OpKnobs(("REDUCE",), ("xla_cpu_prefer_vector_width",)),
    "eltwise": OpKnobs(("ELTWISE",), ("xla_cpu_prefer_vector_width",)),
    "other": OpKnobs((), ("xla_cpu_prefer_vector_width",)),
}

def op_space(op_class: str, accepted: frozenset[str] | None = None,
             defaults: CompilerConfig | None = None) -> SearchSpace:
    """The CPU op-level space of kernels of `op_class`, relative to the compiler's `defaults`
    (see execution.compile.compiler_defaults): the placement of the class's fusion types, and its
    codegen flags' values but the default. Limited to `accepted` flags when given."""
    knobs, defaults = OP_KNOBS[op_class], defaults or {}
    params = placement_params(knobs.routing, accepted, defaults)
    for name in knobs.codegen:
        if accepted is not None and name not in accepted:
            continue
        values = tuple(v for v in values_of(FLAGS[name]) if v != defaults.get(name))
        if values:
            params.append(Param(name, values))
    return SearchSpace(tuple(params))


@functools.lru_cache(maxsize=None)
def accepted_flags(platform: str = "cpu") -> frozenset[str]:
    """The table's flags of `platform` that the installed compiler accepts per executable:
    overrides and build options it compiles with, backend extra options it is seen to act on
    (see the module docstring). Probed once per process, on its default device: the GPU flags
    of a CPU-only jaxlib are probed too (a DebugOptions field is there whatever the platform,
    so the installed compiler's DebugOptions decides)."""
    from execution.compile import CompileError, check_options

    accepted = set()
    for spec in FLAGS.values():
        if spec.platform != platform or spec.channel not in (Channel.OPTION, Channel.BUILD_OPTION):
            continue
        # A library list is probed empty (every type to XLA's emitters), a valid value of it.
        probe = () if spec.library else next(iter(values_of(spec)), None)
        if probe is None:
            continue
        try:
            check_options({spec.name: probe})
        except CompileError:
            continue
        accepted.add(spec.name)
    extra = [spec for spec in FLAGS.values()
             if spec.platform == platform and spec.channel == Channel.BACKEND_EXTRA and values_of(spec)]
    if extra and platform == "cpu":
        accepted |= acting_backend_extra(extra)
    return frozenset(accepted)


# A matrix-vector product and an elementwise tail: XLA emits both itself (no library call), so
# code-size, unrolling and dot-tiling options all show in its machine code.
_PROBE_HLO = """HloModule fdo_backend_extra_probe
ENTRY e {
  m = f32[64,64]{1,0} parameter(0)
  v = f32[64]{0} parameter(1)
  d = f32[64]{0} dot(m, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[64]{0} tanh(d)
  one = f32[] constant(1)
  b = f32[64]{0} broadcast(one), dimensions={}
  ROOT a = f32[64]{0} add(t, b)
}
"""


def acting_backend_extra(specs: list[FlagSpec]) -> set[str]:
    """The CPU backend extra options among `specs` that change the probe module's machine code
    with one of their values; none if the machine code cannot be read."""
    from execution.compile import compile_module, object_code
    from hlo.module import from_text

    probe = from_text(_PROBE_HLO, "fdo_backend_extra_probe").proto
    default = object_code(compile_module(probe, {}).executable)
    if not default:
        return set()
    return {spec.name for spec in specs
            if any(object_code(compile_module(probe, {spec.name: value}).executable) != default
                   for value in values_of(spec))}
