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

Implementation: `hlo.reference_hasher` is the definition, one instruction at a time (clear its
identity fields, re-serialize it, hash): 10 to 13 µs an instruction. `hlo.bulk_hasher` computes
the very same bytes and digests a computation at a time (about 3 µs an instruction), and hands
any module it cannot vouch for back to the reference. This module is the public API: it picks
the hasher.
"""

from __future__ import annotations

import gc

from google.protobuf.message import DecodeError

from hlo.bulk_hasher import BulkHasher, Unsupported, bulk_fingerprint
from hlo.module import HloModule
from hlo.proto import ModuleProto
from hlo.reference_hasher import (
    DOMAIN,
    ModuleFingerprint,
    OpFingerprint,
    ReferenceHasher,
    fingerprint_with,
)

__all__ = ["DOMAIN", "ModuleFingerprint", "OpFingerprint", "fingerprint_by", "fingerprint_module",
           "graph_fingerprint"]

# Below this size (about 20 instructions) the bulk path's fixed costs outweigh what it saves.
_BULK_FROM_BYTES = 1024


def graph_fingerprint(module: HloModule) -> str:
    """The graph fingerprint of `module` as 32 hex characters."""
    return fingerprint_module(module, with_ops=False).fingerprint


def fingerprint_module(module: HloModule, with_ops: bool = True) -> ModuleFingerprint:
    """Graph fingerprint, instruction count and (optionally) op fingerprints in one pass."""
    return fingerprint_by(module, with_ops, ReferenceHasher, BulkHasher)


def fingerprint_by(module: HloModule, with_ops: bool, reference: type[ReferenceHasher],
                   bulk: type[BulkHasher]) -> ModuleFingerprint:
    """`fingerprint_module` with other hashers of one scheme: `reference` defines the digests
    (a subclass of `ReferenceHasher`), `bulk` computes the same ones faster (a subclass of
    `BulkHasher` with the same overrides) where it can vouch for the module."""
    # The hash loop allocates millions of small objects and no cycles; the cyclic collector
    # would rescan the growing heap again and again (superlinear on large modules).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if len(module.proto) >= _BULK_FROM_BYTES:
            try:
                return bulk_fingerprint(module, with_ops, bulk)
            except (Unsupported, ValueError, DecodeError):
                pass  # the reference below either agrees or raises its own error for this module
        return fingerprint_with(module, with_ops, ModuleProto, reference)
    finally:
        if gc_was_enabled:
            gc.enable()
