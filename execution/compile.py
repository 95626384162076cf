"""Compiling an HLO module with a compiler config through jaxlib, with no Python program behind it.

The path follows JAX's own compile stage (`jax.jit(f).lower(...).compile(...)`): the HLO module
proto goes through jaxlib's MLIR bridge to StableHLO, compile options come from JAX's
`get_compile_options` with the config applied (`apply_config`, which the compiler hook uses on
the job's own options too), and the backend client compiles and loads the executable.

A config reaches XLA through two channels (execution.flags.channels): compile-option overrides, and
entries of DebugOptions' `xla_backend_extra_options` map, which no override reaches. Those entries
are merged into the serialized CompileOptionsProto (protobuf merges concatenated messages; a map is
repeated key/value entries) and parsed back into jaxlib's CompileOptions: they then travel with
that one executable's options, into XLA and into JAX's persistent-cache key, which hashes the
serialized options. On jaxlib 0.10.2, `xla_cpu_optimize_for_size` set this way shrinks a small
MLP's optimized LLVM IR from 25,310 to 10,192 bytes, and the zoo's mlp-s's machine code
(`object_code`) from 59,624 to 45,736 bytes.

XLA:GPU's per-fusion autotune results reach a compile through a third channel, a directory
(`execution.autotune.per_fusion_directory.Delivery`): `compile_module` with `results` writes
them into a directory of the process's own for that one compile, points XLA at it and has XLA
dump the compile's results there, and the `Compiled` says what XLA did with them
(`AutotuneOutcome`).
"""

from __future__ import annotations

import copy
import functools
import re
import struct
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor_pb2 import FieldDescriptorProto as _F

from execution.autotune.per_fusion_directory import AutotuneOutcome, Delivery, process_directory
from execution.autotune.results import AutotuneResults
from execution.flags import (
    BUILD_OPTIONS,
    FLAGS,
    FUSION_TYPE_PREFIX,
    LIBRARY_FLAGS,
    PLACEMENT_PREFIX,
    CompilerConfig,
    FlagSpec,
    enum_of_number,
    to_xla,
)
from execution.sharded import base_options, devices_for
from hlo.environment import Partitioning, xla_flags_options
from hlo.proto import build_messages
from vocabulary.flags import Channel, FlagType

# The flags whose defaults the installed compiler's options say: DebugOptions field number
# (`FlagSpec.field`) -> flag, in field order.
_OPTION_FLAGS: dict[int, FlagSpec] = dict(sorted(
    ((spec.field, spec) for spec in FLAGS.values() if spec.field is not None), key=lambda pair: pair[0]))
# The library fusion types (xla.DebugOptions.LibraryFusionType) jaxlib 0.10.2 declares, for a
# jaxlib whose binary cannot be read (see `library_fusion_types`).
_KNOWN_FUSION_TYPES = {1: "DOT", 2: "ELTWISE", 3: "REDUCE", 4: "INDIVIDUAL_DOT",
                       5: "INDIVIDUAL_CONVOLUTION"}
_BACKEND_EXTRA_FIELD = 500  # DebugOptions.xla_backend_extra_options, map<string, string>
_UNSET_BUILD_OPTION = 0  # an effort level's UNKNOWN (jax.CompilerEffortLevel): JAX's default


def _field(number: int, spec: FlagSpec) -> tuple[str, int, int, int, None]:
    """DebugOptions field `number`, option flag `spec`'s, as `build_messages` declares it."""
    type_ = (_F.TYPE_STRING if spec.text_field else _F.TYPE_BOOL if spec.type == FlagType.BOOL
             else _F.TYPE_INT32)
    label = _F.LABEL_REPEATED if spec.type == FlagType.REPEATED_ENUM else _F.LABEL_OPTIONAL
    return spec.name, number, type_, label, None


# The part of xla.CompileOptionsProto (xla/pjrt/proto/compile_options.proto) and xla.DebugOptions
# (xla/xla.proto) that holds the option flags' defaults and the backend extra options.
_COMPILE_OPTIONS = build_messages("fdo_compile", {
    "MapEntry": [("key", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
                 ("value", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None)],
    "DebugOptions": [_field(number, spec) for number, spec in _OPTION_FLAGS.items()]
    + [("xla_backend_extra_options", _BACKEND_EXTRA_FIELD, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
        ".fdo_compile.MapEntry")],
    "ExecutableBuildOptions": [("debug_options", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
                                ".fdo_compile.DebugOptions")],
    "CompileOptions": [("executable_build_options", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
                        ".fdo_compile.ExecutableBuildOptions")],
})["CompileOptions"]


class CompileError(RuntimeError):
    """XLA refused to compile the module with the given config."""


@dataclass
class Compiled:
    """A loaded executable and what it took to build it; for a compile given autotune results,
    what XLA did with them (`autotune`)."""

    executable: Any
    compile_seconds: float
    optimized_proto: bytes
    autotune: AutotuneOutcome | None = None


def compile_module(module_proto: bytes, config: CompilerConfig,
                   results: AutotuneResults | None = None,
                   partitioning: Partitioning | None = None) -> Compiled:
    """Compile a serialized HLO module with `config` applied, for the first local device, or
    as `partitioning` partitions it for the first devices it spans (`execution.sharded`), and
    with autotune `results` delivered where given (see the module docstring; they are delivered
    whatever the platform: XLA:CPU takes the directory and reads nothing). OSError when the
    process's own directory cannot be written; DeviceShortage when the process has too few
    devices."""
    options = compile_options(config, partitioning)
    if results is None:
        return _compiled(module_proto, options, partitioning)
    with Delivery(results, process_directory(), dump=True) as delivery:
        compiled = _compiled(module_proto, delivery.options(options), partitioning)
        compiled.autotune = delivery.outcome()
    return compiled


def _compiled(module_proto: bytes, options: Any, partitioning: Partitioning | None) -> Compiled:
    """The module compiled with jaxlib CompileOptions `options` for the devices `partitioning`
    spans (one device for None)."""
    from jax._src.lib import _jax

    devices = devices_for(partitioning)
    started = time.perf_counter()
    try:
        stablehlo = _jax.mlir.hlo_to_stablehlo(module_proto)
        executable = devices[0].client.compile_and_load(
            stablehlo, _jax.DeviceList(tuple(devices)), options
        )
    except Exception as exc:  # jaxlib raises JaxRuntimeError (XlaRuntimeError before 0.5)
        raise CompileError(_describe(exc)) from exc
    seconds = time.perf_counter() - started
    optimized = executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    return Compiled(executable, seconds, optimized)


def compile_options(config: CompilerConfig, partitioning: Partitioning | None = None) -> Any:
    """JAX's compile options for one device, or for `partitioning`'s devices, with `config`
    applied."""
    return apply_config(base_options(partitioning), config)


def apply_config(options: Any, config: CompilerConfig) -> Any:
    """A copy of jaxlib CompileOptions `options` with `config` applied through both channels.

    A flag the job set itself (an override of these options, a backend extra entry, a flag
    of its XLA_FLAGS, or a build option off JAX's UNKNOWN, see `job_build_options`) keeps its
    value: it is part of the environment a config was tuned for, and a stored config never
    overrides it. CompileError names a build option this jaxlib's options do not have.
    """
    from jax._src.lib import xla_client

    has_placement = any(name.startswith(PLACEMENT_PREFIX) for name in config)
    settings = to_xla(config, compiler_defaults() if has_placement else None)
    tuned = copy.deepcopy(options)
    own = {name for name, _ in tuned.env_option_overrides} | set(xla_flags_options())
    tuned.env_option_overrides = list(tuned.env_option_overrides) + [
        (name, value) for name, value in settings.overrides.items() if name not in own]
    build = tuned.executable_build_options
    for name, number in settings.build.items():
        if not hasattr(build, name):
            raise CompileError(f"{name}: this jaxlib's compile options have no such build option")
        if getattr(build, name) == _UNSET_BUILD_OPTION:
            setattr(build, name, number)
    if not settings.backend_extra:
        return tuned
    raw = tuned.SerializeAsString()
    own_extra = _backend_extra_of(raw)
    fragment = _COMPILE_OPTIONS()
    entries = fragment.executable_build_options.debug_options.xla_backend_extra_options
    for name, value in settings.backend_extra.items():
        if name not in own_extra and name not in own:
            entries.add(key=name, value=value)
    return xla_client.CompileOptions.ParseFromString(raw + fragment.SerializeToString())


def job_build_options(options: Any) -> dict[str, str]:
    """The declared build options that jaxlib CompileOptions `options` set off JAX's UNKNOWN
    (by the job's `jax_optimization_level` or `compiler_options`), by name, as the table's enum
    names: the job's own, part of its environment's key like its XLA flags."""
    build = options.executable_build_options
    return {name: enum_of_number(spec, getattr(build, name)) for name, spec in BUILD_OPTIONS.items()
            if getattr(build, name, _UNSET_BUILD_OPTION) != _UNSET_BUILD_OPTION}


def job_partitioning(options: Any, mesh: tuple[tuple[str, int], ...] = ()) -> Partitioning:
    """How jaxlib CompileOptions `options` partition a compile (replicas, partitions, SPMD and
    Shardy), with the module's `mesh` and this process's view of the job: how many processes
    it has (`jax.process_count()`) and how many devices each (`jax.local_device_count()`)."""
    import jax

    build = options.executable_build_options
    return Partitioning(replicas=int(build.num_replicas), partitions=int(build.num_partitions),
                        spmd=bool(build.use_spmd_partitioning),
                        shardy=bool(getattr(build, "use_shardy_partitioner", False)), mesh=mesh,
                        processes=jax.process_count(), local_devices=jax.local_device_count())


def backend_extra_options(options: Any) -> dict[str, str]:
    """The `xla_backend_extra_options` map of jaxlib CompileOptions `options`."""
    return _backend_extra_of(options.SerializeAsString())


def _backend_extra_of(serialized_options: bytes) -> dict[str, str]:
    parsed = _COMPILE_OPTIONS.FromString(serialized_options)
    return {entry.key: entry.value
            for entry in parsed.executable_build_options.debug_options.xla_backend_extra_options}


def object_code(executable: Any) -> tuple[bytes, ...]:
    """The machine code of a CPU executable: the ELF objects in its serialized form (see
    `elf_objects`). Empty when the executable cannot be serialized or holds no ELF object:
    another platform or format, or an executable JAX's persistent cache loaded (it serializes
    again without them)."""
    try:
        blob = executable.serialize()
    except Exception:  # e.g. a backend without serialization
        return ()
    return elf_objects(blob)


def elf_objects(serialized: bytes) -> tuple[bytes, ...]:
    """The ELF objects in a serialized executable, sorted (their order varies between identical
    compiles; their bytes do not)."""
    blob = serialized
    objects, start = [], blob.find(_ELF_MAGIC)
    while start >= 0 and start + _ELF64_HEADER <= len(blob):
        if blob[start + 4:start + 6] != b"\x02\x01":  # 64-bit little-endian only
            break
        # A relocatable object ends with its section header table.
        (section_headers,) = struct.unpack_from("<Q", blob, start + 0x28)
        entry_size, count = struct.unpack_from("<HH", blob, start + 0x3A)
        end = start + section_headers + entry_size * count
        if end > len(blob):
            break
        objects.append(blob[start:end])
        start = blob.find(_ELF_MAGIC, end)
    return tuple(sorted(objects))


_ELF_MAGIC = b"\x7fELF"
_ELF64_HEADER = 64


@functools.lru_cache(maxsize=None)
def library_fusion_types() -> dict[int, str]:
    """The fusion types the installed compiler knows (xla.DebugOptions.LibraryFusionType), by
    number, read from the protobuf descriptor compiled into jaxlib's shared libraries: each
    enum value there is a message `name` (field 1) then `number` (field 2). A new XLA's types
    join the search this way; jaxlib 0.10.2's are the fallback if no binary can be read."""
    import mmap
    from pathlib import Path

    import jaxlib

    marker = FUSION_TYPE_PREFIX.encode()
    found: dict[int, str] = {}
    for path in sorted(Path(jaxlib.__file__).parent.glob("*.so")):
        if path.stat().st_size < 1 << 20:  # the extension stubs; the compiler is in a big one
            continue
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(marker)
            while at >= 2:
                parsed = _enum_value_at(data, at)
                if parsed is not None and parsed[0] != "INVALID":
                    found[parsed[1]] = parsed[0]
                at = data.find(marker, at + 1)
    return dict(sorted(found.items())) or dict(_KNOWN_FUSION_TYPES)


def _enum_value_at(data: Any, at: int) -> tuple[str, int] | None:
    """The (short name, number) of an EnumValueDescriptorProto whose name starts at `at`."""
    length = data[at - 1]
    if data[at - 2] != 0x0A or length > 100:  # tag of field 1 (bytes), then a 1-byte length
        return None
    name, end = bytes(data[at:at + length]), at + length
    if not re.fullmatch(rb"[A-Z0-9_]+", name) or end >= len(data) or data[end] != 0x10:
        return None
    number, shift, position = 0, 0, end + 1
    while position < len(data) and shift < 35:  # field 2, a varint
        byte = data[position]
        number |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return name[len(FUSION_TYPE_PREFIX):].decode(), number
    return None


@functools.lru_cache(maxsize=None)
def _compiler_defaults() -> tuple[tuple[str, Any], ...]:
    from jax._src import compiler

    # Not through compile_options: placements there need these defaults.
    plain = compiler.get_compile_options(num_replicas=1, num_partitions=1)
    options = _COMPILE_OPTIONS.FromString(plain.SerializeAsString())
    debug = options.executable_build_options.debug_options
    listed = {n for name in LIBRARY_FLAGS.values() for n in getattr(debug, name)}
    # The compiler hook reads these too: the binary is scanned only for a type jaxlib 0.10.2
    # did not have, so a job's start-up pays for no scan of jaxlib.
    types = (_KNOWN_FUSION_TYPES if listed <= set(_KNOWN_FUSION_TYPES)
             else library_fusion_types())
    defaults = []
    for spec in _OPTION_FLAGS.values():
        value = getattr(debug, spec.name)
        if spec.library:
            value = tuple(types.get(number, str(number)) for number in value)
        elif spec.type == FlagType.REPEATED_ENUM:
            value = tuple(enum_of_number(spec, number) for number in value)
        elif spec.numbers:
            value = enum_of_number(spec, value)
        defaults.append((spec.name, value))
    build = plain.executable_build_options
    defaults += [(name, enum_of_number(spec, getattr(build, name)))
                 for name, spec in BUILD_OPTIONS.items() if hasattr(build, name)]
    return tuple(defaults) + tuple((spec.name, spec.absent) for spec in FLAGS.values()
                                   if spec.channel == Channel.BACKEND_EXTRA)


def compiler_defaults() -> CompilerConfig:
    """The installed compiler's default values of the table's flags (option flags as compile
    options carry them; backend extra ones as an absent entry means): searches leave these
    values out (setting a flag to its default changes
    nothing), and op-level spaces start from the library routing."""
    return dict(_compiler_defaults())


def check_options(config: CompilerConfig) -> None:
    """Raise CompileError naming the flag if the installed compiler rejects a name or value."""
    from hlo.module import from_text

    probe = from_text("HloModule probe\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n", "probe")
    compile_module(probe.proto, config)


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    for prefix in ("INVALID_ARGUMENT: ", "INTERNAL: ", "UNIMPLEMENTED: "):
        message = message.replace(prefix, "")
    return message.splitlines()[0] if message else type(exc).__name__
