"""What the fleet and the validator's own audit trail say about each store entry.

- Fleet hits (the scan's priority): compiles where the hook applied the entry's config (`hits`
  rows with outcome 'applied') plus profiled runs that carry its key (`graph_runs` and
  `op_runs` rows whose `config_key` is the entry's), over a recent window.
- Fallbacks: `hits` rows with outcome 'fallback', where the tuned compile failed in the fleet
  and the hook compiled with the defaults (CATWILD 3.4): a cause of invalidation.
- Fleet figures: the realized speedup of each entry's config in the fleet (ranking.realized:
  its holdout arm against its tuned arm, an interval over jobs) over a recent window, from the
  runs of the store versions that served the entry's current config.
- History: the `validations` audit trail, for an entry's first measurement (its lifetime runs
  from there, whatever re-validations refreshed since) and for decisions that need not be made
  twice under one compiler.
"""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ingest.ran_tuned import hit_ran_tuned, ran_tuned
from ingest.tables import GRAPH_RUNS, HITS, OP_RUNS
from ranking.realized import Realized, read_runs, realized_speedups
from storage.home import Home
from storage.store_reader import StoreReader
from storage.store_schema import StoreEntry
from storage.warehouse import Warehouse
from validator.rules import measured_at
from validator.tables import VALIDATIONS
from vocabulary.decisions import DecisionOutcome
from vocabulary.hits import HitOutcome
from vocabulary.store import Provenance

HIT_WINDOW = datetime.timedelta(days=30)
FLEET_WINDOW = datetime.timedelta(days=7)


def fleet_hits(home: Home, now: datetime.datetime, window: datetime.timedelta = HIT_WINDOW) -> Counter:
    """Hits per store key over the `window` before `now`: applied compiles plus profiled runs.

    A fleet's profiles run to millions of rows a day and only the per-key counts are needed:
    the window's files are read one at a time, two columns each, and counted by Arrow."""
    since = (now - window).date().isoformat()
    warehouse = Warehouse(home)
    counts: Counter = Counter()
    for table, column, hit in ((HITS, "key", hit_ran_tuned), (GRAPH_RUNS, "config_key", ran_tuned),
                               (OP_RUNS, "config_key", ran_tuned)):
        columns = {HITS: [column, "outcome"], GRAPH_RUNS: [column, "holdout"]}.get(table, [column])
        for rows in warehouse.read_files(table, columns, filter_dt=lambda dt: dt >= since):
            per_key = rows.filter(hit(rows)).group_by(column).aggregate([(column, "count")])
            counts.update(dict(zip(per_key.column(column).to_pylist(),
                                   per_key.column(f"{column}_count").to_pylist())))
    return counts


def fleet_realized(home: Home, now: datetime.datetime, origins: dict[str, datetime.datetime],
                   window: datetime.timedelta = FLEET_WINDOW) -> dict[str, Realized]:
    """The realized speedup of each key in `origins` (key -> when its current config was first
    measured) over the `window` of days up to `now`'s.

    Only the runs of store versions published at or after the origin count: earlier versions
    may have held another config under the key. Those versions all served the current config,
    so their runs are pooled (more jobs per arm) and named by the newest of them."""
    created = [(m.version, datetime.datetime.fromisoformat(m.created)) for m in StoreReader(home).versions()]
    first_version = {key: next((version for version, at in created if at >= origin), None)
                     for key, origin in origins.items()}
    eligible = pa.table({"config_key": pa.array(list(first_version), pa.string()),
                         "first_version": pa.array(list(first_version.values()), pa.int64())})
    runs = read_runs(home, (now - window).date(), now.date())
    runs = runs.join(eligible.filter(pc.is_valid(eligible.column("first_version"))), "config_key",
                     join_type="inner")
    runs = runs.filter(pc.greater_equal(runs.column("config_version"), runs.column("first_version")))
    newest = runs.group_by("config_key").aggregate([("config_version", "max")])
    runs = runs.drop_columns(["config_version", "first_version"]).join(newest, "config_key",
                                                                      join_type="inner")
    runs = runs.rename_columns({"config_version_max": "config_version"})
    return {r.key: r for r in realized_speedups(runs)}


@dataclass(frozen=True)
class Fallback:
    """One compile in the fleet where the tuned config failed and the default was used."""

    at: datetime.datetime
    config: str | None  # the config the hook tried, JSON, when it recorded it
    reason: str


def fallbacks(home: Home) -> dict[str, list[Fallback]]:
    """The fleet's fallbacks per store key, oldest first."""
    rows = Warehouse(home).read(HITS, columns=["key", "outcome", "at", "config", "reason"])
    rows = rows.filter(pc.equal(rows.column("outcome"), HitOutcome.FALLBACK)).sort_by("at")
    found: dict[str, list[Fallback]] = defaultdict(list)
    for row in rows.to_pylist():
        found[row["key"]].append(Fallback(row["at"], row["config"], row["reason"] or "no reason recorded"))
    return found


class History:
    """The audit trail of earlier validations."""

    def __init__(self, home: Home) -> None:
        rows = Warehouse(home).read(VALIDATIONS, columns=[
            "key", "new_key", "outcome", "reason", "compiler_version", "validated_at", "origin_at"])
        self._by_key: dict[str, list[dict]] = defaultdict(list)
        self._origin: dict[str, datetime.datetime] = {}
        for row in sorted(rows.to_pylist(), key=lambda r: r["validated_at"]):
            self._by_key[row["key"]].append(row)
            # Later rows win: the latest decision that wrote the key.
            if row["origin_at"] is None:
                continue
            if row["outcome"] == DecisionOutcome.KEPT:
                self._origin[row["key"]] = row["origin_at"]
            elif row["outcome"] == DecisionOutcome.REKEYED and row["new_key"]:
                self._origin[row["new_key"]] = row["origin_at"]

    def origin(self, entry: StoreEntry) -> datetime.datetime:
        """When the entry's config was first measured: its own measurement unless the validator
        wrote it, else what the validation that wrote it carried forward."""
        measured = measured_at(entry)
        if entry.provenance != Provenance.VALIDATOR:
            return measured
        return self._origin.get(entry.key, measured)

    def decided(self, key: str, outcome: str, compiler_version: str, since: datetime.datetime,
                reason: str | None = None) -> bool:
        """Whether `key` got `outcome` (with `reason`, if given) under `compiler_version` at or
        after `since`."""
        return any(r["outcome"] == outcome and r["compiler_version"] == compiler_version
                   and r["validated_at"] >= since and (reason is None or r["reason"] == reason)
                   for r in self._by_key.get(key, ()))
