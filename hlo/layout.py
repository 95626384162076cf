"""XLA's default layout of a shape: the one layout reset every stage uses.

Entry layouts are reset when a module comes from StableHLO (`hlo.module.from_stablehlo`), and
every shape of an op cut's runnable form is (`tuner.op_cut.runnable_module`). Both follow XLA's
`LayoutUtil::SetToDefaultLayout`:

- an array keeps its layout's other fields (tiling, element size, memory space, tail padding:
  declared or not in `hlo.proto`'s schema) and gets its dimensions major to minor;
- a tuple has no layout of its own: its elements are reset, each in turn, and a layout on the
  tuple itself (which XLA never writes) is dropped. The empty tuple is a tuple too;
- a token or an opaque value has no layout either.

An array without a layout stays without one: XLA gives it the default when it reads the proto.
"""

from __future__ import annotations

from typing import Any

from hlo.proto import ShapeProto

# The xla.PrimitiveType of shapes that have no layout of their own: TUPLE, OPAQUE_TYPE, TOKEN.
_WITHOUT_LAYOUT = frozenset({13, 14, 17})


def default_layout(shape: bytes) -> bytes:
    """A serialized `xla.ShapeProto` at XLA's default layout (see the module docstring)."""
    message = ShapeProto.FromString(shape)
    _reset(message)
    return message.SerializeToString()


def _reset(shape: Any) -> None:
    for element in shape.tuple_shapes:
        _reset(element)
    if shape.element_type in _WITHOUT_LAYOUT:
        shape.ClearField("layout")
    elif shape.HasField("layout"):
        shape.layout.minor_to_major[:] = range(len(shape.dimensions) - 1, -1, -1)
