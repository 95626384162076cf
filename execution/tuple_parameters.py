"""Tuple-shaped entry parameters, flattened: one parameter per leaf, the tuple rebuilt inside.

The tuner hands an executable one array per entry parameter (`execution.inputs`), and a tuple has no
array. Older XLA dumps and programs compiled with tupled arguments have tuple-shaped parameters,
so the entry computation is rewritten, by editing XLA's module proto (`hlo.proto`): each
tuple parameter becomes one parameter per leaf, in order (depth first for nested tuples), and
`tuple` instructions rebuild the value where it is still used whole (a while loop's state, a
call). A get-tuple-element of a flattened parameter reads its leaf directly, as XLA's simplifier
makes it anyway; that keeps `execution.inputs`' index analysis per leaf, so an index leaf is bounded
by what it indexes and not by what a sibling in the same tuple indexes.

The default and every candidate compile from the same rewritten module, so the comparison stays
fair (see `execution.session.measurable_module`).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor_pb2 import FieldDescriptorProto as _F

from execution.hlo_edit import fresh_id, set_entry, unique_name
from hlo.proto import ComputationProto, InstructionProto, ModuleProto, ShapeProto, build_messages

_TUPLE = 13  # xla.PrimitiveType.TUPLE
# HloInstructionProto.tuple_index, read on its own: declaring it in hlo.proto's schema
# would move it among the known fields of a serialized instruction, and so change fingerprints.
_TupleIndex = build_messages("fdo_tuple_index", {
    "Instruction": [("tuple_index", 13, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None)],
})["Instruction"]


def flatten_tuple_parameters(module_proto: bytes) -> bytes:
    """The module with its entry's tuple-shaped parameters flattened (see the module
    docstring); the very same bytes when it has none."""
    view = ModuleProto.FromString(module_proto)
    position, entry = next((n, c) for n, c in enumerate(view.computations)
                           if c.id == view.entry_computation_id)
    parameters = sorted((i for i in entry.instructions if i.opcode == "parameter"),
                        key=lambda i: i.parameter_number)
    if not any(_is_tuple(p.shape) for p in parameters):
        return module_proto
    flat = _Flattener(fresh_id(view), {i.name for c in view.computations for i in c.instructions})
    for parameter in parameters:
        flat.parameter(parameter)
    rewritten = flat.rewrite(entry)
    del view.computations[position]
    view.ClearField("schedule")  # it names instructions the rewrite removed
    set_entry(view, rewritten)
    return view.SerializeToString()


def _is_tuple(shape_bytes: bytes) -> bool:
    return ShapeProto.FromString(shape_bytes).element_type == _TUPLE


class _Flattener:
    """Builds the flat parameters and the rebuilt tuples, then the entry that uses them."""

    def __init__(self, first_id: int, names: set[str]) -> None:
        self.next_id, self.names = first_id, names
        self.head: list[Any] = []  # parameters and rebuilt tuples, in an order operands-first
        self.count = 0  # parameters so far
        self.elements: dict[int, list[int]] = {}  # a rebuilt tuple's id -> its elements' ids
        self.replaced: dict[int, int] = {}  # an old instruction's id -> the id standing for it

    def parameter(self, old: Any) -> None:
        """Take the entry parameter `old` over: renumbered, or flattened if it is a tuple."""
        if not _is_tuple(old.shape):
            renumbered = InstructionProto()
            renumbered.CopyFrom(old)
            renumbered.parameter_number = self.count
            self.count += 1
            self.head.append(renumbered)
            return
        self.names.discard(old.name)  # the rebuilt tuple takes the parameter's name
        self.replaced[old.id] = self._value(ShapeProto.FromString(old.shape), old.name)

    def _value(self, shape: Any, name: str) -> int:
        """A new parameter for a leaf `shape`, or a tuple of new values for a tuple one."""
        if shape.element_type != _TUPLE:
            self.count += 1
            return self._add(name, "parameter", shape, parameter_number=self.count - 1)
        elements = [self._value(element, f"{name}.{index}")
                    for index, element in enumerate(shape.tuple_shapes)]
        tuple_id = self._add(name, "tuple", shape, operand_ids=elements)
        self.elements[tuple_id] = elements
        return tuple_id

    def _add(self, name: str, opcode: str, shape: Any, **fields: Any) -> int:
        instruction = InstructionProto(
            name=unique_name(name, self.names, "flat"), opcode=opcode, shape=shape.SerializeToString(),
            id=self.next_id, **fields)
        self.head.append(instruction)
        self.next_id += 1
        return instruction.id


    def rewrite(self, entry: Any) -> Any:
        """`entry` over the flat parameters: get-tuple-elements of them forwarded to their
        values, and rebuilt tuples nothing uses left out."""
        by_id = {i.id: i for i in entry.instructions}
        kept = [i for i in entry.instructions
                if i.opcode != "parameter" and self._resolve(by_id, i.id) == i.id]
        for instruction in kept:
            instruction.operand_ids[:] = [self._resolve(by_id, o) for o in instruction.operand_ids]
            instruction.control_predecessor_ids[:] = [
                self._resolve(by_id, o) for o in instruction.control_predecessor_ids]
        root_id = self._resolve(by_id, entry.root_id)
        used = {root_id} | {o for i in kept for o in (*i.operand_ids, *i.control_predecessor_ids)}
        head = []
        for instruction in reversed(self.head):  # a tuple comes after its elements: users first
            if instruction.opcode == "tuple" and instruction.id not in used:
                continue
            used.update(instruction.operand_ids)
            head.append(instruction)
        rewritten = ComputationProto(name=entry.name, id=entry.id, root_id=root_id)
        for instruction in [*reversed(head), *kept]:
            rewritten.instructions.add().CopyFrom(instruction)
        return rewritten

    def _resolve(self, by_id: dict[int, Any], instruction_id: int) -> int:
        """The id that stands for `instruction_id` in the rewritten entry."""
        if instruction_id in self.replaced:
            return self.replaced[instruction_id]
        instruction = by_id[instruction_id]
        if instruction.opcode == "get-tuple-element":
            source = self._resolve(by_id, instruction.operand_ids[0])
            if source in self.elements:
                index = _TupleIndex.FromString(instruction.SerializeToString()).tuple_index
                self.replaced[instruction_id] = self.elements[source][index]
                return self.replaced[instruction_id]
        return instruction_id
