"""Family fingerprints: one key for the same program at other shapes.

A fleet runs one model at many shapes (batch sizes, sequence lengths, widths), and each shape
is its own graph fingerprint (`hlo.fingerprint`). The family fingerprint puts them together:
it is the fingerprint of an *abstracted* copy of the module, in which every size is gone and
the structure stays, hashed by the graph fingerprint's machinery (with one change, below) and
re-hashed under its own domain, so that a family id never equals a graph fingerprint.

What the abstracted module keeps:

- the DAG: every computation with its instructions, operands (in order), called computations,
  control predecessors, root and fusion flag; the entry computation;
- per instruction, an allowlist of size-free attributes (`_INSTRUCTION_FIELDS`): the opcode;
  the shape as a skeleton, element type and rank only, recursively for tuples (dimensions all
  zero, their count kept; no layout, no dynamic-dimension flags); dimension indices and
  dimension numbers (which axes, never how long); parameter and tuple indices; fusion kind,
  custom-call target and API version; comparison direction and type; precision config; the
  RNG, FFT, sort, top-k, reduce-precision, batch-norm and gather/scatter flags.

What it abstracts away: constants' values (a constant keeps its skeleton shape), windows
(kernel sizes, strides, padding), slice bounds, dynamic-slice and gather slice sizes, padding
configs, FFT lengths, feature and batch group counts, top-k's `k`, backend configs, shardings,
replica groups, channel ids, device lists, source-target pairs, frontend attributes, metadata,
and at module level the program shape, aliasing, layouts, shardings and frontend attributes (a
Shardy mesh names device counts). Every field not on the allowlist is dropped, including any
that a newer XLA adds: such a field might carry a size, so the allowlist is the safe side.

The abstracted module is hashed as a graph fingerprint is, but for one thing: a computation's
hash covers the *set* of its instruction digests, not their multiset. Two sizes that coincide
(a batch of 128 and a layer of width 128) let JAX share one broadcast constant between them,
which two other sizes keep apart; sharing a node and repeating it give the same Merkle digests
to every user, so with sets the family is the program's up to common subexpressions.

So the same program at two batch sizes has one family, and a program with another op, another
opcode or another dtype is another family; so is one that JAX traces differently at another
shape (a dimension of 1 that JAX squeezes away changes the graph). A family is a grouping for
evidence (a config verified for a sibling is the first candidate for the others, DESIGN.md's
"Reach"), never a key a config is applied by.
"""

from __future__ import annotations

import hashlib
from typing import Any

from google.protobuf import descriptor_pb2

from hlo.bulk_hasher import BulkHasher
from hlo.fingerprint import fingerprint_by
from hlo.module import HloModule
from hlo.proto import FieldSpec, build_messages
from hlo.reference_hasher import ReferenceHasher

__all__ = ["FAMILY_DOMAIN", "FamilyBulkHasher", "FamilyHasher", "abstracted_module", "family_fingerprint"]

FAMILY_DOMAIN = b"fleet-fdo/family/v1"  # the scheme: change it and every family changes

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_STRING, _BYTES, _BOOL = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_BOOL
_INT32, _INT64, _FLOAT = _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_FLOAT

# xla.HloInstructionProto's size-free fields (xla/service/hlo.proto numbers), sub-messages as
# bytes, and the identity fields the hasher reads (and then drops). Nothing else survives.
_INSTRUCTION_FIELDS: list[FieldSpec] = [
    ("name", 1, _STRING, _OPT, None),
    ("opcode", 2, _STRING, _OPT, None),
    ("shape", 3, _BYTES, _OPT, None),  # replaced by its skeleton
    ("parameter_number", 9, _INT64, _OPT, None),
    ("fusion_kind", 11, _STRING, _OPT, None),
    ("tuple_index", 13, _INT64, _OPT, None),
    ("dimensions", 14, _INT64, _REP, None),  # dimension indices: broadcast, reduce, transpose
    ("convolution_dimension_numbers", 16, _BYTES, _OPT, None),
    ("exponent_bits", 18, _INT32, _OPT, None),
    ("mantissa_bits", 19, _INT32, _OPT, None),
    ("distribution", 23, _INT32, _OPT, None),
    ("epsilon", 24, _FLOAT, _OPT, None),
    ("feature_index", 25, _INT64, _OPT, None),
    ("custom_call_target", 28, _STRING, _OPT, None),
    ("dot_dimension_numbers", 30, _BYTES, _OPT, None),
    ("fft_type", 31, _INT32, _OPT, None),
    ("gather_dimension_numbers", 33, _BYTES, _OPT, None),
    ("id", 35, _INT64, _OPT, None),
    ("operand_ids", 36, _INT64, _REP, None),
    ("control_predecessor_ids", 37, _INT64, _REP, None),
    ("called_computation_ids", 38, _INT64, _REP, None),
    ("scatter_dimension_numbers", 48, _BYTES, _OPT, None),
    ("precision_config", 51, _BYTES, _OPT, None),
    ("is_stable", 60, _BOOL, _OPT, None),
    ("comparison_direction", 63, _STRING, _OPT, None),
    ("indices_are_sorted", 67, _BOOL, _OPT, None),
    ("unique_indices", 69, _BOOL, _OPT, None),
    ("rng_algorithm", 70, _INT32, _OPT, None),
    ("comparison_type", 72, _STRING, _OPT, None),
    ("custom_call_api_version", 77, _INT32, _OPT, None),
    ("largest", 85, _BOOL, _OPT, None),
    ("is_composite", 89, _BOOL, _OPT, None),
    ("result_accuracy", 91, _BYTES, _OPT, None),
]

_SCHEMA: dict[str, list[FieldSpec]] = {
    # xla.ShapeProto without layout (5) and dynamic-dimension flags (6).
    "Shape": [
        ("element_type", 2, _INT32, _OPT, None),
        ("dimensions", 3, _INT64, _REP, None),
        ("tuple_shapes", 4, _F.TYPE_MESSAGE, _REP, ".fdo_family.Shape"),
    ],
    "Instruction": _INSTRUCTION_FIELDS,
    # xla.HloComputationProto without its program shape (4) and execution thread (8).
    "Computation": [
        ("name", 1, _STRING, _OPT, None),
        ("instructions", 2, _F.TYPE_MESSAGE, _REP, ".fdo_family.Instruction"),
        ("id", 5, _INT64, _OPT, None),
        ("root_id", 6, _INT64, _OPT, None),
        ("is_fusion_computation", 7, _BOOL, _OPT, None),
    ],
    # xla.HloModuleProto: its computations and which is the entry, nothing module-wide.
    "Module": [
        ("name", 1, _STRING, _OPT, None),
        ("entry_computation_name", 2, _STRING, _OPT, None),
        ("computations", 3, _F.TYPE_MESSAGE, _REP, ".fdo_family.Computation"),
        ("entry_computation_id", 6, _INT64, _OPT, None),
    ],
}
_CLASSES = build_messages("fdo_family", _SCHEMA)
_ShapeProto = _CLASSES["Shape"]
_ModuleProto = _CLASSES["Module"]


class FamilyHasher(ReferenceHasher):
    """The reference hasher with a computation's instruction digests as a set (the definition)."""

    @staticmethod
    def _sorted_join(digests: Any) -> bytes:
        return ReferenceHasher._sorted_join(set(digests))


class FamilyBulkHasher(BulkHasher):
    """`FamilyHasher`'s digests, in bulk."""

    @staticmethod
    def _sorted_join(digests: Any) -> bytes:
        return BulkHasher._sorted_join(set(digests))


def family_fingerprint(module: HloModule) -> str:
    """The family fingerprint of `module` as 32 hex characters: the fingerprint of its
    abstracted copy (`abstracted_module`, hashed by `FamilyHasher`) under the family's own
    domain. ValueError, as `graph_fingerprint` raises it, for a module it cannot hash."""
    abstracted = abstracted_module(module)
    fingerprint = fingerprint_by(abstracted, False, FamilyHasher, FamilyBulkHasher).fingerprint
    return hashlib.blake2b(FAMILY_DOMAIN + bytes.fromhex(fingerprint), digest_size=16).hexdigest()


def abstracted_module(module: HloModule) -> HloModule:
    """`module` with its sizes gone: the allowlisted fields only, shapes as skeletons."""
    view = _ModuleProto.FromString(module.proto)
    view.DiscardUnknownFields()  # recursive: what the schema does not declare is gone
    skeletons: dict[bytes, bytes] = {}
    for computation in view.computations:
        for instruction in computation.instructions:
            shape = instruction.shape
            skeleton = skeletons.get(shape)
            if skeleton is None:
                skeleton = skeletons[shape] = _skeleton(shape)
            instruction.shape = skeleton
    return HloModule(view.SerializeToString(), module.name, module.source)


def _skeleton(shape_bytes: bytes) -> bytes:
    """A shape's element type and rank (recursively for tuples): its dimensions zeroed."""
    shape = _ShapeProto.FromString(shape_bytes)
    shape.DiscardUnknownFields()
    _zero_dimensions(shape)
    return shape.SerializeToString()


def _zero_dimensions(shape: Any) -> None:
    if shape.dimensions:
        shape.dimensions[:] = [0] * len(shape.dimensions)
    for element in shape.tuple_shapes:
        _zero_dimensions(element)
