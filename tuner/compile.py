"""Compiling an HLO module with a compiler config through jaxlib, with no Python program behind it.

The path follows JAX's own compile stage (`jax.jit(f).lower(...).compile(...)`): the HLO module
proto goes through jaxlib's MLIR bridge to StableHLO, compile options come from JAX's
`get_compile_options` with the config's flags as overrides, and the backend client compiles and
loads the executable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

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
