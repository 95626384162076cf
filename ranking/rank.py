"""`fdo rank`: which graphs and ops cost the fleet the most, as an Apache Beam pipeline.

Cost of a graph = chip-seconds per (fingerprint, env_key) over the window; cost of an op = its
chip-seconds summed over every graph that contains it, per (op fingerprint, env_key), since an
op config is shared by all graphs with that op. Every key of a kind lands in exactly one
coverage category, in this order:
  opted_out        chip-time of jobs that opted out of tuning (by row, before anything else)
  tuned            the key has a live entry in the config store (same key: same compiler)
  missing_symbols  no HLO for it in `graphs` / `ops`: a coverage gap, reported, not ranked
  long_tail        its share of the kind's fleet chip-time is under `min_share`
  candidate        ranked by cost (ties by fingerprint, then env_key), within the top K
  beyond_top_k     ranked, but below the top K
Candidates and coverage are written to the warehouse under the ranking date, replacing an
earlier ranking of that date.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS, OPS
from ranking.arrow_sums import ArrowSum, TaggedSums
from ranking.tables import CANDIDATES, COVERAGE
from storage.beam_io import ReadPlan, ReadTables, Source, WriteWarehouse, partition_files, plan_reads
from storage.beam_runner import pipeline_options
from storage.home import Home
from storage.home_factory import open_home
from storage.store_reader import StoreReader
from storage.warehouse import TableSchema, Warehouse
from vocabulary.tuning import Kind

CATEGORIES = ("candidate", "beyond_top_k", "tuned", "opted_out", "missing_symbols", "long_tail")


@dataclass(frozen=True)
class RankSettings:
    """What to rank and how much of it to keep."""

    date: datetime.date
    window_days: int = 7
    top_k: int = 20
    min_share: float = 0.001  # the long tail: keys under this share of the kind's chip-time

    @property
    def first_day(self) -> datetime.date:
        """The first date of the window."""
        return self.date - datetime.timedelta(days=self.window_days - 1)


@dataclass(frozen=True)
class RankedKind:
    """Where one ranked kind's costs and symbols come from: its runs table, the runs column
    holding its fingerprint (`key`) and the one holding the graph that ran (`graph_key`), and
    its symbols table."""

    kind: Kind
    runs: TableSchema
    key: str
    graph_key: str
    symbols: TableSchema


# The kinds ranked, by the tuning kind (`vocabulary.tuning.Kind`) their candidates are tasks of.
# A kernels task's candidates are the graph ranking's (`tuner.candidates`): it has no entry. The
# tuner's registry of kinds (`tuner.kinds`) lies above ranking and cannot hold these facts for
# it, so ranking keeps its own, keyed by the same enum.
RANKED: dict[Kind, RankedKind] = {
    Kind.GRAPH: RankedKind(Kind.GRAPH, GRAPH_RUNS, "fingerprint", "fingerprint", GRAPHS),
    Kind.OP: RankedKind(Kind.OP, OP_RUNS, "op_fingerprint", "graph_fingerprint", OPS),
}

_COSTS = pa.schema([("fingerprint", pa.string()), ("graph_fingerprint", pa.string()),
                    ("env_key", pa.string()), ("opted_out", pa.bool_()), ("chip_seconds", pa.float64())])
_SYMBOLS = pa.schema([("fingerprint", pa.string()), ("env_key", pa.string())])


_COST = ArrowSum(["fingerprint", "graph_fingerprint", "env_key", "opted_out"], ["chip_seconds"], _COSTS)
_DISTINCT = ArrowSum(["fingerprint", "env_key"], [], _SYMBOLS)


def rank_reads(home: Home, settings: RankSettings) -> ReadPlan:
    """What the ranking reads: both kinds' runs in the window and their symbols."""
    sources = []
    for spec in RANKED.values():
        columns = list(dict.fromkeys([spec.key, spec.graph_key, "env_key", "opted_out", "chip_seconds"]))
        sources.append(Source(spec.runs, partition_files(home, spec.runs, settings.first_day, settings.date),
                              columns))
        sources.append(Source(spec.symbols, partition_files(home, spec.symbols, None, None),
                              ["fingerprint", "env_key"]))
    return plan_reads(sources)


class Rank(beam.PTransform):
    """The ranking of both kinds, from (table name, rows) of their runs in the window and of
    their symbols, as `ReadTables` reads `rank_reads` (an empty table for a table without
    files: a kind none of whose tables arrives is not ranked).

    Each row group is summed per key where it is read; one combine keyed by kind sums the costs
    and collects the symbol keys together; each kind is then classified against `tuned` (the
    live store entries' kind, fingerprint and env_key). Yields {"candidates": ..., "coverage":
    ...}, each (part, rows) per kind, the part named after the table and the kind, for
    `WriteWarehouse`.
    """

    def __init__(self, settings: RankSettings, tuned: pa.Table) -> None:
        super().__init__()
        self.settings = settings
        self.tuned_by_kind = {kind: tuned.filter(pc.equal(tuned.column("kind"), kind)).select(
            ["fingerprint", "env_key"]) for kind in RANKED}

    def expand(self, tables):
        ranked = (tables
                  | "Sum where read" >> beam.MapTuple(_kind_sums)
                  | "Sum per kind" >> beam.CombinePerKey(TaggedSums({"costs": _COST, "symbols": _DISTINCT}))
                  | "Classify" >> beam.Map(_classify_kind, self.tuned_by_kind, self.settings))
        return {"candidates": ranked | "Candidates" >> beam.MapTuple(
                    lambda kind, both: (f"candidates-{kind}", both[0])),
                "coverage": ranked | "Coverage" >> beam.MapTuple(
                    lambda kind, both: (f"coverage-{kind}", both[1]))}


def build_rank_pipeline(pipeline: beam.Pipeline, reads: ReadPlan, home: Home,
                        settings: RankSettings, tuned: pa.Table) -> None:
    """Add the ranking of both kinds to `pipeline`: read (`rank_reads`), `Rank`, and write
    candidates and coverage to the warehouse under the ranking date."""
    ranked = pipeline | "Read" >> ReadTables(reads) | "Rank" >> Rank(settings, tuned)
    day = [settings.date.isoformat()]
    ranked["candidates"] | "Write candidates" >> WriteWarehouse(home, CANDIDATES, day)
    ranked["coverage"] | "Write coverage" >> WriteWarehouse(home, COVERAGE, day)


def rank(home: Home, settings: RankSettings, beam_args: Iterable[str] = ()) -> tuple[pa.Table, pa.Table]:
    """Run the ranking pipeline; returns the date's (candidates, coverage) as written.
    `home` may be a URL on any of Beam's file systems (gs://, s3://, ...)."""
    home = open_home(home)
    home.reach(pipeline_options(beam_args))
    reads = rank_reads(home, settings)
    with beam.Pipeline(options=pipeline_options(beam_args, reads.rows)) as pipeline:
        build_rank_pipeline(pipeline, reads, home, settings, StoreReader(home).live_entries())
    on_date = settings.date.isoformat().__eq__
    candidates = Warehouse(home).read(CANDIDATES, filter_dt=on_date)
    coverage = Warehouse(home).read(COVERAGE, filter_dt=on_date)
    return (candidates.sort_by([("kind", "descending"), ("rank", "ascending")]),
            coverage.sort_by([("kind", "descending"), ("category", "ascending")]))


def classify(costs: pa.Table, symbols: pa.Table, tuned: pa.Table, kind: Kind,
             settings: RankSettings) -> tuple[pa.Table, pa.Table]:
    """(candidates, coverage) of one kind from its summed costs; vectorized over keys."""
    total = pc.sum(costs.column("chip_seconds")).as_py() or 0.0
    opted = costs.filter(costs.column("opted_out"))
    active = costs.filter(pc.invert(costs.column("opted_out")))
    per_key = _per_key(active)
    in_store = _member(per_key, tuned)
    has_symbols = _member(per_key, symbols)
    share = pc.divide(per_key.column("chip_seconds"), total) if total else pc.multiply(
        per_key.column("chip_seconds"), 0.0)
    category = pc.if_else(in_store, "tuned", pc.if_else(
        pc.invert(has_symbols), "missing_symbols",
        pc.if_else(pc.less(share, settings.min_share), "long_tail", "ranked")))
    per_key = per_key.append_column("share", share).append_column("category", category)
    ranked = per_key.filter(pc.equal(per_key.column("category"), "ranked")).sort_by(
        [("chip_seconds", "descending"), ("fingerprint", "ascending"), ("env_key", "ascending")])
    ranks = pa.array(range(1, ranked.num_rows + 1), pa.int64())
    ranked = ranked.append_column("rank", ranks)
    top = ranked.filter(pc.less_equal(ranks, settings.top_k))
    candidates = pa.table({
        "dt": pa.repeat(pa.scalar(settings.date, pa.date32()), top.num_rows),
        "kind": pa.repeat(pa.scalar(kind), top.num_rows),
        "fingerprint": top.column("fingerprint"), "env_key": top.column("env_key"),
        "graph_fingerprint": top.column("graph_fingerprint"),
        "chip_seconds": top.column("chip_seconds"), "share": top.column("share"),
        "rank": top.column("rank"),
    })
    parts = {"opted_out": _per_key(opted), "candidate": top,
             "beyond_top_k": ranked.filter(pc.greater(ranks, settings.top_k))}
    rows = []
    for name in CATEGORIES:
        part = parts[name] if name in parts else per_key.filter(pc.equal(per_key.column("category"), name))
        seconds = pc.sum(part.column("chip_seconds")).as_py() or 0.0
        rows.append({"dt": settings.date, "kind": kind, "category": name, "keys": part.num_rows,
                     "chip_seconds": seconds, "share": seconds / total if total else 0.0})
    return CANDIDATES.conform(candidates), pa.Table.from_pylist(rows, COVERAGE.schema)


def _classify_kind(summed: tuple[Kind, dict[str, pa.Table]], tuned_by_kind: dict[Kind, pa.Table],
                   settings: RankSettings) -> tuple[Kind, tuple[pa.Table, pa.Table]]:
    kind, sums = summed
    return kind, classify(sums["costs"], sums["symbols"], tuned_by_kind[kind], kind, settings)


def _kind_sums(name: str, rows: pa.Table) -> tuple[Kind, tuple[str, pa.Table]]:
    """(kind, ("costs" or "symbols", the partial sum)) of rows of table `name`."""
    for spec in RANKED.values():
        if name == spec.runs.name:
            return spec.kind, ("costs", _COST.reduce(pa.table({
                "fingerprint": rows.column(spec.key), "graph_fingerprint": rows.column(spec.graph_key),
                "env_key": rows.column("env_key"), "opted_out": rows.column("opted_out"),
                "chip_seconds": rows.column("chip_seconds")})))
        if name == spec.symbols.name:
            return spec.kind, ("symbols", _DISTINCT.reduce(rows))
    raise ValueError(f"rank: no kind reads table {name!r}")


def _per_key(costs: pa.Table) -> pa.Table:
    """Chip-seconds per (fingerprint, env_key), with the graph that spends the most on it."""
    ordered = costs.sort_by([("fingerprint", "ascending"), ("env_key", "ascending"),
                             ("chip_seconds", "descending"), ("graph_fingerprint", "ascending")])
    per_graph = ordered.group_by(["fingerprint", "env_key", "graph_fingerprint"], use_threads=False
                                 ).aggregate([("chip_seconds", "sum")])
    per_graph = per_graph.sort_by([("fingerprint", "ascending"), ("env_key", "ascending"),
                                   ("chip_seconds_sum", "descending"), ("graph_fingerprint", "ascending")])
    per_key = per_graph.group_by(["fingerprint", "env_key"], use_threads=False).aggregate(
        [("chip_seconds_sum", "sum"), ("graph_fingerprint", "first")])
    return pa.table({"fingerprint": per_key.column("fingerprint"), "env_key": per_key.column("env_key"),
                     "graph_fingerprint": per_key.column("graph_fingerprint_first"),
                     "chip_seconds": per_key.column("chip_seconds_sum_sum")})


def _member(keys: pa.Table, members: pa.Table) -> pa.Array:
    """Whether each (fingerprint, env_key) of `keys` is in `members`."""
    joined = pc.binary_join_element_wise(keys.column("fingerprint"), keys.column("env_key"), "/")
    known = pc.binary_join_element_wise(members.column("fingerprint"), members.column("env_key"), "/")
    return pc.is_in(joined, value_set=pa.chunked_array(known, pa.string()).combine_chunks())
