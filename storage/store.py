"""The config store's schema and its read path for every stage (`delivery.store` writes it).

Layout under `<home>/store/`: `CURRENT` holds the live version number N, `v<N>/entries.parquet`
one row per entry (ENTRIES), `v<N>/manifest.json` what the version is and who wrote it
(`delivery.store.Manifest`). Ranking skips keys with a live entry; savings attributes hits to
entries the validator last updated; the fleet simulator applies the entries' speedups: they
read `live_entries`, the columns of STORE_ENTRY_COLUMNS, which every version holds. No store
yet means no entries. The home may be a URL on any of Beam's file systems.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.home import Home
from storage.homes import open_home

STORE_ENTRY_COLUMNS = pa.schema([
    pa.field("key", pa.string()),  # the store key: hlo.environment.store_key(fingerprint, env_key)
    pa.field("fingerprint", pa.string()),
    pa.field("env_key", pa.string()),
    pa.field("kind", pa.string()),  # 'graph' or 'op'
    pa.field("speedup", pa.float64()),  # the measured speedup a hit is expected to give
    pa.field("expires_at", pa.timestamp("us", tz="UTC")),
    pa.field("provenance", pa.string()),  # 'tuner', 'validator' or 'import': who wrote it last
])
ENTRIES = pa.schema(list(STORE_ENTRY_COLUMNS) + [
    pa.field("config", pa.string()),  # JSON of allowlisted flags
    pa.field("ci_low", pa.float64()),
    pa.field("ci_high", pa.float64()),
    pa.field("compiler_version", pa.string()),
    pa.field("measured_at", pa.timestamp("us", tz="UTC")),
    pa.field("source", pa.string()),  # the tuning task id, the imported file, or "import via service"
])


def current_version(home: Home | str | Path) -> int | None:
    """The live store version, or None when nothing is published; ValueError when CURRENT
    holds anything but a version number."""
    home = open_home(home)
    current = home.location("store", "CURRENT")
    if not home.exists(current):
        return None
    text = home.read_bytes(current).decode(errors="replace").strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{current} holds {text[:40]!r}, not a version number")
    return int(text)


def live_entries(home: Home | str | Path, now: datetime.datetime | None = None) -> pa.Table:
    """The live version's unexpired entries (STORE_ENTRY_COLUMNS); empty when there is no store."""
    home = open_home(home)
    version = current_version(home)
    if version is None:
        return STORE_ENTRY_COLUMNS.empty_table()
    data = home.read_bytes(home.location("store", f"v{version}", "entries.parquet"))
    entries = pq.read_table(pa.BufferReader(data), columns=STORE_ENTRY_COLUMNS.names).cast(STORE_ENTRY_COLUMNS)
    now = now or datetime.datetime.now(datetime.UTC)
    return entries.filter(pc.greater(entries.column("expires_at"), pa.scalar(now, entries.schema.field("expires_at").type)))
