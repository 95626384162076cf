"""The versioned config store's one writer: immutable numbered snapshots of fingerprint -> config
entries. It builds on the store's read side, `storage.store_reader.StoreReader`, through which
every stage reads (and which states what a reader sees while this publishes).

Layout under `<home>/store/`:
  v<N>/entries.parquet   one row per entry (storage.store_schema.ENTRIES, declared with the
                         entry record that every stage shares)
  v<N>/manifest.json     version, parent, created, checksum of entries.parquet, counts by kind,
                         compiler versions, what made it (deliver, import, rollback, ...),
                         who wrote it (`writer`, for a writer to find its own versions) and
                         its policies for the hook: the holdout share of its entries that
                         set none (`holdout_share`) and the teams whose jobs take relaxed-
                         numerics configs (`relaxed_numerics_teams`)
  CURRENT                the live version number
  LAST_VERSION           the highest version number ever handed out

Publishing writes the new version into a staged directory that lands whole
(`Home.staged_directory`; file by file on an object store, where readers only find a version
once CURRENT names it), then replaces CURRENT (`Home.atomic_write`), each step durable; a
version is never rewritten. The home may be a URL; there the store's lock holds within one
process only (`storage.home`): writers on several machines must be run one at a time (the
check below catches one that builds on a version another has since replaced). It is
optimistic: the caller says which version it built on, and a publish that finds CURRENT moved
on meanwhile is refused (ConcurrentPublish), so two writers never silently drop each other's
entries; `update` and `rollback` retry on the new live version. Rollback publishes a new
version with an older version's entries, so history only grows. A version's policies are
carried forward by every publish until one is set again (`set_holdout_share`,
`set_relaxed_numerics_teams`). Every config is checked against the flag allowlist on the way in
(`execution.flags.checked_config`), the relaxed config too, every row as the entry record it must
make (`storage.store_schema.StoreEntry`: each field's type, the holdout share within its range, a
relaxed config's speedup), every team list (`check_relaxed_numerics_teams`) and every entry's
autotune results (`check_autotune_results`).

The store heals around what a crash or a careless hand leaves. A version number is never
reused: the next one is past every `v<N>` name on disk (complete or not), CURRENT and
LAST_VERSION, so a deleted or half-written version is skipped, never overwritten. A directory
without a readable manifest, or whose entries fail their checksum, is never read as a version
(the reader's `entries` refuses it, `versions` leaves it out) and `problems` names it. A corrupt CURRENT or
a missing live version stops imports (their entries would be merged onto nothing) until a
rollback, which needs no live entries, publishes a good version again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import random
import re
import time
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from execution.autotune.results import ResultsError, parse_results
from execution.flags import FlagError, checked_config, to_json
from storage.store_reader import StoreReader, checksum
from storage.store_schema import (
    Manifest,
    StoreError,
    check_holdout_share,
    check_relaxed_numerics_teams,
    conform_entries,
    entries_of,
)

DEFAULT_TTL = datetime.timedelta(days=30)
_VERSION_NAME = re.compile(r"\.?v([0-9]+)(?:\.tmp-.*)?")  # v<N>, and .v<N>.tmp-* while staged
LAST_VERSION = "LAST_VERSION"


class ConcurrentPublish(StoreError):
    """Someone published a version after the one this publish was built on."""


class Store(StoreReader):
    """The store under `<home>/store`, written (and read: `StoreReader`)."""

    def publish(self, entries: pa.Table, parent: int | None, reason: str, writer: str | None = None,
                holdout_share: float | None = None,
                relaxed_numerics_teams: Sequence[str] | None = None) -> int:
        """Publish `entries` as the next version, built on `parent`, made for `reason` by
        `writer`, with the policies `holdout_share` and `relaxed_numerics_teams` (see Manifest;
        None: the parent's); returns the new version. StoreError names an entry whose config,
        relaxed config, autotune results or other field (storage.store_schema.StoreEntry checks their
        types, the holdout share, the relaxed speedup) is refused, or a refused policy."""
        entries = _sorted(conform_entries(entries))
        for key, config, relaxed in zip(*(entries.column(name).to_pylist()
                                          for name in ("key", "config", "relaxed_config"))):
            _check_config(config, f"entry {key}")
            if relaxed is not None:
                _check_config(relaxed, f"entry {key} (relaxed config)")
        try:
            records = entries_of(entries)  # each checked: its fields' types, share, relaxed speedup
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        for entry in records:
            if entry.autotune_results is not None:
                check_autotune_results(entry.autotune_results, f"entry {entry.key}")
        given = {"holdout_share": holdout_share, "relaxed_numerics_teams": relaxed_numerics_teams}
        policies = {name: _POLICIES[name](value, "the version") for name, value in given.items()
                    if value is not None}
        with self._lock():
            self.home.remove_temporaries("store/.v*.tmp-*")  # staged by a publish a kill cut short
            live = self._current_or_none()
            if live != parent:
                raise ConcurrentPublish(f"store moved from version {parent} to {live} meanwhile")
            version = self._next_version()
            # The number is taken before anything bears it: a crash from here on skips it.
            self.home.atomic_write(self.home.location("store", LAST_VERSION), f"{version}\n")
            sink = pa.BufferOutputStream()
            pq.write_table(entries, sink)
            data = sink.getvalue().to_pybytes()
            kinds = entries.column("kind").to_pylist()
            manifest = Manifest(
                version=version, parent=live,
                created=datetime.datetime.now(datetime.UTC).isoformat(), checksum=checksum(data),
                counts={kind: kinds.count(kind) for kind in sorted(set(kinds))},
                compiler_versions=sorted(set(entries.column("compiler_version").to_pylist()) - {None}),
                reason=reason, writer=writer, **{**self._policies_of(live), **policies})
            with self.home.staged_directory(self.home.location("store", f"v{version}")) as staging:
                (staging / "entries.parquet").write_bytes(data)
                (staging / "manifest.json").write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
            self.home.atomic_write(self.home.location("store", "CURRENT"), f"{version}\n")
        return version

    def update(self, change: Callable[[pa.Table], pa.Table], reason: str, retries: int = 20,
               writer: str | None = None) -> int | None:
        """Apply `change` to the live entries and publish (as `writer`, see Manifest, keeping the
        live version's policies), retrying when another writer got in first; returns the
        new version, or None when nothing changed."""
        def build() -> tuple[int | None, pa.Table | None]:
            parent = self.current()
            try:
                before = self.entries(parent)
            except StoreError as exc:
                raise StoreError(f"the live version is unusable ({exc}): roll back to a good "
                                 "version (fdo store rollback N) first") from None
            after = change(before)
            if parent is not None and _sorted(conform_entries(after)).equals(_sorted(before)):
                return parent, None
            return parent, after

        return self._publish_retrying(build, reason, retries, writer)

    def rollback(self, version: int, retries: int = 20) -> int:
        """Make `version`'s entries live again, as a new version; retries when another writer
        got in first. Needs no readable live version, so it also repairs a corrupt CURRENT."""
        entries = self.entries(version)
        published = self._publish_retrying(lambda: (self._current_or_none(), entries),
                                           f"rollback to v{version}", retries)
        assert published is not None  # a rollback always publishes
        return published

    def set_holdout_share(self, share: float, retries: int = 20) -> int | None:
        """Publish the live entries as a new version whose entries that set no share of their
        own hold `share` of their jobs out (`fdo store holdout-share`); returns the new version,
        None when the live version has that share already. StoreError: a refused share, or
        nothing published yet."""
        share = _check_share(share, "the version")
        return self._set_policy("holdout_share", share, f"holdout share {share}", retries)

    def set_relaxed_numerics_teams(self, teams: Sequence[str], retries: int = 20) -> int | None:
        """Publish the live entries as a new version whose relaxed-numerics configs also go to
        the jobs of `teams` (none: only to jobs that opted in themselves; `fdo store
        relaxed-teams`); returns the new version, None when the live version names those teams
        already. StoreError: a refused list (see check_relaxed_numerics_teams), or nothing
        published yet."""
        teams = check_relaxed_numerics_teams(teams, "the version")
        return self._set_policy("relaxed_numerics_teams", teams,
                                f"relaxed-numerics teams {', '.join(teams) or 'none'}", retries)

    def _set_policy(self, name: str, value: Any, reason: str, retries: int) -> int | None:
        """Publish the live entries as a new version, for `reason`, whose policy `name` (see
        Manifest) is `value`, checked; None when the live version's is that already."""
        def build() -> tuple[int | None, pa.Table | None]:
            parent = self.current()
            if parent is None:
                raise StoreError(f"no store version to set {reason} on: publish one first")
            if getattr(self.manifest(parent), name) == value:
                return parent, None
            return parent, self.entries(parent)

        return self._publish_retrying(build, reason, retries, **{name: value})

    def _publish_retrying(self, build: Callable[[], tuple[int | None, pa.Table | None]], reason: str,
                          retries: int, writer: str | None = None, **policies: Any) -> int | None:
        """Publish what `build` makes on the live version it read (None: nothing to publish),
        with `policies` (publish's keywords), again on the new live version each time another
        writer got in first."""
        for attempt in range(retries):
            if attempt:  # writers that collided must not collide again in lockstep
                time.sleep(random.uniform(0.0, 0.05))
            parent, entries = build()
            if entries is None:
                return None
            try:
                return self.publish(entries, parent, reason, writer, **policies)
            except ConcurrentPublish:
                continue
        raise ConcurrentPublish(f"gave up after {retries} concurrent publishes")

    def _current_or_none(self) -> int | None:
        """The live version, None when there is none or CURRENT is corrupt (a publish replaces it)."""
        try:
            return self.current()
        except StoreError:
            return None

    def _policies_of(self, version: int | None) -> dict[str, Any]:
        """The policies of `version`'s manifest by name; none, so the defaults, without one (none
        yet, or the manifest unreadable: a rollback repairing the store must still publish)."""
        if version is None:
            return {}
        try:
            manifest = self.manifest(version)
        except StoreError:
            return {}
        return {name: getattr(manifest, name) for name in _POLICIES}

    def _next_version(self) -> int:
        """Past every number ever handed out: names on disk, staged or stray too, the live one
        (whose directory may be gone) and LAST_VERSION (the highest one may be gone as well)."""
        names = [name for name, _ in self.home.children(self.root)]
        numbers = [int(m.group(1)) for m in map(_VERSION_NAME.fullmatch, names) if m]
        numbers.append(self._current_or_none() or 0)
        with contextlib.suppress(OSError, ValueError):
            numbers.append(int(self.home.read_bytes(self.home.location("store", LAST_VERSION))))
        return max(numbers) + 1

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.home.lock(self.home.location("store", ".lock"), "store writer"))
            except OSError as exc:
                raise StoreError(f"cannot write the store under {self.root}: {exc.strerror}") from None
            yield


def merge_entries(current: pa.Table, new: pa.Table) -> pa.Table:
    """`current` with the rows of `new` replacing those of the same key."""
    new = conform_entries(new)
    kept = current.filter(pc.invert(pc.is_in(current.column("key"), value_set=new.column("key"))))
    return pa.concat_tables([conform_entries(kept), new])


def _check_config(text: str, where: str) -> str:
    """The canonical JSON of an allowlisted config; StoreError otherwise."""
    try:
        return json.dumps(to_json(checked_config(json.loads(text))), sort_keys=True)
    except (FlagError, json.JSONDecodeError, TypeError) as exc:
        raise StoreError(f"{where}: config refused: {exc}") from None


def check_autotune_results(text: Any, where: str) -> None:
    """Check `text` as an entry's autotune results (`execution.autotune.results.parse_results`);
    StoreError naming `where` and the problem when they are refused."""
    try:
        parse_results(text)
    except ResultsError as exc:
        raise StoreError(f"{where}: {exc}") from None


def _check_share(value: Any, where: str) -> float:
    """`check_holdout_share`, its refusal a StoreError."""
    try:
        return check_holdout_share(value, where)
    except ValueError as exc:
        raise StoreError(str(exc)) from None


# A version's policies (Manifest fields) and what checks each on the way in (a manifest read
# checks them too: storage.store_schema.MANIFEST_POLICIES).
_POLICIES: dict[str, Callable[[Any, str], Any]] = {
    "holdout_share": _check_share, "relaxed_numerics_teams": check_relaxed_numerics_teams}


def _sorted(entries: pa.Table) -> pa.Table:
    return entries.sort_by([("key", "ascending")])
