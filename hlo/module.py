"""Loading HLO modules in every form a fleet hands them to us, through XLA's own parser.

Forms: XLA dump text (`*.before_optimizations.txt`, `*after_optimizations.txt`, with or without
`%` prefixes and metadata), serialized `HloModuleProto` / `HloProto` (`--xla_dump_hlo_as_proto`),
and what JAX produces at compile time (a `Lowered` object or a StableHLO MLIR module). Whatever the
form, the result is one `HloModule`: the serialized `xla.HloModuleProto` that XLA itself produced,
so every later stage (fingerprints, the evaluator, the hook) sees the same thing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from hlo.layout import default_layout
from hlo.proto import HloProtoWrapper, ModuleProto, ProgramShapeProto
from vocabulary.errors import first_line

# Refuse inputs larger than this unless the caller raises the limit (the scale of a 1M-instruction
# module as text is ~70 MiB; this leaves ample room while bounding memory).
DEFAULT_MAX_BYTES = 512 * 1024 * 1024


class HloLoadError(ValueError):
    """An input could not be read as an HLO module; the message names the input and the problem."""


@dataclass(frozen=True)
class HloModule:
    """An HLO module as XLA serializes it (`xla.HloModuleProto` bytes), plus where it came from."""

    proto: bytes
    name: str
    source: str

    def view(self) -> Any:
        """Parse the proto into the partial schema of `hlo.proto` (fresh object each call)."""
        return ModuleProto.FromString(self.proto)

    def n_instructions(self) -> int:
        """Instructions over all computations, fused ones included."""
        return sum(len(c.instructions) for c in self.view().computations)

    def to_text(self) -> str:
        """XLA's own text form of the module; HloLoadError if XLA refuses the proto."""
        try:
            return xla_hlo().HloModule.from_serialized_hlo_module_proto(self.proto).to_string()
        except Exception as exc:  # XLA raises JaxRuntimeError / XlaRuntimeError, version dependent
            raise HloLoadError(f"{self.source}: not a valid HLO module: {first_line(exc, lines=3)}") from exc


def xla_hlo() -> Any:
    """jaxlib's HLO bindings (HloModule, hlo_module_from_text, XlaComputation): `jax._src.lib.hlo`
    in jaxlib 0.10.2, part of `jax._src.lib._jax` in 0.10.0 and older (the validator runs those)."""
    try:
        from jax._src.lib import hlo
    except ImportError:
        from jax._src.lib import _jax as hlo
    return hlo


def from_text(text: str, source: str = "<text>") -> HloModule:
    """Parse HLO text (any form XLA dumps or prints) with XLA's parser."""
    try:
        parsed = xla_hlo().hlo_module_from_text(text)
    except Exception as exc:  # XLA raises JaxRuntimeError / XlaRuntimeError, version dependent
        raise HloLoadError(f"{source}: not a parsable HLO module: {first_line(exc, lines=3)}") from exc
    return HloModule(parsed.as_serialized_hlo_module_proto(), parsed.name, source)


def from_proto_bytes(data: bytes, source: str = "<proto>") -> HloModule:
    """Accept a serialized `HloModuleProto` or an `HloProto` (which wraps one)."""
    for unwrap in (_as_module_proto, _as_wrapped_module_proto):
        proto = unwrap(data)
        if proto is not None:
            return HloModule(proto, ModuleProto.FromString(proto).name, source)
    raise HloLoadError(f"{source}: neither HLO text nor a serialized HloModuleProto/HloProto")


def from_lowered(lowered: Any, source: str | None = None) -> HloModule:
    """The unoptimized module of a `jax.jit(f).lower(...)` result."""
    computation = lowered.compiler_ir("hlo")
    proto = computation.as_serialized_hlo_module_proto()
    return HloModule(proto, ModuleProto.FromString(proto).name, source or "jax:lowered")


def from_stablehlo(mlir_module: Any, source: str = "jax:stablehlo") -> HloModule:
    """Convert a StableHLO module (what JAX hands the compiler) to HLO, as XLA's compile does.

    The converter leaves the entry's result layout as its root computes it (a transposed result
    comes out column-major); XLA's compile gives the entry default layouts, as JAX asks for by
    default, and that is what a dump shows. So the entry layouts are reset to the default here,
    to key the module as its dump is keyed. (A job that pins other entry layouts is keyed by
    default ones: a rare case where the hook and a dump disagree.)
    """
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax

    if not isinstance(mlir_module, (bytes, str)):
        mlir_module = mlir.module_to_bytecode(mlir_module)
    computation = _jax.mlir.mlir_module_to_xla_computation(
        mlir_module, use_tuple_args=False, return_tuple=False
    )
    proto = _with_default_entry_layouts(computation.as_serialized_hlo_module_proto())
    return HloModule(proto, ModuleProto.FromString(proto).name, source)


def _with_default_entry_layouts(proto: bytes) -> bytes:
    view = ModuleProto.FromString(proto)
    _default_program_shape(view.host_program_shape)
    for computation in view.computations:
        if computation.id == view.entry_computation_id and computation.program_shape:
            shape = ProgramShapeProto.FromString(computation.program_shape)
            _default_program_shape(shape)
            computation.program_shape = shape.SerializeToString()
    return view.SerializeToString()


def _default_program_shape(program: Any) -> None:
    program.parameters[:] = [default_layout(p) for p in program.parameters]
    if program.result:
        program.result = default_layout(program.result)


def load_file(path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> HloModule:
    """Load one HLO file, text or binary, refusing files over `max_bytes`."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise HloLoadError(f"{path}: cannot read: {exc.strerror}") from exc
    if size > max_bytes:
        raise HloLoadError(f"{path}: {size} bytes is over the {max_bytes}-byte input limit")
    if size == 0:
        raise HloLoadError(f"{path}: empty file")
    try:
        data = path.read_bytes()
    except OSError as exc:  # a directory, no permission
        raise HloLoadError(f"{path}: cannot read: {exc.strerror}") from exc
    text = _as_hlo_text(data)
    if text is not None:
        return from_text(text, str(path))
    return from_proto_bytes(data, str(path))


def _as_hlo_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.lstrip().startswith("HloModule") else None


def _is_module(message: Any) -> bool:
    return bool(message.computations) and any(
        c.id == message.entry_computation_id for c in message.computations
    )


def _as_module_proto(data: bytes) -> bytes | None:
    try:
        return data if _is_module(ModuleProto.FromString(data)) else None
    except DecodeError:
        return None


def _as_wrapped_module_proto(data: bytes) -> bytes | None:
    try:
        wrapper = HloProtoWrapper.FromString(data)
    except DecodeError:
        return None
    if not wrapper.HasField("hlo_module") or not _is_module(wrapper.hlo_module):
        return None
    return wrapper.hlo_module.SerializeToString()
