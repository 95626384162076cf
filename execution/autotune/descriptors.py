"""The protobuf file descriptors that the installed XLA's shared libraries embed.

Generated C++ code keeps each .proto file's FileDescriptorProto, serialized, in the binary. A
GPU PJRT plugin's library (jax_plugins.*, the XLA:GPU that reads autotune results) is scanned
before jaxlib's: `embedded_descriptors` finds a file's descriptor and those of everything it
imports, so that a descriptor pool can build XLA's message classes at run time
(`execution.autotune.schema`). The well-known types (google/protobuf/*) come from protobuf
itself.
"""

from __future__ import annotations

import contextlib
import importlib
import mmap
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

# The well-known types XLA's protos import: protobuf's own definitions of them.
_WELL_KNOWN = "google/protobuf/"
_MIN_LIBRARY_BYTES = 1 << 20  # jaxlib's extension stubs embed no descriptors
# FileDescriptorProto's fields and their wire types: an embedded descriptor ends where these end.
_FILE_FIELDS = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 13: 2, 14: 0}
# What the scan reads: a library's bytes, mapped (mmap), or bytes in memory.
Binary = mmap.mmap | bytes


def compiler_libraries() -> list[Path]:
    """The shared libraries that hold the installed XLA: each GPU PJRT plugin's (jax_plugins.*,
    the XLA:GPU that reads autotune results), then jaxlib's, big ones only."""
    import jaxlib

    roots: list[Path] = []
    with contextlib.suppress(ImportError):
        import jax_plugins

        roots += sorted(Path(p) for p in jax_plugins.__path__)
    found = [path for root in roots for path in sorted(root.glob("*/*.so"))]
    found += sorted(Path(jaxlib.__file__).parent.glob("*.so"))
    return [path for path in found if path.stat().st_size >= _MIN_LIBRARY_BYTES]


def library_descriptors(library: Path, name: str) -> list[descriptor_pb2.FileDescriptorProto] | None:
    """`embedded_descriptors` of shared library `library` (read through a memory map)."""
    with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return embedded_descriptors(data, name)


def embedded_descriptors(data: Binary, name: str) -> list[descriptor_pb2.FileDescriptorProto] | None:
    """The FileDescriptorProto of .proto file `name` and those of everything it imports,
    imports first, in the order a descriptor pool takes them; the well-known types from
    protobuf itself. None when one of them is not embedded in `data`."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def visit(file_name: str) -> bool:
        if file_name in seen:
            return True
        seen.add(file_name)
        proto = _well_known(file_name) if file_name.startswith(_WELL_KNOWN) else _embedded(data, file_name)
        if proto is None or not all(visit(dependency) for dependency in proto.dependency):
            return False
        ordered.append(proto)
        return True

    return ordered if visit(name) else None


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """protobuf's own copy of well-known file `name` (google/protobuf/any.proto, ...)."""
    try:
        module = importlib.import_module(name[:-len(".proto")].replace("/", ".") + "_pb2")
    except ImportError:
        return None
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _embedded(data: Binary, name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The serialized FileDescriptorProto of `name` in `data`: generated C++ code keeps each
    .proto file's descriptor as bytes that start with field 1, its name. It runs for as long as
    the bytes read as FileDescriptorProto fields."""
    marker = bytes([0x0A, len(name)]) + name.encode()
    at = data.find(marker)
    while at >= 0:
        end = _fields_end(data, at)
        with contextlib.suppress(DecodeError):
            proto = descriptor_pb2.FileDescriptorProto.FromString(bytes(data[at:end]))
            if proto.name == name and proto.message_type:
                return proto
        at = data.find(marker, at + 1)
    return None


def _fields_end(data: Binary, at: int) -> int:
    """Where the run of FileDescriptorProto fields that starts at `at` ends."""
    size = len(data)
    while at < size:
        tag, position = _varint(data, at)
        if tag is None or _FILE_FIELDS.get(tag >> 3) != tag & 7:
            return at
        value, position = _varint(data, position)
        if value is None:
            return at
        if tag & 7 == 2:
            position += value
        if position > size:
            return at
        at = position
    return at


def _varint(data: Binary, at: int) -> tuple[int | None, int]:
    """The base-128 varint at `at` and where it ends; None for a truncated or over-long one."""
    value, shift = 0, 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
    return None, at
