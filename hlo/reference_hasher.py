"""The fingerprint's definition: the reference hasher, one instruction at a time.

Each instruction is parsed with `hlo.proto`'s schema, its identity fields are cleared, it is
re-serialized and hashed with its operands', callees' and control predecessors' digests (10 to
13 µs an instruction). Everything here defines the digests: the scheme's constants, the hash
input of an instruction, of a computation (`ReferenceHasher`) and of a module
(`fingerprint_with`), and the op walk. `hlo.bulk_hasher` computes the same digests faster and
builds on these; `hlo.fingerprint` is the public API and describes the scheme.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from hlo.module import HloModule
from hlo.proto import (
    INSTRUCTION_IDENTITY_FIELDS,
    MODULE_IDENTITY_FIELDS,
    FrontendAttributesProto,
    ModuleProto,
    ShapeProto,
)

DIGEST_BYTES = 16
LARGE_CONSTANT_ELEMENTS = 10
DOMAIN = b"fleet-fdo/fingerprint/v1"  # the scheme: change it and every fingerprint changes
_blake = hashlib.blake2b
# Lengths of the four parts of an instruction's hash input, so the parts cannot run together.
pack_lengths = struct.Struct("<4I").pack


def instruction_digest(attr: bytes, operands: bytes, called: bytes, controls: bytes) -> bytes:
    """An instruction's hash: its attributes, then its operands', called computations' and
    control predecessors' digests, each part's length first so the parts cannot run together."""
    return _blake(pack_lengths(len(attr), len(operands), len(called), len(controls))
                  + attr + operands + called + controls, digest_size=DIGEST_BYTES).digest()


# Opcodes that move or name data but compute nothing: they are not kernels of their own.
NON_KERNEL_OPCODES = frozenset(
    {
        "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
        "add-dependency", "opt-barrier", "domain", "partition-id", "replica-id",
        "while", "conditional", "call",
    }
)
# Instructions whose called computations run as kernels of their own (control flow).
CONTROL_FLOW_OPCODES = frozenset(
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


def reference_fingerprint(module: HloModule, with_ops: bool = True) -> ModuleFingerprint:
    """`module`'s fingerprint as the reference hasher computes it (the definition)."""
    return fingerprint_with(module, with_ops, ModuleProto, ReferenceHasher)


def fingerprint_with(
    module: HloModule, with_ops: bool, module_class: type[Message], hasher_class: type[ReferenceHasher]
) -> ModuleFingerprint:
    """The module's hash over its entry computation's digest, and its kernels with `with_ops`,
    parsing `module` with `module_class` and hashing its computations with `hasher_class`
    (`ReferenceHasher` or a hasher of the same digests); ValueError if it has no entry."""
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


class ReferenceHasher:
    """Memoized Merkle hashing of the computations of one module.

    A computation's digest and the kernel walk are the same for every hasher of these digests;
    a subclass computes a computation's instruction digests (`_instruction_digests`) and the
    kernels of one computation (`_computation_kernels`) its own way.
    """

    def __init__(self, computations: dict[int, Any], module: HloModule, view: Any) -> None:
        # `view`: the parsed module `computations` come from (the bulk hasher reads it too).
        self._computations = computations
        self._source = module.source
        self._computation_digests: dict[int, bytes] = {}
        self._instruction_attrs: dict[int, dict[int, bytes]] = {}

    def computation_digest(self, computation_id: int) -> bytes:
        """The digest of computation `computation_id`, its callees hashed first, each once."""
        cached = self._computation_digests.get(computation_id)
        if cached is not None:
            return cached
        computation = self._computations.get(computation_id)
        if computation is None:
            raise ValueError(f"{self._source}: call to unknown computation id {computation_id}")
        digests = self._instruction_digests(computation_id, computation)
        if computation.root_id not in digests:
            raise ValueError(f"{self._source}: computation {computation.name!r} has no root")
        h = _blake(DOMAIN + b"/computation", digest_size=DIGEST_BYTES)
        h.update(b"F" if computation.is_fusion_computation else b"C")
        h.update(digests[computation.root_id])
        h.update(self._sorted_join(digests.values()))
        digest = h.digest()
        self._computation_digests[computation_id] = digest
        return digest

    @staticmethod
    def _sorted_join(digests: Any) -> bytes:
        return b"".join(sorted(digests))

    def _instruction_digests(self, computation_id: int, computation: Any) -> dict[int, bytes]:
        """Each instruction's digest by id, the computations it calls hashed first."""
        # Callees first: a computation's hash needs those of the computations it calls.
        for instruction in computation.instructions:
            for called in instruction.called_computation_ids:
                self.computation_digest(called)
        digests, self._instruction_attrs[computation_id] = self._hash_instructions(computation)
        return digests

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
                if instruction.opcode == "constant" and is_large_constant(instruction.shape):
                    instruction.ClearField("literal")
                attr = _attribute_bytes(instruction)
                attrs[instruction_id] = attr
                digests[instruction_id] = instruction_digest(attr, operands, called, controls)
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
            self._computation_kernels(computations, computation_id, stack, ops)
        return ops

    def _computation_kernels(
        self, computations: dict[int, Any], computation_id: int, stack: list[int],
        ops: list[OpFingerprint],
    ) -> None:
        """Append the kernels of one computation to `ops`, and the computations its control
        flow calls to `stack`."""
        computation = computations[computation_id]
        shapes = {i.id: i.shape for i in computation.instructions}
        for instruction in computation.instructions:
            if instruction.opcode in CONTROL_FLOW_OPCODES:
                stack.extend(instruction.called_computation_ids)
            if instruction.opcode in NON_KERNEL_OPCODES:
                continue
            ops.append(self._op_fingerprint(computations, computation_id, instruction, shapes))

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
        return OpFingerprint(h.hexdigest(), kernel_kind(instruction), size, instruction.name)


def _instruction_count(computations: dict[int, Any], computation_id: int) -> int:
    computation = computations[computation_id]
    return len(computation.instructions) + sum(
        _instruction_count(computations, c)
        for i in computation.instructions
        for c in i.called_computation_ids
    )


def is_large_constant(shape_bytes: bytes) -> bool:
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
    return instruction.SerializeToString() + frontend_suffix(raw)


def frontend_suffix(raw: bytes) -> bytes:
    """What an instruction's serialized frontend attributes (`raw`, not empty) add to its
    attribute bytes: the entries as sorted JSON, so their order does not count."""
    entries = FrontendAttributesProto.FromString(raw).map
    return json.dumps(sorted((e.key, e.value) for e in entries)).encode()


def _update_sorted_frontend_attributes(h: Any, message: Any) -> None:
    if message.HasField("frontend_attributes"):
        h.update(json.dumps(sorted((e.key, e.value) for e in message.frontend_attributes.map)).encode())
        message.ClearField("frontend_attributes")


def kernel_kind(instruction: Any) -> str:
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
