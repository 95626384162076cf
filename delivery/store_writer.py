"""The versioned config store's one writer: immutable numbered snapshots of fingerprint -> config
entries (every stage reads the live ones through `storage.store_reader`).

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
(`entries` refuses it, `versions` leaves it out) and `problems` names it. A corrupt CURRENT or
a missing live version stops imports (their entries would be merged onto nothing) until a
rollback, which needs no live entries, publishes a good version again.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from execution.autotune.results import ResultsError, parse_results
from execution.flags import FlagError, checked_config, to_json
from ingest.tables import TEAM
from storage.home import Home
from storage.home_factory import open_home
from storage.store_reader import current_version
from storage.store_schema import DEFAULT_HOLDOUT_SHARE, ENTRIES, check_holdout_share, conform_entries, entries_of

DEFAULT_TTL = datetime.timedelta(days=30)
_VERSION_NAME = re.compile(r"\.?v([0-9]+)(?:\.tmp-.*)?")  # v<N>, and .v<N>.tmp-* while staged
LAST_VERSION = "LAST_VERSION"


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
    reason: str  # for people: what made it
    # For programs: who wrote it, set by a writer that must find its own version again (a
    # validator run: "validator/<run id>"); None for the others and in versions made before it.
    writer: str | None = None
    # Its policies (_POLICIES), which hold for all its entries: a publish keeps its parent's
    # unless given another; versions made before one read as its default. The share of jobs
    # held out to the defaults for an entry that sets none (see delivery.compile_decision):
    holdout_share: float = DEFAULT_HOLDOUT_SHARE
    # The teams whose jobs take entries' relaxed-numerics configs, beside the jobs that opted
    # in themselves (see delivery.compile_decision); sorted, no repeats:
    relaxed_numerics_teams: list[str] = field(default_factory=list)


class Store:
    """The store under `<home>/store`."""

    def __init__(self, home: Home | Path | str) -> None:
        self.home = open_home(home)
        self.root = self.home.location("store")

    def current(self) -> int | None:
        """The live version, None before the first publish; StoreError when CURRENT is corrupt."""
        try:
            return current_version(self.home)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{exc}: roll back to a good version (fdo store rollback N) to "
                             "repair it") from None

    def versions(self) -> list[Manifest]:
        """Every version with a readable manifest, oldest first (`problems` names the others)."""
        found = []
        for name in self._version_names():
            try:
                found.append(self._manifest(name))
            except StoreError:
                continue
        return sorted(found, key=lambda m: m.version)

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

    def manifest(self, version: int) -> Manifest:
        """The manifest of `version`; StoreError when it is missing or unreadable."""
        return self._manifest(f"v{version}")

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
        if _checksum(data) != manifest.checksum:
            raise StoreError(f"store version {version}: entries.parquet does not match its checksum")
        return manifest, data

    def entries(self, version: int | None = None) -> pa.Table:
        """The entries of `version` (default: the live one), checked against the manifest."""
        version = self.current() if version is None else version
        if version is None:
            return ENTRIES.empty_table()
        _, data = self.read_version(version)
        try:
            return conform_entries(pq.read_table(pa.BufferReader(data)))
        except (pa.ArrowException, ValueError) as exc:  # matches its checksum, yet no table of entries
            raise StoreError(f"store version {version}: entries.parquet unusable: {exc}") from None

    def sources(self) -> set[str]:
        """The `source` (tuning task, imported file) of every entry any version ever held."""
        found: set[str] = set()
        for manifest in self.versions():
            path = self.home.location("store", f"v{manifest.version}", "entries.parquet")
            try:
                with self.home.open(path) as source:
                    found.update(pq.read_table(source, columns=["source"]).column("source").to_pylist())
            # Skipping it could deliver again what it once held and was since taken out.
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"store version {manifest.version} is damaged ({exc}): what it "
                                 "delivered cannot be told") from None
        return found - {None}

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
                created=datetime.datetime.now(datetime.UTC).isoformat(), checksum=_checksum(data),
                counts={kind: kinds.count(kind) for kind in sorted(set(kinds))},
                compiler_versions=sorted(set(entries.column("compiler_version").to_pylist()) - {None}),
                reason=reason, writer=writer, **{**self._policies_of(live), **policies})
            with self.home.staged_directory(self.home.location("store", f"v{version}")) as staging:
                (staging / "entries.parquet").write_bytes(data)
                (staging / "manifest.json").write_text(json.dumps(manifest.__dict__, indent=1) + "\n")
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

    def _version_names(self) -> list[str]:
        """`v<N>` of every version directory, complete or not."""
        return [name for name, is_dir in self.home.children(self.root) if is_dir and re.fullmatch(r"v[0-9]+", name)]

    def _manifest(self, name: str) -> Manifest:
        path = self.home.location("store", name, "manifest.json")
        if not self.home.exists(path):
            raise StoreError(f"store {name} is incomplete: no manifest.json (a writer that crashed?)")
        try:
            manifest = Manifest(**json.loads(self.home.read_bytes(path)))
            for policy, check in _POLICIES.items():
                check(getattr(manifest, policy), "manifest.json")
        except (OSError, ValueError, TypeError) as exc:
            raise StoreError(f"store {name}: manifest.json unreadable: {exc}") from None
        if f"v{manifest.version}" != name:
            raise StoreError(f"store {name}: its manifest says version {manifest.version}")
        return manifest

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


def check_relaxed_numerics_teams(value: Any, where: str) -> list[str]:
    """`value` as a version's relaxed-numerics teams: a list of team names, each a non-empty
    string of at most ingest.tables.TEAM characters (as the warehouse keeps a team), returned
    sorted without repeats; StoreError naming `where` and the refused value otherwise (a string
    is no list)."""
    if not isinstance(value, (list, tuple)):
        raise StoreError(f"{where}: relaxed-numerics teams {value!r} refused: must be a list of "
                         "team names")
    for team in value:
        if not (isinstance(team, str) and 0 < len(team) <= TEAM):
            raise StoreError(f"{where}: relaxed-numerics team {team!r} refused: must be a "
                             f"non-empty string of at most {TEAM} characters")
    return sorted(set(value))


def _check_share(value: Any, where: str) -> float:
    """`check_holdout_share`, its refusal a StoreError."""
    try:
        return check_holdout_share(value, where)
    except ValueError as exc:
        raise StoreError(str(exc)) from None


# A version's policies (Manifest fields) and what checks each, on the way in and when read.
_POLICIES: dict[str, Callable[[Any, str], Any]] = {
    "holdout_share": _check_share, "relaxed_numerics_teams": check_relaxed_numerics_teams}


def _sorted(entries: pa.Table) -> pa.Table:
    return entries.sort_by([("key", "ascending")])


def _checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


