"""The config store's schema: its entries, its versions' manifests, the entry record and the
error the store's reads and writes raise (`storage.store_reader.StoreReader` reads the store
for every stage, `delivery.store_writer.Store` writes the versions).

Layout under `<home>/store/`: `CURRENT` holds the live version number N, `v<N>/entries.parquet`
one row per entry (ENTRIES), `v<N>/manifest.json` what the version is and who wrote it
(`Manifest`). Ranking skips keys with a live entry; savings attributes hits to entries the
validator last updated; the fleet simulator applies the entries' speedups: they read
`StoreReader.live_entries`, the columns of STORE_ENTRY_COLUMNS, which every version holds.

Columns came to ENTRIES after the first versions (ADDED_ENTRY_COLUMNS): every reader takes a
version's table through `conform_entries`, where a version written before them reads as null.

One entry as Python sees it is a `StoreEntry`, the contract between the tuner's deliver, the
hook, the service and the validator: a table of entries becomes records through `entries_of`
(a row through `StoreEntry.from_row`) and records a table through `entries_table`; the
service's JSON form of an entry is `to_json`/`from_json`. Nothing reads an entry as a dict
(tests/project/test_architecture.py checks it).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import math
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping

import pyarrow as pa

from vocabulary.store import Provenance
from vocabulary.tuning import Kind, Origin

STORE_ENTRY_COLUMNS = pa.schema([
    pa.field("key", pa.string()),  # the store key: hlo.environment.store_key(fingerprint, env_key)
    pa.field("fingerprint", pa.string()),
    pa.field("env_key", pa.string()),
    # a vocabulary.tuning.Kind: graph (a graph's or a kernels result: either applies to a whole
    # compile) or op
    pa.field("kind", pa.string()),
    pa.field("speedup", pa.float64()),  # the measured speedup a hit is expected to give
    pa.field("expires_at", pa.timestamp("us", tz="UTC")),
    pa.field("provenance", pa.string()),  # who wrote it last: a Provenance
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
    # text format (execution.autotune.results); null where the entry carries none.
    pa.field("autotune_results", pa.string()),
    # Where the config came from (a vocabulary.tuning.Origin: its tuning result's search, a
    # transfer from a sibling, or a key measured alike), and the graph key
    # ("<fingerprint>/<env_key>") it was verified for first; null for an import, or an entry
    # written before them.
    pa.field("origin", pa.string()),
    pa.field("transferred_from", pa.string()),
])
_ENTRY_NAMES = tuple(ENTRIES.names)  # Arrow makes the list anew each time it is asked
ADDED_ENTRY_COLUMNS = frozenset({"holdout_share", "relaxed_config", "relaxed_speedup", "autotune_results",
                                 "origin", "transferred_from"})
# The share of jobs a key's holdout arm takes when neither the entry nor its version's manifest
# says (versions made before shares existed), and the most any may say: the holdout arm is a
# measurement, never the fleet's main way to run a tuned program.
DEFAULT_HOLDOUT_SHARE = 0.05
MAX_HOLDOUT_SHARE = 0.5
# The longest team name, in characters: a version's relaxed-numerics teams are held to it, as
# the warehouse's team columns are (ingest.tables.TEAM is this bound).
TEAM_CHARS = 128


class StoreError(ValueError):
    """A store operation that cannot be done, a read (a version missing, incomplete or corrupt;
    CURRENT holding no version number) or a write (a refused entry or policy); the message says
    which and why."""


def conform_entries(entries: pa.Table) -> pa.Table:
    """`entries` (a version's table, or rows built for one) as ENTRIES: the columns of
    ADDED_ENTRY_COLUMNS it lacks null, the others cast; ValueError or an Arrow error when it
    lacks another column or a value does not cast."""
    for name in ENTRIES.names:
        if name not in entries.column_names and name in ADDED_ENTRY_COLUMNS:
            entries = entries.append_column(name, pa.nulls(entries.num_rows, ENTRIES.field(name).type))
    return entries.select(ENTRIES.names).cast(ENTRIES)


@dataclass(frozen=True, kw_only=True)
class StoreEntry:
    """One entry of a store version, a row of ENTRIES: a tuned config for a graph (or op) in an
    environment, under `key` = hlo.environment.store_key(fingerprint, env_key).

    The configs are JSON text of allowlisted flags, as the store keeps them: the allowlist is
    checked where they are written and where they are applied (delivery.store_writer, the hook, the
    validator), so that a config the allowlist stops taking is refused there, never an entry
    that cannot be read. Times are aware datetimes. The fields that may be null are null in an
    entry that never had them (an import carries no interval, compiler or measured relaxed
    config; a version or a service answer from before a column has none of it); an entry with
    no holdout share takes its version's. The fields are ENTRIES' columns in their order (that
    of `to_row` and of the JSON form).

    Making one checks it: each field's type (an int where a float goes reads as the float, a
    kind's, a provenance's or an origin's text as its enum's member), a holdout share within its
    range, a relaxed config only with the positive speedup it was measured at; ValueError naming
    the entry, the field and the value otherwise."""

    key: str
    fingerprint: str
    env_key: str
    kind: Kind  # GRAPH (graph and kernels results: delivery.deliver) or OP (imported)
    speedup: float  # the measured speedup a hit is expected to give
    expires_at: datetime.datetime | None = None
    provenance: Provenance | None = None
    config: str
    ci_low: float | None = None
    ci_high: float | None = None
    compiler_version: str | None = None
    measured_at: datetime.datetime | None = None
    source: str | None = None  # the tuning task id, the imported file, or "import via service"
    holdout_share: float | None = None  # None: its version's
    relaxed_config: str | None = None  # with numerics-relaxing flags, for jobs that opted in
    relaxed_speedup: float | None = None
    autotune_results: str | None = None  # XLA:GPU's, in XLA's text format (execution.autotune.results)
    origin: Origin | None = None  # where the config came from; None: an import, or written before
    transferred_from: str | None = None  # the graph key it was verified for first, if another

    # The fields whose JSON form is an object (their text parsed), and those in ISO 8601.
    CONFIG_FIELDS: ClassVar[tuple[str, ...]] = ("config", "relaxed_config")
    TIME_FIELDS: ClassVar[tuple[str, ...]] = ("expires_at", "measured_at")

    def __post_init__(self) -> None:
        where = "entry" if self.key is None else f"entry {self.key}"
        for name, kind, required in _entry_fields():
            value = getattr(self, name)
            if value is None:
                if required:
                    raise ValueError(f"{where}: no {name}")
                continue
            if type(value) is kind and kind is not datetime.datetime:  # as Arrow reads them: the common case
                continue
            typed = _typed(value, kind)
            if typed is None:
                raise ValueError(f"{where}: {name} {value!r} refused: must be {_KIND_NAMES[kind]}")
            if typed is not value:
                object.__setattr__(self, name, typed)
        if self.holdout_share is not None:
            check_holdout_share(self.holdout_share, where)
        if self.relaxed_config is not None and not relaxed_speedup_ok(self.relaxed_speedup):
            raise ValueError(f"{where}: relaxed speedup {self.relaxed_speedup!r} refused: a relaxed "
                             "config needs the positive speedup it was measured at")

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoreEntry:
        """The entry of a row of ENTRIES (Arrow's Python values); a column the row lacks reads
        as null, one it has beyond ENTRIES is ignored. ValueError: see the class."""
        values: dict[str, Any] = {name: row.get(name) for name in _ENTRY_NAMES}  # checked by __post_init__
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """The row of ENTRIES, columns in ENTRIES' order."""
        return {name: getattr(self, name) for name in _ENTRY_NAMES}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoreEntry:
        """The entry of its JSON form (`to_json`, a service's answer): the configs objects, the
        times ISO 8601 (one without a time zone is UTC); a field it lacks reads as null, one
        beyond the entry's is ignored. ValueError naming the field otherwise (see the class)."""
        row = dict(data)
        key = data.get("key")
        for name in cls.CONFIG_FIELDS:
            value = row.get(name)
            if value is not None:
                if not isinstance(value, dict):
                    raise ValueError(f"entry {key}: {name} {value!r} refused: must be a JSON object")
                row[name] = json.dumps(value, sort_keys=True)
        for name in cls.TIME_FIELDS:
            value = row.get(name)
            if value is not None:
                try:
                    moment = datetime.datetime.fromisoformat(value)
                except (TypeError, ValueError):
                    raise ValueError(f"entry {key}: {name} {value!r} refused: must be an ISO 8601 "
                                     "time") from None
                row[name] = moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)
        return cls.from_row(row)

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON shows it (the service's answers, `fdo store show`): the configs
        objects, the times ISO 8601, the fields in ENTRIES' order."""
        return {name: json.loads(value) if name in self.CONFIG_FIELDS and value is not None
                else value.isoformat() if isinstance(value, datetime.datetime) else value
                for name, value in self.to_row().items()}

    def expired(self, now: datetime.datetime) -> bool:
        """Whether it is past its expiry at `now` (one without an expiry never is)."""
        return self.expires_at is not None and self.expires_at <= now


def entries_of(table: pa.Table) -> list[StoreEntry]:
    """The entries of a table of ENTRIES' columns (a version's, conformed; or rows built for
    one), in its order; ValueError naming the first entry refused (see StoreEntry)."""
    return [StoreEntry.from_row(row) for row in table.to_pylist()]


def entries_table(entries: Iterable[StoreEntry]) -> pa.Table:
    """A table of ENTRIES holding `entries`, in their order."""
    return pa.Table.from_pylist([entry.to_row() for entry in entries], ENTRIES)


def relaxed_speedup_ok(value: Any) -> bool:
    """Whether `value` can be a relaxed config's speedup: a finite positive number (no bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def check_holdout_share(value: Any, where: str) -> float:
    """`value` as a holdout share, a number from 0 to MAX_HOLDOUT_SHARE; ValueError naming
    `where` and the value otherwise (a bool, NaN, a string are no share)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
            or not 0 <= value <= MAX_HOLDOUT_SHARE):
        raise ValueError(f"{where}: holdout share {value!r} refused: must be a number from 0 "
                         f"to {MAX_HOLDOUT_SHARE}")
    return float(value)


def check_relaxed_numerics_teams(value: Any, where: str) -> list[str]:
    """`value` as a version's relaxed-numerics teams: a list of team names, each a non-empty
    string of at most TEAM_CHARS characters (as the warehouse keeps a team), returned sorted
    without repeats; StoreError naming `where` and the refused value otherwise (a string is no
    list)."""
    if not isinstance(value, (list, tuple)):
        raise StoreError(f"{where}: relaxed-numerics teams {value!r} refused: must be a list of "
                         "team names")
    for team in value:
        if not (isinstance(team, str) and 0 < len(team) <= TEAM_CHARS):
            raise StoreError(f"{where}: relaxed-numerics team {team!r} refused: must be a "
                             f"non-empty string of at most {TEAM_CHARS} characters")
    return sorted(set(value))


@dataclass(frozen=True)
class Manifest:
    """What a version is (its `manifest.json`): its number, the version it was built on, when,
    its entries' checksum, counts by kind and compiler versions, what made it and who, and its
    policies (MANIFEST_POLICIES), which hold for all its entries."""

    version: int
    parent: int | None
    created: str  # ISO 8601
    checksum: str  # of entries.parquet
    counts: dict[str, int]
    compiler_versions: list[str]
    reason: str  # for people: what made it
    # For programs: who wrote it, set by a writer that must find its own version again (a
    # validator run: "validator/<run id>"); None for the others and in versions made before it.
    writer: str | None = None
    # Its policies: a publish keeps its parent's unless given another; versions made before
    # one read as its default. The share of jobs held out to the defaults for an entry that
    # sets none (see delivery.compile_decision):
    holdout_share: float = DEFAULT_HOLDOUT_SHARE
    # The teams whose jobs take entries' relaxed-numerics configs, beside the jobs that opted
    # in themselves (see delivery.compile_decision); sorted, no repeats:
    relaxed_numerics_teams: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """The manifest of manifest.json's object, its policies checked (a field it lacks that
        came later reads as its default); TypeError where it is no such object (a field missing
        or unknown), ValueError naming a refused policy."""
        if not isinstance(data, dict):
            raise TypeError(f"{type(data).__name__}, not an object")
        manifest = cls(**data)
        for name, check in MANIFEST_POLICIES.items():
            check(getattr(manifest, name), "manifest.json")
        return manifest

    def to_json(self) -> dict[str, Any]:
        """The object manifest.json holds, fields in order."""
        return dict(self.__dict__)


# A version's policies (Manifest fields) and what checks each (ValueError, naming `where`).
MANIFEST_POLICIES: dict[str, Callable[[Any, str], Any]] = {
    "holdout_share": check_holdout_share, "relaxed_numerics_teams": check_relaxed_numerics_teams}


_KIND_NAMES: dict[type, str] = {
    str: "text", float: "a number", datetime.datetime: "a time with a time zone",
    **{closed: f"one of {', '.join(closed)}" for closed in (Kind, Provenance, Origin)}}


def _typed(value: Any, kind: type) -> Any:
    """`value` as a `kind`, the one value it stands for (an int for a float, a string for an
    enum's member, as the enum reads it: a Kind, a Provenance, an Origin) or itself; None where
    it is no `kind`."""
    if isinstance(value, bool):
        return None
    if kind is float and isinstance(value, int):
        return float(value)
    if issubclass(kind, enum.Enum) and isinstance(value, str) and not isinstance(value, kind):
        try:
            return kind(value)
        except ValueError:
            return None
    if kind is datetime.datetime and isinstance(value, datetime.datetime) and value.tzinfo is None:
        return None
    return value if isinstance(value, kind) else None


@functools.cache
def _entry_fields() -> tuple[tuple[str, type, bool], ...]:
    """Each StoreEntry field: its name, the type of its values and whether it must be set."""
    hints = typing.get_type_hints(StoreEntry)
    found = []
    for field in dataclasses.fields(StoreEntry):
        kinds = [kind for kind in typing.get_args(hints[field.name]) or (hints[field.name],)
                 if kind is not type(None)]
        found.append((field.name, kinds[0], field.default is not None))
    return tuple(found)
