"""The config store's schema and its read path for every stage (`delivery.store` writes it).

Layout under `<home>/store/`: `CURRENT` holds the live version number N, `v<N>/entries.parquet`
one row per entry (ENTRIES), `v<N>/manifest.json` what the version is and who wrote it
(`delivery.store.Manifest`). Ranking skips keys with a live entry; savings attributes hits to
entries the validator last updated; the fleet simulator applies the entries' speedups: they
read `live_entries`, the columns of STORE_ENTRY_COLUMNS, which every version holds. No store
yet means no entries. The home may be a URL on any of Beam's file systems.

Columns came to ENTRIES after the first versions (ADDED_ENTRY_COLUMNS): every reader takes a
version's table through `conform_entries`, where a version written before them reads as null.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

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
    # Added after the first versions (their files lack them: read as null). The share of jobs
    # held out to the defaults for this entry (0 to 0.5; null: the version's manifest share).
    pa.field("holdout_share", pa.float64()),
    # The config with numerics-relaxing flags (execution.flags.FlagSpec.relaxes_numerics) and its
    # speedup, delivered only to jobs and teams that opted in; null where the tuner found none.
    pa.field("relaxed_config", pa.string()),
    pa.field("relaxed_speedup", pa.float64()),
    # XLA:GPU per-fusion autotune results for the entry's graph, an xla.AutotuneResults in XLA's
    # text format (execution.autotune_results); null where the entry carries none.
    pa.field("autotune_results", pa.string()),
])
ADDED_ENTRY_COLUMNS = frozenset({"holdout_share", "relaxed_config", "relaxed_speedup", "autotune_results"})
# The share of jobs a key's holdout arm takes when neither the entry nor its version's manifest
# says (versions made before shares existed), and the most any may say: the holdout arm is a
# measurement, never the fleet's main way to run a tuned program.
DEFAULT_HOLDOUT_SHARE = 0.05
MAX_HOLDOUT_SHARE = 0.5


def conform_entries(entries: pa.Table) -> pa.Table:
    """`entries` (a version's table, or rows built for one) as ENTRIES: the columns of
    ADDED_ENTRY_COLUMNS it lacks null, the others cast; ValueError or an Arrow error when it
    lacks another column or a value does not cast."""
    for name in ENTRIES.names:
        if name not in entries.column_names and name in ADDED_ENTRY_COLUMNS:
            entries = entries.append_column(name, pa.nulls(entries.num_rows, ENTRIES.field(name).type))
    return entries.select(ENTRIES.names).cast(ENTRIES)


def check_holdout_share(value: Any, where: str) -> float:
    """`value` as a holdout share, a number from 0 to MAX_HOLDOUT_SHARE; ValueError naming
    `where` and the value otherwise (a bool, NaN, a string are no share)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
            or not 0 <= value <= MAX_HOLDOUT_SHARE):
        raise ValueError(f"{where}: holdout share {value!r} refused: must be a number from 0 "
                         f"to {MAX_HOLDOUT_SHARE}")
    return float(value)


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
