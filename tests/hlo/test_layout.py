"""The one layout reset (`hlo.layout.default_layout`): XLA's default layout, tuples included."""

from __future__ import annotations

from hlo.layout import default_layout
from hlo.module import from_text
from hlo.proto import ShapeProto

TEXT = """HloModule m
ENTRY e {{
  a = f32[2,3]{{{a}}} parameter(0)
  b = s32[4,2,2]{{{b}}} parameter(1)
  t = token[] after-all()
  empty = () tuple()
  inner = (s32[4,2,2]{{{b}}}, ()) tuple(b, empty)
  ROOT r = (f32[2,3]{{{a}}}, (s32[4,2,2]{{{b}}}, ()), token[]) tuple(a, inner, t)
}}
"""


def root_shape(a: str, b: str) -> bytes:
    module = from_text(TEXT.format(a=a, b=b))
    entry = next(c for c in module.view().computations if c.id == module.view().entry_computation_id)
    return next(i.shape for i in entry.instructions if i.id == entry.root_id)


def test_a_nested_tuple_gets_xlas_default_layout_in_every_element() -> None:
    # XLA writes the same bytes for the module printed at its default layouts: the arrays'
    # other layout fields are kept, and neither the tuples nor the token have a layout.
    assert default_layout(root_shape("0,1", "0,2,1")) == root_shape("1,0", "2,1,0")
    assert default_layout(root_shape("1,0", "2,1,0")) == root_shape("1,0", "2,1,0")


def test_a_tuple_has_no_layout_of_its_own() -> None:
    element = ShapeProto(element_type=11, dimensions=[2, 3])  # F32
    element.layout.minor_to_major[:] = [0, 1]
    shape = ShapeProto(element_type=13, tuple_shapes=[element, ShapeProto(element_type=13)])
    shape.layout.minor_to_major[:] = [0]  # XLA never writes one; a reset drops it
    shape.tuple_shapes[1].layout.SetInParent()
    reset = ShapeProto.FromString(default_layout(shape.SerializeToString()))
    assert not reset.HasField("layout")
    assert list(reset.tuple_shapes[0].layout.minor_to_major) == [1, 0]
    assert not reset.tuple_shapes[1].HasField("layout")  # the empty tuple is a tuple too
    without = ShapeProto(element_type=11, dimensions=[4])  # an array with no layout keeps none
    assert default_layout(without.SerializeToString()) == without.SerializeToString()
