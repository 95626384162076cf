"""Search spaces as data: the allowlisted flags of a backend and the values each may take.

A space is built from the flag table (`tuner.flags.FLAGS`, the single allowlist the store and
the hook enforce too), keeping the flags of the platform that the installed compiler accepts
(`accepted_flags`). A config is a sparse mapping: flags left out keep the compiler's default,
and the empty config is the default itself.

Graph level: every such flag (`graph_space`). Op level (`op_space`): the knobs that act on one
class of kernel (`OP_KNOBS`): the library routing of its fusion types (each library's list
with the class's types added or taken out, relative to the compiler's default list) and its
codegen flags, small enough to search exhaustively.

What "accepted" means differs per channel. A compile-option override is checked by XLA, so a
flag is accepted when a compile with it succeeds. A backend extra option is never checked (XLA
ignores keys it does not know), so a compile proves nothing: such a flag is accepted only when
it is seen to act, when a small probe module (a matrix-vector product, where all three declared
CPU options act on jaxlib 0.10.2) compiles to different machine code (`tuner.compile.
object_code`) with one of the flag's values than with none. A flag a new XLA dropped or renamed
thus leaves the spaces instead of being searched in vain. Both probes run once per process and
take about a second together.
"""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass

from tuner.flags import FLAGS, CompilerConfig, FlagSpec, FlagValue, is_default, to_json


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
        # A backend extra bool acts by its presence: false is the absent default (tuner.flags).
        return (True,) if spec.channel == "backend_extra" else (True, False)
    if spec.type == "int":
        return tuple(int(c) for c in spec.choices)
    if spec.type == "enum":
        return spec.choices
    if spec.type == "repeated_enum":  # every subset, the empty one included (clears the list)
        return tuple(combo for size in range(len(spec.choices) + 1)
                     for combo in itertools.combinations(spec.choices, size))
    return ()


def graph_space(platform: str = "cpu", accepted: frozenset[str] | None = None,
                defaults: CompilerConfig | None = None) -> SearchSpace:
    """The graph-level space of `platform`: the table's flags with a finite domain, limited to
    `accepted` (the names the installed compiler takes; see `accepted_flags`) when given, each
    without its value in the compiler's `defaults` (see tuner.compile.compiler_defaults): that
    is the config without the flag, and would only be measured again as another program."""
    params = []
    for spec in FLAGS.values():
        if spec.platform != platform:
            continue
        if accepted is not None and spec.name not in accepted:
            continue
        values = tuple(v for v in values_of(spec) if not is_default(spec.name, v, defaults or {}))
        if values:
            params.append(Param(spec.name, values))
    return SearchSpace(tuple(params))


# The flags that route fusion types to a library (YNNPACK, XNNPACK, oneDNN); a type in none of
# them is left to XLA's own emitters.
LIBRARY_FLAGS = ("xla_cpu_experimental_ynn_fusion_type", "xla_cpu_experimental_xnn_fusion_type",
                 "xla_cpu_experimental_onednn_fusion_type")


def library_list(flag: str, members: set[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A library flag's list of fusion types in the table's order (types the table does not
    know last, kept so that nothing the compiler defaults to is dropped unseen)."""
    order = FLAGS[flag].choices
    return tuple(t for t in order if t in members) + tuple(sorted(set(members) - set(order)))


@dataclass(frozen=True)
class OpKnobs:
    """What XLA's CPU backend exposes for one class of kernel."""

    routing: tuple[str, ...]  # the library fusion types that decide which library runs it
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

# GPU op level: XLA's Triton GEMM tile configs (the fields of xla.AutotuneResult.TritonGemmKey,
# xla/autotuning.proto), applied per fusion through an autotune-results file rather than flags.
TRITON_GEMM_SPACE = SearchSpace((
    Param("block_m", (16, 32, 64, 128, 256)),
    Param("block_n", (16, 32, 64, 128, 256)),
    Param("block_k", (16, 32, 64, 128)),
    Param("split_k", (1, 2, 4, 8, 16)),
    Param("num_stages", (1, 2, 3, 4)),
    Param("num_warps", (2, 4, 8, 16)),
))


def op_space(op_class: str, accepted: frozenset[str] | None = None,
             defaults: CompilerConfig | None = None) -> SearchSpace:
    """The CPU op-level space of kernels of `op_class`, relative to the compiler's `defaults`
    (see tuner.compile.compiler_defaults): per library flag, its default list with the class's
    fusion types added and with them taken out (whichever differs from the default); per codegen
    flag, its values but the default. Limited to `accepted` flags when given."""
    knobs, defaults = OP_KNOBS[op_class], defaults or {}
    params = []
    for name in LIBRARY_FLAGS if knobs.routing else ():
        default = set(defaults.get(name, ()))
        added = library_list(name, default | set(knobs.routing))
        removed = library_list(name, default - set(knobs.routing))
        values = tuple(v for v in dict.fromkeys((added, removed)) if set(v) != default)
        if values:
            params.append(Param(name, values))
    for name in knobs.codegen:
        values = tuple(v for v in values_of(FLAGS[name]) if v != defaults.get(name))
        if values:
            params.append(Param(name, values))
    return SearchSpace(tuple(p for p in params if accepted is None or p.name in accepted))


@functools.lru_cache(maxsize=None)
def accepted_flags(platform: str = "cpu") -> frozenset[str]:
    """The table's flags of `platform` that the installed compiler accepts per executable:
    overrides it compiles with, backend extra options it is seen to act on (see the module
    docstring). Probed once per process."""
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
    extra = [spec for spec in FLAGS.values()
             if spec.platform == platform and spec.channel == "backend_extra" and values_of(spec)]
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
    from ingest.hlo_module import from_text
    from tuner.compile import compile_module, object_code

    probe = from_text(_PROBE_HLO, "fdo_backend_extra_probe").proto
    default = object_code(compile_module(probe, {}).executable)
    if not default:
        return set()
    return {spec.name for spec in specs
            if any(object_code(compile_module(probe, {spec.name: value}).executable) != default
                   for value in values_of(spec))}
