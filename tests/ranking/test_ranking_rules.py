"""The ranking's rules without Beam: ranking.rank.classify (which coverage category each key
lands in, the ranks, the top K) and ranking.savings.hit_rows (what a hit saves), on cost tables
built here."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

from ranking.rank import CATEGORIES, RankSettings, classify
from ranking.savings import hit_rows
from ranking.tables import CANDIDATES, COVERAGE

DATE = datetime.date(2026, 6, 1)
ENV = "e" * 32


def fp(n: int) -> str:
    return f"{n:032x}"


def costs(*rows: tuple[int, float, bool] | tuple[int, float, bool, int]) -> pa.Table:
    """Summed costs: (fingerprint, chip_seconds, opted_out[, graph it ran in]) per row."""
    return pa.table({
        "fingerprint": pa.array([fp(r[0]) for r in rows], pa.string()),
        "graph_fingerprint": pa.array([fp(r[3] if len(r) > 3 else r[0]) for r in rows], pa.string()),
        "env_key": pa.array([ENV] * len(rows), pa.string()),
        "opted_out": pa.array([r[2] for r in rows], pa.bool_()),
        "chip_seconds": pa.array([r[1] for r in rows], pa.float64())})


def keys(*numbers: int) -> pa.Table:
    return pa.table({"fingerprint": pa.array([fp(n) for n in numbers], pa.string()),
                     "env_key": pa.array([ENV] * len(numbers), pa.string())})


def coverage_of(coverage: pa.Table) -> dict[str, tuple[int, float]]:
    return {r["category"]: (r["keys"], r["chip_seconds"]) for r in coverage.to_pylist()}


def test_every_key_lands_in_one_category_in_the_rules_order():
    # 1: tuned (and costliest); 2: no symbols; 3: long tail; 4..6: ranked; 7: opted out only.
    table = costs((1, 500.0, False), (2, 200.0, False), (3, 0.5, False), (4, 100.0, False),
                  (5, 90.0, False), (6, 80.0, False), (7, 29.5, True))
    settings = RankSettings(date=DATE, top_k=2, min_share=0.001)
    candidates, coverage = classify(table, keys(1, 3, 4, 5, 6, 7), keys(1), "graph", settings)
    assert candidates.schema == CANDIDATES.schema and coverage.schema == COVERAGE.schema
    assert [(r["fingerprint"], r["rank"]) for r in candidates.to_pylist()] == [(fp(4), 1), (fp(5), 2)]
    assert coverage_of(coverage) == {
        "candidate": (2, 190.0), "beyond_top_k": (1, 80.0), "tuned": (1, 500.0), "opted_out": (1, 29.5),
        "missing_symbols": (1, 200.0), "long_tail": (1, 0.5)}
    assert [r["category"] for r in coverage.to_pylist()] == list(CATEGORIES)
    assert sum(r["share"] for r in coverage.to_pylist()) == pytest.approx(1.0)
    assert {r["dt"] for r in candidates.to_pylist() + coverage.to_pylist()} == {DATE}


@pytest.mark.parametrize("seconds, category", [(1.0, "candidate"), (0.999, "long_tail")])
def test_the_long_tail_is_under_min_share_not_at_it(seconds, category):
    table = costs((1, seconds, False), (2, 1000.0 - seconds, False))  # 1000 chip-seconds in all
    _, coverage = classify(table, keys(1, 2), keys(), "graph", RankSettings(date=DATE, min_share=0.001))
    assert coverage_of(coverage)[category][0] == 1 + (category == "candidate")


def test_a_tuned_key_without_symbols_counts_as_tuned():
    _, coverage = classify(costs((1, 10.0, False)), keys(), keys(1), "graph", RankSettings(date=DATE))
    assert coverage_of(coverage)["tuned"] == (1, 10.0) and coverage_of(coverage)["missing_symbols"][0] == 0


def test_opted_out_runs_count_by_row_and_leave_the_keys_other_runs():
    # Key 1 ran both in a job that opted out and in one that did not.
    table = costs((1, 40.0, True), (1, 60.0, False), (2, 100.0, False))
    candidates, coverage = classify(table, keys(1, 2), keys(), "graph", RankSettings(date=DATE))
    assert coverage_of(coverage)["opted_out"] == (1, 40.0)
    ranked = {r["fingerprint"]: r for r in candidates.to_pylist()}
    assert ranked[fp(1)]["chip_seconds"] == 60.0 and ranked[fp(1)]["share"] == pytest.approx(0.3)
    assert [r["fingerprint"] for r in candidates.to_pylist()] == [fp(2), fp(1)]


def test_ties_rank_by_fingerprint_and_an_op_names_its_costliest_graph():
    # Op 9 runs in graphs 20 (30 s in two runs) and 21 (25 s); op 8 costs the same in all.
    table = costs((9, 10.0, False, 20), (9, 20.0, False, 20), (9, 25.0, False, 21), (8, 55.0, False, 22))
    candidates, _ = classify(table, keys(8, 9), keys(), "op", RankSettings(date=DATE))
    rows = candidates.to_pylist()
    assert [(r["fingerprint"], r["rank"], r["kind"]) for r in rows] == [(fp(8), 1, "op"), (fp(9), 2, "op")]
    assert rows[1]["graph_fingerprint"] == fp(20) and rows[1]["chip_seconds"] == 55.0


def test_no_chip_time_ranks_nothing_and_shares_nothing():
    candidates, coverage = classify(costs(), keys(), keys(), "graph", RankSettings(date=DATE))
    assert candidates.num_rows == 0
    assert all((r["keys"], r["chip_seconds"], r["share"]) == (0, 0.0, 0.0) for r in coverage.to_pylist())


def test_a_hit_saves_what_the_run_would_have_used_more_without_its_config():
    dt = pa.array([DATE] * 4, pa.date32())
    runs = pa.table({"dt": dt, "team": ["a", "a", "b", "b"], "env_key": [ENV] * 4,
                     "chip_seconds": [100.0, 100.0, 50.0, 70.0],
                     "config_key": ["k1", "k2", None, "k3"], "config_version": [3, 3, None, 4],
                     "expected_speedup": [1.25, None, None, 0.9]})
    rows = hit_rows(runs, "graph", ["k2"]).to_pylist()
    assert [(r["team"], r["hit_chip_seconds"], r["validator_updated"]) for r in rows] == [
        ("a", 100.0, False), ("a", 100.0, True), ("b", 70.0, False)]  # the run without a config: no hit
    saved = [r["chip_seconds_saved"] for r in rows]
    assert saved[0] == pytest.approx(25.0) and saved[1] == 0.0  # no recorded speedup: nothing claimed
    assert saved[2] == pytest.approx(-7.0)  # a slower config costs: it is not hidden
