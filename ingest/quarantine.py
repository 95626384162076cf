"""Quarantine: inputs that failed validation, kept with the reason beside them.

`<home>/quarantine/<date>/<digest>-<name>` holds a copy of the input (or the rows of it that
were bad, as Parquet with a `reason` column) and `<...>.reason.json` says why. Names carry the
content digest, so quarantining the same input twice keeps one copy.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


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
        """Copy `source` (a file) into quarantine with `reason`; the original is left in place."""
        target = self._target(source.name, file_digest(source) if source.is_file() else "missing")
        if source.is_file() and not target.exists():
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        return self._write_reason(target, source, reason)

    def put_rows(self, source: Path, digest: str, rows: pa.Table, reasons: list[str]) -> Quarantined:
        """Keep the bad rows of `source` (with a `reason` column per row) in quarantine."""
        target = self._target(f"{source.name}.bad-rows.parquet", digest)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            pq.write_table(rows.append_column("reason", pa.array(reasons, pa.string())), tmp)
            os.replace(tmp, target)
        summary = f"{rows.num_rows} bad rows: " + "; ".join(sorted(set(reasons))[:5])
        return self._write_reason(target, source, summary)

    def _target(self, name: str, digest: str) -> Path:
        day = datetime.date.today().isoformat()
        directory = self.root / day
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{digest[:12]}-{name}"

    def _write_reason(self, target: Path, source: Path, reason: str) -> Quarantined:
        entry = Quarantined(source=str(source), reason=reason, copy=str(target))
        note = target.with_name(target.name + ".reason.json")
        tmp = note.with_name(f".{note.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({**asdict(entry),
                                   "quarantined_at": datetime.datetime.now(datetime.UTC).isoformat()},
                                  indent=2) + "\n")
        os.replace(tmp, note)
        return entry
