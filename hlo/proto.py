"""A partial, schema-light view of XLA's HloModuleProto.

XLA serializes a parsed module as `xla.HloModuleProto` (xla/service/hlo.proto). jaxlib does not
ship the generated Python classes, so we declare here only the fields we must *read or drop*:
identities (names, ids, operand ids), source metadata, and the few attributes the toolkit looks
at. Every other field stays an unknown field, is preserved byte for byte by protobuf, and so is
hashed by the fingerprint without being listed here. A field XLA adds in a later version is
therefore covered automatically.

Field numbers are XLA's and are stable: protobuf forbids renumbering.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (name, number, type, label, message type or None). Sub-messages we never look inside are
# declared as bytes: that is wire-compatible and keeps them out of Python objects.
_SCHEMA: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "StringMapEntry": [
        ("key", 1, _F.TYPE_STRING, _OPT, None),
        ("value", 2, _F.TYPE_STRING, _OPT, None),
    ],
    "FrontendAttributes": [("map", 1, _F.TYPE_MESSAGE, _REP, ".fdo_hlo.StringMapEntry")],
    # xla.LayoutProto: only the dimension order (`hlo.layout` resets it to the default).
    "Layout": [("minor_to_major", 1, _F.TYPE_INT64, _REP, None)],
    "Shape": [
        ("element_type", 2, _F.TYPE_INT32, _OPT, None),
        ("dimensions", 3, _F.TYPE_INT64, _REP, None),
        ("tuple_shapes", 4, _F.TYPE_MESSAGE, _REP, ".fdo_hlo.Shape"),
        ("layout", 5, _F.TYPE_MESSAGE, _OPT, ".fdo_hlo.Layout"),
    ],
    # Shapes as bytes: re-serializing a module leaves them exactly as XLA wrote them.
    "ProgramShape": [
        ("parameters", 1, _F.TYPE_BYTES, _REP, None),
        ("result", 2, _F.TYPE_BYTES, _OPT, None),
        ("parameter_names", 3, _F.TYPE_STRING, _REP, None),
    ],
    "Instruction": [
        ("name", 1, _F.TYPE_STRING, _OPT, None),
        ("opcode", 2, _F.TYPE_STRING, _OPT, None),
        ("shape", 3, _F.TYPE_BYTES, _OPT, None),
        ("metadata", 7, _F.TYPE_BYTES, _OPT, None),
        ("literal", 8, _F.TYPE_BYTES, _OPT, None),
        ("parameter_number", 9, _F.TYPE_INT64, _OPT, None),
        ("fusion_kind", 11, _F.TYPE_STRING, _OPT, None),
        ("dimensions", 14, _F.TYPE_INT64, _REP, None),
        ("dynamic_slice_sizes", 20, _F.TYPE_INT64, _REP, None),
        ("custom_call_target", 28, _F.TYPE_STRING, _OPT, None),
        ("gather_dimension_numbers", 33, _F.TYPE_BYTES, _OPT, None),
        ("gather_slice_sizes", 34, _F.TYPE_INT64, _REP, None),
        ("id", 35, _F.TYPE_INT64, _OPT, None),
        ("operand_ids", 36, _F.TYPE_INT64, _REP, None),
        ("control_predecessor_ids", 37, _F.TYPE_INT64, _REP, None),
        ("called_computation_ids", 38, _F.TYPE_INT64, _REP, None),
        ("backend_config", 43, _F.TYPE_BYTES, _OPT, None),
        ("scatter_dimension_numbers", 48, _F.TYPE_BYTES, _OPT, None),
        # Raw bytes: a message view of it costs microseconds per instruction in the hot loop.
        ("frontend_attributes", 68, _F.TYPE_BYTES, _OPT, None),
        ("statistics_viz", 82, _F.TYPE_BYTES, _OPT, None),
        ("original_value", 88, _F.TYPE_BYTES, _OPT, None),
    ],
    "Computation": [
        ("name", 1, _F.TYPE_STRING, _OPT, None),
        ("instructions", 2, _F.TYPE_MESSAGE, _REP, ".fdo_hlo.Instruction"),
        ("program_shape", 4, _F.TYPE_BYTES, _OPT, None),
        ("id", 5, _F.TYPE_INT64, _OPT, None),
        ("root_id", 6, _F.TYPE_INT64, _OPT, None),
        ("is_fusion_computation", 7, _F.TYPE_BOOL, _OPT, None),
    ],
    "Module": [
        ("name", 1, _F.TYPE_STRING, _OPT, None),
        ("entry_computation_name", 2, _F.TYPE_STRING, _OPT, None),
        ("computations", 3, _F.TYPE_MESSAGE, _REP, ".fdo_hlo.Computation"),
        ("host_program_shape", 4, _F.TYPE_MESSAGE, _OPT, ".fdo_hlo.ProgramShape"),
        ("id", 5, _F.TYPE_INT64, _OPT, None),
        ("entry_computation_id", 6, _F.TYPE_INT64, _OPT, None),
        ("schedule", 7, _F.TYPE_BYTES, _OPT, None),
        ("input_output_alias", 8, _F.TYPE_BYTES, _OPT, None),
        ("profile_info", 13, _F.TYPE_BYTES, _REP, None),
        ("device_assignment", 15, _F.TYPE_BYTES, _OPT, None),
        ("stack_frame_index", 17, _F.TYPE_BYTES, _OPT, None),
        ("buffer_donor", 18, _F.TYPE_BYTES, _OPT, None),
        ("frontend_attributes", 19, _F.TYPE_MESSAGE, _OPT, ".fdo_hlo.FrontendAttributes"),
    ],
    # xla.HloProto wraps a module; XLA's --xla_dump_hlo_as_proto writes this form.
    "HloProto": [("hlo_module", 1, _F.TYPE_MESSAGE, _OPT, ".fdo_hlo.Module")],
    # xla.GatherDimensionNumbers / ScatterDimensionNumbers: which operand dims indices address.
    "GatherDims": [("start_index_map", 3, _F.TYPE_INT64, _REP, None)],
    "ScatterDims": [("scatter_dims_to_operand_dims", 3, _F.TYPE_INT64, _REP, None)],
}

# Instruction fields that carry identity or provenance, never structure.
INSTRUCTION_IDENTITY_FIELDS = (
    "name",
    "metadata",
    "id",
    "operand_ids",
    "control_predecessor_ids",
    "called_computation_ids",
    "statistics_viz",
    "original_value",
)
# Module fields that are identity, provenance, or results of compilation rather than input.
MODULE_IDENTITY_FIELDS = (
    "name",
    "entry_computation_name",
    "computations",
    "id",
    "entry_computation_id",
    "schedule",
    "profile_info",
    "device_assignment",
    "stack_frame_index",
)


# A field's declaration: (name, number, type, label, message type or None).
FieldSpec = tuple[str, int, int, int, "str | None"]


def build_messages(package: str, schema: dict[str, list[FieldSpec]],
                   oneofs: dict[str, tuple[str, frozenset[int]]] | None = None) -> dict[str, type[Message]]:
    """Message classes for a partial schema of XLA protos (message types named
    `.<package>.<Name>`); fields left out stay unknown fields, kept byte for byte. `oneofs`:
    per message, the name of its one oneof and the numbers of the fields in it."""
    fd = descriptor_pb2.FileDescriptorProto(
        name=f"{package}_subset.proto", package=package, syntax="proto3"
    )
    for message_name, fields in schema.items():
        message = fd.message_type.add(name=message_name)
        oneof_name, members = (oneofs or {}).get(message_name, ("", frozenset()))
        if oneof_name:
            message.oneof_decl.add(name=oneof_name)
        for field_name, number, field_type, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                field.type_name = type_name
            if number in members:
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in schema
    }


_CLASSES = build_messages("fdo_hlo", _SCHEMA)
ModuleProto = _CLASSES["Module"]
ComputationProto = _CLASSES["Computation"]
InstructionProto = _CLASSES["Instruction"]
ShapeProto = _CLASSES["Shape"]
ProgramShapeProto = _CLASSES["ProgramShape"]
HloProtoWrapper = _CLASSES["HloProto"]
GatherDimsProto = _CLASSES["GatherDims"]
FrontendAttributesProto = _CLASSES["FrontendAttributes"]
ScatterDimsProto = _CLASSES["ScatterDims"]
