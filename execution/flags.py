"""Compiler flags: the declared table, typed parsing of values, and the XLA channel each uses.

A compiler config is a mapping from flag name to a typed value (bool, int, str, or a tuple of
enum names for repeated enums). It reaches XLA through one of two channels:

- `option`: a DebugOptions field, set per executable through the compile options' overrides
  (XLA checks the name and the value and rejects unknown ones);
- `backend_extra`: an entry of DebugOptions' `xla_backend_extra_options` map, which the compile
  options' overrides cannot reach. It is set per executable too, by merging map entries into the
  serialized compile options (`execution.compile.apply_config`). XLA checks nothing here: it
  ignores keys it does not know and values it cannot parse, and the CPU backend tests its boolean
  keys for presence only (an entry `xla_cpu_optimize_for_size=false` still optimizes for size;
  checked on jaxlib 0.10.2). So `to_xla` writes a true bool as an entry ("true"), leaves a false
  one out (the default), writes ints as text, and only flags the table declares `backend_extra`
  ever reach the map: the table is its allowlist.

Library routing is a placement (Collage's backend placement, for XLA CPU). Three repeated-enum
flags say which fusion types go to YNNPACK, XNNPACK and oneDNN; a type in none of them is left to
XLA's own emitters. A config does not set those lists: it holds one `placement:<TYPE>` entry per
fusion type moved away from the compiler's default routing, naming its backend (`xla`, `ynn`,
`xnn`, `onednn`). `to_xla` turns the moves into the three lists, starting from the compiler's
default lists, so a moved type is taken out of every list before it joins one: a type never
sits in two lists, and a type the table does not know stays where the compiler put it. A
mutation of such a config moves one fusion type to another backend. (The list flags themselves
may still be set, by `--set` or an old stored entry; moves apply on top of them.)

A third channel, `build_option`, is a field of the compile options' ExecutableBuildOptions
rather than of DebugOptions: XLA's effort level (`optimization_level`, JAX's `jax.CompilerEffortLevel`:
O0 to O3; the one effort knob jaxlib 0.11.2 still has, `exec_time_optimization_effort` being
gone there). JAX leaves it UNKNOWN (the compiler decides), so a value there is the job's own.

Each flag belongs to one platform (`FlagSpec.platform`: "cpu" for XLA:CPU, "gpu" for XLA:GPU, as
JAX names a CUDA or ROCm device's platform), and a search of a graph takes its environment's
platform's flags only (tuner.space). A flag that acts only across devices (collective combining
and pipelining) says so in `min_devices`: a graph compiled for one device never searches it.

The table below is the single source of truth for the flags this project knows: their types,
domains, channel, cold-start rank, where the installed compiler's default of each is read
(an option flag's DebugOptions field; a backend extra flag's meaning when absent; a build
option's attribute), and which of their values relax IEEE semantics (`FlagSpec.relaxing`,
`relaxes_numerics`: a config holding one is delivered only to jobs that opted in). Flags not in
the table may still be set through `option` when the installed XLA knows them; XLA parses and
checks their values. No flag that names a file, a directory or a
cache is ever in the table or applied (`check_name`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Union

from hlo.environment import SIDE_EFFECT_FLAG_PARTS
from vocabulary.flags import Channel, FlagType

FlagValue = Union[bool, int, float, str, tuple[str, ...]]
CompilerConfig = dict[str, FlagValue]


class FlagError(ValueError):
    """A flag name or value that cannot be used; the message names the flag and the problem."""


@dataclass(frozen=True)
class FlagSpec:
    """One compiler flag: its type, its domain, how it reaches XLA, and where a search tries it."""

    name: str
    type: FlagType
    choices: tuple[str, ...] = ()  # enum values, short names (without `enum_prefix`)
    enum_prefix: str = ""  # XLA's proto enum prefix, e.g. "LIBRARY_FUSION_TYPE_"
    channel: Channel = Channel.OPTION  # how it reaches XLA (`to_xla`)
    codegen: bool = False  # changes generated code without changing the optimized HLO
    # Changes the program where its key (execution.session.program_key: the optimized HLO's
    # fingerprint, which leaves the schedule out, and the kernels' machine code) cannot see it:
    # the schedule, or what the runtime does (command buffers). Its value joins the key, or a
    # search would take its programs for the default's and never time them.
    unseen: bool = False
    platform: str = "cpu"  # "cpu" | "gpu": the XLA backend it acts on (module docstring)
    library: str = ""  # a library routing list: the backend it sends its fusion types to
    # Cold-start order of a search's one-move neighbourhood (tuner.schedule), lower first: what
    # moved speed most often in our measurements (FIELD-NOTES, docs/) before what rarely does;
    # flags that are reliably slower come last, and are still tried. A GPU flag's rank is a
    # prior from XLA's documentation, not a measurement yet: replace it by what docs/gpu.md's
    # device runs measure.
    rank: int = 5
    # The fewest devices a compile must span for the flag to act at all (collectives): a graph
    # compiled for fewer never searches it (tuner.space.graph_space).
    min_devices: int = 1
    # A repeated enum searched as whole lists (XLA:GPU's command buffer types): the lists a search
    # may set, besides the compiler's default one. Library routing lists are searched as
    # placements instead, and declare none.
    lists: tuple[tuple[str, ...], ...] = ()
    # Where the installed compiler's default is read (execution.compile.compiler_defaults): the
    # flag's field number in xla.DebugOptions (xla/xla.proto), read off jaxlib 0.10.2 by setting
    # each flag through XLA_FLAGS and seeing which field of the serialized debug options changed
    # (a test checks them against jaxlib's own accessors where it has them). The field is a
    # bool for a bool flag and an int32 for the others (an enum travels as its number; a
    # "repeated_enum" is a repeated one), or a string where `text_field` says so. None: no
    # default is read there.
    field: int | None = None
    text_field: bool = False
    numbers: tuple[int, ...] = ()  # an enum field's numbers, in the order of `choices`
    # A backend extra flag's default: what no entry in the map means (see `to_xla`).
    absent: FlagValue | None = None
    # The values that relax IEEE semantics (NaN and infinity handling, signed zeros,
    # reassociation, approximate division and functions): a program compiled with one may
    # compute other numbers than the default's, which a one-step numeric check cannot bound
    # over a training run. Empty: no value does. A tuned config holding one is delivered only
    # to jobs that opted in (`relaxes_numerics`; docs/tuner.md).
    relaxing: tuple[FlagValue, ...] = ()

    @property
    def relaxes_numerics(self) -> bool:
        """Whether some value of the flag relaxes IEEE semantics (`relaxing`)."""
        return bool(self.relaxing)


FUSION_TYPE_PREFIX = "LIBRARY_FUSION_TYPE_"
PLACEMENT_PREFIX = "placement:"
XLA_BACKEND = "xla"  # XLA's own emitters: the backend of a fusion type in no library's list

FLAGS: dict[str, FlagSpec] = {
    spec.name: spec
    for spec in (
        FlagSpec("xla_cpu_experimental_ynn_fusion_type", FlagType.REPEATED_ENUM,
                 enum_prefix=FUSION_TYPE_PREFIX, library="ynn", field=422),
        FlagSpec("xla_cpu_experimental_xnn_fusion_type", FlagType.REPEATED_ENUM,
                 enum_prefix=FUSION_TYPE_PREFIX, library="xnn", field=400),
        FlagSpec("xla_cpu_experimental_onednn_fusion_type", FlagType.REPEATED_ENUM,
                 enum_prefix=FUSION_TYPE_PREFIX, library="onednn", field=399),
        # xla.DebugOptions.CpuSchedulerType
        FlagSpec("xla_cpu_scheduler_type", FlagType.ENUM, ("DEFAULT", "MEMORY_OPTIMIZED"),
                 "CPU_SCHEDULER_TYPE_", rank=1, field=448, numbers=(0, 1)),
        # The flag most often in a best config: 1.13x on the two-tower model's training step,
        # 1.9x (with fast math) on attention with a KV cache (AMD EPYC); 2.2x on that attention,
        # 1.10x on the two-tower, 1.14x on a GNN (Intel Xeon; jaxlib 0.10.2,
        # docs/bench_search_quality.md). Listed here, before the flags of its rank, so that an
        # 8-evaluation search tries it (ties keep this table's order).
        FlagSpec("xla_cpu_disable_loop_unrolling", FlagType.BOOL, channel=Channel.BACKEND_EXTRA,
                 codegen=True, rank=1, absent=False),
        FlagSpec("xla_cpu_copy_insertion_use_region_analysis", FlagType.BOOL, rank=1, field=337),
        FlagSpec("xla_cpu_use_xnnpack", FlagType.BOOL, rank=3, field=359),
        FlagSpec("xla_cpu_use_fusion_emitters", FlagType.BOOL, rank=3, field=376),
        # Fast math lets LLVM reassociate, contract, and assume no NaN, infinity or signed zero;
        # each honor flag takes one of those assumptions back, and acts with fast math on
        # (XLA:CPU's fast-math flags): false relaxes, whatever fast math is set to, so that a
        # config relaxes by its own values alone. Fast min/max ignores NaN operands.
        FlagSpec("xla_cpu_enable_fast_math", FlagType.BOOL, codegen=True, rank=2, field=99,
                 relaxing=(True,)),
        FlagSpec("xla_cpu_enable_fast_min_max", FlagType.BOOL, codegen=True, rank=4, relaxing=(True,)),
        *(FlagSpec(f"xla_cpu_fast_math_honor_{what}", FlagType.BOOL, codegen=True, rank=7, field=field,
                   relaxing=(False,))
          for what, field in (("nans", 120), ("infs", 121), ("division", 126), ("functions", 129))),
        FlagSpec("xla_cpu_prefer_vector_width", FlagType.INT, ("128", "256", "512"), codegen=True,
                 rank=2, field=308),
        FlagSpec("xla_cpu_max_isa", FlagType.ENUM, ("SSE4_2", "AVX", "AVX2", "AVX512"), codegen=True,
                 rank=6, field=333, text_field=True),
        FlagSpec("xla_cpu_parallel_codegen_split_count", FlagType.INT, ("1", "8", "32"), codegen=True,
                 rank=6, field=323),
        FlagSpec("xla_llvm_disable_expensive_passes", FlagType.BOOL, codegen=True, rank=5, field=73),
        # Level 2 is in the best config of an LSTM (with YNN ELTWISE) and of a two-tower model
        # (AMD EPYC, jaxlib 0.10.2; docs/bench_search_quality.md); 0 is reliably slower: the
        # values are tried highest first.
        FlagSpec("xla_backend_optimization_level", FlagType.INT, ("3", "2", "1", "0"), codegen=True,
                 rank=2, field=31),
        FlagSpec("xla_cpu_optimize_for_size", FlagType.BOOL, channel=Channel.BACKEND_EXTRA, codegen=True,
                 rank=8, absent=False),
        # Absent, XLA tiles matrix-vector products by 8 (seen: 8 compiles to the same machine
        # code as no entry; jaxlib 0.10.2): the domain is half and double that, which keeps the
        # dot op space searchable.
        FlagSpec("xla_llvm_dot_tiling_factor", FlagType.INT, ("4", "16"),
                 channel=Channel.BACKEND_EXTRA, codegen=True, rank=6, absent=8),
        # XLA:GPU. Fields read off the DebugOptions descriptor compiled into jaxlib 0.10.2 and
        # 0.11.2 (the same numbers in both), defaults off their compile options (docs/gpu.md);
        # ranks are priors (see `rank`). Triton GEMM fusions against cuBLAS/cuBLASLt: which library runs a
        # dot is GPU's routing lever, as library placement is CPU's.
        FlagSpec("xla_gpu_enable_triton_gemm", FlagType.BOOL, platform="gpu", rank=1, field=188),
        FlagSpec("xla_gpu_triton_gemm_any", FlagType.BOOL, platform="gpu", rank=2, field=190),
        FlagSpec("xla_gpu_enable_cublaslt", FlagType.BOOL, platform="gpu", rank=2, field=166),
        # Command buffers (CUDA graphs) save a launch per kernel, the lever of graphs of many
        # small kernels: none at all, or fusions alone, against the default types (FUSION, CUBLAS,
        # CUBLASLT, CUDNN, CUSTOM_CALL, CONDITIONAL, DYNAMIC_SLICE_FUSION on both jaxlibs).
        FlagSpec("xla_gpu_enable_command_buffer", FlagType.REPEATED_ENUM,
                 ("FUSION", "CUBLAS", "CUDNN", "COLLECTIVES", "CONDITIONAL", "WHILE", "CUSTOM_CALL",
                  "CUBLASLT", "DYNAMIC_SLICE_FUSION", "CONVOLUTION"),
                 platform="gpu", rank=2, field=258, numbers=(1, 2, 3, 4, 5, 6, 7, 8, 9, 11),
                 unseen=True, lists=((), ("FUSION",), ("FUSION", "CUBLAS", "CUBLASLT", "CUDNN", "CUSTOM_CALL",
                                          "CONDITIONAL", "DYNAMIC_SLICE_FUSION", "WHILE"))),
        FlagSpec("xla_gpu_graph_min_graph_size", FlagType.INT, ("1", "2", "20"), platform="gpu", rank=3,
                 field=208, unseen=True),  # default 5
        FlagSpec("xla_gpu_enable_dynamic_slice_fusion", FlagType.BOOL, platform="gpu", rank=3, field=105),
        FlagSpec("xla_gpu_enable_latency_hiding_scheduler", FlagType.BOOL, platform="gpu", rank=3,
                 field=186, unseen=True),
        FlagSpec("xla_gpu_cudnn_gemm_fusion_level", FlagType.INT, ("1", "2", "3"), platform="gpu",
                 rank=3, field=285),  # default 0: no dot fusion goes to cuDNN
        FlagSpec("xla_gpu_enable_cudnn_layer_norm", FlagType.BOOL, platform="gpu", rank=4, field=262),
        FlagSpec("xla_gpu_enable_while_loop_double_buffering", FlagType.BOOL, platform="gpu", rank=4,
                 field=248),
        FlagSpec("xla_gpu_enable_fast_min_max", FlagType.BOOL, platform="gpu", codegen=True, rank=4,
                 field=100, relaxing=(True,)),
        # More Triton tile configs autotuned per GEMM fusion: a slower compile, perhaps a faster
        # kernel.
        FlagSpec("xla_gpu_exhaustive_tiling_search", FlagType.BOOL, platform="gpu", rank=4, field=219),
        # Level 0: no autotuning, XLA's heuristic picks each GEMM's algorithm and tiles. Levels
        # 1 to 4 (the default) time the same candidates and differ in the checks they make.
        FlagSpec("xla_gpu_autotune_level", FlagType.INT, ("0",), platform="gpu", rank=6, field=123),
        FlagSpec("optimization_level", FlagType.ENUM, ("O0", "O1", "O2", "O3"), channel=Channel.BUILD_OPTION,
                 platform="gpu", rank=5, numbers=(9, 19, 29, 39)),
        # Across devices only (min_devices): collective combining thresholds (int64 fields, read
        # as int32: the same varint below 2**31, where the 30 MiB defaults are) and pipelining,
        # as jaxlib 0.11.2 (an enum per collective) and 0.10.2 (a bool per collective) name it;
        # the installed compiler accepts one of the two (tuner.space.accepted_flags).
        *(FlagSpec(f"xla_gpu_{collective}_combine_threshold_bytes", FlagType.INT,
                   ("8388608", "134217728", "536870912"), platform="gpu", rank=3, min_devices=2,
                   field=field)
          for collective, field in (("all_reduce", 157), ("all_gather", 212),
                                    ("reduce_scatter", 213))),
        *(FlagSpec(f"xla_gpu_pipeline_{collective}", FlagType.ENUM, ("OFF", "ON"),
                   "COLLECTIVE_PIPELINING_MODE_", platform="gpu", rank=4, min_devices=2,
                   field=field, numbers=(1, 2))
          for collective, field in (("all_gather", 517), ("all_reduce", 518),
                                    ("reduce_scatter", 519))),
        *(FlagSpec(f"xla_gpu_enable_pipelined_{collective}", FlagType.BOOL, platform="gpu", rank=4,
                   min_devices=2, field=field)
          for collective, field in (("all_reduce", 217), ("all_gather", 227),
                                    ("reduce_scatter", 231))),
    )
}

# The library each routing list sends its fusion types to, by backend name.
LIBRARY_FLAGS: dict[str, str] = {spec.library: spec.name for spec in FLAGS.values() if spec.library}
# Where one fusion type runs: every config key `placement:<TYPE>` has this spec. Moves to XLA's
# own emitters come first in a cold start: on CPU, library routing is the big lever. A move to a
# library ranks PLACEMENT.rank plus its backend's offset here (tuner.schedule.cold_rank): XNNPACK
# and oneDNN took no fusion type of any workload we measured on jaxlib 0.10.2.
PLACEMENT = FlagSpec("placement", FlagType.PLACEMENT, (XLA_BACKEND, *LIBRARY_FLAGS),
                     channel=Channel.PLACEMENT, rank=0)
BACKEND_RANK_OFFSETS = {XLA_BACKEND: 0, "ynn": 1, "xnn": 4, "onednn": 5}
# The build options a config may set (channel BUILD_OPTION), by name.
BUILD_OPTIONS: dict[str, FlagSpec] = {name: spec for name, spec in FLAGS.items()
                                      if spec.channel == Channel.BUILD_OPTION}
_FUSION_TYPE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# Names of flags that load something besides those of hlo.environment.SIDE_EFFECT_FLAG_PARTS
# (`xla_gpu_load_autotune_results_from` reads a file): never applied. Left out of that list, which
# also decides which of a job's XLA_FLAGS join its environment's key, so no key changes.
_LOADS_PARTS = ("_from",)



def parse_assignment(text: str) -> tuple[str, FlagValue]:
    """Parse `name=value` as given to `--set`."""
    name, sep, raw = text.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not name:
        raise FlagError(f"--set {text!r}: expected name=value")
    return name, parse_value(name, raw)


def spec_of(name: str) -> FlagSpec | None:
    """The declared spec of a config key: a table flag, or PLACEMENT for `placement:<TYPE>`."""
    return PLACEMENT if name.startswith(PLACEMENT_PREFIX) else FLAGS.get(name)


def placement_key(fusion_type: str) -> str:
    """The config key that places `fusion_type` on a backend."""
    return PLACEMENT_PREFIX + fusion_type


def fusion_type_of(name: str) -> str | None:
    """The fusion type a placement key moves; None for any other key."""
    return name[len(PLACEMENT_PREFIX):] if name.startswith(PLACEMENT_PREFIX) else None


def parse_value(name: str, raw: str) -> FlagValue:
    """Parse a flag's textual value by the flag's declared type (string if undeclared)."""
    check_name(name)
    spec = spec_of(name)
    raw = raw.strip()
    if spec is None:
        return _guess_type(raw)
    return _READINGS[spec.type].parse(spec, name, raw)


def _guess_type(raw: str) -> FlagValue:
    """An undeclared flag's value: XLA's override parser wants bools and numbers typed."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def check_name(name: str) -> None:
    """Reject names that are not XLA flags or placements, or that could touch files or the
    process."""
    fusion_type = fusion_type_of(name)
    if fusion_type is not None:
        if not _FUSION_TYPE.fullmatch(fusion_type):
            raise FlagError(f"{name}: not a fusion type (upper-case letters, digits and '_')")
        return
    if name in BUILD_OPTIONS:
        return
    if not name.startswith("xla_"):
        raise FlagError(f"{name}: not an XLA compiler flag (they start with 'xla_'), a placement "
                        f"('{PLACEMENT_PREFIX}<FUSION_TYPE>') nor a build option "
                        f"({', '.join(BUILD_OPTIONS)})")
    if any(part in name for part in SIDE_EFFECT_FLAG_PARTS + _LOADS_PARTS):
        raise FlagError(f"{name}: flags that write or read files or caches are never applied")


def _enum_name(spec: FlagSpec, raw: str) -> str:
    short = raw.strip().upper()
    if spec.enum_prefix and short.startswith(spec.enum_prefix):
        short = short[len(spec.enum_prefix):]
    if spec.choices and short not in spec.choices:
        raise FlagError(f"{spec.name}: {raw!r} is not one of {', '.join(spec.choices)}")
    if not spec.choices and not _FUSION_TYPE.fullmatch(short):
        raise FlagError(f"{spec.name}: {raw!r} is not an enum name")
    return short


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


@dataclass(frozen=True)
class XlaSettings:
    """A config as XLA takes it, per channel."""

    overrides: dict[str, bool | int | float | str]  # compile-option overrides (DebugOptions)
    backend_extra: dict[str, str]  # entries of the `xla_backend_extra_options` map
    build: dict[str, int]  # ExecutableBuildOptions fields, an enum as its number


def to_xla(config: CompilerConfig, defaults: CompilerConfig | None = None) -> XlaSettings:
    """XLA's per-executable settings for a config, per channel.

    Placement moves become the library lists (`as_flags`, from the compiler's `defaults`).
    Overrides: bools and numbers stay typed (XLA's override parser rejects the string 'false'
    for a bool); enums and repeated enums become XLA's full names as text. Backend extra
    entries: text as XLA's backend parses it; a false bool is no entry (see the module
    docstring). Build options: an enum's number. A name the table does not declare goes to the
    overrides, where XLA checks it.
    """
    overrides: dict[str, bool | int | float | str] = {}
    backend_extra: dict[str, str] = {}
    build: dict[str, int] = {}
    for name, value in sorted(as_flags(config, defaults or {}).items()):
        check_name(name)
        spec = FLAGS.get(name)
        if spec is not None and spec.channel == Channel.BACKEND_EXTRA:
            if value is not False:
                backend_extra[name] = _to_text(spec, value)
        elif spec is not None and spec.channel == Channel.BUILD_OPTION:
            build[name] = dict(zip(spec.choices, spec.numbers))[str(value)]
        elif isinstance(value, (bool, int, float)):
            overrides[name] = value
        else:
            overrides[name] = _to_text(spec, value)
    return XlaSettings(overrides, backend_extra, build)


def enum_of_number(spec: FlagSpec, number: int) -> str:
    """The name of the value of enum flag `spec` that compile options hold as `number`; the
    number as text for one the table does not name."""
    return dict(zip(spec.numbers, spec.choices)).get(number, str(number))


def _to_text(spec: FlagSpec | None, value: FlagValue) -> str:
    prefix = spec.enum_prefix if spec is not None else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(prefix + item for item in value)
    if isinstance(value, str) and spec is not None and spec.type == FlagType.ENUM:
        return prefix + value
    return str(value)


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


def relaxes_numerics(config: CompilerConfig) -> list[str]:
    """The flags of `config` set to a value that relaxes IEEE semantics (`FlagSpec.relaxing`),
    sorted; empty for a config that keeps them. A flag the table does not declare is not
    counted: no search proposes one, and the hook applies no such flag from the store."""
    return sorted(name for name, value in config.items()
                  if (spec := spec_of(name)) is not None and value in spec.relaxing)


def codegen_values(config: CompilerConfig) -> tuple[tuple[str, FlagValue], ...]:
    """The config's codegen-level flags: these change speed without changing optimized HLO."""
    return tuple(
        (name, value)
        for name, value in sorted(config.items())
        if (spec := spec_of(name)) is None or spec.codegen  # undeclared: it may affect codegen
    )


def unseen_values(config: CompilerConfig) -> tuple[tuple[str, FlagValue], ...]:
    """The config's flags that change the program where neither its optimized HLO's
    fingerprint nor its machine code shows it (`FlagSpec.unseen`)."""
    return tuple((name, value) for name, value in sorted(config.items())
                 if (spec := spec_of(name)) is not None and spec.unseen)


def to_json(config: CompilerConfig) -> dict[str, object]:
    """A JSON-ready form of a config (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(config.items())}


def from_json(data: object) -> CompilerConfig:
    """A config from its JSON form (as `to_json` writes it and the store holds it): only flags
    on the allowlist and placements, each value of its kind's JSON type and in its declared
    domain (`expected_json`); no value is coerced from another type ("false" is no bool).
    FlagError names the flag, the value given and what the flag takes."""
    if not isinstance(data, dict):
        raise FlagError("a config must be a JSON object of flag: value")
    config: CompilerConfig = {}
    for name, value in data.items():
        if not isinstance(name, str):
            raise FlagError(f"{name!r}: flag names are strings")
        check_name(name)
        spec = spec_of(name)
        if spec is None:
            raise FlagError(f"{name}: not on the allowlist of tunable flags")
        config[name] = _value_from_json(name, spec, value)
    return config


MAX_LIST_ITEMS = 32  # a library list longer than this is no config XLA was ever tuned with


def expected_json(spec: FlagSpec) -> str:
    """What a config's JSON form must give a flag of `spec`, in words: the JSON type of its
    kind and its declared domain (`choices`: the values a search may set)."""
    return _READINGS[spec.type].expected(spec)


def _value_from_json(name: str, spec: FlagSpec, value: object) -> FlagValue:
    """Flag `name`'s value from its JSON form, if it is of the JSON type and in the domain that
    `expected_json` says; FlagError `NAME: VALUE is not EXPECTED` otherwise. XLA checks names,
    not values: a tiling factor of 0 aborts the process that compiles, a split count of 1e8
    hangs it."""
    try:
        read = _READINGS[spec.type].from_json(spec, name, value)
    except FlagError:
        read = None  # said below, with what the flag takes
    if read is None:
        raise FlagError(f"{name}: {_shown(value)} is not {expected_json(spec)}")
    return read


@dataclass(frozen=True)
class _Reading:
    """How the values of one flag type are read: from text (`--set`, XLA_FLAGS; `parse`, of a
    stripped text), from a config's JSON (`from_json`: None where the JSON value is not of the
    type's form or domain), and what that form and domain are, in words (`expected`)."""

    parse: Callable[[FlagSpec, str, str], FlagValue]
    from_json: Callable[[FlagSpec, str, object], FlagValue | None]
    expected: Callable[[FlagSpec], str]


def _parse_bool(spec: FlagSpec, name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise FlagError(f"{name}: {raw!r} is not a bool (true/false)")


def _parse_number(cast: Callable[[str], int | float], what: str) -> Callable[[FlagSpec, str, str], FlagValue]:
    def parse(spec: FlagSpec, name: str, raw: str) -> FlagValue:
        try:
            return cast(raw)
        except ValueError:
            raise FlagError(f"{name}: {raw!r} is not {what}") from None
    return parse


def _parse_backend(spec: FlagSpec, name: str, raw: str) -> str:
    if raw.lower() not in spec.choices:
        raise FlagError(f"{name}: {raw!r} is not a backend ({', '.join(spec.choices)})")
    return raw.lower()


def _parse_list(spec: FlagSpec, name: str, raw: str) -> tuple[str, ...]:
    # An empty value is meaningful: it clears the list (e.g. no library fusions at all).
    return tuple(_enum_name(spec, item) for item in raw.split(",") if item.strip())


def _text_from_json(spec: FlagSpec, name: str, value: object) -> FlagValue | None:
    """A JSON string read as the flag's text is (an enum name, a backend)."""
    return _READINGS[spec.type].parse(spec, name, value.strip()) if isinstance(value, str) else None


def _list_from_json(spec: FlagSpec, name: str, value: object) -> FlagValue | None:
    if (isinstance(value, list) and len(value) <= MAX_LIST_ITEMS
            and all(isinstance(item, str) for item in value)):
        return tuple(_enum_name(spec, item) for item in value)
    return None


def _names(spec: FlagSpec) -> str:
    return (f"one of {', '.join(spec.choices)}" if spec.choices
            else 'fusion type names such as "REDUCE" or "INDIVIDUAL_DOT"')


def _no_domain(json_type: str) -> Callable[[FlagSpec], str]:
    # float and string: no flag of these kinds declares a domain, so no config may set one.
    return lambda spec: f"settable: a {spec.type} flag (a JSON {json_type}) has no declared domain"


_READINGS: dict[FlagType, _Reading] = {
    FlagType.BOOL: _Reading(_parse_bool, lambda spec, name, value: value if isinstance(value, bool) else None,
                            lambda spec: "a JSON boolean (true or false)"),
    FlagType.INT: _Reading(
        _parse_number(int, "an integer"),
        lambda spec, name, value: value if type(value) is int and (
            not spec.choices or str(value) in spec.choices) else None,
        lambda spec: (f"a JSON integer in its domain ({', '.join(spec.choices)})" if spec.choices
                      else "a JSON integer")),
    FlagType.FLOAT: _Reading(_parse_number(float, "a number"), lambda spec, name, value: None,
                             _no_domain("number")),
    FlagType.ENUM: _Reading(lambda spec, name, raw: _enum_name(spec, raw), _text_from_json,
                            lambda spec: f"a JSON string, {_names(spec)}"),
    FlagType.REPEATED_ENUM: _Reading(
        _parse_list, _list_from_json,
        lambda spec: f"a JSON list of at most {MAX_LIST_ITEMS} enum values ({_names(spec)}); write [] for none"),
    FlagType.STRING: _Reading(lambda spec, name, raw: raw, lambda spec, name, value: None, _no_domain("string")),
    FlagType.PLACEMENT: _Reading(_parse_backend, _text_from_json,
                                 lambda spec: f"a JSON string naming a backend ({', '.join(spec.choices)})"),
}


def _shown(value: object) -> str:
    """A value as its config's JSON wrote it, cut short: a message names it, never quotes a file."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def config_from_json(data: Mapping[str, Any]) -> CompilerConfig:
    """A config as this project's own files hold it (journals, results): JSON lists back to
    tuples, nothing checked (these were checked on the way in)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
