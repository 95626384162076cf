"""What the hook reads of JAX's objects: the module JAX hands the compiler (its name, its
Shardy mesh, its bytecode), the devices of a compile, and an executable's optimized module.
Each reads what a jaxlib shows and says so (None, empty) where it hides it."""

from __future__ import annotations

from typing import Any

from hlo.environment import parse_mesh


def module_name(computation: Any) -> str:
    """The name of the StableHLO module JAX hands the compiler (`jit_<function>`)."""
    from jax._src.lib.mlir import ir

    return ir.StringAttr(computation.operation.attributes["sym_name"]).value


def mesh(computation: Any) -> tuple[tuple[str, int], ...]:
    """The axes of the module's Shardy mesh (its first `sdy.mesh` op); empty where it has none
    (a GSPMD module, or one for a single device)."""
    if isinstance(computation, bytes):
        return ()
    for op in computation.body.operations:
        if op.operation.name == "sdy.mesh":
            return parse_mesh(str(op.operation.attributes["mesh"]))
    return ()


def bytecode(computation: Any) -> bytes:
    """The StableHLO module JAX hands the compiler, serialized (for the sandbox)."""
    from jax._src.interpreters import mlir

    return computation if isinstance(computation, bytes) else mlir.module_to_bytecode(computation)


def device_count(devices: Any) -> int:
    """How many devices a compile is for (JAX passes them as an array of devices)."""
    size = getattr(devices, "size", None)
    return int(size) if size is not None else len(devices)


def optimized_proto(executable: Any) -> bytes | None:
    """An executable's optimized module, serialized; None if it hides it."""
    try:
        return executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:  # some executables (e.g. deserialized ones on some backends) hide their HLO
        return None


def optimized_text(executable: Any) -> str | None:
    """An executable's optimized module as text; None if it hides it."""
    try:
        return executable.hlo_modules()[0].to_string()
    except Exception:  # as above
        return None
