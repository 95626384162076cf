"""Which ranked candidates this machine (or a cluster's nodes) can tune, with their HLO from
the blob store.

A config is measured on the machine that runs the tuner, so a candidate is tunable here when it
was ranked for this platform and device kind; the result is keyed to the candidate's own
environment. On a cluster (`environments`: the keys its nodes offer, `tasks.runner.Runner`), a
candidate is tunable when a node offers its very environment. Each is a `Candidate`: a label,
the task's subject (`tuner.target.Subject`) and the environment its results are keyed to. A
graph candidate's subject is its unoptimized module. An op candidate's is its kernel cut out of
an optimized graph that holds it (`tuner.op_cut`), found deterministically: among the `ops` rows
of (op fingerprint, environment), the graph ranking named (the one that spends the most on the
op) first, then the earliest sighting, by instruction name and blob.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from execution.sharded import MAX_PARTITION_DEVICES, spans
from hlo.environment import Partitioning, current_environment, machine_kind, partitioning_from_json
from hlo.module import from_text
from ingest.tables import GRAPHS, OPS
from ranking.tables import CANDIDATES
from storage.blobs import BlobStore
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.op_cut import OpCutError, cut_op
from tuner.tables import TUNING_RESULTS, results_of
from tuner.target import Subject, graph_subject, op_subject
from vocabulary.tuning import Kind


@dataclass(frozen=True)
class Candidate:
    """One thing to tune: a label for people (its rank, name and fingerprint), the task's
    subject (a graph's module, or an op's kernel cut out of its graph), and the environment its
    results are keyed to (a module given as a file: the one beside it, else this machine's)."""

    label: str
    subject: Subject
    env_key: str


@dataclass
class Candidates:
    """The candidates of one kind to tune, best first; and the ones that could not be made
    tasks, with why."""

    tunable: list[Candidate] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def latest_candidates(home: Home, kind: Kind) -> pa.Table:
    """The latest ranking's candidates of `kind`, best first."""
    candidates = Warehouse(home).read(CANDIDATES)
    if candidates.num_rows == 0:
        return candidates
    latest = pc.max(candidates.column("dt"))
    return candidates.filter(pc.and_(pc.equal(candidates.column("dt"), latest),
                                     pc.equal(candidates.column("kind"), kind))).sort_by("rank")


@dataclass(frozen=True)
class RankedGraph:
    """A graph candidate of the latest ranking that can be measured: its rank, fleet
    chip-seconds over the ranking window, and its `graphs` row."""

    rank: int
    chip_seconds: float
    graph: dict

    @property
    def key(self) -> tuple[str, str]:
        """(fingerprint, env_key)."""
        return self.graph["fingerprint"], self.graph["env_key"]

    @property
    def label(self) -> str:
        """For people: its rank, module name and fingerprint."""
        return f"#{self.rank} {self.graph['module_name']} {self.graph['fingerprint'][:8]}"

    def candidate(self, blobs: BlobStore) -> Candidate:
        """The task's candidate: the graph's unoptimized module from the blob store."""
        module = from_text(blobs.get_text(self.graph["hlo_blob"]), source=self.graph["hlo_blob"])
        return Candidate(self.label, graph_subject(module), self.graph["env_key"])


def ranked_graphs(home: Home, environments: frozenset[str] | None = None,
                  platforms: frozenset[str] | None = None) -> list[RankedGraph]:
    """The graph candidates of the latest ranking that can be measured (`_measurable_graphs`),
    best first, of environments on `platforms` only where given."""
    graphs = _measurable_graphs(home, environments)
    if platforms is not None:
        graphs = {key: g for key, g in graphs.items() if g["platform"] in platforms}
    found = []
    for candidate in latest_candidates(home, Kind.GRAPH).to_pylist():
        graph = graphs.get((candidate["fingerprint"], candidate["env_key"]))
        if graph is not None:
            found.append(RankedGraph(candidate["rank"], candidate["chip_seconds"], graph))
    return found


def tunable_candidates(home: Home, top: int, untried: bool = False,
                       environments: frozenset[str] | None = None, kind: Kind = Kind.GRAPH,
                       platforms: frozenset[str] | None = None) -> list[Candidate]:
    """The best-ranked graph candidates of the latest ranking that can be measured
    (`ranked_graphs`), at most `top`, for tasks of `kind` (a graph's flags, or its kernels), of
    environments on `platforms` only where given. `untried`: only those this compiler has no
    `kind` result for yet, so that a nightly run moves down the ranking."""
    tried = _tried(home, kind) if untried else set()
    blobs = BlobStore(home)
    ranked = [r for r in ranked_graphs(home, environments, platforms) if r.key not in tried]
    return [r.candidate(blobs) for r in ranked[:max(top, 0)]]


def tunable_op_candidates(home: Home, top: int, untried: bool = False,
                          environments: frozenset[str] | None = None) -> Candidates:
    """The best-ranked op candidates of the latest ranking that can be measured, cut out of
    their graphs, at most `top` (`untried`, `environments`: as for graphs)."""
    graphs = _measurable_graphs(home, environments)
    tried = _tried(home, Kind.OP) if untried else set()
    ops: dict[tuple[str, str], list[dict]] = {}
    for row in Warehouse(home).read(OPS).to_pylist():
        ops.setdefault((row["fingerprint"], row["env_key"]), []).append(row)
    blobs = BlobStore(home)
    found = Candidates()
    for candidate in latest_candidates(home, Kind.OP).to_pylist():
        if len(found.tunable) >= top:  # before the first too: a `top` of 0 takes none
            break
        key = (candidate["fingerprint"], candidate["env_key"])
        if key in tried:
            continue
        rows = [r for r in ops.get(key, []) if (r["graph_fingerprint"], r["env_key"]) in graphs]
        if not rows:
            continue
        row = min(rows, key=lambda r: (r["graph_fingerprint"] != candidate["graph_fingerprint"],
                                       r["dt"], r["name"], r["hlo_blob"]))
        label = f"#{candidate['rank']} op {row['name']} {candidate['fingerprint'][:8]}"
        try:
            cut = cut_op(from_text(blobs.get_text(row["hlo_blob"]), source=row["hlo_blob"]),
                         row["name"])
        except OpCutError as exc:
            found.skipped.append(f"{label}: {exc}")
            continue
        if cut.fingerprint != candidate["fingerprint"]:
            found.skipped.append(f"{label}: kernel {row['name']!r} of {row['hlo_blob']} "
                                 "fingerprints differently now (compiler or hash changed)")
            continue
        found.tunable.append(Candidate(f"{label} ({cut.kind}, {cut.op_class})", op_subject(cut),
                                       candidate["env_key"]))
    return found


@dataclass(frozen=True)
class Sharded:
    """A sharded graph's environment as the tuner needs it: how its job partitioned it, and the
    machine kind that measures it (`hlo.environment.machine_kind`)."""

    partitioning: Partitioning
    machine: str


def sharded_environments(home: Home) -> dict[str, Sharded]:
    """Every environment whose graphs the warehouse holds partitioned across devices or
    processes, by env_key (graphs landed before partitionings were recorded, and graphs of one
    device, have none)."""
    graphs = Warehouse(home).read(GRAPHS)
    if "partitioning" not in graphs.column_names:
        return {}
    found = {}
    for row in graphs.to_pylist():
        if row["partitioning"] is not None:
            found[row["env_key"]] = Sharded(
                partitioning_from_json(json.loads(row["partitioning"])),
                machine_kind(row["platform"], row["device_kind"], row["compiler_version"]))
    return found


def _tried(home: Home, kind: Kind) -> set[tuple[str, str]]:
    """(fingerprint, env_key) of the `kind` results this compiler has measured already."""
    version = current_environment().compiler_version
    return {(r.fingerprint, r.env_key) for r in results_of(Warehouse(home).read(TUNING_RESULTS))
            if r.kind == kind and r.compiler_version == version}


def _measurable_graphs(home: Home, environments: frozenset[str] | None) -> dict[tuple[str, str], dict]:
    """The `graphs` rows, by (fingerprint, env_key), of the environments whose keys are
    `environments` (a sharded graph's, or its machine kind's: `tasks.resources`); None: of this
    machine's platform and device kind. A graph spanning more than MAX_PARTITION_DEVICES has
    none: no per-device program of it can be built."""
    here = current_environment() if environments is None else None

    def measurable(g: dict) -> bool:
        if g.get("partitioning") is not None and spans(
                partitioning_from_json(json.loads(g["partitioning"]))) > MAX_PARTITION_DEVICES:
            return False
        if here is not None:
            return (g["platform"], g["device_kind"]) == (here.platform, here.device_kind)
        assert environments is not None
        if g["env_key"] in environments:
            return True
        return g.get("partitioning") is not None and machine_kind(
            g["platform"], g["device_kind"], g["compiler_version"]) in environments

    return {(g["fingerprint"], g["env_key"]): g for g in Warehouse(home).read(GRAPHS).to_pylist()
            if measurable(g)}
