"""A tune stage's budget shared by what each graph is worth (tuner.allot), the time that follows
it (tasks.runner), and the verified coverage a night leaves (ranking.verified_coverage): no XLA,
a warehouse written by hand. The night's plan itself: tests/tuner/test_plan.py."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pytest

from delivery.store_writer import Store
from hlo.environment import Environment, current_environment, store_key
from ingest.tables import GRAPH_RUNS, GRAPHS
from ranking.tables import CANDIDATES
from ranking.verified_coverage import verified_coverage
from storage.home_factory import open_home
from storage.store_schema import ENTRIES
from storage.warehouse import Warehouse
from tasks.records import TuneTask
from tasks.runner import time_share
from tuner.allot import (
    FLOOR_EVALUATIONS,
    PRIOR_SPEEDUP,
    PSEUDO_COUNT,
    Allotment,
    Basis,
    Worth,
    allot,
    expected_speedup,
    saved_share,
    worths,
)
from tuner.tables import TUNING_RESULTS
from tuner.target import Subject
from tuner.tune import TuneSettings
from vocabulary.tuning import Kind

DAY = datetime.date(2026, 5, 2)
HERE = Environment("cpu", "test-cpu", 1, "jaxlib-new")
GPU = Environment("gpu", "test-gpu", 1, "jaxlib-new")
NOW = datetime.datetime.now(datetime.UTC)


def fp(n: int) -> str:
    return f"{n:032x}"


def worth(n: int, chip_hours: float, speedup: float = 1.1) -> Worth:
    return Worth(fp(n), HERE.key(), chip_hours * 3600, speedup, Basis.PRIOR, 0)


def test_a_graph_worth_little_gets_the_floor_and_the_top_graph_most_of_the_stage():
    # The top graph holds most of the chip-time; the last is 0.1% of the candidates'.
    top, middle, tail = worth(1, 850.0), worth(2, 149.0), worth(3, 1.0)
    allotted = allot([top, middle, tail], per_task_evals=24)
    assert [a.stage_evals for a in allotted] == [72] * 3
    assert sum(a.share for a in allotted) == pytest.approx(1.0)
    assert allotted[2].share == pytest.approx(0.001) and allotted[2].budget_evals == FLOOR_EVALUATIONS
    assert allotted[0].budget_evals == round(0.85 * 72) > 2 * 24  # more than an equal split
    assert allotted[0].budget_evals > allotted[1].budget_evals > allotted[2].budget_evals
    # The share follows what a tuning is expected to save, not the chip-time alone.
    hopeless = allot([worth(1, 900.0, speedup=1.001), worth(2, 99.0, speedup=1.5)], 24)
    assert hopeless[1].share > hopeless[0].share
    # A per-task budget below the floor is the floor; nothing worth anything: equal shares.
    assert [a.budget_evals for a in allot([top, tail], per_task_evals=4)] == [8, 4]
    assert [a.share for a in allot([worth(1, 0.0), worth(2, 0.0)], 6)] == [0.5, 0.5]


def test_an_allotment_says_why_and_reads_back_as_written():
    allotted = allot([worth(1, 900.0), worth(2, 100.0)], per_task_evals=10)[1]
    assert allotted.reason.startswith("10.0% of the candidates' worth: 100.00 chip-hours")
    assert "no results yet" in allotted.reason and allotted.reason.endswith("-> 8 of 20 evaluations")
    assert Allotment.from_json(json.loads(json.dumps(allotted.to_json()))) == allotted


def test_the_expected_speedup_rests_on_similar_graphs_shrunk_towards_the_platform():
    assert expected_speedup({}, "m", "cpu") == (PRIOR_SPEEDUP, Basis.PRIOR, 0)
    # Saved shares: a 2x result saved half its graph's time, three results delivered nothing.
    evidence = {("cpu", "m"): [saved_share(2.0)], ("cpu", "other"): [0.0, 0.0, 0.0],
                ("gpu", "m"): [saved_share(3.0)]}
    pooled = 0.5 / 4  # the CPU's mean
    speedup, basis, count = expected_speedup(evidence, "m", "cpu")
    assert (basis, count) == (Basis.SIMILAR, 1)
    assert saved_share(speedup) == pytest.approx((0.5 + PSEUDO_COUNT * pooled) / (1 + PSEUDO_COUNT))
    assert expected_speedup(evidence, "new", "cpu") == (pytest.approx(1 / (1 - pooled)), Basis.PLATFORM, 4)
    assert expected_speedup(evidence, "m", "tpu") == (PRIOR_SPEEDUP, Basis.PRIOR, 0)
    # A graph like one that gained nothing is worth less than one nothing is known of.
    assert expected_speedup(evidence, "other", "cpu")[0] < expected_speedup(evidence, "new", "cpu")[0]
    # One graph's huge lever saves at most all of its time: it does not swamp the mean.
    assert expected_speedup({("cpu", "a"): [saved_share(100.0), 0.0, 0.0]}, "b", "cpu")[0] < 1.5


def _graph(home, n: int, name: str, env: Environment = HERE) -> None:
    Warehouse(home).append(GRAPHS, pa.Table.from_pylist([{
        "dt": DAY, "fingerprint": fp(n), "env_key": env.key(), "module_name": name, "n_instructions": 3,
        "hlo_blob": f"{fp(n)}.hlo.zst", "optimized_blob": None, "optimized_fingerprint": None,
        "platform": env.platform, "device_kind": env.device_kind, "device_count": env.device_count,
        "compiler_version": env.compiler_version, "first_seen": NOW, "last_seen": NOW, "family": None}],
        GRAPHS.schema), f"graph-{n}-{env.platform}")


def _result(home, n: int, speedup: float | None, accepted: bool, env: Environment = HERE) -> None:
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([{
        "dt": DAY, "task_id": f"task-{n}-{speedup}", "kind": "graph", "fingerprint": fp(n),
        "env_key": env.key(), "config": "{}", "speedup": speedup, "compiler_version": env.compiler_version,
        "accepted": accepted, "status": "accepted" if accepted else "no significant gain",
        "strategy": "evolution", "evaluations": 8, "measured": 8}], TUNING_RESULTS.schema),
        f"result-{n}-{speedup}")


def _candidates(home, chip_hours: dict[int, float]) -> None:
    Warehouse(home).replace(CANDIDATES, pa.Table.from_pylist([
        {"dt": DAY, "kind": "graph", "fingerprint": fp(n), "env_key": HERE.key(), "graph_fingerprint": fp(n),
         "chip_seconds": hours * 3600, "share": 0.1, "rank": rank}
        for rank, (n, hours) in enumerate(chip_hours.items(), start=1)], CANDIDATES.schema),
        "candidates", [DAY.isoformat()])


def test_what_a_graph_is_worth_comes_from_the_ranking_and_the_results_of_graphs_like_it(tmp_path):
    _candidates(tmp_path, {1: 50.0, 2: 40.0, 3: 10.0})
    for n, name in ((1, "step"), (2, "step"), (3, "lonely"), (4, "step"), (5, "other")):
        _graph(tmp_path, n, name)
    _graph(tmp_path, 6, "step", GPU)
    _result(tmp_path, 4, 1.8, True)  # graph 4 is like 1 and 2: it gained 1.8x
    _result(tmp_path, 5, 1.02, False)  # graph 5 gained nothing that was delivered
    _result(tmp_path, 6, 5.0, True)  # a GPU graph of the same name: another platform
    found = worths(tmp_path, [(fp(1), HERE.key()), (fp(3), HERE.key()), (fp(9), HERE.key())])
    assert [(w.chip_seconds, w.basis, w.evidence) for w in found] == [
        (50.0 * 3600, Basis.SIMILAR, 1), (10.0 * 3600, Basis.PLATFORM, 2), (0.0, Basis.PRIOR, 0)]
    assert found[0].expected_speedup > found[1].expected_speedup > 1.0


def test_time_follows_the_shares_and_equal_tasks_split_it_as_before():
    subject = Subject(None, fp(1), "g")  # the records only carry it here

    def task(share: float | None) -> TuneTask:
        allotment = None if share is None else Allotment(worth(1, 1.0), share, 8, 24)
        return TuneTask.of(Kind.GRAPH, "g", subject, HERE.key(), TuneSettings(allotment=allotment))

    equal = [task(None)] * 3
    assert [time_share(equal, i, 1) for i in range(3)] == pytest.approx([1 / 4, 1 / 3, 1 / 2])
    weighted = [task(0.7), task(0.2), task(0.1)]
    assert time_share(weighted, 0, 0) == pytest.approx(0.7)
    assert time_share(weighted, 1, 0) == pytest.approx(2 / 3)  # of what the first left
    assert time_share(weighted, 2, 0) == pytest.approx(1.0)
    assert time_share(weighted, 2, 1) == pytest.approx(0.1 / (0.1 + 1 / 3))


def _run(home, n: int, env: Environment, hours: float, opted_out: bool = False, day: datetime.date = DAY) -> None:
    Warehouse(home).append(GRAPH_RUNS, pa.Table.from_pylist([{
        "dt": day, "job_id": f"job-{n}-{hours}-{opted_out}", "team": "t", "fingerprint": fp(n),
        "env_key": env.key(), "device_kind": env.device_kind, "compiler_version": env.compiler_version,
        "chips": 1, "executions": 10, "chip_seconds": hours * 3600, "opted_out": opted_out,
        "config_key": None, "config_version": None, "expected_speedup": None, "holdout": None}],
        GRAPH_RUNS.schema), f"runs-{n}-{hours}-{opted_out}-{day}")


def _entry(n: int, env: Environment, provenance: str, kind: str = "graph") -> dict:
    return {"key": store_key(fp(n), env.key()), "fingerprint": fp(n), "env_key": env.key(), "kind": kind,
            "speedup": 1.5, "expires_at": NOW + datetime.timedelta(days=20), "provenance": provenance,
            "config": json.dumps({"xla_cpu_use_xnnpack": False}), "ci_low": 1.3, "ci_high": 1.7,
            "compiler_version": env.compiler_version, "measured_at": NOW, "source": f"task-{n}",
            "holdout_share": None, "relaxed_config": None, "relaxed_speedup": None, "autotune_results": None}


def test_verified_coverage_is_the_tunable_chip_time_whose_graph_runs_a_config_the_loop_measured(tmp_path):
    for n in (1, 2, 3, 4):
        _graph(tmp_path, n, f"m{n}")
    _graph(tmp_path, 5, "gpu", GPU)
    _run(tmp_path, 1, HERE, 60.0)  # verified by the tuner
    _run(tmp_path, 2, HERE, 20.0)  # kept by the validator
    _run(tmp_path, 3, HERE, 10.0)  # a team's imported config: its claim
    _run(tmp_path, 4, HERE, 10.0)  # not tuned
    _run(tmp_path, 1, HERE, 500.0, opted_out=True)  # not tunable: opted out
    _run(tmp_path, 5, GPU, 900.0)  # not tunable here: another platform
    _run(tmp_path, 6, HERE, 300.0)  # not tunable: no HLO
    _run(tmp_path, 4, HERE, 1000.0, day=DAY - datetime.timedelta(days=1))  # before the window
    Store(tmp_path).publish(pa.Table.from_pylist(
        [_entry(1, HERE, "tuner"), _entry(2, HERE, "validator"), _entry(3, HERE, "import"),
         _entry(5, GPU, "tuner")], ENTRIES), None, "test entries")
    covered = verified_coverage(open_home(tmp_path), DAY, DAY, frozenset({HERE.key()}))
    assert (covered.tunable_chip_seconds, covered.covered_chip_seconds) == (100.0 * 3600, 80.0 * 3600)
    assert (covered.tunable_keys, covered.covered_keys, covered.share) == (4, 2, 0.8)
    assert covered.to_json()["share"] == 0.8 and covered.to_json()["first"] == DAY.isoformat()
    everything = verified_coverage(open_home(tmp_path), DAY, DAY, frozenset({HERE.key(), GPU.key()}))
    assert everything.share == pytest.approx((80.0 + 900.0) / (100.0 + 900.0))



@pytest.mark.slow  # the default asks jaxlib for this machine's environment
def test_verified_coverage_counts_this_machines_platform_and_device_kind_by_default(tmp_path):
    here = current_environment()
    _graph(tmp_path, 1, "m1", here)
    _graph(tmp_path, 2, "m2", HERE)
    _run(tmp_path, 1, here, 30.0)
    _run(tmp_path, 2, HERE, 70.0)
    Store(tmp_path).publish(pa.Table.from_pylist([_entry(1, here, "tuner")], ENTRIES), None, "test")
    covered = verified_coverage(open_home(tmp_path), DAY, DAY)
    assert (covered.tunable_keys, covered.share) == (1, 1.0)
