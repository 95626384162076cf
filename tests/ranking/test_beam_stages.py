"""The Beam stages as PTransforms, on small tables made here: `Rank`, `AccountSavings` and
deliver's `BestEntryPerKey`, each fed by `beam.Create` with the (table name, rows) a read
yields and checked with `assert_that`, in this process (Beam's in-memory mode), with no XLA
and no warehouse. The stages against the DuckDB reference on a simulated fleet:
tests/ranking/test_ranking.py, tests/ranking/test_compile_savings.py; the reads and the sink:
tests/storage/test_beam_io.py."""

from __future__ import annotations

import datetime
from typing import Any, Callable

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from delivery.deliver import BestEntryPerKey
from hlo.environment import store_key
from ingest.tables import GRAPH_RUNS, GRAPHS, HITS, OP_RUNS, OPS
from ranking.rank import CATEGORIES, Rank, RankSettings
from ranking.savings import UNKNOWN_TEAM, AccountSavings
from storage.beam_runner import pipeline_options
from storage.store_schema import ENTRIES, STORE_ENTRY_COLUMNS
from storage.warehouse import TableSchema
from tuner.tables import TUNING_RESULTS

DAY = datetime.date(2026, 6, 2)
ENV = "e" * 32
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def fp(n: int) -> str:
    return f"{n:032x}"


def read(table: TableSchema, rows: list[dict[str, Any]], dictionary: bool = True) -> tuple[str, pa.Table]:
    """(table name, rows) as a read of `table` yields them: the rows' columns, strings
    dictionary-encoded (or plain), `dt` last."""
    columns = [name for name in rows[0] if name != "dt"]
    data = pa.Table.from_pylist(rows, pa.schema([table.schema.field(name) for name in [*columns, "dt"]]))
    if dictionary:
        data = pa.table({name: column.dictionary_encode() if pa.types.is_string(column.type) else column
                         for name, column in zip(data.column_names, data.columns)})
    return table.name, data


def empty(table: TableSchema, columns: list[str]) -> tuple[str, pa.Table]:
    """What a read of `table` yields where it has no files: one empty table."""
    return table.name, pa.schema([table.schema.field(name) for name in [*columns, "dt"]]).empty_table()


def run(inputs: list[tuple[str, pa.Table]], stage: beam.PTransform,
        check: Callable[[Any], dict[str, Callable[[list], None]]]) -> None:
    """Run `stage` over `inputs`; `check(output)` names each matcher and the PCollection it takes."""
    with beam.Pipeline(options=pipeline_options(IN_PROCESS)) as pipeline:
        output = pipeline | beam.Create(inputs, reshuffle=False) | stage
        for label, (pcollection, matcher) in check(output).items():
            assert_that(pcollection, matcher, label=label)


def as_rows(parts: beam.PCollection, label: str) -> beam.PCollection:
    """(part, rows) as (part, [row dict, ...]), comparable."""
    return parts | f"{label} as rows" >> beam.MapTuple(lambda part, table: (part, table.to_pylist()))


# Graph runs in two row groups: fp 1 and 2 ranked, 3 opted out, 4 without symbols, 5 tuned,
# 6 in the long tail (under 0.1% of the kind's chip-time). Binary fractions: every sum is exact.
GRAPH_COSTS = [[(1, 60.0, False), (2, 50.0, False), (3, 30.0, True), (4, 20.0, False)],
               [(1, 40.0, False), (5, 10.0, False), (6, 0.0625, False)]]
TOTAL = 210.0625


def test_rank_sums_costs_across_row_groups_and_classifies_each_kind():
    def runs(costs: list[tuple[int, float, bool]]) -> tuple[str, pa.Table]:
        return read(GRAPH_RUNS, [{"fingerprint": fp(n), "env_key": ENV, "opted_out": out, "chip_seconds": s,
                                  "dt": DAY} for n, s, out in costs])

    # An op in two graphs: ranked once, with the graph that spends the most on it.
    ops = read(OP_RUNS, [{"op_fingerprint": fp(70), "graph_fingerprint": fp(g), "env_key": ENV,
                          "opted_out": False, "chip_seconds": s, "dt": DAY} for g, s in ((1, 10.0), (2, 30.0))])
    inputs = [runs(GRAPH_COSTS[0]), runs(GRAPH_COSTS[1]), ops,
              read(GRAPHS, [{"fingerprint": fp(n), "env_key": ENV, "dt": DAY} for n in (1, 2, 3, 5, 6)]),
              read(OPS, [{"fingerprint": fp(70), "env_key": ENV, "dt": DAY}], dictionary=False)]
    tuned = pa.Table.from_pylist([{"key": store_key(fp(5), ENV), "fingerprint": fp(5), "env_key": ENV,
                                   "kind": "graph", "speedup": 1.2, "expires_at": None, "provenance": "tuner"}],
                                 STORE_ENTRY_COLUMNS)
    settings = RankSettings(date=DAY, top_k=1)

    def candidate(kind: str, n: int, graph: int, seconds: float, share: float) -> dict:
        return {"dt": DAY, "kind": kind, "fingerprint": fp(n), "env_key": ENV, "graph_fingerprint": fp(graph),
                "chip_seconds": seconds, "share": share, "rank": 1}

    def coverage(kind: str, seconds: dict[str, float], total: float) -> list[dict]:
        return [{"dt": DAY, "kind": kind, "category": name, "keys": int(name in seconds),
                 "chip_seconds": seconds.get(name, 0.0), "share": seconds.get(name, 0.0) / total}
                for name in CATEGORIES]

    graph = {"candidate": 100.0, "beyond_top_k": 50.0, "tuned": 10.0, "opted_out": 30.0,
             "missing_symbols": 20.0, "long_tail": 0.0625}
    run(inputs, Rank(settings, tuned), lambda ranked: {
        "candidates": (as_rows(ranked["candidates"], "candidates"), equal_to([
            ("candidates-graph", [candidate("graph", 1, 1, 100.0, 100.0 / TOTAL)]),
            ("candidates-op", [candidate("op", 70, 2, 40.0, 1.0)])])),
        "coverage": (as_rows(ranked["coverage"], "coverage"), equal_to([
            ("coverage-graph", coverage("graph", graph, TOTAL)),
            ("coverage-op", coverage("op", {"candidate": 40.0}, 40.0))]))})


def test_rank_classifies_a_kind_whose_tables_have_no_files_as_nothing():
    inputs = [empty(GRAPH_RUNS, ["fingerprint", "env_key", "opted_out", "chip_seconds"]),
              empty(GRAPHS, ["fingerprint", "env_key"])]
    zero = [{"dt": DAY, "kind": "graph", "category": name, "keys": 0, "chip_seconds": 0.0, "share": 0.0}
            for name in CATEGORIES]
    run(inputs, Rank(RankSettings(date=DAY), STORE_ENTRY_COLUMNS.empty_table()), lambda ranked: {
        "candidates": (as_rows(ranked["candidates"], "candidates"), equal_to([("candidates-graph", [])])),
        "coverage": (as_rows(ranked["coverage"], "coverage"), equal_to([("coverage-graph", zero)]))})


HELD, TRIED, VALIDATED, UNHELD, OP_CONFIG = (fp(n) for n in (11, 12, 13, 14, 15))
_HIT = {"env_key": ENV, "kind": "graph", "config_version": 3, "dt": DAY}


def _savings_inputs() -> list[tuple[str, pa.Table]]:
    run_ = {"env_key": ENV, "config_version": 3, "dt": DAY}
    graph_runs = [  # (job, team, chip-seconds, config key, expected speedup, holdout)
        {**run_, "job_id": "j1", "team": "ads", "chip_seconds": 20.0, "config_key": TRIED,
         "expected_speedup": 1.5, "holdout": False},
        {**run_, "job_id": "j2", "team": "ads", "chip_seconds": 8.0, "config_key": TRIED,
         "expected_speedup": 1.5, "holdout": True},  # the holdout arm: ran the defaults
        {**run_, "job_id": "j3", "team": "maps", "chip_seconds": 4.0, "config_key": None,
         "expected_speedup": None, "holdout": None},  # no tuned config
        {**run_, "job_id": "j4", "team": "maps", "chip_seconds": 6.0, "config_key": VALIDATED,
         "expected_speedup": 1.25, "holdout": None},  # written before the holdout column
    ]
    hits = [
        *({**_HIT, "job_id": f"held-{n}", "key": TRIED, "outcome": "holdout", "compile_seconds": s}
          for n, s in enumerate([14.0, 10.0, 12.0])),  # median 12
        {**_HIT, "job_id": "j1", "key": TRIED, "outcome": "applied", "compile_seconds": 3.0},
        {**_HIT, "job_id": "j1", "key": TRIED, "outcome": "fallback", "compile_seconds": 5.0},
        {**_HIT, "job_id": "j9", "key": TRIED, "outcome": "applied", "compile_seconds": 2.0},  # no graph run
        {**_HIT, "job_id": "j1", "key": UNHELD, "outcome": "applied", "compile_seconds": 1.0},
        {**_HIT, "job_id": "j1", "key": UNHELD, "outcome": "miss", "kind": None, "config_version": None,
         "compile_seconds": 90.0},
    ]
    return [read(GRAPH_RUNS, graph_runs[:2]), read(GRAPH_RUNS, graph_runs[2:], dictionary=False),
            read(OP_RUNS, [{**run_, "team": "ads", "chip_seconds": 10.0, "config_key": OP_CONFIG,
                            "expected_speedup": 1.25}]),
            read(HITS, hits[:4]), read(HITS, hits[4:]),
            read(GRAPHS, [{"env_key": ENV, "device_count": 4, "partitioning": None, "dt": DAY}])]


def _saving(kind: str, team: str, validator: bool = False, hit: float = 0.0, saved: float = 0.0,
            compiles: int = 0, unmeasured: int = 0, compile_saved: float = 0.0) -> dict:
    return {"dt": DAY, "kind": kind, "team": team, "env_key": ENV, "config_version": 3,
            "validator_updated": validator, "hit_chip_seconds": hit, "chip_seconds_saved": saved,
            "compile_hits": compiles, "compile_unmeasured": unmeasured, "compile_chip_seconds_saved": compile_saved}


def test_savings_book_runtime_hits_and_compiles_against_the_holdout_median():
    want = [
        # 20 s at 1.5x saved 10; the key's tried compiles (3 s, 5 s, 2 s: median 3) against its
        # holdout median of 12, on 4 devices: two of them saved 2 x (12 - 3) x 4; a key
        # without holdout compiles: counted unmeasured.
        _saving("graph", "ads", hit=20.0, saved=10.0, compiles=2, unmeasured=1, compile_saved=72.0),
        _saving("graph", "maps", validator=True, hit=6.0, saved=1.5),
        _saving("op", "ads", hit=10.0, saved=2.5),
        _saving("graph", UNKNOWN_TEAM, compiles=1, compile_saved=36.0),  # (12 - 3) x 4
    ]
    run(_savings_inputs(), AccountSavings([VALIDATED]), lambda out: {
        "savings": (out | beam.FlatMapTuple(lambda part, table: [(part, row) for row in table.to_pylist()]),
                    equal_to([("savings", row) for row in want]))})


def test_savings_of_days_without_files_are_one_empty_table_for_the_sink_to_clear_them():
    inputs = [empty(GRAPH_RUNS, ["team", "env_key", "chip_seconds", "config_key", "config_version",
                                 "expected_speedup", "holdout", "job_id"]),
              empty(OP_RUNS, ["team", "env_key", "chip_seconds", "config_key", "config_version",
                              "expected_speedup"]),
              empty(HITS, ["job_id", "key", "env_key", "outcome", "kind", "config_version", "compile_seconds"]),
              empty(GRAPHS, ["env_key", "device_count", "partitioning"])]
    run(inputs, AccountSavings([]), lambda out: {
        "savings": (as_rows(out, "savings"), equal_to([("savings", [])]))})


def _result(task: str, n: int, ci_low: float, kind: str = "graph", accepted: bool = True,
            numerics_ok: bool = True, day: datetime.date = DAY) -> dict:
    return {"task_id": task, "kind": kind, "fingerprint": fp(n), "env_key": ENV,
            "config": '{"xla_cpu_use_xnnpack": false}', "speedup": ci_low + 0.1, "ci_low": ci_low,
            "ci_high": ci_low + 0.2, "numerics_ok": numerics_ok, "compiler_version": "jaxlib-test",
            "accepted": accepted, "relaxed_config": None, "relaxed_speedup": None, "autotune_results": None,
            "origin": None, "transferred_from": None,
            "dt": day}


def test_deliver_keeps_the_best_accepted_result_per_key_as_an_entry():
    earlier = DAY - datetime.timedelta(days=1)
    first = [_result("t1", 1, 1.10), _result("t3", 2, 1.005),  # within the noise band
             _result("t4", 3, 1.30, numerics_ok=False), _result("t5", 4, 1.30, kind="op")]
    second = [_result("t2", 1, 1.20, day=earlier), _result("t6", 5, 1.30, kind="kernels"),
              _result("t7", 5, 1.30),  # a tie on the lower bound: the later task wins
              _result("t8", 6, 1.50, accepted=False)]
    inputs = [read(TUNING_RESULTS, first)[1], read(TUNING_RESULTS, second, dictionary=False)[1]]
    want = sorted([(store_key(fp(1), ENV), fp(1), "t2", 1.20, earlier),
                   (store_key(fp(5), ENV), fp(5), "t7", 1.30, DAY)])

    def entries(tables: list[pa.Table]) -> None:
        [table] = tables
        assert table.schema == ENTRIES
        rows = table.to_pylist()
        assert [(r["key"], r["fingerprint"], r["source"], r["ci_low"], r["measured_at"].date()) for r in rows] == want
        assert {(r["kind"], r["provenance"]) for r in rows} == {("graph", "tuner")}
        assert all(r["expires_at"] - r["measured_at"] == datetime.timedelta(days=30) for r in rows)

    run(inputs, BestEntryPerKey(), lambda out: {"entries": (out, entries)})


def test_deliver_of_no_accepted_result_is_one_empty_table():
    inputs = [read(TUNING_RESULTS, [_result("t1", 1, 1.5, accepted=False)])[1]]
    run(inputs, BestEntryPerKey(), lambda out: {
        "entries": (out | beam.Map(lambda table: (table.num_rows, table.schema == ENTRIES)), equal_to([(0, True)]))})


@pytest.mark.parametrize("stage", [Rank(RankSettings(date=DAY), STORE_ENTRY_COLUMNS.empty_table()),
                                   AccountSavings([])])
def test_a_stage_refuses_a_table_it_does_not_read(stage):
    with pytest.raises(ValueError, match="tuning_results"):
        run([read(TUNING_RESULTS, [_result("t1", 1, 1.5)])], stage, lambda out: {})
