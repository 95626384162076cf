"""Compiling an HLO module with a compiler config through jaxlib, with no Python program behind it.

The path follows JAX's own compile stage (`jax.jit(f).lower(...).compile(...)`): the HLO module
proto goes through jaxlib's MLIR bridge to StableHLO, compile options come from JAX's
`get_compile_options` with the config's flags as overrides, and the backend client compiles and
loads the executable. Flags of the `backend_extra` channel are merged into the serialized
compile options' DebugOptions map, which `compiler_options` cannot reach.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tuner.flags import CompilerConfig, to_xla


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
    from jax._src import compiler
    from jax._src.lib import _jax

    overrides, backend_extra = to_xla(config)
    device = jax.devices()[0]
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=1, env_options_overrides=overrides
    )
    if backend_extra:
        options.ParseFromString(options.SerializeAsString() + _backend_extra_fragment(backend_extra))
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


def _build_fragment_class() -> type:
    # CompileOptionsProto.executable_build_options (3) -> ExecutableBuildOptionsProto
    # .debug_options (3) -> DebugOptions.xla_backend_extra_options (500, map<string,string>).
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(
        name="fdo_compile_options_fragment.proto", package="fdo_co", syntax="proto3"
    )
    entry = fd.message_type.add(name="Entry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    for name, child, number in (
        ("Debug", "Entry", 500),
        ("Build", "Debug", 3),
        ("Options", "Build", 3),
    ):
        message = fd.message_type.add(name=name)
        label = F.LABEL_REPEATED if child == "Entry" else F.LABEL_OPTIONAL
        message.field.add(
            name="child", number=number, type=F.TYPE_MESSAGE, label=label,
            type_name=f".fdo_co.{child}",
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("fdo_co.Options"))


_Fragment = _build_fragment_class()


def _backend_extra_fragment(backend_extra: dict[str, str]) -> bytes:
    """Serialized CompileOptions holding only backend extra options: parsing it after the full
    options merges the map entries in (protobuf merges repeated occurrences of a message)."""
    fragment = _Fragment()
    for key, value in backend_extra.items():
        fragment.child.child.child.add(key=key, value=value)
    return fragment.SerializeToString()
