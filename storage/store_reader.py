"""The config store's read side, one interface for every stage: `StoreReader` (its one writer,
`delivery.store_writer.Store`, builds on it). The layout it reads is `storage.store_schema`'s."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.home import Home
from storage.home_factory import open_home
from storage.store_schema import (
    ENTRIES,
    STORE_ENTRY_COLUMNS,
    Manifest,
    StoreEntry,
    StoreError,
    conform_entries,
    entries_of,
)

_REPAIR = "roll back to a good version (fdo store rollback N) to repair it"


class StoreReader:
    """The store under `<home>/store`, read (the home local, or a URL on any of Beam's file
    systems).

    What a reader sees while a writer publishes:
    - Versions are immutable. A publish writes a new version `v<N>` whole (its entries and its
      manifest, staged, then landed), and only then names it live in CURRENT (an atomic
      replace); no version is ever rewritten. So a reader never sees a version half written,
      and a version once read reads the same for ever.
    - CURRENT names the live version, and a call reads it once: each call sees one version
      whole, never a mix of two, whatever is published meanwhile. Two calls may see two
      versions: read `current()` once and hand its number to `entries`, `records` and
      `manifest` to read one version throughout.
    - Nothing is cached: each call reads the home afresh (a reader holds only the home, and
      may be shared between threads).
    - No store yet (no CURRENT): no live version (None), no entries, no versions, no sources.

    What it raises, each method saying when: `StoreError` (a ValueError), naming the version
    and the fault, and nothing else for what is on disk: a CURRENT that holds no version number
    or cannot be read (every read of the live version; the writer's rollback repairs it); a
    version missing, without a readable manifest, or whose entries fail their manifest's
    checksum or are no table of entries (`manifest`, `read_version`, `entries`, `records`); a
    live entries file that cannot be read (`live_entries`, `live_records`).

    Expiry: the live reads (`live_entries`, `live_records`) hold only the entries whose
    `expires_at` is after `now` (one expired, or without an expiry, is left out); a version read
    whole (`entries`, `records`) holds every entry, expired ones too, which the writer carries
    over and the hook's look-up refuses (`StoreEntry.expired`).

    The live reads are the stages' contract, the columns every version holds
    (STORE_ENTRY_COLUMNS, or every column as records): they read the live entries file alone,
    no manifest needed; the reads of a given version check it against its manifest.
    """

    def __init__(self, home: Home | str | Path) -> None:
        self.home = open_home(home)
        self.root = self.home.location("store")

    def current(self) -> int | None:
        """The live version, None before the first publish; StoreError when CURRENT cannot be
        read or holds anything but a version number."""
        current = self.home.location("store", "CURRENT")
        try:
            if not self.home.exists(current):
                return None
            text = self.home.read_bytes(current).decode(errors="replace").strip()
        except OSError as exc:
            raise StoreError(f"{exc}: {_REPAIR}") from None
        if not (text.isascii() and text.isdigit()):
            raise StoreError(f"{current} holds {text[:40]!r}, not a version number: {_REPAIR}")
        return int(text)

    def live_entries(self, now: datetime.datetime | None = None) -> pa.Table:
        """The live version's entries unexpired at `now` (default: now), in the columns every
        version holds (STORE_ENTRY_COLUMNS); empty when there is no store. StoreError: see the
        class."""
        version = self.current()
        if version is None:
            return STORE_ENTRY_COLUMNS.empty_table()
        table = self._live_table(version, STORE_ENTRY_COLUMNS.names)
        return _unexpired(table.cast(STORE_ENTRY_COLUMNS), now)

    def live_records(self, now: datetime.datetime | None = None) -> list[StoreEntry]:
        """The live version's entries unexpired at `now` (default: now) as records, every
        column (a version written before a column was added reads null there); none when
        there is no store. StoreError: see the class, or an entry that is no StoreEntry."""
        version = self.current()
        if version is None:
            return []
        try:
            return entries_of(_unexpired(conform_entries(self._live_table(version)), now))
        except (pa.ArrowException, ValueError) as exc:
            raise StoreError(f"store version {version}: entries.parquet unusable: {exc}") from None

    def entries(self, version: int | None = None) -> pa.Table:
        """The entries of `version` (default: the live one; empty when there is none) as
        ENTRIES, expired ones too, checked against its manifest. StoreError: see the class."""
        version = self.current() if version is None else version
        if version is None:
            return ENTRIES.empty_table()
        _, data = self.read_version(version)
        try:
            return conform_entries(pq.read_table(pa.BufferReader(data)))
        except (pa.ArrowException, ValueError) as exc:  # matches its checksum, yet no table of entries
            raise StoreError(f"store version {version}: entries.parquet unusable: {exc}") from None

    def records(self, version: int | None = None) -> list[StoreEntry]:
        """`entries` as records, in the version's order. StoreError: see `entries`, or an entry that is
        no StoreEntry."""
        table = self.entries(version)
        try:
            return entries_of(table)
        except ValueError as exc:
            raise StoreError(f"store version {version if version is not None else 'live'}: {exc}") from None

    def manifest(self, version: int) -> Manifest:
        """The manifest of `version`; StoreError when it is missing or unreadable."""
        return self._manifest(f"v{version}")

    def versions(self) -> list[Manifest]:
        """Every version with a readable manifest, oldest first (`problems` names the others)."""
        found = []
        for name in self._version_names():
            try:
                found.append(self._manifest(name))
            except StoreError:
                continue
        return sorted(found, key=lambda m: m.version)

    def read_version(self, version: int) -> tuple[Manifest, bytes]:
        """The manifest and the entries.parquet bytes of `version`, the bytes checked against
        the manifest's checksum; StoreError when it is missing, incomplete or corrupt."""
        name = f"v{version}"
        if not (self.home.exists(self.home.location("store", name))
                or self.home.exists(self.home.location("store", name, "manifest.json"))):
            raise StoreError(f"store version {version} does not exist")
        manifest = self._manifest(name)
        try:
            data = self.home.read_bytes(self.home.location("store", name, "entries.parquet"))
        except OSError as exc:
            raise StoreError(f"store version {version}: entries.parquet unreadable: "
                             f"{exc.strerror or exc}") from None
        if checksum(data) != manifest.checksum:
            raise StoreError(f"store version {version}: entries.parquet does not match its checksum")
        return manifest, data

    def sources(self) -> set[str]:
        """The `source` (tuning task, imported file) of every entry any version ever held;
        StoreError when a version's entries cannot be read (skipping it could deliver again
        what it once held and was since taken out)."""
        found: set[str] = set()
        for manifest in self.versions():
            path = self.home.location("store", f"v{manifest.version}", "entries.parquet")
            try:
                with self.home.open(path) as source:
                    found.update(pq.read_table(source, columns=["source"]).column("source").to_pylist())
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"store version {manifest.version} is damaged ({exc}): what it "
                                 "delivered cannot be told") from None
        return found - {None}

    def problems(self) -> dict[str, str]:
        """What is wrong under the store, by name (`v<N>`, `CURRENT`): directories that are no
        complete version (no manifest, entries missing or failing their checksum) and a live
        version that is unreadable. Reads every version: for reports, not for hot paths."""
        found = {}
        names = self._version_names()
        for name in names:
            try:
                self.read_version(int(name[1:]))
            except StoreError as exc:
                found[name] = str(exc)
        try:
            live = self.current()
        except StoreError as exc:
            found["CURRENT"] = str(exc)
            return found
        if live is not None and (f"v{live}" in found or f"v{live}" not in names):
            found["CURRENT"] = f"the live version v{live} is unusable: roll back to a good version"
        return found

    def _version_names(self) -> list[str]:
        """`v<N>` of every version directory, complete or not."""
        return [name for name, is_dir in self.home.children(self.root)
                if is_dir and re.fullmatch(r"v[0-9]+", name)]

    def _manifest(self, name: str) -> Manifest:
        path = self.home.location("store", name, "manifest.json")
        if not self.home.exists(path):
            raise StoreError(f"store {name} is incomplete: no manifest.json (a writer that crashed?)")
        try:
            manifest = Manifest.from_json(json.loads(self.home.read_bytes(path)))
        except (OSError, ValueError, TypeError) as exc:
            raise StoreError(f"store {name}: manifest.json unreadable: {exc}") from None
        if f"v{manifest.version}" != name:
            raise StoreError(f"store {name}: its manifest says version {manifest.version}")
        return manifest

    def _live_table(self, version: int, columns: list[str] | None = None) -> pa.Table:
        """The live version's entries file as it is (no manifest read), `columns` of it."""
        try:
            data = self.home.read_bytes(self.home.location("store", f"v{version}", "entries.parquet"))
            return pq.read_table(pa.BufferReader(data), columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"store version {version}: entries.parquet unreadable: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None


def checksum(data: bytes) -> str:
    """A version's entries' checksum, as its manifest holds it."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _unexpired(entries: pa.Table, now: datetime.datetime | None) -> pa.Table:
    now = now or datetime.datetime.now(datetime.UTC)
    expires_at = entries.column("expires_at")
    return entries.filter(pc.greater(expires_at, pa.scalar(now, expires_at.type)))
