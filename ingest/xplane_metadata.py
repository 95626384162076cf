"""The HLO of each executable in a profiler trace: the `/host:metadata` plane of an `xla.XSpace`.

`ProfileData` does not expose event metadata, so the plane is found by walking the protobuf
wire format of the XSpace and decoded with a minimal schema of `xplane.proto` (what the plane
needs; field numbers are fixed). Each event metadata entry of a live executable is named
`<module>(<program_id>)` and carries its optimized module as a `Hlo Proto` stat.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterator

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from hlo.proto import FieldSpec, build_messages

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
MODULE_EVENT_NAME = re.compile(r"^(?P<name>.*)\((?P<id>\d+)\)$")  # `<module>(<program_id>)`
HloEntries = dict[int | None, list[tuple[str, bytes]]]  # program_id -> [(name, HloProto)]


class CorruptMetadata(ValueError):
    """The XSpace bytes are not a well-formed protobuf where the metadata plane was sought."""


_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
# tsl/profiler/protobuf/xplane.proto, only what the metadata plane needs. Field numbers are fixed.
_XPLANE_SCHEMA: dict[str, list[FieldSpec]] = {
    "XStat": [
        ("metadata_id", 1, _F.TYPE_INT64, _OPT, None),
        ("double_value", 2, _F.TYPE_DOUBLE, _OPT, None),
        ("uint64_value", 3, _F.TYPE_UINT64, _OPT, None),
        ("int64_value", 4, _F.TYPE_INT64, _OPT, None),
        ("str_value", 5, _F.TYPE_STRING, _OPT, None),
        ("bytes_value", 6, _F.TYPE_BYTES, _OPT, None),
        ("ref_value", 7, _F.TYPE_UINT64, _OPT, None),
    ],
    "XEventMetadata": [
        ("id", 1, _F.TYPE_INT64, _OPT, None),
        ("name", 2, _F.TYPE_STRING, _OPT, None),
        ("stats", 5, _F.TYPE_MESSAGE, _REP, ".fdo_xplane.XStat"),
    ],
    "XStatMetadata": [
        ("id", 1, _F.TYPE_INT64, _OPT, None),
        ("name", 2, _F.TYPE_STRING, _OPT, None),
    ],
    "EventMetadataEntry": [
        ("key", 1, _F.TYPE_INT64, _OPT, None),
        ("value", 2, _F.TYPE_MESSAGE, _OPT, ".fdo_xplane.XEventMetadata"),
    ],
    "StatMetadataEntry": [
        ("key", 1, _F.TYPE_INT64, _OPT, None),
        ("value", 2, _F.TYPE_MESSAGE, _OPT, ".fdo_xplane.XStatMetadata"),
    ],
    # Lines (field 3) are left out: the metadata plane has none, and unknown fields are skipped.
    "XPlane": [
        ("id", 1, _F.TYPE_INT64, _OPT, None),
        ("name", 2, _F.TYPE_STRING, _OPT, None),
        ("event_metadata", 4, _F.TYPE_MESSAGE, _REP, ".fdo_xplane.EventMetadataEntry"),
        ("stat_metadata", 5, _F.TYPE_MESSAGE, _REP, ".fdo_xplane.StatMetadataEntry"),
    ],
}


# XStat's value is a oneof of its fields 2 to 7.
_XPLANE = build_messages("fdo_xplane", _XPLANE_SCHEMA, {"XStat": ("value", frozenset(range(2, 8)))})


def hlo_protos(data: bytes) -> HloEntries:
    """program_id -> [(event metadata name, serialized HloProto)] from the `/host:metadata`
    plane of the serialized XSpace `data`; CorruptMetadata when the bytes do not parse."""
    result: dict[int | None, list[tuple[str, bytes]]] = defaultdict(list)
    view = memoryview(data)
    try:
        for number, wire_type, start, end in _fields(view, 0, len(view)):
            if number != 1 or wire_type != 2 or _plane_name(view, start, end) != METADATA_PLANE:
                continue
            plane = _XPLANE["XPlane"].FromString(view[start:end].tobytes())
            stat_names = {entry.key: entry.value.name for entry in plane.stat_metadata}
            for entry in plane.event_metadata:
                metadata = entry.value
                stats = {stat_names.get(s.metadata_id): s for s in metadata.stats}
                proto = stats.get(HLO_PROTO_STAT)
                if proto is None or not proto.bytes_value:
                    continue
                program_id = _stat_int(stats.get("program_id"))
                if program_id is None:
                    match = MODULE_EVENT_NAME.match(metadata.name)
                    program_id = int(match.group("id")) if match else None
                result[program_id].append((metadata.name, proto.bytes_value))
    except DecodeError as exc:
        raise CorruptMetadata(str(exc)) from exc
    return dict(result)




def _fields(view: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value start, value end) of the fields in view[pos:end]."""
    while pos < end:
        key, pos = _varint(view, pos, end)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, value_end = _varint(view, pos, end)
        elif wire_type == 1:
            value_end = pos + 8
        elif wire_type == 2:
            length, pos = _varint(view, pos, end)
            value_end = pos + length
        elif wire_type == 5:
            value_end = pos + 4
        else:
            raise CorruptMetadata(f"unsupported wire type {wire_type}")
        if value_end > end:
            raise CorruptMetadata("truncated message")
        yield number, wire_type, pos, value_end
        pos = value_end


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise CorruptMetadata("truncated or malformed varint")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _plane_name(view: memoryview, start: int, end: int) -> str | None:
    for number, wire_type, value_start, value_end in _fields(view, start, end):
        if number == 2 and wire_type == 2:
            return view[value_start:value_end].tobytes().decode("utf-8", "replace")
    return None


def _stat_int(stat: Any) -> int | None:
    if stat is None:
        return None
    kind = stat.WhichOneof("value")
    if kind in ("int64_value", "uint64_value"):
        return int(getattr(stat, kind))
    return as_int(stat.str_value) if kind == "str_value" else None


def as_int(value: Any) -> int | None:
    """`value` as an int (a stat holds ids as ints or as digit strings); None when it is none."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
