"""The versioned config store: immutable numbered snapshots of fingerprint -> config entries.

Layout under `<home>/store/`:
  v<N>/entries.parquet   one row per entry (ENTRIES; its first columns are the contract that
                         ranking reads, see ranking.store_snapshot)
  v<N>/manifest.json     version, parent, created, checksum of entries.parquet, counts by kind,
                         compiler versions, and what made it (deliver, import, rollback, ...)
  CURRENT                the live version number

Publishing writes the new version into a temporary directory, renames it into place, then
replaces CURRENT; a version is never rewritten. It is optimistic: the caller says which version
it built on, and a publish that finds CURRENT moved on meanwhile is refused (ConcurrentPublish),
so two writers never silently drop each other's entries. Rollback publishes a new version with
an older version's entries, so history only grows. Every config is checked against the flag
allowlist on the way in (`tuner.flags.from_json`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.environment import store_key
from ranking.store_snapshot import STORE_ENTRY_COLUMNS, current_version
from tuner.flags import FlagError, from_json, to_json

ENTRIES = pa.schema(list(STORE_ENTRY_COLUMNS) + [
    pa.field("config", pa.string()),  # JSON of allowlisted flags
    pa.field("ci_low", pa.float64()),
    pa.field("ci_high", pa.float64()),
    pa.field("compiler_version", pa.string()),
    pa.field("measured_at", pa.timestamp("us", tz="UTC")),
    pa.field("source", pa.string()),  # the tuning task id, or the imported file
])
DEFAULT_TTL = datetime.timedelta(days=30)
MAX_IMPORT_BYTES = 16 << 20
_HEX = set("0123456789abcdef")


class StoreError(ValueError):
    """A store operation that cannot be done; the message says which and why."""


class ConcurrentPublish(StoreError):
    """Someone published a version after the one this publish was built on."""


@dataclass(frozen=True)
class Manifest:
    """What a version is."""

    version: int
    parent: int | None
    created: str
    checksum: str
    counts: dict[str, int]
    compiler_versions: list[str]
    reason: str


class Store:
    """The store under `<home>/store`."""

    def __init__(self, home: Path | str) -> None:
        self.home = Path(home)
        self.root = self.home / "store"

    def current(self) -> int | None:
        """The live version, None before the first publish."""
        return current_version(self.home)

    def versions(self) -> list[Manifest]:
        """Every published version, oldest first."""
        found = []
        for path in self.root.glob("v*/manifest.json"):
            found.append(Manifest(**json.loads(path.read_text())))
        return sorted(found, key=lambda m: m.version)

    def entries(self, version: int | None = None) -> pa.Table:
        """The entries of `version` (default: the live one), checked against the manifest."""
        version = self.current() if version is None else version
        if version is None:
            return ENTRIES.empty_table()
        directory = self.root / f"v{version}"
        if not directory.is_dir():
            raise StoreError(f"store version {version} does not exist")
        manifest = json.loads((directory / "manifest.json").read_text())
        data = (directory / "entries.parquet").read_bytes()
        if _checksum(data) != manifest["checksum"]:
            raise StoreError(f"store version {version}: entries.parquet does not match its checksum")
        return pq.read_table(pa.BufferReader(data)).cast(ENTRIES)

    def sources(self) -> set[str]:
        """The `source` (tuning task, imported file) of every entry any version ever held."""
        found: set[str] = set()
        for path in self.root.glob("v*/entries.parquet"):
            found.update(pq.read_table(path, columns=["source"]).column("source").to_pylist())
        return found - {None}

    def publish(self, entries: pa.Table, parent: int | None, reason: str) -> int:
        """Publish `entries` as the next version, built on `parent`; returns the new version."""
        entries = _sorted(entries.select(ENTRIES.names).cast(ENTRIES))
        for row in entries.select(["key", "config"]).to_pylist():
            _check_config(row["config"], f"entry {row['key']}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock():
            for abandoned in self.root.glob(".v*.tmp-*"):  # staged by a publish a kill cut short
                shutil.rmtree(abandoned, ignore_errors=True)
            live = self.current()
            if live != parent:
                raise ConcurrentPublish(f"store moved from version {parent} to {live} meanwhile")
            version = max([m.version for m in self.versions()] + [0]) + 1
            staging = Path(tempfile.mkdtemp(prefix=f".v{version}.tmp-", dir=self.root))
            sink = pa.BufferOutputStream()
            pq.write_table(entries, sink)
            data = sink.getvalue().to_pybytes()
            (staging / "entries.parquet").write_bytes(data)
            kinds = entries.column("kind").to_pylist()
            manifest = Manifest(
                version=version, parent=live,
                created=datetime.datetime.now(datetime.UTC).isoformat(), checksum=_checksum(data),
                counts={kind: kinds.count(kind) for kind in sorted(set(kinds))},
                compiler_versions=sorted(set(entries.column("compiler_version").to_pylist()) - {None}),
                reason=reason)
            (staging / "manifest.json").write_text(json.dumps(manifest.__dict__, indent=1) + "\n")
            for path in staging.iterdir():
                _fsync(path)
            staging.chmod(0o755)
            os.replace(staging, self.root / f"v{version}")
            _write_atomic(self.root / "CURRENT", f"{version}\n")
        return version

    def update(self, change: Callable[[pa.Table], pa.Table], reason: str, retries: int = 20) -> int | None:
        """Apply `change` to the live entries and publish, retrying when another writer got in
        first; returns the new version, or None when nothing changed."""
        for attempt in range(retries):
            if attempt:  # writers that collided must not collide again in lockstep
                time.sleep(random.uniform(0.0, 0.05))
            parent = self.current()
            before = self.entries(parent)
            after = change(before)
            if parent is not None and _sorted(after.cast(ENTRIES)).equals(_sorted(before)):
                return None
            try:
                return self.publish(after, parent, reason)
            except ConcurrentPublish:
                continue
        raise ConcurrentPublish(f"gave up after {retries} concurrent publishes")

    def rollback(self, version: int) -> int:
        """Make `version`'s entries live again, as a new version."""
        entries = self.entries(version)
        return self.publish(entries, self.current(), f"rollback to v{version}")

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with open(self.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def merge_entries(current: pa.Table, new: pa.Table) -> pa.Table:
    """`current` with the rows of `new` replacing those of the same key."""
    new = new.select(ENTRIES.names).cast(ENTRIES)
    kept = current.filter(pc.invert(pc.is_in(current.column("key"), value_set=new.column("key"))))
    return pa.concat_tables([kept.cast(ENTRIES), new])


def read_import(path: Path, now: datetime.datetime | None = None) -> pa.Table:
    """Entries from a JSON-lines file of owner-validated configs (CATWILD 5.2): each line has
    fingerprint, env_key, kind, config, speedup and optionally expires_at. StoreError names the
    line and the problem; nothing is imported from a file with a bad line."""
    now = now or datetime.datetime.now(datetime.UTC)
    if path.stat().st_size > MAX_IMPORT_BYTES:
        raise StoreError(f"{path}: over the {MAX_IMPORT_BYTES}-byte import limit")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{where}: not JSON: {exc}") from None
        rows.append(_import_row(data, where, now, path.name))
    if not rows:
        raise StoreError(f"{path}: no entries")
    return pa.Table.from_pylist(rows, ENTRIES)


def _import_row(data: Any, where: str, now: datetime.datetime, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise StoreError(f"{where}: an entry must be a JSON object")
    for name in ("fingerprint", "env_key"):
        value = data.get(name)
        if not (isinstance(value, str) and len(value) == 32 and set(value) <= _HEX):
            raise StoreError(f"{where}: {name} must be 32 lowercase hex digits")
    if data.get("kind") not in ("graph", "op"):
        raise StoreError(f"{where}: kind must be 'graph' or 'op'")
    speedup = data.get("speedup")
    if not isinstance(speedup, (int, float)) or isinstance(speedup, bool) or not 0 < speedup <= 100:
        raise StoreError(f"{where}: speedup must be a number in (0, 100]")
    config = _check_config(json.dumps(data.get("config")), where)
    expires = now + DEFAULT_TTL
    if data.get("expires_at") is not None:
        try:
            expires = datetime.datetime.fromisoformat(data["expires_at"])
        except (TypeError, ValueError):
            raise StoreError(f"{where}: expires_at is not an ISO 8601 time") from None
        if expires.tzinfo is None:
            raise StoreError(f"{where}: expires_at needs a time zone")
    return {"key": store_key(data["fingerprint"], data["env_key"]), "fingerprint": data["fingerprint"],
            "env_key": data["env_key"], "kind": data["kind"], "speedup": float(speedup),
            "expires_at": expires, "provenance": "import", "config": config, "ci_low": None,
            "ci_high": None, "compiler_version": None, "measured_at": now, "source": source}


def _check_config(text: str, where: str) -> str:
    """The canonical JSON of an allowlisted config; StoreError otherwise."""
    try:
        return json.dumps(to_json(from_json(json.loads(text))), sort_keys=True)
    except (FlagError, json.JSONDecodeError, TypeError) as exc:
        raise StoreError(f"{where}: config refused: {exc}") from None


def _sorted(entries: pa.Table) -> pa.Table:
    return entries.sort_by([("key", "ascending")])


def _checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    _fsync(tmp)
    os.replace(tmp, path)

