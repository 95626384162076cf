"""The config store as ranking and savings see it: the live version's entries, read-only.

The contract the store (`delivery`) publishes by: `<home>/store/CURRENT` holds the live version
number N, and `<home>/store/v<N>/entries.parquet` one row per entry with at least the columns
of STORE_ENTRY_COLUMNS. Ranking skips keys with a live entry; savings attributes hits to
entries the validator last updated; the fleet simulator applies the entries' speedups. No store
yet means no entries. The home may be a URL on any of Beam's file systems.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STORE_ENTRY_COLUMNS = pa.schema([
    pa.field("key", pa.string()),  # the store key: hlo.environment.store_key(fingerprint, env_key)
    pa.field("fingerprint", pa.string()),
    pa.field("env_key", pa.string()),
    pa.field("kind", pa.string()),  # 'graph' or 'op'
    pa.field("speedup", pa.float64()),  # the measured speedup a hit is expected to give
    pa.field("expires_at", pa.timestamp("us", tz="UTC")),
    pa.field("provenance", pa.string()),  # 'tuner', 'validator' or 'import': who wrote it last
])


def current_version(home: str | Path) -> int | None:
    """The live store version, or None when nothing is published; ValueError when CURRENT
    holds anything but a version number."""
    current = _path(home, "store", "CURRENT")
    if not _exists(current):
        return None
    text = _read(current).decode(errors="replace").strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{current} holds {text[:40]!r}, not a version number")
    return int(text)


def live_entries(home: str | Path, now: datetime.datetime | None = None) -> pa.Table:
    """The live version's unexpired entries (STORE_ENTRY_COLUMNS); empty when there is no store."""
    version = current_version(home)
    if version is None:
        return STORE_ENTRY_COLUMNS.empty_table()
    entries = pq.read_table(pa.BufferReader(_read(_path(home, "store", f"v{version}", "entries.parquet"))),
                            columns=STORE_ENTRY_COLUMNS.names).cast(STORE_ENTRY_COLUMNS)
    now = now or datetime.datetime.now(datetime.UTC)
    return entries.filter(pc.greater(entries.column("expires_at"), pa.scalar(now, entries.schema.field("expires_at").type)))


# A home given as a URL (gs://, s3://, ...) is read through Beam's FileSystems, imported only
# then: the store and the compiler hook read local homes through this module without Beam.
def _path(home: str | Path, *parts: str) -> str | Path:
    if "://" not in str(home):
        return Path(home).joinpath(*parts)
    from ranking.home_io import home_path
    return home_path(home, *parts)


def _exists(path: str | Path) -> bool:
    if isinstance(path, Path):
        return path.exists()
    from ranking.home_io import exists
    return exists(path)


def _read(path: str | Path) -> bytes:
    if isinstance(path, Path):
        return path.read_bytes()
    from ranking.home_io import open_file
    with open_file(path) as handle:
        return handle.read()
