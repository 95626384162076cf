"""The flag table: every compiler flag this project knows, each flag's facts in one `FlagSpec`,
and the config keys they make.

A compiler config (`CompilerConfig`) maps a config key to a typed value (`FlagValue`: bool,
int, str, or a tuple of enum names for repeated enums). A key is a flag of `FLAGS`, a flag the
table does not declare (set through the `option` channel, where XLA checks it), or a placement
key, `placement:<TYPE>` (`placement_key`), whose spec is `PLACEMENT` (library routing:
execution.flags.placement).

The table is the single source of truth for the flags this project knows: their types,
domains, channel (execution.flags.channels), cold-start rank, where the installed compiler's
default of each is read (an option flag's DebugOptions field; a backend extra flag's meaning
when absent; a build option's attribute), and which of their values relax IEEE semantics
(`FlagSpec.relaxing`, `relaxes_numerics`: a config holding one is delivered only to jobs that
opted in).

Each flag belongs to one platform (`FlagSpec.platform`: "cpu" for XLA:CPU, "gpu" for XLA:GPU, as
JAX names a CUDA or ROCm device's platform), and a search of a graph takes its environment's
platform's flags only (tuner.space). A flag that acts only across devices (collective combining
and pipelining) says so in `min_devices`: a graph compiled for one device never searches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

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
    channel: Channel = Channel.OPTION  # how it reaches XLA (execution.flags.channels.to_xla)
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
    # A backend extra flag's default: what no entry in the map means (execution.flags.channels).
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


def spec_of(name: str) -> FlagSpec | None:
    """The declared spec of a config key: a table flag, or PLACEMENT for `placement:<TYPE>`."""
    return PLACEMENT if name.startswith(PLACEMENT_PREFIX) else FLAGS.get(name)


def placement_key(fusion_type: str) -> str:
    """The config key that places `fusion_type` on a backend."""
    return PLACEMENT_PREFIX + fusion_type


def fusion_type_of(name: str) -> str | None:
    """The fusion type a placement key moves; None for any other key."""
    return name[len(PLACEMENT_PREFIX):] if name.startswith(PLACEMENT_PREFIX) else None


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

