"""Compiling an HLO module with a compiler config through jaxlib, with no Python program behind it.

The path follows JAX's own compile stage (`jax.jit(f).lower(...).compile(...)`): the HLO module
proto goes through jaxlib's MLIR bridge to StableHLO, compile options come from JAX's
`get_compile_options` with the config's flags as overrides, and the backend client compiles and
loads the executable.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor_pb2 import FieldDescriptorProto as _F

from ingest.hlo_proto import build_messages
from tuner.flags import FLAGS, CompilerConfig, to_xla

# The part of xla.CompileOptionsProto (xla/pjrt/proto/compile_options.proto) and xla.DebugOptions
# (xla/xla.proto) that says the installed compiler's defaults of the table's option flags. The
# numbers were read off jaxlib 0.10.2 by setting each flag through XLA_FLAGS and seeing which
# field of the serialized debug options changed; a test checks them against jaxlib's own
# accessors where it has them.
_DEBUG_OPTION_FIELDS = {
    "xla_backend_optimization_level": (31, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    "xla_llvm_disable_expensive_passes": (73, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
    "xla_cpu_enable_fast_math": (99, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
    "xla_cpu_prefer_vector_width": (308, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    "xla_cpu_parallel_codegen_split_count": (323, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
    "xla_cpu_max_isa": (333, _F.TYPE_STRING, _F.LABEL_OPTIONAL),
    "xla_cpu_copy_insertion_use_region_analysis": (337, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
    "xla_cpu_use_xnnpack": (359, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
    "xla_cpu_use_fusion_emitters": (376, _F.TYPE_BOOL, _F.LABEL_OPTIONAL),
    "xla_cpu_experimental_onednn_fusion_type": (399, _F.TYPE_INT32, _F.LABEL_REPEATED),
    "xla_cpu_experimental_xnn_fusion_type": (400, _F.TYPE_INT32, _F.LABEL_REPEATED),
    "xla_cpu_experimental_ynn_fusion_type": (422, _F.TYPE_INT32, _F.LABEL_REPEATED),
    "xla_cpu_scheduler_type": (448, _F.TYPE_INT32, _F.LABEL_OPTIONAL),
}
# Enum values by number: xla.DebugOptions.LibraryFusionType and CpuSchedulerType.
_LIBRARY_FUSION_TYPES = {1: "DOT", 2: "ELTWISE", 3: "REDUCE", 4: "INDIVIDUAL_DOT",
                         5: "INDIVIDUAL_CONVOLUTION"}
_ENUMS = {"xla_cpu_scheduler_type": {0: "DEFAULT", 1: "MEMORY_OPTIMIZED"}}
_COMPILE_OPTIONS = build_messages("fdo_compile", {
    "DebugOptions": [(name, number, type_, label, None)
                     for name, (number, type_, label) in _DEBUG_OPTION_FIELDS.items()],
    "ExecutableBuildOptions": [("debug_options", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
                                ".fdo_compile.DebugOptions")],
    "CompileOptions": [("executable_build_options", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
                        ".fdo_compile.ExecutableBuildOptions")],
})["CompileOptions"]


class CompileError(RuntimeError):
    """XLA refused to compile the module with the given config."""


@dataclass
class Compiled:
    """A loaded executable and what it took to build it."""

    executable: Any
    compile_seconds: float
    optimized_proto: bytes


def compile_module(module_proto: bytes, config: CompilerConfig) -> Compiled:
    """Compile a serialized HLO module for the first local device with `config` applied."""
    import jax
    from jax._src.lib import _jax

    device = jax.devices()[0]
    options = compile_options(config)
    started = time.perf_counter()
    try:
        stablehlo = _jax.mlir.hlo_to_stablehlo(module_proto)
        executable = device.client.compile_and_load(
            stablehlo, _jax.DeviceList((device,)), options
        )
    except Exception as exc:  # jaxlib raises JaxRuntimeError (XlaRuntimeError before 0.5)
        raise CompileError(_describe(exc)) from exc
    seconds = time.perf_counter() - started
    optimized = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    return Compiled(executable, seconds, optimized)


def compile_options(config: CompilerConfig) -> Any:
    """JAX's compile options for one device with `config` applied as overrides."""
    from jax._src import compiler

    return compiler.get_compile_options(
        num_replicas=1, num_partitions=1, env_options_overrides=to_xla(config)
    )


@functools.lru_cache(maxsize=None)
def _compiler_defaults() -> tuple[tuple[str, Any], ...]:
    options = _COMPILE_OPTIONS.FromString(compile_options({}).SerializeAsString())
    debug = options.executable_build_options.debug_options
    defaults = []
    for name in _DEBUG_OPTION_FIELDS:
        value = getattr(debug, name)
        if FLAGS[name].type == "repeated_enum":
            value = tuple(_LIBRARY_FUSION_TYPES.get(number, str(number)) for number in value)
        elif name in _ENUMS:
            value = _ENUMS[name].get(value, str(value))
        defaults.append((name, value))
    return tuple(defaults)


def compiler_defaults() -> CompilerConfig:
    """The installed compiler's default values of the table's option flags, as compile options
    carry them: searches leave these values out (setting a flag to its default changes
    nothing), and op-level spaces start from the library routing."""
    return dict(_compiler_defaults())


def check_options(config: CompilerConfig) -> None:
    """Raise CompileError naming the flag if the installed compiler rejects a name or value."""
    from ingest.hlo_module import from_text

    probe = from_text("HloModule probe\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n", "probe")
    compile_module(probe.proto, config)


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    for prefix in ("INVALID_ARGUMENT: ", "INTERNAL: ", "UNIMPLEMENTED: "):
        message = message.replace(prefix, "")
    return message.splitlines()[0] if message else type(exc).__name__
