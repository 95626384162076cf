"""Verified coverage: the share of the tunable chip-time that runs a verified config, and the
share the loop has decided.

The loop's reach as two figures, beside what it saved (`fdo savings --json`, the nightly's savings
stage, the dashboard's overview, the demo's summary). Over a window of days:
- tunable chip-time: the graph chip-time (`graph_runs`) of jobs that did not opt out, of graphs
  the loop can tune: their HLO is in `graphs`, and their environment is one the tuner measures
  (`environments`; by default this machine's platform and device kind, as the tuner's candidates
  are chosen: `tuner.candidates`), spanning no more devices than a per-device program is built
  for (`execution.sharded.MAX_PARTITION_DEVICES`); the chip-time of this platform's keys that
  span more is told apart (`unmeasurable_chip_seconds`), a limit of the loop, not of the fleet;
- covered (faster): the part of it whose key has a live store entry the loop measured (written
  by the tuner or the validator; a team's imported config is its claim until the validator
  keeps it);
- decided: covered, or whose key's defaults the loop verified best (`tuner.decided`, which the
  caller reads: ranking sits below the tuner).
The figure holds the live store against the window's runs, so taken after a night's deliver and
validate it says what that night left the fleet: the nightly's savings stage records it in the
run ledger (its `coverage` counts; `pipelines.nightly.coverage_by_night` reads them back).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from execution.sharded import MAX_PARTITION_DEVICES, spans
from hlo.environment import current_environment
from ingest.tables import GRAPH_RUNS, GRAPHS, partitioning_of
from storage.home import Home
from storage.home_factory import open_home
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse, partition_days
from vocabulary.store import Provenance
from vocabulary.tuning import Kind

# Who last wrote an entry whose config the loop measured.
MEASURED_BY_LOOP = (Provenance.TUNER, Provenance.VALIDATOR)


@dataclass(frozen=True)
class VerifiedCoverage:
    """The tunable chip-time of [first, last] and the part of it with a verified config live,
    in chip-seconds, and how many graph keys each holds."""

    first: datetime.date
    last: datetime.date
    tunable_chip_seconds: float
    covered_chip_seconds: float
    tunable_keys: int
    covered_keys: int
    decided_chip_seconds: float = 0.0
    decided_keys: int = 0
    # The platform's chip-time no machine of the loop can measure, beside the tunable: keys
    # spanning more devices than a per-device program is built for (`MAX_PARTITION_DEVICES`).
    unmeasurable_chip_seconds: float = 0.0

    @property
    def share(self) -> float | None:
        """The covered share of the tunable chip-time (running a verified faster config); None
        where nothing was tunable."""
        if self.tunable_chip_seconds <= 0:
            return None
        return self.covered_chip_seconds / self.tunable_chip_seconds

    @property
    def decided_share(self) -> float | None:
        """The decided share of the tunable chip-time (covered, or its defaults verified best);
        None where nothing was tunable."""
        if self.tunable_chip_seconds <= 0:
            return None
        return self.decided_chip_seconds / self.tunable_chip_seconds

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: every field (dates in ISO form) and both shares."""
        return {**asdict(self), "first": self.first.isoformat(), "last": self.last.isoformat(),
                "share": self.share, "decided_share": self.decided_share}


def verified_coverage(home: Home, first: datetime.date, last: datetime.date,
                      environments: frozenset[str] | None = None,
                      entries: pa.Table | None = None,
                      defaults_kept: Iterable[tuple[str, str]] = ()) -> VerifiedCoverage:
    """The verified coverage of the graph runs of [first, last] under the live store (see the
    module docstring); `environments`: the env keys the tuner measures (None: this machine's
    platform and device kind); `entries`: the store entries to count instead of the live
    version's (an earlier version's, to say what it covered); `defaults_kept`: the (fingerprint,
    env_key) keys whose defaults the loop verified best, decided too."""
    home = open_home(home)
    warehouse = Warehouse(home)
    graphs = warehouse.read(GRAPHS, ["fingerprint", "env_key", "platform", "device_kind", "partitioning"])
    if environments is None:
        here = current_environment()
        platform = pc.and_(pc.equal(graphs.column("platform"), here.platform),
                           pc.equal(graphs.column("device_kind"), here.device_kind))
    else:
        platform = pc.is_in(graphs.column("env_key"), value_set=pa.array(sorted(environments), pa.string()))
    wide = pa.array([text is not None and spans(partitioning_of(text)) > MAX_PARTITION_DEVICES
                     for text in graphs.column("partitioning").to_pylist()], pa.bool_())
    tunable_keys = _keys(graphs.filter(pc.and_(platform, pc.invert(wide))))
    unmeasurable_keys = _keys(graphs.filter(pc.and_(platform, wide)))
    days = set(partition_days(first, last))
    runs = warehouse.read(GRAPH_RUNS, ["fingerprint", "env_key", "opted_out", "chip_seconds"],
                          filter_dt=days.__contains__)
    runs = runs.filter(pc.invert(runs.column("opted_out")))
    every_key = runs.group_by(["fingerprint", "env_key"], use_threads=False).aggregate([("chip_seconds", "sum")])
    per_key = every_key.filter(pc.is_in(_keys(every_key), value_set=tunable_keys))
    unmeasurable = every_key.filter(pc.is_in(_keys(every_key), value_set=unmeasurable_keys))
    entries = StoreReader(home).live_entries() if entries is None else entries
    verified = entries.filter(pc.and_(pc.equal(entries.column("kind"), Kind.GRAPH),
                                      pc.is_in(entries.column("provenance"),
                                               value_set=pa.array(MEASURED_BY_LOOP))))
    covered = per_key.filter(pc.is_in(_keys(per_key), value_set=_keys(verified)))
    kept = pa.array([f"{fingerprint}/{env_key}" for fingerprint, env_key in defaults_kept], pa.string())
    decided = per_key.filter(pc.or_(pc.is_in(_keys(per_key), value_set=_keys(verified)),
                                    pc.is_in(_keys(per_key), value_set=kept)))

    def total(table: pa.Table) -> float:
        return float(pc.sum(table.column("chip_seconds_sum")).as_py() or 0.0)

    return VerifiedCoverage(first, last, total(per_key), total(covered), per_key.num_rows,
                            covered.num_rows, total(decided), decided.num_rows, total(unmeasurable))


def _keys(table: pa.Table) -> pa.Array:
    """Each row's (fingerprint, env_key) as one string."""
    joined = pc.binary_join_element_wise(table.column("fingerprint"), table.column("env_key"), "/")
    return pa.chunked_array(joined, pa.string()).combine_chunks() if isinstance(
        joined, pa.ChunkedArray) else joined
