"""Structural fingerprints of HLO modules and of their kernels (HloDagHash in spirit).

A graph fingerprint is a Merkle hash over the module's DAG:

- an instruction's hash covers every attribute XLA serializes for it (opcode, shape with dtype
  and layout, constant literals up to the size XLA prints in dumps, dimension numbers, backend
  config, ...), then its operands'
  hashes in operand order, its called computations' hashes, and its control predecessors'
  hashes as a set. Names, ids, source metadata and value-tracking annotations are dropped.
- a computation's hash covers its root's hash and the multiset of all its instruction hashes
  (so unreachable side-effecting instructions count, and instruction order does not).
- the module's hash covers the entry computation's hash, the module-level attributes
  (input/output aliasing, shardings, ...) and the entry layout, without names.

Attributes are taken from the serialized proto rather than listed one by one: everything not
declared an identity in `hlo.proto` is hashed, including fields a newer XLA adds.

An op fingerprint is the same hash over one kernel of an optimized module (a fusion with its
fused computation, or an unfused compute instruction) with the shapes of its operands standing
in for the operands themselves, so the same kernel in two graphs gets the same fingerprint.

Implementation: `_DagHasher` is the definition, one instruction at a time (clear its identity
fields, re-serialize it, hash): 10 to 13 µs an instruction. `_BulkHasher` computes the very same
bytes and digests a computation at a time, with protobuf calls over whole computations and chains
of C-level iterators (about 3 µs an instruction), and hands any module it cannot vouch for back to
`_DagHasher` (see the comment above `_BulkSchema`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import struct
from collections import deque
from dataclasses import dataclass
from itertools import accumulate, islice, repeat, starmap, tee
from operator import attrgetter, itemgetter
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from hlo.module import HloModule
from hlo.proto import (
    INSTRUCTION_IDENTITY_FIELDS,
    MODULE_IDENTITY_FIELDS,
    ComputationProto,
    FrontendAttributesProto,
    InstructionProto,
    ModuleProto,
    ShapeProto,
)

DIGEST_BYTES = 16
LARGE_CONSTANT_ELEMENTS = 10
DOMAIN = b"fleet-fdo/fingerprint/v1"  # the scheme: change it and every fingerprint changes
_blake = hashlib.blake2b
# Lengths of the four parts of an instruction's hash input, so the parts cannot run together.
_pack_lengths = struct.Struct("<4I").pack


def _instruction_digest(attr: bytes, operands: bytes, called: bytes, controls: bytes) -> bytes:
    """An instruction's hash: its attributes, then its operands', called computations' and
    control predecessors' digests, each part's length first so the parts cannot run together."""
    return _blake(_pack_lengths(len(attr), len(operands), len(called), len(controls))
                  + attr + operands + called + controls, digest_size=DIGEST_BYTES).digest()

# Opcodes that move or name data but compute nothing: they are not kernels of their own.
_NON_KERNEL_OPCODES = frozenset(
    {
        "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
        "add-dependency", "opt-barrier", "domain", "partition-id", "replica-id",
        "while", "conditional", "call",
    }
)
# Instructions whose called computations run as kernels of their own (control flow).
_CONTROL_FLOW_OPCODES = frozenset(
    {"while", "conditional", "call", "async-start", "async-update", "async-done"}
)


@dataclass(frozen=True)
class OpFingerprint:
    """One kernel of an optimized module."""

    fingerprint: str
    kind: str
    n_instructions: int
    name: str


@dataclass(frozen=True)
class ModuleFingerprint:
    """The graph fingerprint of a module and the fingerprints of its kernels."""

    fingerprint: str
    n_instructions: int
    ops: tuple[OpFingerprint, ...]


def graph_fingerprint(module: HloModule) -> str:
    """The graph fingerprint of `module` as 32 hex characters."""
    return fingerprint_module(module, with_ops=False).fingerprint


def fingerprint_module(module: HloModule, with_ops: bool = True) -> ModuleFingerprint:
    """Graph fingerprint, instruction count and (optionally) op fingerprints in one pass."""
    # The hash loop allocates millions of small objects and no cycles; the cyclic collector
    # would rescan the growing heap again and again (superlinear on large modules).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if _BULK is not None and len(module.proto) >= _BULK_FROM_BYTES:
            try:
                return _fingerprint_view(module, with_ops, _BULK.module_class, _BulkHasher)
            except (_Unsupported, ValueError, DecodeError):
                pass  # the reference below either agrees or raises its own error for this module
        return _fingerprint_view(module, with_ops, ModuleProto, _DagHasher)
    finally:
        if gc_was_enabled:
            gc.enable()


def _fingerprint_view(
    module: HloModule, with_ops: bool, module_class: type, hasher_class: type
) -> ModuleFingerprint:
    view = module_class.FromString(module.proto)
    by_id = {c.id: c for c in view.computations}
    if view.entry_computation_id not in by_id:
        raise ValueError(f"{module.source}: module has no entry computation")
    hasher = hasher_class(by_id, module, view)
    entry = hasher.computation_digest(view.entry_computation_id)
    n_instructions = sum(len(c.instructions) for c in by_id.values())
    h = _blake(DOMAIN + b"/module", digest_size=DIGEST_BYTES)
    h.update(entry)
    for field in MODULE_IDENTITY_FIELDS:
        view.ClearField(field)
    view.host_program_shape.ClearField("parameter_names")
    _update_sorted_frontend_attributes(h, view)
    h.update(view.SerializeToString())
    # Hashing cleared the identity fields in place; the kernel walk needs them, so re-parse.
    ops = tuple(hasher.kernels(module.view())) if with_ops else ()
    return ModuleFingerprint(h.hexdigest(), n_instructions, ops)


class _DagHasher:
    """Memoized Merkle hashing of the computations of one module."""

    def __init__(self, computations: dict[int, Any], module: HloModule, view: Any) -> None:
        # `view`: the parsed module `computations` come from (the bulk hasher reads it too).
        self._computations = computations
        self._source = module.source
        self._computation_digests: dict[int, bytes] = {}
        self._instruction_digests: dict[int, dict[int, bytes]] = {}
        self._instruction_attrs: dict[int, dict[int, bytes]] = {}

    def computation_digest(self, computation_id: int) -> bytes:
        cached = self._computation_digests.get(computation_id)
        if cached is not None:
            return cached
        computation = self._computations.get(computation_id)
        if computation is None:
            raise ValueError(f"{self._source}: call to unknown computation id {computation_id}")
        # Callees first: a computation's hash needs those of the computations it calls.
        for instruction in computation.instructions:
            for called in instruction.called_computation_ids:
                self.computation_digest(called)
        digests, attrs = self._hash_instructions(computation)
        if computation.root_id not in digests:
            raise ValueError(f"{self._source}: computation {computation.name!r} has no root")
        h = _blake(DOMAIN + b"/computation", digest_size=DIGEST_BYTES)
        h.update(b"F" if computation.is_fusion_computation else b"C")
        h.update(digests[computation.root_id])
        h.update(b"".join(sorted(digests.values())))
        digest = h.digest()
        self._computation_digests[computation_id] = digest
        self._instruction_digests[computation_id] = digests
        self._instruction_attrs[computation_id] = attrs
        return digest

    def _hash_instructions(self, computation: Any) -> tuple[dict[int, bytes], dict[int, bytes]]:
        # The hot loop of the toolkit (500k instructions must hash in seconds): locals only.
        digests: dict[int, bytes] = {}
        attrs: dict[int, bytes] = {}
        called_digests = self._computation_digests
        identity_fields = INSTRUCTION_IDENTITY_FIELDS
        pending = computation.instructions
        while pending:
            deferred = []
            for instruction in pending:
                try:
                    operands = b"".join([digests[o] for o in instruction.operand_ids])
                    controls = b"".join(
                        sorted([digests[o] for o in instruction.control_predecessor_ids])
                    )
                except KeyError:
                    deferred.append(instruction)  # operand listed later: not in proto order
                    continue
                called = b"".join([called_digests[c] for c in instruction.called_computation_ids])
                instruction_id = instruction.id
                for field in identity_fields:
                    instruction.ClearField(field)
                if instruction.opcode == "constant" and _is_large(instruction.shape):
                    instruction.ClearField("literal")
                attr = _attribute_bytes(instruction)
                attrs[instruction_id] = attr
                digests[instruction_id] = _instruction_digest(attr, operands, called, controls)
            if len(deferred) == len(pending):
                raise ValueError(
                    f"{self._source}: computation {computation.name!r} has a cycle or a "
                    "reference to a missing instruction"
                )
            pending = deferred
        return digests, attrs

    def kernels(self, fresh_view: Any) -> list[OpFingerprint]:
        """Op fingerprints of the kernels reachable from the entry through control flow.

        `fresh_view` is an unhashed parse of the same module (hashing strips names and ids).
        """
        computations = {c.id: c for c in fresh_view.computations}
        ops: list[OpFingerprint] = []
        seen: set[int] = set()
        stack = [fresh_view.entry_computation_id]
        while stack:
            computation_id = stack.pop()
            if computation_id in seen:
                continue
            seen.add(computation_id)
            computation = computations[computation_id]
            shapes = {i.id: i.shape for i in computation.instructions}
            for instruction in computation.instructions:
                if instruction.opcode in _CONTROL_FLOW_OPCODES:
                    stack.extend(instruction.called_computation_ids)
                if instruction.opcode in _NON_KERNEL_OPCODES:
                    continue
                ops.append(self._op_fingerprint(computations, computation_id, instruction, shapes))
        return ops

    def _op_fingerprint(
        self, computations: dict[int, Any], computation_id: int, instruction: Any, shapes: dict
    ) -> OpFingerprint:
        attr = self._instruction_attrs[computation_id][instruction.id]
        h = _blake(DOMAIN + b"/op", digest_size=DIGEST_BYTES)
        h.update(b"%d:" % len(attr) + attr)
        for operand in instruction.operand_ids:
            h.update(b"%d:" % len(shapes[operand]) + shapes[operand])
        size = 1
        for called in instruction.called_computation_ids:
            h.update(self._computation_digests[called])
            size += _instruction_count(computations, called)
        return OpFingerprint(h.hexdigest(), _kernel_kind(instruction), size, instruction.name)


def _instruction_count(computations: dict[int, Any], computation_id: int) -> int:
    computation = computations[computation_id]
    return len(computation.instructions) + sum(
        _instruction_count(computations, c)
        for i in computation.instructions
        for c in i.called_computation_ids
    )


def _is_large(shape_bytes: bytes) -> bool:
    """More elements than XLA prints in dumps: such constants hash by shape, not by value.

    XLA's dumps print a constant of over `LARGE_CONSTANT_ELEMENTS` elements as `{...}`, so a
    dump never tells its value; hashing it would give a dump and JAX's own module of the same
    program different fingerprints. A config tuned for one such graph fits the other anyway.
    """
    shape = ShapeProto.FromString(shape_bytes)
    elements = 1
    for dimension in shape.dimensions:
        elements *= dimension
    return elements > LARGE_CONSTANT_ELEMENTS or bool(shape.tuple_shapes)


def _attribute_bytes(instruction: Any) -> bytes:
    """The instruction's serialized attributes; frontend attributes in a canonical order.

    XLA writes an (often empty) frontend-attribute map on every instruction, in map order;
    absent and empty are the same thing, and two or more entries are sorted.
    """
    raw = instruction.frontend_attributes
    instruction.ClearField("frontend_attributes")
    if not raw:
        return instruction.SerializeToString()
    entries = FrontendAttributesProto.FromString(raw).map
    return instruction.SerializeToString() + json.dumps(sorted((e.key, e.value) for e in entries)).encode()


def _update_sorted_frontend_attributes(h: Any, message: Any) -> None:
    if message.HasField("frontend_attributes"):
        h.update(json.dumps(sorted((e.key, e.value) for e in message.frontend_attributes.map)).encode())
        message.ClearField("frontend_attributes")


def _kernel_kind(instruction: Any) -> str:
    """A short kind: the library fusion kind, XLA's fusion kind, or the opcode."""
    if instruction.opcode == "fusion":
        library_kind = _backend_fusion_kind(instruction.backend_config)
        return f"fusion:{library_kind or instruction.fusion_kind}"
    if instruction.opcode == "custom-call":
        return f"custom-call:{instruction.custom_call_target}"
    return instruction.opcode


def _backend_fusion_kind(backend_config: bytes) -> str | None:
    if not backend_config:
        return None
    try:
        config = json.loads(backend_config)
    except (ValueError, UnicodeDecodeError):
        return None
    fusion_config = config.get("fusion_config") if isinstance(config, dict) else None
    kind = fusion_config.get("kind") if isinstance(fusion_config, dict) else None
    return kind.strip("_") if isinstance(kind, str) and kind else None


# --- Bulk hashing --------------------------------------------------------------------------------
#
# `_DagHasher` above is the definition. `_BulkHasher` computes the same digests without handling
# each instruction field by field in Python; each step below reproduces one of
# `_DagHasher._hash_instructions`, and a module it cannot vouch for goes to `_DagHasher`:
#
# - Attribute bytes. The reference parses an instruction with the `hlo.proto` schema, clears
#   the identity fields and frontend attributes and re-serializes it: upb writes the declared fields
#   in field-number order, then the undeclared ones as they came. The bulk schema is a copy of that
#   one in which the cleared fields are singular proto3 scalars (the repeated id lists become
#   bytes, which is how packed lists travel). Merging one fixed suffix that sets each of them to
#   its default clears them all in one call per instruction, and serializing the whole computation
#   then yields every instruction's bytes as the reference serializes them, the other fields being
#   declared identically. Constants and frontend attributes then get the reference's treatment.
# - Ids and id lists. Ids and the packed lists (as bytes) are read with C-level `map`s over the
#   instructions. The lists' values come from a second parse of the module in which a computation's
#   instructions are one singular message, so that protobuf merges them: each list comes out whole,
#   with the reference's repeated-field semantics (packed or not, split or not). An instruction's
#   share of it is the number of varints in its packed bytes; shares that do not add up to the
#   merged list (ids not written as one packed list) send the module to the reference.
# - The Merkle step is a chain of C iterators driven by `dict.update`, which stores each digest
#   before it pulls the next instruction's hash input, whose operand lookups therefore see exactly
#   what the reference's loop sees. An operand listed after its user (KeyError) sends the
#   computation through the reference's deferral loop instead.

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
# Below this size (about 20 instructions) the bulk path's fixed costs outweigh what it saves.
_BULK_FROM_BYTES = 1024
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
_KIND_OPCODES = frozenset({"fusion", "custom-call"})  # whose `_kernel_kind` is not the opcode
_OP_HASH = _blake(DOMAIN + b"/op", digest_size=DIGEST_BYTES)


class _Unsupported(Exception):
    """The bulk path cannot vouch for this module (or this schema): use the reference."""


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
            raise _Unsupported("schema")
        messages = {m.name: m for m in file.message_type}
        instruction = messages[InstructionProto.DESCRIPTOR.name]
        cleared = set(INSTRUCTION_IDENTITY_FIELDS) | {"frontend_attributes"}
        fields = {f.name: f for f in instruction.field}
        if (
            instruction.oneof_decl
            or not cleared <= set(fields)
            or not {"id", *_ID_LIST_FIELDS} <= set(INSTRUCTION_IDENTITY_FIELDS)
            or fields["id"].label == _F.LABEL_REPEATED
            or fields["id"].type not in _VARINT_TYPES
            or any(
                fields[n].label != _F.LABEL_REPEATED or fields[n].type not in _VARINT_TYPES
                for n in _ID_LIST_FIELDS
            )
        ):
            raise _Unsupported("schema")
        flat_fields = [_F() for _ in _ID_LIST_FIELDS]
        for copy, name in zip(flat_fields, _ID_LIST_FIELDS):
            copy.CopyFrom(fields[name])  # the reference's semantics for the merged lists
        suffix = b""
        for field in instruction.field:
            if field.name not in cleared:
                continue
            if field.proto3_optional or field.HasField("oneof_index"):
                raise _Unsupported("schema")
            if field.label == _F.LABEL_REPEATED:
                # A packed list of varints is one length-delimited field: bytes on the wire.
                # Only the id lists are checked against their merged values (see above).
                if field.name not in _ID_LIST_FIELDS:
                    raise _Unsupported("schema")
                field.label = _F.LABEL_OPTIONAL
                field.type = _F.TYPE_BYTES
                field.ClearField("type_name")
                field.ClearField("options")
            if field.type in (_F.TYPE_STRING, _F.TYPE_BYTES):
                suffix += _tag(field.number, 2) + b"\x00"
            elif field.type in _VARINT_TYPES:
                suffix += _tag(field.number, 0) + b"\x00"
            else:
                raise _Unsupported("schema")
        self.clear_suffix = suffix
        instructions_number = ComputationProto.DESCRIPTOR.fields_by_name["instructions"].number
        computations_number = ModuleProto.DESCRIPTOR.fields_by_name["computations"].number
        frontend_number = fields["frontend_attributes"].number
        opcode = fields["opcode"]
        self.constant_opcode = _tag(opcode.number, 2) + _varint(len(b"constant")) + b"constant"

        def add(name: str, specs: list[tuple[str, int, int, int, str | None]]) -> None:
            if name in messages:
                raise _Unsupported("schema")
            message = file.message_type.add(name=name)
            for field_name, number, field_type, label, type_name in specs:
                field = message.field.add(
                    name=field_name, number=number, type=field_type, label=label
                )
                if type_name:
                    field.type_name = f".{file.package}.{type_name}"

        add("FpRawComputation", [
            ("instructions", instructions_number, _F.TYPE_BYTES, _F.LABEL_REPEATED, None),
        ])
        add("FpOpaque", [])
        add("FpMergedInstructions", [
            ("frontend_attributes", frontend_number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
             "FpOpaque"),
        ])
        file.message_type[-1].field.extend(flat_fields)
        add("FpMergedComputation", [
            ("instructions", instructions_number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
             "FpMergedInstructions"),
        ])
        add("FpMergedModule", [
            ("computations", computations_number, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
             "FpMergedComputation"),
        ])
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file)

        def get(name: str) -> type:
            descriptor = pool.FindMessageTypeByName(f"{file.package}.{name}")
            return message_factory.GetMessageClass(descriptor)

        self.module_class = get(ModuleProto.DESCRIPTOR.name)
        # The unbound method: mapping it saves a bound-method lookup per instruction.
        self.merge_from_string = get(InstructionProto.DESCRIPTOR.name).MergeFromString
        self.raw_computation_class = get("FpRawComputation")
        self.merged_module_class = get("FpMergedModule")


def _build_bulk_schema() -> _BulkSchema | None:
    try:
        return _BulkSchema()
    except (_Unsupported, KeyError, TypeError, ValueError):
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
    last_bytes = np.zeros(len(joined) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(joined, dtype=np.uint8) < 0x80, out=last_bytes[1:])
    return np.diff(last_bytes[ends], prepend=0).tolist()


def _sorted_join(digests: Any) -> bytes:
    """`b"".join(sorted(digests))` for digests of DIGEST_BYTES bytes."""
    if len(digests) < _NUMPY_FROM:
        return _join(sorted(digests))
    import numpy as np

    return np.sort(np.frombuffer(_join(digests), dtype=f"S{DIGEST_BYTES}")).tobytes()


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
    if instruction.opcode == "constant" and _is_large(instruction.shape):
        instruction.ClearField("literal")
        return instruction.SerializeToString()
    return attributes


def _frontend_suffix(raw: bytes) -> bytes:
    entries = FrontendAttributesProto.FromString(raw).map
    return json.dumps(sorted((e.key, e.value) for e in entries)).encode()


class _BulkHasher(_DagHasher):
    """`_DagHasher`'s digests, a computation at a time in bulk (see the comment above)."""

    def __init__(self, computations: dict[int, Any], module: HloModule, view: Any) -> None:
        super().__init__(computations, module, view)
        merged = _BULK.merged_module_class.FromString(module.proto).computations
        if len(merged) != len(view.computations):
            raise _Unsupported("computations")
        # Keyed like `computations`: the last computation of an id wins.
        self._merged = {c.id: m.instructions for c, m in zip(view.computations, merged)}
        # Per hashed computation, what the kernel walk needs: ids, attributes (a list in
        # instruction order, or the reference loop's map by id), id-list shares, merged lists.
        self._kernel_inputs: dict[int, tuple[Any, ...]] = {}

    def computation_digest(self, computation_id: int) -> bytes:
        cached = self._computation_digests.get(computation_id)
        if cached is not None:
            return cached
        computation = self._computations.get(computation_id)
        if computation is None:
            raise ValueError(f"{self._source}: call to unknown computation id {computation_id}")
        merged = self._merged[computation_id]
        instructions = list(computation.instructions)
        ids = list(map(_get_id, instructions))
        operand_counts = _id_counts(list(map(_get_operands, instructions)))
        operand_ids = merged.operand_ids
        called_ids = merged.called_computation_ids
        control_ids = merged.control_predecessor_ids
        if sum(operand_counts) != len(operand_ids):
            raise _Unsupported("operand ids not written as one packed list")
        if called_ids or control_ids:
            called_counts = _id_counts(list(map(_get_called, instructions)))
            control_counts = _id_counts(list(map(_get_controls, instructions)))
            if sum(called_counts) != len(called_ids) or sum(control_counts) != len(control_ids):
                raise _Unsupported("id lists not written as one packed list")
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
            attribute_source: Any = attributes
        except KeyError:  # operand listed later: not in proto order
            zeros = [0] * len(ids)
            digests, attribute_source = self._deferred_digests(
                computation, ids, attributes,
                _split(operand_ids, operand_counts),
                _split(called_ids, called_counts or zeros),
                _split(control_ids, control_counts or zeros),
            )
        self._kernel_inputs[computation_id] = (
            ids, attribute_source, operand_counts, called_counts, merged
        )
        if computation.root_id not in digests:
            raise ValueError(f"{self._source}: computation {computation.name!r} has no root")
        h = _blake(DOMAIN + b"/computation", digest_size=DIGEST_BYTES)
        h.update(b"F" if computation.is_fusion_computation else b"C")
        h.update(digests[computation.root_id])
        h.update(_sorted_join(digests.values()))
        digest = h.digest()
        self._computation_digests[computation_id] = digest
        self._instruction_digests[computation_id] = digests
        return digest

    @staticmethod
    def _attributes(
        computation: Any, instructions: list[Any], frontends: list[bytes] | None
    ) -> list[bytes]:
        """Each instruction's `_attribute_bytes` after the reference's clearing, in order."""
        deque(map(_BULK.merge_from_string, instructions, repeat(_BULK.clear_suffix)), maxlen=0)
        serialized = computation.SerializeToString()
        attributes = list(_BULK.raw_computation_class.FromString(serialized).instructions)
        if len(attributes) != len(instructions):
            raise _Unsupported("instructions")
        constant = _BULK.constant_opcode
        if constant in serialized:
            for j, attr in enumerate(attributes):
                if constant in attr:
                    attributes[j] = _constant_attributes(attr)
        if frontends is not None:
            for j, raw in enumerate(frontends):
                if raw:
                    attributes[j] += _frontend_suffix(raw)
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
        if called_counts is None:
            lengths = map(
                _pack_lengths, map(len, attributes), map(_times_digest, operand_counts),
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
                _pack_lengths, map(len, attributes), map(_times_digest, operand_counts),
                map(_times_digest, called_counts), map(_times_digest, control_counts),
            )
            parts = zip(lengths, attributes, operands, called, controls)
        digests.update(zip(ids, _hashes(map(_join, parts))))
        return digests

    def _deferred_digests(
        self,
        computation: Any,
        ids: list[int],
        attributes: list[bytes],
        operands_of: list[list[int]],
        called_of: list[list[int]],
        controls_of: list[list[int]],
    ) -> tuple[dict[int, bytes], dict[int, bytes]]:
        """The reference's loop, deferring instructions listed before an operand."""
        digests: dict[int, bytes] = {}
        attrs: dict[int, bytes] = {}
        called_digests = self._computation_digests
        pending: Any = range(len(ids))
        while pending:
            deferred = []
            for j in pending:
                try:
                    operands = b"".join([digests[o] for o in operands_of[j]])
                    controls = b"".join(sorted([digests[o] for o in controls_of[j]]))
                except KeyError:
                    deferred.append(j)
                    continue
                called = b"".join([called_digests[c] for c in called_of[j]])
                attr = attributes[j]
                attrs[ids[j]] = attr
                digests[ids[j]] = _instruction_digest(attr, operands, called, controls)
            if len(deferred) == len(pending):
                raise ValueError(
                    f"{self._source}: computation {computation.name!r} has a cycle or a "
                    "reference to a missing instruction"
                )
            pending = deferred
        return digests, attrs

    def kernels(self, fresh_view: Any) -> list[OpFingerprint]:
        """`_DagHasher.kernels`, reading each computation's instructions in bulk."""
        computations = {c.id: c for c in fresh_view.computations}
        ops: list[OpFingerprint] = []
        seen: set[int] = set()
        sizes: dict[int, int] = {}
        stack = [fresh_view.entry_computation_id]
        while stack:
            computation_id = stack.pop()
            if computation_id in seen:
                continue
            seen.add(computation_id)
            self._kernels_of(computations, computation_id, stack, sizes, ops)
        return ops

    def _kernels_of(
        self,
        computations: dict[int, Any],
        computation_id: int,
        stack: list[int],
        sizes: dict[int, int],
        ops: list[OpFingerprint],
    ) -> None:
        instructions = list(computations[computation_id].instructions)
        ids, attribute_source, operand_counts, called_counts, merged = self._kernel_inputs[
            computation_id
        ]
        attrs = (
            dict(zip(ids, attribute_source))
            if isinstance(attribute_source, list)
            else attribute_source
        )
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
            if opcode in _CONTROL_FLOW_OPCODES:
                stack.extend(called_ids)
            if opcode in _NON_KERNEL_OPCODES:
                continue
            h = after_attributes[attrs[instruction_id]].copy()
            if operands:
                h.update(_join(map(shapes.__getitem__, operands)))
            size = 1
            for called in called_ids:
                h.update(computation_digests[called])
                size += _instruction_count_memo(computations, called, sizes)
            kind = _kernel_kind(instruction) if opcode in _KIND_OPCODES else opcode
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
    """`_instruction_count`, remembering each computation's count."""
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
