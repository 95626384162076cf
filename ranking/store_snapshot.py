"""The config store as ranking and savings see it: the live version's entries, read-only.

The contract the store (`delivery`) publishes by: `<home>/store/CURRENT` holds the live version
number N, and `<home>/store/v<N>/entries.parquet` one row per entry with at least the columns
of STORE_ENTRY_COLUMNS. Ranking skips keys with a live entry; savings attributes hits to
entries the validator last updated; the fleet simulator applies the entries' speedups. No store
yet means no entries.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STORE_ENTRY_COLUMNS = pa.schema([
    pa.field("key", pa.string()),  # the store key: ingest.environment.store_key(fingerprint, env_key)
    pa.field("fingerprint", pa.string()),
    pa.field("env_key", pa.string()),
    pa.field("kind", pa.string()),  # 'graph' or 'op'
    pa.field("speedup", pa.float64()),  # the measured speedup a hit is expected to give
    pa.field("expires_at", pa.timestamp("us", tz="UTC")),
    pa.field("provenance", pa.string()),  # 'tuner', 'validator' or 'import': who wrote it last
])


def current_version(home: Path) -> int | None:
    """The live store version, or None when nothing is published."""
    current = Path(home) / "store" / "CURRENT"
    if not current.exists():
        return None
    return int(current.read_text().strip())


def live_entries(home: Path, now: datetime.datetime | None = None) -> pa.Table:
    """The live version's unexpired entries (STORE_ENTRY_COLUMNS); empty when there is no store."""
    version = current_version(home)
    if version is None:
        return STORE_ENTRY_COLUMNS.empty_table()
    entries = pq.read_table(Path(home) / "store" / f"v{version}" / "entries.parquet",
                            columns=STORE_ENTRY_COLUMNS.names).cast(STORE_ENTRY_COLUMNS)
    now = now or datetime.datetime.now(datetime.UTC)
    return entries.filter(pc.greater(entries.column("expires_at"), pa.scalar(now, entries.schema.field("expires_at").type)))
