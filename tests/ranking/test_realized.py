"""Realized speedups and savings from the fleet's own profiles (ranking.realized), the loop's
cost (ranking.cost), the validator's fleet guard and `fdo savings`: synthetic fleets of jobs
with a known true speedup and job-level noise, as tables and as real Parquet in a warehouse."""

from __future__ import annotations

import dataclasses
import datetime
import json

import numpy as np
import pyarrow as pa
import pytest

from ingest.tables import GRAPH_RUNS
from pipelines.cli import main
from ranking.cost import LoopCost, loop_cost, return_on_cost
from ranking.realized import Arm, Realized, Undecided, read_realized, realized_savings, realized_speedups
from storage.store_schema import StoreEntry
from storage.warehouse import Warehouse
from tests.support.url_home import url_of
from tests.support.validator_records import DAY, HERE, NOW, Home, entry, result
from tuner.tables import TRIALS
from validator import rules
from validator.tables import VALIDATIONS
from vocabulary.decisions import Applied, StoreChange
from vocabulary.interval import Interval

KEY, OTHER = "ab" * 16, "cd" * 16
FIRST = datetime.date(2026, 5, 25)
DAYS = 7


def fleet(seed: int, speedup: float, *, tuned_jobs: int = 60, holdout_jobs: int = 8,
          job_sigma: float = 0.1, run_sigma: float = 0.05, key: str = KEY, version: int = 1,
          expected: float = 1.2, first: datetime.date = FIRST) -> pa.Table:
    """graph_runs rows of one entry over DAYS days: each job has its own seconds per execution
    (lognormal, `job_sigma`), runs on most days with its own number of executions and run-level
    noise; a tuned job runs `speedup` times faster than it would under the defaults."""
    rng = np.random.default_rng(seed)
    rows = []
    for job in range(tuned_jobs + holdout_jobs):
        held = job >= tuned_jobs
        per_execution = 0.01 * rng.lognormal(0.0, job_sigma) / (1.0 if held else speedup)
        chips = int(rng.choice([1, 4, 8]))
        for day in range(DAYS):
            if rng.random() < 0.3:
                continue
            executions = int(rng.integers(100, 5000))
            rows.append({"dt": first + datetime.timedelta(days=day), "job_id": f"{key[:4]}-job-{job}",
                         "team": f"team-{job % 3}", "fingerprint": key, "env_key": HERE.key(),
                         "device_kind": "test-cpu", "compiler_version": "jaxlib-new", "chips": chips,
                         "executions": executions,
                         "chip_seconds": chips * executions * per_execution * rng.lognormal(0.0, run_sigma),
                         "opted_out": False, "config_key": key, "config_version": version,
                         "expected_speedup": expected, "holdout": held})
    return pa.Table.from_pylist(rows, GRAPH_RUNS.schema)


def one(runs: pa.Table, **settings) -> Realized:
    [found] = realized_speedups(runs, **settings)
    return found


def same(a: list[Realized], b: list[Realized]) -> bool:
    """The same entries and figures, but for the last bits of sums taken in another order."""
    def figures(r: Realized) -> tuple:
        return (r.speedup.estimate, r.speedup.low, r.speedup.high, r.tuned.chip_seconds,
                r.holdout.chip_seconds)
    return ([dataclasses.replace(r, speedup=None, tuned=None, holdout=None) for r in a]
            == [dataclasses.replace(r, speedup=None, tuned=None, holdout=None) for r in b]
            and all(figures(x) == pytest.approx(figures(y), rel=1e-12) for x, y in zip(a, b)))


# --- ranking.realized: the figures --------------------------------------------------------------

def test_the_speedup_is_holdout_over_tuned_seconds_per_execution_of_the_summed_jobs():
    runs = pa.Table.from_pylist([
        {"job_id": job, "team": "t", "chips": chips, "executions": executions, "chip_seconds": seconds,
         "config_key": KEY, "config_version": 4, "expected_speedup": 1.3, "holdout": held}
        for job, chips, executions, seconds, held in (
            ("a", 2, 100, 20.0, False), ("a", 2, 100, 20.0, False), ("b", 1, 100, 10.0, None),
            ("c", 4, 200, 80.0, False), ("h1", 1, 50, 6.0, True), ("h2", 2, 100, 24.0, True),
            ("h3", 1, 100, 12.0, True))] + [
        {"job_id": "u", "team": "t", "chips": 1, "executions": 1, "chip_seconds": 1.0,
         "config_key": None, "config_version": None, "expected_speedup": None, "holdout": None}])
    found = one(runs, min_jobs=3)
    # tuned: (10 + 10 + 10 + 20) seconds / 500 executions; holdout: (6 + 12 + 12) / 250.
    assert found.tuned == Arm(jobs=3, runs=4, executions=500, chip_seconds=130.0, seconds_per_execution=0.1)
    assert found.holdout == Arm(jobs=3, runs=3, executions=250, chip_seconds=42.0, seconds_per_execution=0.12)
    assert (found.key, found.config_version, found.kind, found.team, found.expected_speedup) == (
        KEY, 4, "graph", None, 1.3)
    assert found.speedup.estimate == pytest.approx(1.2) and found.decided and not found.regressed
    # Every job of each arm ran at one rate: no spread to resample.
    estimate = found.speedup.estimate
    assert found.speedup == Interval(estimate, estimate, estimate)
    json.dumps(found.to_json())


def test_an_arm_with_too_few_jobs_leaves_the_entry_undecided():
    runs = fleet(0, 1.2, tuned_jobs=5, holdout_jobs=2)
    for settings, reason in (({}, Undecided.TOO_FEW_HOLDOUT_JOBS), ({"min_jobs": 6}, Undecided.TOO_FEW_HOLDOUT_JOBS),
                             ({"min_jobs": 2}, None)):
        found = one(runs, **settings)
        assert found.undecided == reason and (found.speedup is None) == (reason is not None)
    assert one(fleet(0, 1.2, tuned_jobs=2, holdout_jobs=5)).undecided == Undecided.TOO_FEW_TUNED_JOBS
    no_holdout = one(fleet(0, 1.2, holdout_jobs=0))
    assert (no_holdout.undecided, no_holdout.speedup, no_holdout.holdout.runs) == (Undecided.NO_HOLDOUT_RUNS, None, 0)
    assert not no_holdout.decided and not no_holdout.regressed
    assert no_holdout.to_json()["realized_ci_low"] is None
    assert no_holdout.to_json()["undecided_reason"] == "no holdout runs"


def test_the_interval_resamples_jobs_not_runs_and_is_deterministic():
    runs = pa.concat_tables([fleet(1, 1.2), fleet(2, 0.95, key=OTHER, version=2)])
    found = realized_speedups(runs, seed=7)
    assert [(r.key, r.config_version) for r in found] == [(KEY, 1), (OTHER, 2)]
    # Seeded per entry: the same figures whatever the order of rows and entries.
    assert same(realized_speedups(runs.take(np.random.default_rng(0).permutation(runs.num_rows)), seed=7), found)
    assert not same(realized_speedups(runs, seed=8), found)
    # Each run split in two rows of half its executions and seconds: the same jobs, the same interval.
    half = runs.to_pylist()
    for row in half:
        row.update(chip_seconds=row["chip_seconds"] / 2, executions=row["executions"] / 2)
    split = realized_speedups(pa.Table.from_pylist(half * 2, GRAPH_RUNS.schema), seed=7)
    for whole, parts in zip(found, split):
        assert parts.tuned.runs == 2 * whole.tuned.runs and parts.tuned.jobs == whole.tuned.jobs
        assert parts.speedup.low == pytest.approx(whole.speedup.low, rel=1e-2)
        assert parts.speedup.high == pytest.approx(whole.speedup.high, rel=1e-2)


def test_resamples_in_chunks_give_the_same_interval_but_for_the_draws(monkeypatch):
    runs = fleet(11, 1.2)
    whole = one(runs)
    monkeypatch.setattr("ranking.realized._CHUNK_DRAWS", 500)  # 8 resamples a chunk
    chunked = one(runs)
    assert chunked.speedup.estimate == whole.speedup.estimate
    assert chunked.speedup.low == pytest.approx(whole.speedup.low, rel=0.02)
    assert chunked.speedup.high == pytest.approx(whole.speedup.high, rel=0.02)


def test_per_team_when_asked():
    found = realized_speedups(fleet(3, 1.2, tuned_jobs=30, holdout_jobs=12), by_team=True)
    assert [(r.team, r.tuned.jobs, r.holdout.jobs) for r in found] == [
        ("team-0", 10, 4), ("team-1", 10, 4), ("team-2", 10, 4)]


@pytest.mark.parametrize("effect, checks, most_invalidated, least_covered", [
    # A true gain is never invalidated, and covered about 99% of the time: measured 0.98 to 0.99
    # (docs/ranking.md).
    pytest.param(1.2, 200, 0.0, 0.96, id="a-true-gain"),
    # No effect at all is invalidated in at most 1.5% of checks: the one-sided 99.5% bound, 0.5%
    # in theory (docs/validator.md).
    pytest.param(1.0, 400, 0.015, 0.97, id="no-effect-at-all"),
])
def test_an_effect_is_invalidated_no_more_often_than_stated_and_covered_by_its_interval(
        effect, checks, most_invalidated, least_covered):
    invalidated = covered = 0
    for seed in range(checks):
        found = one(fleet(seed, effect), seed=seed)
        invalidated += found.regressed
        covered += found.speedup.low <= effect <= found.speedup.high
    assert invalidated / checks <= most_invalidated
    assert covered / checks >= least_covered


def test_a_true_regression_with_enough_jobs_is_caught():
    caught = sum(one(fleet(seed, 0.9, tuned_jobs=120, holdout_jobs=40), seed=seed).regressed for seed in range(50))
    assert caught >= 48


# --- ranking.realized: savings ------------------------------------------------------------------

def test_realized_savings_beside_booked_per_team_version_and_total():
    runs = pa.concat_tables([fleet(4, 1.2, expected=1.3), fleet(5, 1.1, key=OTHER, version=2, holdout_jobs=1)])
    found = realized_speedups(runs)
    decided = {r.key: r for r in found}
    assert decided[KEY].decided and not decided[OTHER].decided
    split = realized_savings(runs, found)
    tuned = runs.filter(pa.compute.invert(runs.column("holdout"))).to_pylist()
    used = {key: sum(r["chip_seconds"] for r in tuned if r["config_key"] == key) for key in (KEY, OTHER)}
    total = split.total
    assert total.tuned_chip_seconds == pytest.approx(used[KEY] + used[OTHER])
    assert total.booked == pytest.approx(used[KEY] * 0.3 + used[OTHER] * 0.2)
    assert total.booked_decided == pytest.approx(used[KEY] * 0.3)
    assert total.realized == Interval(pytest.approx(used[KEY] * (decided[KEY].speedup.estimate - 1)),
                                      pytest.approx(used[KEY] * (decided[KEY].speedup.low - 1)),
                                      pytest.approx(used[KEY] * (decided[KEY].speedup.high - 1)))
    assert (total.decided, total.undecided) == (1, 1)
    assert [s.team for s in split.by_team] == ["team-0", "team-1", "team-2"]
    assert sum(s.realized.estimate for s in split.by_team) == pytest.approx(total.realized.estimate)
    assert sum(s.booked for s in split.by_team) == pytest.approx(total.booked)
    assert [(s.config_version, s.decided, s.undecided) for s in split.by_version] == [(1, 1, 0), (2, 0, 1)]
    undecided = split.by_version[1].to_json()  # no figure where nothing is decided: not a saving of 0
    assert (undecided["realized"], undecided["realized_ci_low"], undecided["realized_ci_high"]) == (None,) * 3
    assert split.by_version[1].realized is None
    assert split.by_version[1].booked == pytest.approx(used[OTHER] * 0.2)


def test_read_realized_reads_the_window_from_real_parquet(tmp_path):
    runs = fleet(6, 1.2)
    Warehouse(tmp_path).append(GRAPH_RUNS, runs, "runs")
    Warehouse(tmp_path).append(GRAPH_RUNS, fleet(7, 0.5, first=FIRST - datetime.timedelta(days=10)), "old")
    assert same(read_realized(tmp_path, FIRST, FIRST + datetime.timedelta(days=DAYS - 1)), realized_speedups(runs))
    assert same(read_realized(url_of(tmp_path), FIRST, FIRST), realized_speedups(
        runs.filter(pa.compute.equal(runs.column("dt"), pa.scalar(FIRST, pa.date32())))))


# --- ranking.cost -------------------------------------------------------------------------------

def test_the_loop_cost_and_its_return():
    day = datetime.timedelta(days=1)
    trials = pa.table({"dt": pa.array([FIRST - day, FIRST, FIRST + day, FIRST, FIRST], pa.date32()),
                       "task_id": ["a", "a", "a", "b", "c"],
                       "elapsed_seconds": [100.0, 150.0, 400.0, 30.0, None]})
    at = datetime.datetime(2026, 5, 25, 2, tzinfo=datetime.UTC)
    validations = pa.table({"dt": pa.array([FIRST] * 4, pa.date32()), "run_id": ["r1", "r1", "r1", "r2"],
                            "validated_at": pa.array([at, at + datetime.timedelta(seconds=9),
                                                      at + datetime.timedelta(seconds=20), at],
                                                     pa.timestamp("us", tz="UTC"))})
    found = realized_speedups(fleet(8, 1.25))
    [entry_] = found
    cost = loop_cost(trials, validations, found, FIRST, FIRST + 3 * day)
    forgone = entry_.holdout.chip_seconds * (1 - 1 / entry_.speedup.estimate)
    assert cost == LoopCost(days=4, tuning=300.0 + 30.0, validation=20.0, holdout=pytest.approx(forgone))
    assert cost.total == pytest.approx(350.0 + forgone) and cost.per_day == pytest.approx(cost.total / 4)
    assert return_on_cost(1000.0, cost) == pytest.approx(1000.0 / cost.total)
    assert return_on_cost(1.0, LoopCost(days=1, tuning=0.0, validation=0.0, holdout=0.0)) is None


# --- the validator's fleet guard ----------------------------------------------------------------

def fleet_runs(home: Home, row: StoreEntry, speedup: float, seed: int = 0, **options) -> None:
    """The week before NOW of the fleet's runs of `row`'s entry (store version 1)."""
    first = (NOW - 6 * DAY).date()
    Warehouse(home.path).append(GRAPH_RUNS, fleet(seed, speedup, key=row.key, expected=row.speedup,
                                                  first=first, **options), f"runs-{row.key[:6]}")


def test_an_entry_that_regressed_in_the_fleet_is_invalidated_with_its_figures(home):
    for n in (1, 2, 3, 4):
        home.graph(n, HERE)
    regressed, fine, flagged, undecided = (entry(n, days_old=0.5) for n in (1, 2, 3, 4))
    fleet_runs(home, regressed, 0.85, tuned_jobs=80, holdout_jobs=20)
    fleet_runs(home, fine, 1.5, seed=1)
    fleet_runs(home, flagged, 1.05, seed=2, tuned_jobs=80, holdout_jobs=20)  # expected 1.5
    fleet_runs(home, undecided, 0.5, seed=3, holdout_jobs=2)
    free, queue, skipped = home.plan(regressed, fine, flagged, undecided)
    decision = free[regressed.key]
    assert (decision.outcome, decision.change) == ("invalidated", StoreChange.REMOVE)
    assert decision.reason.startswith("regressed in the fleet: 0.8")
    assert f"tuned 80 jobs, {decision.fleet_tuned_runs} runs" in decision.reason
    assert f"holdout {decision.fleet_holdout_jobs} jobs, {decision.fleet_holdout_runs} runs" in decision.reason
    assert decision.fleet_speedup.high < 1.0
    assert decision.fleet_speedup.estimate == pytest.approx(0.85, abs=0.05)
    assert decision.fleet_tuned_jobs == 80 and decision.fleet_holdout_jobs >= 19  # a job may miss the week
    assert decision.fleet_tuned_runs > 80 and decision.fleet_holdout_runs > 19
    # Measured half a day ago: the fine and the undecided entries wait; the flagged one is measured now.
    assert set(free) == {regressed.key} and skipped == 2
    [measure] = queue
    assert measure.entry.key == flagged.key and measure.flagged.startswith("flagged in the fleet")
    kept = measure.measured(result(speedup=1.4, ci_low=1.3, ci_high=1.5), HERE.compiler_version, 0.01,
                            NOW, 30 * DAY, 180 * DAY)
    assert kept.outcome == "kept" and kept.reason.startswith("flagged in the fleet, far short")
    assert kept.fleet_speedup.estimate == pytest.approx(1.05, abs=0.05)
    # The audit row carries the figures.
    row = rules.audit_row(decision, "run-1", 2, Applied.IN_EFFECT)
    audited = pa.Table.from_pylist([row], VALIDATIONS.schema)
    assert audited.column("fleet_holdout_jobs").to_pylist() == [decision.fleet_holdout_jobs]
    Warehouse(home.path).append(VALIDATIONS, audited, "run-1")
    assert Warehouse(home.path).read(VALIDATIONS).column("fleet_ci_high").to_pylist() == [
        decision.fleet_speedup.high]


def test_the_guard_counts_only_versions_that_served_the_current_config(home):
    home.graph(1, HERE)
    row = entry(1, days_old=0.5)
    fleet_runs(home, row, 0.85, tuned_jobs=80, holdout_jobs=20)  # served by version 1
    free, _, _ = home.plan(row)  # publishes version 1
    assert free[row.key].reason.startswith("regressed in the fleet")
    changed = dataclasses.replace(row, config=json.dumps({"xla_cpu_use_xnnpack": True}),
                                  measured_at=datetime.datetime.now(datetime.UTC))
    free, _, _ = home.plan(changed)  # version 2, a config first measured after version 1 was published
    assert row.key not in free


@pytest.fixture
def home(tmp_path) -> Home:
    return Home(tmp_path / "home")


# --- fdo savings ----------------------------------------------------------------------------------

def test_fdo_savings_prints_booked_realized_and_the_return_on_cost(tmp_path, capsys):
    runs = pa.concat_tables([fleet(9, 1.2), fleet(10, 1.1, key=OTHER, version=2, holdout_jobs=1)])
    Warehouse(tmp_path).append(GRAPH_RUNS, runs, "runs")
    last = FIRST + datetime.timedelta(days=DAYS - 1)
    Warehouse(tmp_path).append(TRIALS, pa.Table.from_pylist([{
        "dt": FIRST, "trial_id": "t1", "task_id": "task", "kind": "graph", "fingerprint": KEY,
        "env_key": HERE.key(), "strategy": "random", "index": 0, "config": "{}", "outcome": "measured",
        "elapsed_seconds": 600.0}], TRIALS.schema), "trials")
    window = ["--from", FIRST.isoformat(), "--to", last.isoformat()]
    assert main(["--home", str(tmp_path), "savings", *window, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"rows", "booked", "entries", "totals", "teams", "versions", "cost", "coverage"}
    # No graph of these runs was ingested: nothing tunable, and no nightly run recorded a night.
    assert printed["coverage"]["share"] is None and printed["coverage"]["nights"] == []
    assert {r["config_version"] for r in printed["rows"]} == {1, 2}
    by_key = {e["key"]: e for e in printed["entries"]}
    assert by_key[KEY]["realized_ci_low"] < by_key[KEY]["realized_speedup"] < by_key[KEY]["realized_ci_high"]
    assert by_key[KEY]["expected_speedup"] == 1.2 and by_key[KEY]["holdout_jobs"] == 8
    assert by_key[OTHER]["realized_speedup"] is None and by_key[OTHER]["undecided_reason"] == "too few holdout jobs"
    assert (printed["totals"]["decided"], printed["totals"]["undecided"]) == (1, 1)
    assert printed["cost"]["tuning_chip_seconds"] == 600.0 and printed["cost"]["validation_chip_seconds"] == 0.0
    cost = printed["cost"]
    assert cost["return_on_cost"] == pytest.approx(printed["totals"]["realized"] / cost["total_chip_seconds"])
    assert main(["--home", str(tmp_path), "savings", *window]) == 0
    text = capsys.readouterr().out
    assert "realized in the fleet" in text and "undecided: too few holdout jobs" in text
    assert "team team-0" in text and "total" in text and "return on cost:" in text
    # v2's one entry is undecided: no realized figure, printed "-" and carried as null.
    (v2,) = [line.split() for line in text.splitlines() if line.split()[:1] == ["v2"]]
    assert v2[3:5] == ["-", "-"] and v2[5:] == ["0", "1"], v2
    (v1,) = [line.split() for line in text.splitlines() if line.split()[:1] == ["v1"]]
    assert v1[3] != "-" and v1[4].startswith("[") and v1[-2:] == ["1", "0"], v1
    assert [v["realized"] is None for v in printed["versions"]] == [False, True]
    assert "verified coverage: no tunable chip-time in these days" in text
