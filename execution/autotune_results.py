"""XLA:GPU per-fusion autotune results: XLA's own protos, checked, and handed to one compile.

XLA:GPU autotunes each GEMM and convolution fusion at compile time. With
`xla_gpu_per_fusion_autotune_cache_dir` set it first looks for a result file in that directory,
named by the fusion's key (`cache_file_name`), and writes one for each fusion it had to
autotune itself. A result made offline (an exhaustive search, once) reaches a job's compile as
such a file. The record of one result is XLA's `xla.AutotuneResults.Entry`
(xla/autotune_results.proto): the device description XLA keys on (`device`), the fusion's
canonical HLO (`hlo`), the key's version constant (`version`) and the `xla.AutotuneResult`
(xla/autotuning.proto) it chose; a set of them is an `xla.AutotuneResults` in text form, what
`xla_gpu_dump_autotune_results_to` writes for a whole compile.

The message classes are XLA's own (`schema`): the serialized FileDescriptorProtos that the
installed compiler's shared libraries embed (a GPU plugin's first, it is the XLA:GPU that reads
the files; else jaxlib's), built with protobuf's descriptor pool. Where no binary yields them,
the fields declared here (`declared_schema`) take their place; a test holds the two equal.

`parse_results` is the gate every results text passes (the store's publish and import, the
hook): XLA's text format with known fields only, a chosen config in every result, the device
and version present, sizes bounded (MAX_*). `Delivery` is one compile's directory: created
under a directory its caller owns (the hook's under its home; a worker's `process_directory`),
never a path from the data; the files written; what XLA took and wrote read back (`Uptake`),
and, where asked, XLA's dump of the compile's results (`AutotuneOutcome`: how XLA keys them
now, what an offline tuning made); removed afterwards, whatever happened. An offline tuning is
a delivery of no results (`NO_RESULTS`) to a compile with XLA's exhaustive tiling search.

JAX's persistent compilation cache keys an executable on its compile options, and a jaxlib of
0.10 hashes the per-fusion directory's path with them: a directory made for one compile would
make every such compile a miss, and leave a cache entry behind each time. jax 0.11 leaves the
path out of the key, and with it any trace of the results: the executable built with them
would be keyed as the default's. So where the persistent cache is on (`persistent_cache_on`),
a delivery is `kept`: one directory per set of results (`results-<digest>`, the same path for
every compile of them, kept between compiles), and `CacheKeyed` adds the results' digest to the
cache key through JAX's `cache_key.custom_hook` for that compile alone: a compile of the same
module with the same results hits, any other keys apart (the default's, other results').

What could not be checked without a GPU (docs/gpu.md): that the installed XLA:GPU reads this
directory in the legacy per-fusion format (jaxlib 0.11.2 also has a newer cache format behind
`xla_gpu_use_new_autotune_cache_format`), and that `cache_file_name` matches its names; the
GPU check compares them with the files XLA itself writes.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import copy
import functools
import hashlib
import importlib
import mmap
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import DecodeError

from hlo.proto import build_messages

CACHE_DIR_OPTION = "xla_gpu_per_fusion_autotune_cache_dir"
# Where XLA writes every autotune result of a compile (text, for a name ending in .txt), and the
# flag that makes its autotuner search every tiling: the tuner's own, never a config's (a path
# option is refused there: execution.flags.check_name).
DUMP_OPTION = "xla_gpu_dump_autotune_results_to"
DUMP_FILE = "xla-autotune-dump.txt"
EXHAUSTIVE_FLAG = "xla_gpu_exhaustive_tiling_search"
# The platforms whose XLA autotunes its kernels at compile time (environment platforms).
AUTOTUNING_PLATFORMS = frozenset({"gpu"})
RESULTS_FILE = "xla/autotune_results.proto"
CACHE_FILE_SUFFIX = ".textproto"
# Bounds on what a store entry may carry, far above what XLA writes (a result is tens of
# bytes, a fusion's canonical HLO a few KiB) and low enough that an entry stays within a
# look-up answer (delivery.lookup.MAX_RESPONSE_BYTES, 1 MiB).
MAX_TEXT_BYTES = 512 << 10  # an entry's whole results text
MAX_RESULTS = 256  # fusions per entry
MAX_RESULT_BYTES = 4 << 10  # one serialized xla.AutotuneResult
MAX_HLO_CHARS = 64 << 10
MAX_DEVICE_CHARS = 1024
STALE_SECONDS = 24 * 3600  # a delivery directory this old was left by a process that died
KEPT_STALE_SECONDS = 7 * 24 * 3600  # a kept directory no compile used for this long goes
_DIRECTORY_PREFIX = "fusions-"
_KEPT_PREFIX = "results-"
# What JAX records in the compiling thread when its persistent cache hands back an executable.
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# The well-known types XLA's protos import: protobuf's own definitions of them.
_WELL_KNOWN = "google/protobuf/"
_MIN_LIBRARY_BYTES = 1 << 20  # jaxlib's extension stubs embed no descriptors
# FileDescriptorProto's fields and their wire types: an embedded descriptor ends where these end.
_FILE_FIELDS = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 13: 2, 14: 0}


class ResultsError(ValueError):
    """Autotune results that are refused; the message says what is wrong, in one line."""


@dataclass(frozen=True)
class Schema:
    """The message classes of xla.AutotuneResults and xla.AutotuneResult, and where their
    definitions came from (a shared library's path, or "declared")."""

    results: type
    result: type
    source: str


@functools.lru_cache(maxsize=None)
def schema() -> Schema:
    """XLA's classes as the installed compiler embeds them (`extracted_schema`), else the
    declared ones (`declared_schema`). Read once per process."""
    return extracted_schema() or declared_schema()


def extracted_schema() -> Schema | None:
    """The classes built from the FileDescriptorProtos of xla/autotune_results.proto and its
    imports that the first shared library holding them embeds (`compiler_libraries`); None
    when none does."""
    for library in compiler_libraries():
        with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            files = _embedded_with_imports(data, RESULTS_FILE)
        if files is None:
            continue
        pool = descriptor_pool.DescriptorPool()
        for proto in files:
            pool.Add(proto)
        return Schema(message_factory.GetMessageClass(pool.FindMessageTypeByName("xla.AutotuneResults")),
                      message_factory.GetMessageClass(pool.FindMessageTypeByName("xla.AutotuneResult")),
                      str(library))
    return None


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


def _embedded_with_imports(data: Any, name: str) -> list[descriptor_pb2.FileDescriptorProto] | None:
    """`name`'s FileDescriptorProto and those of everything it imports, imports first; the
    well-known types from protobuf itself. None when one is not embedded in `data`."""
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
    found = module.DESCRIPTOR
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    return proto


def _embedded(data: Any, name: str) -> descriptor_pb2.FileDescriptorProto | None:
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


def _fields_end(data: Any, at: int) -> int:
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


def _varint(data: Any, at: int) -> tuple[int | None, int]:
    value, shift = 0, 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
    return None, at


_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _I32, _BOOL, _STR, _MSG = _F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_BOOL, _F.TYPE_STRING, _F.TYPE_MESSAGE
# jaxlib 0.10.2's xla.AutotuneResults and xla.AutotuneResult, field for field (xla/
# autotune_results.proto, xla/autotuning.proto, xla/tsl/protobuf/dnn.proto's AlgorithmProto,
# google/protobuf's Duration and UInt64Value); nested messages flattened (`Result_Triton` is
# xla.AutotuneResult.TritonGemmKey) and enums as their numbers, which XLA's text parser takes.
_DECLARED = {
    "Results": [("version", 1, _I32, _OPT, None), ("results", 4, _MSG, _REP, ".fdo_autotune.Entry")],
    "Entry": [("device", 1, _STR, _OPT, None), ("hlo", 2, _STR, _OPT, None),
              ("result", 3, _MSG, _OPT, ".fdo_autotune.Result"), ("version", 4, _I32, _OPT, None)],
    "Result": [("scratch_bytes", 8, _I64, _OPT, None),
               ("run_time", 9, _MSG, _OPT, ".fdo_autotune.Duration"),
               ("failure", 7, _MSG, _OPT, ".fdo_autotune.Failure"),
               ("conv", 5, _MSG, _OPT, ".fdo_autotune.Conv"), ("gemm", 6, _MSG, _OPT, ".fdo_autotune.Gemm"),
               ("triton", 17, _MSG, _OPT, ".fdo_autotune.Triton"),
               ("cuda_conv_plan", 15, _MSG, _OPT, ".fdo_autotune.ConvPlan"),
               ("custom_kernel_fusion", 18, _MSG, _OPT, ".fdo_autotune.CustomKernel"),
               ("algorithm", 16, _MSG, _OPT, ".fdo_autotune.Algorithm"),
               ("other", 19, _MSG, _OPT, ".fdo_autotune.BackendConfig")],
    "Failure": [("kind", 1, _I32, _OPT, None), ("msg", 2, _STR, _OPT, None),
                ("reference_conv", 11, _MSG, _OPT, ".fdo_autotune.Conv"),
                ("reference_gemm", 12, _MSG, _OPT, ".fdo_autotune.Gemm"),
                ("reference_cuda_conv_plan", 14, _MSG, _OPT, ".fdo_autotune.ConvPlan"),
                ("reference_algorithm", 15, _MSG, _OPT, ".fdo_autotune.Algorithm"),
                ("buffer_address", 13, _I64, _OPT, None)],
    "Conv": [("algorithm", 1, _I64, _OPT, None), ("tensor_ops_enabled", 2, _BOOL, _OPT, None)],
    "Gemm": [("algorithm", 1, _I64, _OPT, None), ("autotune_workspace_size", 2, _I64, _OPT, None)],
    "ConvPlan": [("exec_plan_id", 1, _STR, _OPT, None)],
    "Triton": [("block_m", 1, _I64, _OPT, None), ("block_n", 2, _I64, _OPT, None),
               ("block_k", 3, _I64, _OPT, None), ("split_k", 4, _I64, _OPT, None),
               ("num_stages", 5, _I64, _OPT, None), ("num_warps", 6, _I64, _OPT, None),
               ("num_ctas", 7, _I64, _OPT, None), ("is_tma_allowed", 8, _BOOL, _OPT, None),
               ("is_warp_specialization_allowed", 9, _BOOL, _OPT, None),
               ("waves_per_eu", 10, _I64, _OPT, None)],
    "CustomKernel": [("kernel_index", 1, _I64, _OPT, None)],
    "BackendConfig": [("name", 1, _STR, _OPT, None), ("config", 2, _MSG, _OPT, ".fdo_autotune.Any")],
    "Any": [("type_url", 1, _STR, _OPT, None), ("value", 2, _F.TYPE_BYTES, _OPT, None)],
    "Algorithm": [("algo_id", 1, _I64, _OPT, None), ("math_type", 2, _I32, _OPT, None),
                  ("tuning_knobs", 4, _MSG, _REP, ".fdo_autotune.Knob"),
                  ("is_cudnn_frontend", 5, _BOOL, _OPT, None),
                  ("workspace_size", 6, _MSG, _OPT, ".fdo_autotune.UInt64")],
    "Knob": [("key", 1, _I64, _OPT, None), ("value", 2, _I64, _OPT, None)],
    "Duration": [("seconds", 1, _I64, _OPT, None), ("nanos", 2, _I32, _OPT, None)],
    "UInt64": [("value", 1, _F.TYPE_UINT64, _OPT, None)],
}
_DECLARED_ONEOFS = {"Result": ("key", frozenset({5, 6, 15, 16, 17, 18, 19})),
                    "Failure": ("key", frozenset({11, 12, 14, 15}))}
# Declared message -> XLA's full name, for the test that holds the two schemas equal.
DECLARED_NAMES = {"Results": "xla.AutotuneResults", "Entry": "xla.AutotuneResults.Entry",
                  "Result": "xla.AutotuneResult", "Failure": "xla.AutotuneResult.FailureResult",
                  "Conv": "xla.AutotuneResult.ConvKey", "Gemm": "xla.AutotuneResult.GemmKey",
                  "ConvPlan": "xla.AutotuneResult.CudaConvPlanKey",
                  "Triton": "xla.AutotuneResult.TritonGemmKey",
                  "CustomKernel": "xla.AutotuneResult.CustomKernelFusionKey",
                  "BackendConfig": "xla.AutotuneResult.BackendConfigKey", "Any": "google.protobuf.Any",
                  "Algorithm": "stream_executor.dnn.AlgorithmProto",
                  "Knob": "stream_executor.dnn.AlgorithmProto.TuningKnobsEntry",
                  "Duration": "google.protobuf.Duration", "UInt64": "google.protobuf.UInt64Value"}


@functools.lru_cache(maxsize=None)
def declared_schema() -> Schema:
    """The classes of the fields declared here (jaxlib 0.10.2's), for a compiler whose
    binaries embed no descriptors."""
    classes = build_messages("fdo_autotune", _DECLARED, _DECLARED_ONEOFS)
    return Schema(classes["Results"], classes["Result"], "declared")


def declared_fields() -> dict[str, dict[int, tuple[str, int]]]:
    """XLA's full message name -> field number -> (name, type) of the declared schema."""
    return {DECLARED_NAMES[name]: {number: (field, type_) for field, number, type_, _, _ in fields}
            for name, fields in _DECLARED.items()}


def autotunes(platform: str) -> bool:
    """Whether XLA autotunes kernels on environment platform `platform` (a GPU's, not a CPU's):
    whether autotune results mean anything there."""
    return platform in AUTOTUNING_PLATFORMS


@dataclass(frozen=True)
class Keying:
    """How XLA keys a result: the device description and the key version of its cache key."""

    device: str
    version: int

    def describe(self) -> str:
        """One phrase, e.g. `'CUDA: 9.0, ...' key version 24`."""
        return f"{self.device!r} key version {self.version}"


@dataclass(frozen=True)
class FusionResult:
    """One fusion's offline result, as XLA keys and keeps it (xla.AutotuneResults.Entry)."""

    device: str  # XLA's description of the GPU the result was made on
    hlo: str  # the fusion's canonical HLO text
    version: int  # XLA's autotune cache key version
    result: bytes  # the serialized xla.AutotuneResult
    kind: str  # which config it chose: triton, gemm, conv, cuda_conv_plan, algorithm, ...
    run_time_seconds: float  # what XLA's autotuner measured for it

    def cache_key(self) -> str:
        """The key XLA's per-fusion cache hashes (xla/service/gpu/autotuning/
        autotune_cache_key.cc, its format string read off jaxlib 0.11.2's CUDA plugin)."""
        return f"<key model='{self.device}', hlo='{self.hlo}', version={self.version}>"

    def cache_file_name(self) -> str:
        """The file XLA looks this fusion up in: the SHA-256 of the key in web-safe base64
        without padding (tsl::Base64Encode), then `.textproto`."""
        digest = hashlib.sha256(self.cache_key().encode()).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=") + CACHE_FILE_SUFFIX

    def cache_file_text(self) -> str:
        """The file's content: the xla.AutotuneResult in text form, as XLA writes it."""
        message = schema().result.FromString(self.result)
        return text_format.MessageToString(message)


@dataclass(frozen=True)
class AutotuneResults:
    """The per-fusion results a store entry carries (an xla.AutotuneResults)."""

    version: int  # the set's format version (xla.AutotuneResults.version)
    fusions: tuple[FusionResult, ...]

    def keying(self) -> Keying | None:
        """How the results are keyed: their first fusion's device and key version (XLA keys a
        compile's results alike); None for no results."""
        return Keying(self.fusions[0].device, self.fusions[0].version) if self.fusions else None

    def digest(self) -> str:
        """A digest of the canonical text (32 hex digits): these results' name in a kept
        directory's path and in JAX's cache key."""
        return hashlib.sha256(self.to_text().encode()).hexdigest()[:32]

    def to_text(self) -> str:
        """The canonical text form, which `parse_results` reads back to an equal value."""
        classes = schema()
        message = classes.results(version=self.version)
        for fusion in self.fusions:
            entry = message.results.add(device=fusion.device, hlo=fusion.hlo, version=fusion.version)
            entry.result.ParseFromString(fusion.result)
        return text_format.MessageToString(message)

    def select(self, count: int) -> "AutotuneResults":
        """The `count` fusions whose results took longest to run (the costliest kernels)."""
        ranked = sorted(self.fusions, key=lambda f: f.run_time_seconds, reverse=True)
        return AutotuneResults(self.version, tuple(ranked[:count]))

    def for_device(self, device: str, version: int) -> "AutotuneResults":
        """The same results, re-labelled as made on `device` under key `version`: what another
        GPU or another XLA would have made (XLA's keys then differ from this GPU's)."""
        return AutotuneResults(self.version, tuple(
            FusionResult(device, f.hlo, version, f.result, f.kind, f.run_time_seconds)
            for f in self.fusions))


# What an offline tuning delivers: nothing (XLA autotunes every fusion and writes its files).
NO_RESULTS = AutotuneResults(1, ())


def parse_results(text: Any, max_results: int = MAX_RESULTS) -> AutotuneResults:
    """`text`, an xla.AutotuneResults in XLA's text format, checked: known fields only; at
    most `max_results` fusions, each with its device (at most MAX_DEVICE_CHARS), its HLO (at most
    MAX_HLO_CHARS), a positive key version and a result of at most MAX_RESULT_BYTES that chose
    a config; the whole at most MAX_TEXT_BYTES (a larger `max_results`, for a tuner reading
    XLA's dump of a whole compile, lifts that bound). ResultsError says what is refused."""
    if not isinstance(text, str):
        raise ResultsError(f"autotune results must be text (XLA's text format), not {type(text).__name__}")
    if max_results <= MAX_RESULTS and len(text.encode(errors="replace")) > MAX_TEXT_BYTES:
        raise ResultsError(f"autotune results over {MAX_TEXT_BYTES} bytes")
    classes = schema()
    message = classes.results()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ResultsError(f"autotune results unreadable: {_one_line(exc)}") from None
    if message.version <= 0:
        raise ResultsError("autotune results carry no version")
    if not message.results:
        raise ResultsError("autotune results hold no result")
    if len(message.results) > max_results:
        raise ResultsError(f"autotune results hold {len(message.results)} results, more than {max_results}")
    fusions = []
    for index, entry in enumerate(message.results):
        where = f"result {index}"
        if not entry.device or len(entry.device) > MAX_DEVICE_CHARS:
            raise ResultsError(f"{where}: its device must be 1 to {MAX_DEVICE_CHARS} characters")
        if not entry.hlo or len(entry.hlo) > MAX_HLO_CHARS:
            raise ResultsError(f"{where}: its HLO must be 1 to {MAX_HLO_CHARS} characters")
        if entry.version <= 0:
            raise ResultsError(f"{where}: no key version")
        serialized = entry.result.SerializeToString()
        if len(serialized) > MAX_RESULT_BYTES:
            raise ResultsError(f"{where}: its result is {len(serialized)} bytes, over {MAX_RESULT_BYTES}")
        kind = entry.result.WhichOneof("key")
        if kind is None:
            raise ResultsError(f"{where}: its result chose no config")
        run_time = entry.result.run_time
        fusions.append(FusionResult(entry.device, entry.hlo, entry.version, serialized, kind,
                                    run_time.seconds + run_time.nanos / 1e9))
    return AutotuneResults(message.version, tuple(fusions))


def read_result_file(path: Path) -> Any:
    """An xla.AutotuneResult from a per-fusion cache file (one XLA wrote); ResultsError when it
    is unreadable or holds anything else."""
    message = schema().result()
    try:
        text_format.Parse(path.read_text(), message)
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise ResultsError(f"{path.name}: not an autotune result: {_one_line(exc)}") from None
    return message


@dataclass(frozen=True)
class Uptake:
    """What one compile did with the results delivered to it: how many were `delivered`, how
    many XLA read (`taken`; None where the file system keeps no access times), and how many
    fusions it autotuned itself (`autotuned`: the result files it wrote beside them)."""

    delivered: int
    taken: int | None
    autotuned: int

    def describe(self) -> str:
        """One line for a hit record."""
        taken = "unknown (no access times here)" if self.taken is None else str(self.taken)
        return (f"autotune results: {self.delivered} delivered, {taken} taken, "
                f"{self.autotuned} fusions autotuned by XLA")


@dataclass(frozen=True)
class AutotuneOutcome:
    """What one compile did in its per-fusion directory (`Delivery.outcome`): the `uptake` of
    the results delivered; XLA's dump of every result of the compile, keyed as XLA keys them
    now (`dumped`; None where it dumped none, as XLA:CPU, and `dump_error` where the dump was
    refused); how many of the files XLA wrote read as xla.AutotuneResult (`readable`; fewer than
    `uptake.autotuned`: XLA writes another format than the one delivered, `unreadable_sample`
    shows the start of one); how many of the dumped fusions' files bear the name
    `cache_file_name` gives them (`named`: all of them, or the delivered names miss XLA's)."""

    uptake: Uptake
    dumped: AutotuneResults | None
    readable: int
    named: int
    dump_error: str | None = None
    unreadable_sample: str | None = None

    def keying(self) -> Keying | None:
        """How XLA keys its results now (its dump's); None without a dump."""
        return self.dumped.keying() if self.dumped is not None else None


@functools.lru_cache(maxsize=None)
def process_directory() -> Path:
    """A directory of this process's own (a private `mkdtemp`, removed when the process exits)
    for the deliveries of the compiles it runs: a worker's, never a path from the data."""
    path = Path(tempfile.mkdtemp(prefix="fdo-autotune-"))
    atexit.register(shutil.rmtree, path, True)
    return path


class Delivery:
    """One compile's per-fusion cache directory, filled with `results`, as a context manager.

    Entering creates a fresh directory under `parent` (a directory of the caller's own: the
    directory never comes from the results) and writes each result where XLA looks for it; each
    file's access time is set to the epoch, so a read by XLA shows (`uptake`); it also removes
    any sibling directory a process that died left more than STALE_SECONDS ago. With `dump`, XLA
    is also told to dump the compile's results into the directory (`outcome` reads them). Exiting
    removes the directory, whether or not the compile succeeded. Each delivery has its own
    directory: threads and processes never share one. OSError when `parent` cannot be written.

    `kept` (for JAX's persistent cache, see the module's docstring): the directory is instead
    `parent/results-<digest>`, the same for every delivery of these results, in every process;
    entering creates it or takes it as it is (rewriting any delivered file that is missing or
    differs, atomically) and marks it used; exiting leaves it, with the results XLA wrote for the
    fusions it autotuned itself (a later compile of them reads those too). Kept directories no
    compile used for KEPT_STALE_SECONDS are swept. What `uptake` counts is then this compile's:
    the files XLA wrote since entering; a delivered file read by another compile meanwhile
    counts as taken.
    """

    def __init__(self, results: AutotuneResults, parent: Path, dump: bool = False, kept: bool = False) -> None:
        if dump and kept:
            raise ValueError("a kept directory is shared between compiles: it takes no dump of one")
        self.results = results
        self.parent = Path(parent)
        self.dump = dump
        self.kept = kept
        self.directory: Path | None = None
        self._names: frozenset[str] = frozenset()
        self._before: frozenset[str] = frozenset()
        self._atime_observable = False

    def __enter__(self) -> "Delivery":
        self.parent.mkdir(parents=True, exist_ok=True)
        _sweep(self.parent)
        if self.kept:
            self.directory = self.parent / f"{_KEPT_PREFIX}{self.results.digest()}"
            self.directory.mkdir(exist_ok=True)
            os.utime(self.directory)  # in use: the sweep leaves it
        else:
            self.directory = Path(tempfile.mkdtemp(prefix=_DIRECTORY_PREFIX, dir=self.parent))
        try:
            names = set()
            for fusion in self.results.fusions:
                path = self.directory / fusion.cache_file_name()
                _write_result(path, fusion.cache_file_text(), replace_only_if_differs=self.kept)
                _clear_access_time(path)
                names.add(path.name)
            self._names = frozenset(names)
            self._before = frozenset(p.name for p in self.directory.iterdir())
            self._atime_observable = _access_times_kept(self.directory)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.directory is not None and not self.kept:
            shutil.rmtree(self.directory, ignore_errors=True)

    def options(self, compile_options: Any) -> Any:
        """A copy of jaxlib CompileOptions `compile_options` that points XLA at this directory,
        for the one executable built with it (in place of any directory its debug options name,
        JAX's persistent cache's: XLA applies the overrides over them)."""
        assert self.directory is not None, "enter the delivery first"
        tuned = copy.deepcopy(compile_options)
        ours = [(CACHE_DIR_OPTION, str(self.directory))]
        if self.dump:
            ours.append((DUMP_OPTION, str(self.directory / DUMP_FILE)))
        tuned.env_option_overrides = list(tuned.env_option_overrides) + ours
        return tuned

    def uptake(self) -> Uptake:
        """What the compile that used this directory did with it (call before exiting)."""
        written = self._xla_files()
        taken = None
        if self._atime_observable:
            taken = sum(1 for name in self._names if (self.directory / name).exists()
                        and (self.directory / name).stat().st_atime_ns > 0)
        return Uptake(len(self._names), taken, len(written))

    def written_by_xla(self) -> list[Any]:
        """The results XLA wrote into the directory (fusions it autotuned itself), parsed."""
        return [read_result_file(path) for path in self._xla_files()]

    def outcome(self) -> AutotuneOutcome:
        """The `uptake`, XLA's dump (with `dump`) and a census of the files XLA wrote (call
        before exiting)."""
        written = self._xla_files()
        readable, sample = 0, None
        for path in written:
            try:
                read_result_file(path)
                readable += 1
            except ResultsError:
                sample = sample or path.read_text(errors="replace")[:400]
        dumped, error = None, None
        dump = self.directory / DUMP_FILE
        if self.dump and dump.exists():
            text = dump.read_text(errors="replace")
            try:  # XLA's dump of a whole compile: as many fusions as it holds
                dumped = parse_results(text, max_results=max(MAX_RESULTS, len(text)))
            except ResultsError as exc:
                error = str(exc)
        names = {path.name for path in written}
        named = sum(f.cache_file_name() in names for f in dumped.fusions) if dumped else 0
        return AutotuneOutcome(self.uptake(), dumped, readable, named, error, sample)

    def _xla_files(self) -> list[Path]:
        """The result files XLA wrote into the directory since entering, by name."""
        assert self.directory is not None, "enter the delivery first"
        return [path for path in sorted(self.directory.iterdir())
                if path.name not in self._names and path.name not in self._before
                and path.name.endswith(CACHE_FILE_SUFFIX)]


def persistent_cache_on() -> bool:
    """Whether JAX's persistent compilation cache is on in this process (its executables are
    then keyed on their compile options: a delivery is `kept`)."""
    from jax._src import compilation_cache

    return compilation_cache.is_persistent_cache_enabled()


class CacheKeyed:
    """A context manager around one compile (JAX's `compile_or_get_cached`, in this thread):
    JAX's persistent-cache key of that compile holds the digest of `results`, and on exit
    `from_cache` says whether JAX handed back an executable from that cache instead of
    compiling. Other compiles, in other threads or outside the block, keep JAX's own key: the
    digest goes through `jax._src.cache_key.custom_hook`, chained to whatever it was, which adds
    nothing outside such a block."""

    def __init__(self, results: AutotuneResults) -> None:
        self.mark = f"fleet-fdo autotune results {results.digest()}"
        self.from_cache = False
        self._outer: tuple[str | None, int] = (None, 0)

    def __enter__(self) -> "CacheKeyed":
        _watch_cache_keys()
        self._outer = (getattr(_compiling, "mark", None), getattr(_compiling, "hits", 0))
        _compiling.mark, _compiling.hits = self.mark, 0
        return self

    def __exit__(self, *exc: Any) -> None:
        self.from_cache = _compiling.hits > 0
        _compiling.mark, _compiling.hits = self._outer


_compiling = threading.local()  # the CacheKeyed block this thread is in: its mark and hits


@functools.lru_cache(maxsize=None)
def _watch_cache_keys() -> None:
    """Chain `CacheKeyed`'s mark into JAX's cache key and count JAX's persistent-cache hits in
    the thread that compiles; once a process, on first use."""
    from jax._src import cache_key, monitoring

    previous = cache_key.custom_hook

    def custom_hook() -> str:
        mark = getattr(_compiling, "mark", None)
        return previous() if mark is None else previous() + mark

    def on_event(event: str, **_: Any) -> None:
        if event == CACHE_HIT_EVENT and getattr(_compiling, "mark", None) is not None:
            _compiling.hits += 1

    cache_key.custom_hook = custom_hook
    monitoring.register_event_listener(on_event)


def job_sets_cache_dir(compile_options: Any) -> bool:
    """Whether jaxlib CompileOptions `compile_options` name a per-fusion cache directory as an
    override of the job's own (`compiler_options` of its jit): as every option the job set
    itself, it stays the job's, and no results are delivered to that compile. The directory
    that the debug options name (JAX's persistent cache sets one there, as does `XLA_FLAGS`)
    is the job's for its other compiles: a delivery's override takes its place for one."""
    return any(name == CACHE_DIR_OPTION for name, _ in compile_options.env_option_overrides)


def job_cache_dir(compile_options: Any) -> str:
    """The per-fusion cache directory the debug options of `compile_options` name ("" for
    none): JAX's persistent cache's, or `XLA_FLAGS`'."""
    return getattr(compile_options.executable_build_options.debug_options, CACHE_DIR_OPTION, "")


def _write_result(path: Path, text: str, replace_only_if_differs: bool) -> None:
    """Write result file `path`; in a kept directory (`replace_only_if_differs`) only where it
    is missing or differs, through a private file and a rename (a compile in another process
    may be reading it)."""
    if not replace_only_if_differs:
        path.write_text(text)
        return
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text() == text:
            return
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    staging.write_text(text)
    staging.replace(path)


def _clear_access_time(path: Path) -> None:
    os.utime(path, ns=(0, path.stat().st_mtime_ns))


def _access_times_kept(directory: Path) -> bool:
    """Whether a read in `directory` updates a file's access time (not so on noatime mounts)."""
    probe = directory / f".atime-probe.{os.getpid()}.{threading.get_ident()}"  # deliveries may share it
    probe.write_bytes(b"x")
    _clear_access_time(probe)
    probe.read_bytes()
    kept = probe.stat().st_atime_ns > 0
    probe.unlink()
    return kept


def _sweep(parent: Path) -> None:
    """Remove delivery directories under `parent` older than STALE_SECONDS (their compile's
    process was killed before it could remove them), and kept ones no compile used for
    KEPT_STALE_SECONDS (a compile that needs one again writes it again, at the same path)."""
    now = time.time()
    for prefix, age in ((_DIRECTORY_PREFIX, STALE_SECONDS), (_KEPT_PREFIX, KEPT_STALE_SECONDS)):
        for path in parent.glob(f"{prefix}*"):
            with contextlib.suppress(OSError):
                if path.is_dir() and path.stat().st_mtime < now - age:
                    shutil.rmtree(path, ignore_errors=True)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

