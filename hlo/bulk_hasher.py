"""The bulk hasher: the reference hasher's digests, a computation at a time.

`hlo.reference_hasher` is the definition. `BulkHasher` computes the same digests without
handling each instruction field by field in Python (about 3 µs an instruction instead of 10 to
13), with protobuf calls over whole computations and chains of C-level iterators. Each step
below reproduces one of `ReferenceHasher._hash_instructions`, and a module it cannot vouch for
raises `Unsupported`, for `hlo.fingerprint` to hand it to the reference:

- Attribute bytes. The reference parses an instruction with the `hlo.proto` schema, clears
  the identity fields and frontend attributes and re-serializes it: upb writes the declared fields
  in field-number order, then the undeclared ones as they came. The bulk schema is a copy of that
  one in which the cleared fields are singular proto3 scalars (the repeated id lists become
  bytes, which is how packed lists travel). Merging one fixed suffix that sets each of them to
  its default clears them all in one call per instruction, and serializing the whole computation
  then yields every instruction's bytes as the reference serializes them, the other fields being
  declared identically. Constants and frontend attributes then get the reference's treatment.
- Ids and id lists. Ids and the packed lists (as bytes) are read with C-level `map`s over the
  instructions. The lists' values come from a second parse of the module in which a computation's
  instructions are one singular message, so that protobuf merges them: each list comes out whole,
  with the reference's repeated-field semantics (packed or not, split or not). An instruction's
  share of it is the number of varints in its packed bytes; shares that do not add up to the
  merged list (ids not written as one packed list) send the module to the reference.
- The Merkle step is a chain of C iterators driven by `dict.update`, which stores each digest
  before it pulls the next instruction's hash input, whose operand lookups therefore see exactly
  what the reference's loop sees. An operand listed after its user (KeyError: XLA writes
  operands first) sends the module to the reference.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterator
from itertools import accumulate, islice, repeat, starmap, tee
from operator import attrgetter, itemgetter
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from hlo.module import HloModule
from hlo.proto import INSTRUCTION_IDENTITY_FIELDS, ComputationProto, InstructionProto, ModuleProto
from hlo.reference_hasher import (
    CONTROL_FLOW_OPCODES,
    DIGEST_BYTES,
    DOMAIN,
    NON_KERNEL_OPCODES,
    ModuleFingerprint,
    OpFingerprint,
    ReferenceHasher,
    fingerprint_with,
    frontend_suffix,
    is_large_constant,
    kernel_kind,
    pack_lengths,
)

_blake = hashlib.blake2b

_F = descriptor_pb2.FieldDescriptorProto
_VARINT_TYPES = frozenset({
    _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_UINT32, _F.TYPE_UINT64, _F.TYPE_SINT32, _F.TYPE_SINT64,
    _F.TYPE_BOOL, _F.TYPE_ENUM,
})
_ID_LIST_FIELDS = ("operand_ids", "control_predecessor_ids", "called_computation_ids")
# Bytes 0x80-0xff: varint continuation bytes. A packed list holds as many ids as other bytes.
_CONTINUATION = bytes(range(0x80, 0x100))
_join = b"".join
_digest_of = _blake.digest
_update = _blake.update
_second = itemgetter(1)
# Copying a fresh hash object is several times cheaper than constructing one with a digest size.
_EMPTY_HASH = _blake(digest_size=DIGEST_BYTES)
# From this many instructions on, a computation counts ids and sorts its instruction hashes with
# numpy (sorting bytes of one length compares them as unsigned bytes there as in Python).
_NUMPY_FROM = 4096
_times_digest = DIGEST_BYTES.__mul__
_get_id = attrgetter("id")
_get_operands = attrgetter("operand_ids")
_get_controls = attrgetter("control_predecessor_ids")
_get_called = attrgetter("called_computation_ids")
_get_frontend = attrgetter("frontend_attributes")
_get_opcode = attrgetter("opcode")
_get_name = attrgetter("name")
_get_shape = attrgetter("shape")
_KIND_OPCODES = frozenset({"fusion", "custom-call"})  # whose `kernel_kind` is not the opcode
_OP_HASH = _blake(DOMAIN + b"/op", digest_size=DIGEST_BYTES)


class Unsupported(Exception):
    """The bulk path cannot vouch for this module (or this schema): use the reference."""


def bulk_fingerprint(module: HloModule, with_ops: bool = True,
                     hasher_class: type[BulkHasher] | None = None) -> ModuleFingerprint:
    """`module`'s fingerprint as the reference computes it, computed in bulk (by
    `hasher_class`, a subclass of `BulkHasher`, if given). Raises `Unsupported` where the bulk
    path cannot vouch for the module, and ValueError or DecodeError on some malformed ones (the
    reference raises its own error for those)."""
    if _BULK is None:
        raise Unsupported("schema")
    return fingerprint_with(module, with_ops, _BULK.module_class, hasher_class or BulkHasher)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


class _BulkSchema:
    """Message classes derived from `hlo.proto`'s schema for the bulk path."""

    def __init__(self) -> None:
        file = descriptor_pb2.FileDescriptorProto()
        InstructionProto.DESCRIPTOR.file.CopyToProto(file)
        if file.syntax != "proto3" or file.dependency:
            raise Unsupported("schema")
        messages = {m.name: m for m in file.message_type}
        instruction = messages[InstructionProto.DESCRIPTOR.name]
        fields = _checked_instruction_fields(instruction)
        flat_fields = [_F() for _ in _ID_LIST_FIELDS]
        for copy, name in zip(flat_fields, _ID_LIST_FIELDS):
            copy.CopyFrom(fields[name])  # the reference's semantics for the merged lists
        self.clear_suffix = _clearing_suffix(instruction)
        opcode = fields["opcode"]
        self.constant_opcode = _tag(opcode.number, 2) + _varint(len(b"constant")) + b"constant"
        _add_bulk_messages(file, messages, fields["frontend_attributes"].number, flat_fields)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)

        def get(name: str) -> type[Message]:
            descriptor = pool.FindMessageTypeByName(f"{file.package}.{name}")
            return message_factory.GetMessageClass(descriptor)

        self.module_class = get(ModuleProto.DESCRIPTOR.name)
        # The unbound method: mapping it saves a bound-method lookup per instruction.
        self.merge_from_string = get(InstructionProto.DESCRIPTOR.name).MergeFromString
        self.raw_computation_class = get("FpRawComputation")
        self.merged_module_class = get("FpMergedModule")


_CLEARED = frozenset(INSTRUCTION_IDENTITY_FIELDS) | {"frontend_attributes"}


def _checked_instruction_fields(instruction: Any) -> dict[str, Any]:
    """The instruction schema's fields by name, where the bulk schema can be built from it:
    no oneof, every field the reference clears declared, the id a varint and the id lists
    repeated varints (Unsupported otherwise)."""
    fields = {f.name: f for f in instruction.field}
    if (
        instruction.oneof_decl
        or not _CLEARED <= set(fields)
        or not {"id", *_ID_LIST_FIELDS} <= set(INSTRUCTION_IDENTITY_FIELDS)
        or fields["id"].label == _F.LABEL_REPEATED
        or fields["id"].type not in _VARINT_TYPES
        or any(
            fields[n].label != _F.LABEL_REPEATED or fields[n].type not in _VARINT_TYPES
            for n in _ID_LIST_FIELDS
        )
    ):
        raise Unsupported("schema")
    return fields


def _clearing_suffix(instruction: Any) -> bytes:
    """The fixed suffix that sets every field the reference clears to its default when merged
    into an instruction; turns those fields of `instruction`'s schema into singular proto3
    scalars (the id lists into bytes: a packed list of varints is one length-delimited field on
    the wire). Unsupported where a cleared field has another form."""
    suffix = b""
    for field in instruction.field:
        if field.name not in _CLEARED:
            continue
        if field.proto3_optional or field.HasField("oneof_index"):
            raise Unsupported("schema")
        if field.label == _F.LABEL_REPEATED:
            # Only the id lists are checked against their merged values (the module docstring).
            if field.name not in _ID_LIST_FIELDS:
                raise Unsupported("schema")
            field.label = _F.LABEL_OPTIONAL
            field.type = _F.TYPE_BYTES
            field.ClearField("type_name")
            field.ClearField("options")
        if field.type in (_F.TYPE_STRING, _F.TYPE_BYTES):
            suffix += _tag(field.number, 2) + b"\x00"
        elif field.type in _VARINT_TYPES:
            suffix += _tag(field.number, 0) + b"\x00"
        else:
            raise Unsupported("schema")
    return suffix


def _add_bulk_messages(file: Any, messages: dict[str, Any], frontend_number: int, flat_fields: list[Any]) -> None:
    """The bulk schema's own messages, added to `file`: a computation of raw instruction bytes,
    and a module whose computations' instructions are one merged message each (their id lists
    `flat_fields`, with the reference's repeated-field semantics)."""
    instructions_number = ComputationProto.DESCRIPTOR.fields_by_name["instructions"].number
    computations_number = ModuleProto.DESCRIPTOR.fields_by_name["computations"].number

    def add(name: str, specs: list[tuple[str, int, int, int, str | None]]) -> None:
        if name in messages:
            raise Unsupported("schema")
        message = file.message_type.add(name=name)
        for field_name, number, field_type, label, type_name in specs:
            field = message.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                field.type_name = f".{file.package}.{type_name}"

    add("FpRawComputation", [
        ("instructions", instructions_number, _F.TYPE_BYTES, _F.LABEL_REPEATED, None),
    ])
    add("FpOpaque", [])
    add("FpMergedInstructions", [
        ("frontend_attributes", frontend_number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, "FpOpaque"),
    ])
    file.message_type[-1].field.extend(flat_fields)
    add("FpMergedComputation", [
        ("instructions", instructions_number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, "FpMergedInstructions"),
    ])
    add("FpMergedModule", [
        ("computations", computations_number, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "FpMergedComputation"),
    ])

def _build_bulk_schema() -> _BulkSchema | None:
    try:
        return _BulkSchema()
    except (Unsupported, KeyError, TypeError, ValueError):
        return None


def _id_counts(packed_lists: list[bytes]) -> list[int]:
    """How many ids each packed (varint) list holds: its bytes below 0x80 (last of a varint)."""
    joined = _join(packed_lists)
    if joined.isascii():
        return list(map(len, packed_lists))
    if len(packed_lists) < _NUMPY_FROM:
        last_bytes = map(bytes.translate, packed_lists, repeat(None), repeat(_CONTINUATION))
        return list(map(len, last_bytes))
    import numpy as np

    ends = np.fromiter(map(len, packed_lists), dtype=np.int64, count=len(packed_lists)).cumsum()
    last_bytes_before = np.zeros(len(joined) + 1, dtype=np.int64)  # [i]: last bytes in joined[:i]
    np.cumsum(np.frombuffer(joined, dtype=np.uint8) < 0x80, out=last_bytes_before[1:])
    return np.diff(last_bytes_before[ends], prepend=0).tolist()


def _hashes(inputs: Any) -> Any:
    """`_blake(x, digest_size=DIGEST_BYTES).digest()` for each x, lazily and in order."""
    fresh, same = tee(starmap(_EMPTY_HASH.copy, repeat(())))
    return map(_digest_of, map(_second, zip(map(_update, fresh, inputs), same)))


def _split(flat: Any, counts: list[int]) -> list[list[int]]:
    items = iter(flat)
    return [list(islice(items, k)) for k in counts]


def _constant_attributes(attributes: bytes) -> bytes:
    """The reference's treatment of a constant: a large one's literal is not hashed."""
    instruction = InstructionProto.FromString(attributes)
    if instruction.opcode == "constant" and is_large_constant(instruction.shape):
        instruction.ClearField("literal")
        return instruction.SerializeToString()
    return attributes


class BulkHasher(ReferenceHasher):
    """`ReferenceHasher`'s digests, a computation at a time in bulk (see the module docstring)."""

    def __init__(self, computations: dict[int, Any], module: HloModule, view: Any) -> None:
        super().__init__(computations, module, view)
        if _BULK is None:
            raise Unsupported("schema")
        self._bulk = _BULK
        merged = self._bulk.merged_module_class.FromString(module.proto).computations
        if len(merged) != len(view.computations):
            raise Unsupported("computations")
        # Keyed like `computations`: the last computation of an id wins.
        self._merged = {c.id: m.instructions for c, m in zip(view.computations, merged)}
        # Per hashed computation, what the kernel walk needs: ids, attributes in instruction
        # order, id-list shares, merged lists.
        self._kernel_inputs: dict[int, tuple[Any, ...]] = {}
        self._sizes: dict[int, int] = {}  # instructions of a computation and of its callees

    @staticmethod
    def _sorted_join(digests: Any) -> bytes:
        """`b"".join(sorted(digests))` for digests of DIGEST_BYTES bytes."""
        if len(digests) < _NUMPY_FROM:
            return _join(sorted(digests))
        import numpy as np

        return np.sort(np.frombuffer(_join(digests), dtype=f"S{DIGEST_BYTES}")).tobytes()

    def _instruction_digests(self, computation_id: int, computation: Any) -> dict[int, bytes]:
        """`ReferenceHasher._instruction_digests`, the computation's instructions in bulk."""
        merged = self._merged[computation_id]
        instructions = list(computation.instructions)
        ids = list(map(_get_id, instructions))
        operand_counts = _id_counts(list(map(_get_operands, instructions)))
        called_counts: list[int] | None
        control_counts: list[int] | None
        operand_ids = merged.operand_ids
        called_ids = merged.called_computation_ids
        control_ids = merged.control_predecessor_ids
        if sum(operand_counts) != len(operand_ids):
            raise Unsupported("operand ids not written as one packed list")
        if called_ids or control_ids:
            called_counts = _id_counts(list(map(_get_called, instructions)))
            control_counts = _id_counts(list(map(_get_controls, instructions)))
            if sum(called_counts) != len(called_ids) or sum(control_counts) != len(control_ids):
                raise Unsupported("id lists not written as one packed list")
            # Callees first: a computation's hash needs those of the computations it calls.
            for called in called_ids:
                self.computation_digest(called)
        else:
            called_counts = control_counts = None
        frontends = (
            list(map(_get_frontend, instructions))
            if merged.frontend_attributes.ByteSize()
            else None
        )
        attributes = self._attributes(computation, instructions, frontends)
        try:
            digests = self._chained_digests(
                ids, attributes, operand_counts, operand_ids,
                called_counts, called_ids, control_counts, control_ids,
            )
        except KeyError:
            raise Unsupported("an operand listed after its user, or missing") from None
        self._kernel_inputs[computation_id] = (ids, attributes, operand_counts, called_counts, merged)
        return digests

    def _attributes(
        self, computation: Any, instructions: list[Any], frontends: list[bytes] | None
    ) -> list[bytes]:
        """Each instruction's `_attribute_bytes` after the reference's clearing, in order."""
        bulk = self._bulk
        deque(map(bulk.merge_from_string, instructions, repeat(bulk.clear_suffix)), maxlen=0)
        serialized = computation.SerializeToString()
        attributes = list(bulk.raw_computation_class.FromString(serialized).instructions)
        if len(attributes) != len(instructions):
            raise Unsupported("instructions")
        constant = bulk.constant_opcode
        if constant in serialized:
            for j, attr in enumerate(attributes):
                if constant in attr:
                    attributes[j] = _constant_attributes(attr)
        if frontends is not None:
            for j, raw in enumerate(frontends):
                if raw:
                    attributes[j] += frontend_suffix(raw)
        return attributes

    def _chained_digests(
        self,
        ids: list[int],
        attributes: list[bytes],
        operand_counts: list[int],
        operand_ids: Any,
        called_counts: list[int] | None,
        called_ids: Any,
        control_counts: list[int] | None,
        control_ids: Any,
    ) -> dict[int, bytes]:
        """The reference's single pass, as C iterators that `dict.update` drives in order."""
        digests: dict[int, bytes] = {}
        get = digests.__getitem__
        operands = map(_join, map(islice, repeat(map(get, operand_ids)), operand_counts))
        parts: Iterator[tuple[bytes, ...]]
        if called_counts is None or control_counts is None:  # None together: no called or control ids
            lengths = map(
                pack_lengths, map(len, attributes), map(_times_digest, operand_counts),
                repeat(0), repeat(0),
            )
            parts = zip(lengths, attributes, operands)
        else:
            computation_digest = self._computation_digests.__getitem__
            called_digests = map(computation_digest, called_ids)
            called = map(_join, map(islice, repeat(called_digests), called_counts))
            control_digests = map(get, control_ids)
            controls = map(_join, map(sorted, map(islice, repeat(control_digests), control_counts)))
            lengths = map(
                pack_lengths, map(len, attributes), map(_times_digest, operand_counts),
                map(_times_digest, called_counts), map(_times_digest, control_counts),
            )
            parts = zip(lengths, attributes, operands, called, controls)
        digests.update(zip(ids, _hashes(map(_join, parts))))
        return digests

    def _computation_kernels(
        self, computations: dict[int, Any], computation_id: int, stack: list[int],
        ops: list[OpFingerprint],
    ) -> None:
        """`ReferenceHasher._computation_kernels`, reading the instructions in bulk."""
        instructions = list(computations[computation_id].instructions)
        ids, attributes, operand_counts, called_counts, merged = self._kernel_inputs[computation_id]
        attrs = dict(zip(ids, attributes))
        shapes = dict(zip(ids, map(_LengthPrefixed().__getitem__, map(_get_shape, instructions))))
        flat_operands = list(merged.operand_ids)
        bounds = list(accumulate(operand_counts, initial=0))
        operands_of = map(flat_operands.__getitem__, map(slice, bounds, islice(bounds, 1, None)))
        called_of = (
            _split(merged.called_computation_ids, called_counts)
            if called_counts is not None
            else repeat(())
        )
        after_attributes = _OpHashAfterAttributes()
        computation_digests = self._computation_digests
        found: list[tuple[str, str, int, str]] = []
        for instruction, instruction_id, opcode, name, operands, called_ids in zip(
            instructions, ids, map(_get_opcode, instructions), map(_get_name, instructions),
            operands_of, called_of,
        ):
            if opcode in CONTROL_FLOW_OPCODES:
                stack.extend(called_ids)
            if opcode in NON_KERNEL_OPCODES:
                continue
            h = after_attributes[attrs[instruction_id]].copy()
            if operands:
                h.update(_join(map(shapes.__getitem__, operands)))
            size = 1
            for called in called_ids:
                h.update(computation_digests[called])
                size += _instruction_count_memo(computations, called, self._sizes)
            kind = kernel_kind(instruction) if opcode in _KIND_OPCODES else opcode
            found.append((h.hexdigest(), kind, size, name))
        ops.extend(starmap(OpFingerprint, found))


class _LengthPrefixed(dict):
    """bytes -> `b"%d:" % len(x) + x` (how the op hash takes shapes), computed once per value."""

    def __missing__(self, x: bytes) -> bytes:
        value = self[x] = b"%d:" % len(x) + x
        return value


class _OpHashAfterAttributes(dict):
    """attribute bytes -> the op hash with its domain and the length-prefixed attributes fed."""

    def __missing__(self, attr: bytes) -> Any:
        h = self[attr] = _OP_HASH.copy()
        h.update(b"%d:" % len(attr) + attr)
        return h


def _instruction_count_memo(
    computations: dict[int, Any], computation_id: int, sizes: dict[int, int]
) -> int:
    """Instructions of a computation and of those it calls, remembering each count."""
    size = sizes.get(computation_id)
    if size is None:
        computation = computations[computation_id]
        size = sizes[computation_id] = len(computation.instructions) + sum(
            _instruction_count_memo(computations, c, sizes)
            for i in computation.instructions
            for c in i.called_computation_ids
        )
    return size


_BULK = _build_bulk_schema()
