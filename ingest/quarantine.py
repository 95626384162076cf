"""Quarantine: inputs that failed validation, kept with the reason beside them.

`<home>/quarantine/<date>/<digest>-<name>` holds a copy of the input (or the rows of it that
were bad, as Parquet with a `reason` column) and `<...>.reason.json` says why. Names carry the
content digest, so quarantining the same input twice keeps one copy. An input that cannot be
read (no permission) is kept by its reason alone. `<name>` is the input's name made safe: odd
characters replaced and cut to MAX_NAME_CHARS, so that no input's name can make quarantine
fail; the reason file has the input's full path.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage.home import atomic_write

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


class Quarantine:
    """The quarantine directory under `home`."""

    def __init__(self, home: Path | str) -> None:
        self.root = Path(home) / "quarantine"

    def put_file(self, source: Path, reason: str) -> Quarantined:
        """Copy `source` (a file) into quarantine with `reason`; the original is left in place.
        If it cannot be read, only the reason is kept, and `copy` is empty."""
        try:
            target = self._target(source.name, file_digest(source))
            if not target.exists():
                with open(source, "rb") as original:
                    atomic_write(target, lambda handle: shutil.copyfileobj(original, handle))
        except OSError as exc:
            if not _is_reading(exc, source):
                raise  # the quarantine itself cannot be written: not this input's fault
            path_digest = hashlib.blake2b(os.fsencode(source), digest_size=16).hexdigest()
            return self._write_reason(self._target(source.name, path_digest), source,
                                      f"{reason} (not copied: {exc.strerror})", copied=False)
        return self._write_reason(target, source, reason)

    def put_rows(self, source: Path, digest: str, rows: pa.Table, reasons: list[str],
                 label: str = "bad-rows") -> Quarantined:
        """Keep the bad rows of `source` (with a `reason` column per row) in quarantine, in
        `<name>.<label>.parquet` (an input whose rows go to several tables has a label each)."""
        target = self._target(f"{source.name}.{label}.parquet", digest)
        if not target.exists():
            atomic_write(target, lambda handle: pq.write_table(
                rows.append_column("reason", pa.array(reasons, pa.string())), handle))
        summary = f"{rows.num_rows} bad rows: " + "; ".join(sorted(set(reasons))[:5])
        return self._write_reason(target, source, summary)

    def _target(self, name: str, digest: str) -> Path:
        day = datetime.date.today().isoformat()
        directory = self.root / day
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{digest[:12]}-{safe_name(name)}"

    def _write_reason(self, target: Path, source: Path, reason: str, copied: bool = True) -> Quarantined:
        entry = Quarantined(source=str(source), reason=reason, copy=str(target) if copied else "")
        note = target.with_name(target.name + ".reason.json")
        atomic_write(note, json.dumps({**asdict(entry),
                                       "quarantined_at": datetime.datetime.now(datetime.UTC).isoformat()},
                                      indent=2) + "\n")
        return entry


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
