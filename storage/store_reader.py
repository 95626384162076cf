"""The config store's read path for every stage: the live version and its unexpired entries,
in the columns every version holds (`storage.store_schema.STORE_ENTRY_COLUMNS`), or as records
(`live_records`). No store yet means no entries. The home may be a URL on any of Beam's file systems.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.home import Home
from storage.home_factory import open_home
from storage.store_schema import STORE_ENTRY_COLUMNS, StoreEntry, conform_entries, entries_of


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
    entries = _version_table(home, version, STORE_ENTRY_COLUMNS.names).cast(STORE_ENTRY_COLUMNS)
    return _unexpired(entries, now)


def live_records(home: Home | str | Path, now: datetime.datetime | None = None) -> list[StoreEntry]:
    """The live version's unexpired entries as records, every column (a version written before
    a column was added reads null there); none when there is no store. ValueError naming an
    entry that is no StoreEntry."""
    home = open_home(home)
    version = current_version(home)
    if version is None:
        return []
    return entries_of(_unexpired(conform_entries(_version_table(home, version)), now))


def _version_table(home: Home, version: int, columns: list[str] | None = None) -> pa.Table:
    data = home.read_bytes(home.location("store", f"v{version}", "entries.parquet"))
    return pq.read_table(pa.BufferReader(data), columns=columns)


def _unexpired(entries: pa.Table, now: datetime.datetime | None) -> pa.Table:
    now = now or datetime.datetime.now(datetime.UTC)
    expires_at = entries.column("expires_at")
    return entries.filter(pc.greater(expires_at, pa.scalar(now, expires_at.type)))
