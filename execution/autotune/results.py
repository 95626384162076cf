"""Autotune results as a store entry carries them, and the gate every results text passes.

`AutotuneResults` is a set of per-fusion results (an xla.AutotuneResults, `schema`), each a
`FusionResult` keyed as XLA keys it (`Keying`), named as XLA names its per-fusion cache files
(`FusionResult.cache_file_name`). `parse_results` is the gate every results text passes (the
store's publish and import, the hook): XLA's text format with known fields only, a chosen
config in every result, the device and version present, sizes bounded (MAX_*); ResultsError
says, in one line, what it refuses.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import Message

from execution.autotune.schema import schema

# The platforms whose XLA autotunes its kernels at compile time (environment platforms).
AUTOTUNING_PLATFORMS = frozenset({"gpu"})
CACHE_FILE_SUFFIX = ".textproto"
# Bounds on what a store entry may carry, far above what XLA writes (a result is tens of
# bytes, a fusion's canonical HLO a few KiB) and low enough that an entry stays within a
# look-up answer (delivery.lookup.MAX_RESPONSE_BYTES, 1 MiB).
MAX_TEXT_BYTES = 512 << 10  # an entry's whole results text
MAX_RESULTS = 256  # fusions per entry
MAX_RESULT_BYTES = 4 << 10  # one serialized xla.AutotuneResult
MAX_HLO_CHARS = 64 << 10
MAX_DEVICE_CHARS = 1024


class ResultsError(ValueError):
    """Autotune results that are refused; the message says what is wrong, in one line."""


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


def parse_results(text: object, max_results: int = MAX_RESULTS) -> AutotuneResults:
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


def read_result_file(path: Path) -> Message:
    """An xla.AutotuneResult from a per-fusion cache file (one XLA wrote); ResultsError when it
    is unreadable or holds anything else."""
    message = schema().result()
    try:
        text_format.Parse(path.read_text(), message)
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise ResultsError(f"{path.name}: not an autotune result: {_one_line(exc)}") from None
    return message


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

