"""Quarantine: inputs that failed validation, kept with the reason beside them.

`<home>/quarantine/<date>/<digest>-<name>` holds a copy of the input (or the rows of it that
were bad, as Parquet with a `reason` column) and `<...>.reason.json` says why. Names carry the
content digest, so quarantining the same input twice keeps one copy. An input that cannot be
read (no permission) is kept by its reason alone. `<name>` is the input's name made safe: odd
characters replaced and cut to MAX_NAME_CHARS, so that no input's name can make quarantine
fail; the reason file has the input's full path.

The home may be local or a URL (`storage.home.Home`); every file is written with its atomic
write. Inputs are local files, but for the hook's spool files, which are the home's own.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.home import Home
from storage.home_factory import open_home
from vocabulary.errors import first_line

# Of an input's name inside a quarantine file's name: file systems allow 255 bytes, and the
# digest and suffixes (`.bad-rows.parquet.reason.json`) come on top.
MAX_NAME_CHARS = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=,@-]")


@dataclass(frozen=True)
class Quarantined:
    """One quarantined input: where it came from, why, and where its copy is."""

    source: str
    reason: str
    copy: str


def file_digest(path: Path, chunk: int = 1 << 22) -> str:
    """A hex digest of a file's bytes, read in chunks (drops can be large)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _bytes_digest(data: bytes) -> str:
    """`file_digest` of a file holding `data`."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def name_of(location: Path | str) -> str:
    """The file name of a local path or of a location in a URL home."""
    return location.name if isinstance(location, Path) else PurePosixPath(location).name


class Quarantine:
    """The quarantine directory under `home` (local or a URL)."""

    def __init__(self, home: Home | Path | str) -> None:
        self.home = open_home(home)

    def put_file(self, source: Path, reason: str) -> Quarantined:
        """Copy `source` (a local file) into quarantine with `reason`; the original is left in
        place. If it cannot be read, only the reason is kept, and `copy` is empty."""
        try:
            kept = _Kept(source.name, file_digest(source))
            if not self.home.exists(self._target(kept)):
                with open(source, "rb") as original:
                    self.home.atomic_write(self._target(kept),
                                           lambda handle: shutil.copyfileobj(original, handle))
        except OSError as exc:
            if not _is_reading(exc, source):
                raise  # the quarantine itself cannot be written: not this input's fault
            return self._reason_only(source, reason, exc)
        return self._write_reason(kept, source, reason)

    def put_home_file(self, location: Any, reason: str) -> Quarantined:
        """`put_file` for a file of the home itself (a hook's spool file: small, so read whole),
        local or in a URL home, where a failed read does not name the file."""
        try:
            data = self.home.read_bytes(location)
        except OSError as exc:
            return self._reason_only(location, reason, exc)
        kept = _Kept(name_of(location), _bytes_digest(data))
        if not self.home.exists(self._target(kept)):
            self.home.atomic_write(self._target(kept), data)
        return self._write_reason(kept, location, reason)

    def put_rows(self, source: Path | str, digest: str, rows: pa.Table, reasons: list[str],
                 label: str = "bad-rows") -> Quarantined:
        """Keep the bad rows of `source` (with a `reason` column per row) in quarantine, in
        `<name>.<label>.parquet` (an input whose rows go to several tables has a label each)."""
        kept = _Kept(f"{name_of(source)}.{label}.parquet", digest)
        if not self.home.exists(self._target(kept)):
            self.home.atomic_write(self._target(kept), lambda handle: pq.write_table(
                rows.append_column("reason", pa.array(reasons, pa.string())), handle))
        summary = f"{rows.num_rows} bad rows: " + "; ".join(sorted(set(reasons))[:5])
        return self._write_reason(kept, source, summary)

    def _reason_only(self, source: Path | str, reason: str, exc: OSError) -> Quarantined:
        """The reason of an input that could not be read, kept under a digest of its name."""
        kept = _Kept(name_of(source), hashlib.blake2b(os.fsencode(source), digest_size=16).hexdigest())
        return self._write_reason(kept, source, f"{reason} (not copied: {exc.strerror or first_line(exc)})",
                                  copied=False)

    def _target(self, kept: _Kept, suffix: str = "") -> Any:
        """Where the copy of `kept` goes (with `suffix`: its reason)."""
        day = datetime.date.today().isoformat()
        return self.home.location("quarantine", day, f"{kept.digest[:12]}-{safe_name(kept.name)}{suffix}")

    def _write_reason(self, kept: _Kept, source: Path | str, reason: str, copied: bool = True) -> Quarantined:
        entry = Quarantined(source=str(source), reason=reason, copy=str(self._target(kept)) if copied else "")
        self.home.atomic_write(self._target(kept, ".reason.json"), json.dumps(
            {**asdict(entry), "quarantined_at": datetime.datetime.now(datetime.UTC).isoformat()},
            indent=2) + "\n")
        return entry


@dataclass(frozen=True)
class _Kept:
    """What names an input's quarantine files: its name and a digest (of its content, or of its
    path when it cannot be read)."""

    name: str
    digest: str


def safe_name(name: str) -> str:
    """`name` with only portable characters, its middle cut out if over MAX_NAME_CHARS."""
    name = _UNSAFE.sub("_", name)
    if len(name) <= MAX_NAME_CHARS:
        return name
    half = MAX_NAME_CHARS // 2
    return f"{name[:half - 1]}~{name[-half:]}"


def _is_reading(exc: OSError, source: Path) -> bool:
    """Whether `exc` came from reading `source` (rather than from writing the quarantine)."""
    return exc.filename is not None and os.fsencode(exc.filename) == os.fsencode(source)
