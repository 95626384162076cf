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
declared an identity in `ingest.hlo_proto` is hashed, including fields a newer XLA adds.

An op fingerprint is the same hash over one kernel of an optimized module (a fusion with its
fused computation, or an unfused compute instruction) with the shapes of its operands standing
in for the operands themselves, so the same kernel in two graphs gets the same fingerprint.
"""

from __future__ import annotations

import gc
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from ingest.hlo_module import HloModule
from ingest.hlo_proto import (
    INSTRUCTION_IDENTITY_FIELDS,
    MODULE_IDENTITY_FIELDS,
    FrontendAttributesProto,
    ShapeProto,
)

DIGEST_BYTES = 16
LARGE_CONSTANT_ELEMENTS = 10
_DOMAIN = b"fleet-fdo/fingerprint/v1"
_blake = hashlib.blake2b
# Lengths of the four parts of an instruction's hash input, so the parts cannot run together.
_pack_lengths = struct.Struct("<4I").pack

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
        return _fingerprint_module(module, with_ops)
    finally:
        if gc_was_enabled:
            gc.enable()


def _fingerprint_module(module: HloModule, with_ops: bool) -> ModuleFingerprint:
    view = module.view()
    by_id = {c.id: c for c in view.computations}
    if view.entry_computation_id not in by_id:
        raise ValueError(f"{module.source}: module has no entry computation")
    hasher = _DagHasher(by_id, module.source)
    entry = hasher.computation_digest(view.entry_computation_id)
    h = _blake(_DOMAIN + b"/module", digest_size=DIGEST_BYTES)
    h.update(entry)
    for field in MODULE_IDENTITY_FIELDS:
        view.ClearField(field)
    view.host_program_shape.ClearField("parameter_names")
    _update_sorted_frontend_attributes(h, view)
    h.update(view.SerializeToString())
    n_instructions = sum(len(c.instructions) for c in by_id.values())
    # Hashing cleared the identity fields in place; the kernel walk needs them, so re-parse.
    ops = tuple(hasher.kernels(module.view())) if with_ops else ()
    return ModuleFingerprint(h.hexdigest(), n_instructions, ops)


class _DagHasher:
    """Memoized Merkle hashing of the computations of one module."""

    def __init__(self, computations: dict[int, Any], source: str) -> None:
        self._computations = computations
        self._source = source
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
        h = _blake(_DOMAIN + b"/computation", digest_size=DIGEST_BYTES)
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
        blake = _blake
        identity_fields = INSTRUCTION_IDENTITY_FIELDS
        pack_lengths = _pack_lengths
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
                digests[instruction_id] = blake(
                    pack_lengths(len(attr), len(operands), len(called), len(controls))
                    + attr + operands + called + controls,
                    digest_size=DIGEST_BYTES,
                ).digest()
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
        h = _blake(_DOMAIN + b"/op", digest_size=DIGEST_BYTES)
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
