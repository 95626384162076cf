"""The autotuner: strategies, a real search with verification, and exactly-once on kill -9."""

from __future__ import annotations

import dataclasses
import datetime
import json
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb
import jax
import jax.numpy as jnp
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from execution.compile import compiler_defaults
from execution.cores import MIN_CORES_TO_SPLIT, CorePlan, available_cores, plan_cores
from execution.flags import FLAGS, checked_config, relaxes_numerics, trusted_config
from execution.measure import MeasureSettings
from execution.session import Span
from execution.worker import Worker
from hlo.environment import current_environment
from hlo.module import from_lowered, from_text
from pipelines.cli.tune import _print_tune_result
from storage.home_factory import open_home
from storage.warehouse import SchemaError, TableSchema, Warehouse, added_column
from tests.support import worker_tasks
from tests.support.processes import kill_9_once_journaled, signal_once_journaled
from tests.support.url_home import UrlFileSystem, url_of
from tuner.persist import finished_result, land_result, save_result, task_file
from tuner.platform_prior import NO_CHANGE, prior_for
from tuner.prior import move_prior
from tuner.result import TuneResult
from tuner.schedule import Scheduled, order_moves
from tuner.search import PhaseSpend, search, spending
from tuner.space import Param, SearchSpace, accepted_flags, config_key, graph_space
from tuner.strategies import FAILED, STRATEGIES, TrialRecord, propose
from tuner.tables import TRIALS, TUNING_RESULTS, ResultRow, results_of, trials_of
from tuner.task import tune_module
from tuner.trial import Trial
from tuner.tune import SEARCH_SETTINGS, TuneSettings
from tuner.worker_evaluator import WorkerEvaluator
from vocabulary.interval import Interval
from vocabulary.measure import MeasureMode
from vocabulary.tuning import UNTIMED, Kind, Origin, Phase, StopReason, TrialOutcome, Verdict
from workloads import zoo


def fdo(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=900)


def conv_loss(w1, w2, x):
    dims = ("NHWC", "HWIO", "NHWC")
    y = jax.nn.relu(jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dims))
    return jnp.tanh(jax.lax.conv_general_dilated(y, w2, (1, 1), "SAME", dimension_numbers=dims)).mean()


def conv_net(x, w1, w2):
    """Not a zoo program: the gradient of two convolutions, where XLA's CPU library routing
    of the backward convolutions matters."""
    return jax.grad(conv_loss, argnums=(0, 1))(w1, w2, x)


def _write_module(path: Path, fn, *shapes) -> Path:
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    path.write_text(from_lowered(jax.jit(fn).lower(*args)).to_text())
    return path


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_strategies_start_from_the_default_and_never_repeat(name):
    space = SearchSpace((Param("a", (True, False)), Param("b", (1, 2, 3)), Param("c", ("X", "Y"))))
    strategy = STRATEGIES[name](space, budget=40, seed=1,
                                prior=[TrialRecord({"b": 3}, 0.1), TrialRecord({"a": False}, FAILED)])
    history = [TrialRecord({}, 0.0)]
    while (config := propose(strategy, history)) is not None and len(history) < 60:
        assert set(config) <= {"a", "b", "c"}
        history.append(TrialRecord(config, 0.01 * len(history) if config.get("c") == "X" else -0.01))
    keys = [config_key(t.config) for t in history]
    assert len(keys) == len(set(keys))
    assert len(history) == space.size()  # the whole space, each config once, then it stops
    if name == "model":
        assert history[1].config == {"b": 3}  # warm start from the winner on a similar graph


@pytest.mark.parametrize("name", ["anneal", "evolution", "model"])
def test_mutation_of_a_single_value_flag_goes_back_to_the_default(name):
    space = SearchSpace((Param("a", (True,)), Param("b", ("X",))))
    strategy = STRATEGIES[name](space, budget=8, seed=0)
    history = [TrialRecord({}, 0.0)]
    while (config := propose(strategy, history)) is not None:
        history.append(TrialRecord(config, 0.1 * len(config)))
    assert len(history) == space.size() == 4


def test_graph_space_is_the_allowlist_with_routing_as_placement():
    space = graph_space("cpu")
    placements = [p for p in space.params if p.name.startswith("placement:")]
    assert {p.name for p in space.params} - {p.name for p in placements} <= set(FLAGS)
    assert not any("dump" in p.name or "path" in p.name for p in space.params)
    # The library lists are searched as one placement per fusion type the compiler knows.
    assert not any(FLAGS[p.name].library for p in space.params if p.name in FLAGS)
    assert {"placement:REDUCE", "placement:INDIVIDUAL_CONVOLUTION"} <= {p.name for p in placements}
    assert all(set(p.values) <= {"xla", "ynn", "xnn", "onednn"} for p in placements)


def test_core_plans_split_the_cores_or_take_turns_on_one():
    plan = plan_cores(cores=frozenset(range(8)))
    assert plan.execute.isdisjoint(plan.compile) and plan.execute | plan.compile == set(range(8))
    assert len(plan.execute) == 6 and plan.compile_workers == 2 and not plan.overlapping
    assert plan_cores(3, frozenset({4, 5})).compile_workers == 3
    single = plan_cores(cores=frozenset({3}))
    assert single.execute == single.compile == {3} and single.overlapping
    # A small machine measures on all its cores, the parallelism its jobs run with.
    small = plan_cores(cores=frozenset(range(MIN_CORES_TO_SPLIT - 1)))
    assert small.execute == small.compile == set(range(MIN_CORES_TO_SPLIT - 1)) and small.overlapping


def _overlaps(a: Span, b: Span) -> bool:
    return a.started < b.ended and b.started < a.ended


# Codegen flags that change the machine code: programs of their own, each compiled and measured.
_DISTINCT_PROGRAMS = [{"xla_cpu_prefer_vector_width": 128}, {"xla_cpu_enable_fast_math": True},
                      {"xla_cpu_optimize_for_size": True}, {"xla_backend_optimization_level": 1},
                      {"xla_cpu_prefer_vector_width": 128, "xla_cpu_enable_fast_math": True}]


def _search_timeline(module_path: Path, plan) -> tuple[list, list[Span]]:
    module = from_text(module_path.read_text())
    configs = iter(_DISTINCT_PROGRAMS)
    trials: list = []
    with WorkerEvaluator(module.proto, 0, plan) as evaluator:
        search(evaluator, lambda done, pending: next(configs, None), trials,
               len(_DISTINCT_PROGRAMS), MeasureSettings(max_seconds=0.5, min_pairs=10),
               lambda: True, lambda t: None)
    return trials, evaluator.timeline


@pytest.mark.skipif(len(available_cores()) < 2, reason="one core: nothing to split")
@pytest.mark.slow
@pytest.mark.subprocess
def test_compiles_run_in_their_pool_beside_measurements_on_other_cores(tmp_path):
    module = _write_module(tmp_path / "conv.hlo", conv_net, (4, 16, 16, 16), (3, 3, 16, 32), (3, 3, 32, 32))
    cores = sorted(available_cores())  # split as on a machine of MIN_CORES_TO_SPLIT or more
    plan = CorePlan(frozenset(cores[:-1]), frozenset(cores[-1:]), 1)
    trials, timeline = _search_timeline(module, plan)
    assert [t.outcome for t in trials] == ["measured"] * len(_DISTINCT_PROGRAMS)
    compiles = [s for s in timeline if s.kind == "compile"]
    measures = [s for s in timeline if s.kind == "measure"]
    assert len(compiles) == len(measures) == len(_DISTINCT_PROGRAMS)
    assert {s.pid for s in compiles}.isdisjoint({s.pid for s in measures})
    assert {s.cores for s in measures} == {tuple(sorted(plan.execute))}
    assert {s.cores for s in compiles} == {tuple(sorted(plan.compile))}
    # The next candidates compile while one is measured: the pool works ahead.
    assert any(_overlaps(c, m) for c in compiles for m in measures)


@pytest.mark.skipif(len(available_cores()) < 2, reason="one core: one parallelism")
@pytest.mark.subprocess
def test_a_compile_worker_compiles_for_the_execute_cores_parallelism():
    module = from_lowered(zoo.get("mlp-s").lower())  # compiles to other code on 1 and 2 cores
    both, one = frozenset(sorted(available_cores())[:2]), frozenset(sorted(available_cores())[1:2])
    probe = worker_tasks.cores_and_machine_code
    with Worker(cores=both) as on_both, Worker(cores=one) as on_one, \
            Worker(cores=one, backend_cores=both) as moved:
        (_, code_both), (_, code_one), (cores, code_moved) = (
            w.call(probe, module_proto=module.proto) for w in (on_both, on_one, moved))
    assert code_both != code_one  # XLA compiles for the parallelism its backend started with
    assert cores == sorted(one) and code_moved == code_both


@pytest.mark.slow
@pytest.mark.subprocess
def test_on_one_core_compiles_and_measurements_take_turns(tmp_path):
    module = _write_module(tmp_path / "conv.hlo", conv_net, (4, 16, 16, 16), (3, 3, 16, 32), (3, 3, 32, 32))
    core = min(available_cores())
    trials, timeline = _search_timeline(module, plan_cores(cores=frozenset({core})))
    assert [t.outcome for t in trials] == ["measured"] * len(_DISTINCT_PROGRAMS)
    assert {s.cores for s in timeline} == {(core,)}
    compiles = [s for s in timeline if s.kind == "compile"]
    measures = [s for s in timeline if s.kind == "measure"]
    assert not any(_overlaps(c, m) for c in compiles for m in measures)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_comparison_of_two_candidates_runs_in_fresh_workers(tmp_path):
    # The race and pruning compare two configs directly (`against`): here the default against
    # a config far slower (no backend optimization), and the other way round.
    module = from_text(_write_module(tmp_path / "conv.hlo", conv_net, (4, 16, 16, 16),
                                     (3, 3, 16, 32), (3, 3, 32, 32)).read_text())
    slow = {"xla_backend_optimization_level": 0}
    quick = MeasureSettings(max_seconds=1.0, min_pairs=10, stop_when_no_gain=False)
    with WorkerEvaluator(module.proto, 0, plan_cores()) as evaluator:
        slow_build, default_build = (evaluator.build(c).result() for c in (slow, {}))
        alone = evaluator.measure(0, slow, slow_build, quick)
        screened_in = {s.pid for s in evaluator.timeline if s.kind == "measure"}
        over_slow = evaluator.measure(1, {}, default_build, quick, against=(slow, slow_build))
        compared_in = [s.pid for s in evaluator.timeline if s.kind == "measure"][1:]
        # A baseline that does not load fails the comparison, and the search can go on.
        broken = dataclasses.replace(slow_build, artifact=b"not an executable")
        unloadable = evaluator.measure(2, {}, default_build, quick, against=(slow, broken))
        assert evaluator.measure(3, slow, slow_build, quick).outcome == "measured"
    assert unloadable.outcome == "failed" and unloadable.error.startswith("error: "), unloadable
    assert alone.baseline is None and alone.speedup.high < 1.0
    assert over_slow.baseline == slow and over_slow.speedup.low > 1.0 and over_slow.numerics_ok
    # The comparison ran in three fresh workers, none of them the search's execute worker.
    assert len(set(compared_in)) == 3 and not screened_in & set(compared_in)



def pooled_scan(x):
    """Not a zoo program: a 7x7 window sum, a running sum and elementwise math, all in XLA's own
    emitters (no library takes a reduce-window or a cumulative sum), so LLVM's optimizations
    are most of its speed: at optimization level 0 it runs some 30 times slower."""
    pooled = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 7, 7, 1), (1, 1, 1, 1), "SAME")
    return jnp.cumsum(jnp.tanh(pooled), axis=2) * x


# On `pooled_scan` at (20, 128, 128, 16) (some 45 ms a run on this project's 2-core machines,
# well clear of the rule's 20 ms floor, which half of it met only on some CPUs): 0.03x each
# on this project's machines, far beyond the rule's 3x; loop unrolling off alone is 0.4x there.
CATASTROPHIC = [{"xla_backend_optimization_level": 0},
                {"xla_backend_optimization_level": 0, "xla_cpu_disable_loop_unrolling": True}]
NEUTRAL = {"xla_cpu_prefer_vector_width": 128}  # its own program, as fast as the default's


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.subprocess
def test_a_screen_stops_catastrophic_configs_at_their_second_run_and_times_the_others():
    module = from_lowered(jax.jit(pooled_scan).lower(
        jax.ShapeDtypeStruct((20, 128, 128, 16), jnp.float32)))
    configs = [*CATASTROPHIC, NEUTRAL]
    with WorkerEvaluator(module.proto, 0, plan_cores()) as evaluator:
        builds = [evaluator.build(config).result() for config in configs]
        trials = [evaluator.measure(index, config, build, SEARCH_SETTINGS)
                  for index, (config, build) in enumerate(zip(configs, builds))]
    assert [t.outcome for t in trials] == ["measured"] * len(configs), trials
    *stopped, neutral = trials
    for trial in stopped:  # two runs of its own (and its numerics check), slower than 1/3
        assert trial.stop_reason == "catastrophic" and trial.candidate_runs <= 2, trial
        assert trial.speedup.high < 1 / SEARCH_SETTINGS.catastrophe_ratio
    # A config of its own program near the default's is screened as any other.
    assert builds[-1].program != evaluator.default_program
    assert neutral.stop_reason != "catastrophic" and neutral.candidate_runs > 2, neutral

def nbody_step(pos, vel, mass):
    """Not a zoo program: a few steps of an n-body simulation, small reductions everywhere
    (XLA CPU routes reductions to YNNPACK by default)."""
    def step(_, state):
        pos, vel = state
        d = pos[:, None, :] - pos[None, :, :]
        r2 = jnp.sum(d * d, axis=-1) + 0.01
        acc = jnp.sum(d * (mass[None, :] / (r2 * jnp.sqrt(r2)))[..., None], axis=1)
        vel = vel - 0.001 * acc
        return pos + 0.001 * vel, vel

    pos, vel = jax.lax.fori_loop(0, 4, step, (pos, vel))
    return pos, vel, jnp.sum(0.5 * mass * jnp.sum(vel * vel, axis=-1))


# A small known set: each fusion type that YNNPACK runs by default moved to XLA's own emitters.
# Which of them wins, and by how much, differs between CPUs (Intel, AMD); the test asserts only
# that the search finds the best of the set, whichever it is.
KNOWN_MOVES = ["placement:INDIVIDUAL_CONVOLUTION=xla", "placement:INDIVIDUAL_DOT=xla",
               "placement:REDUCE=xla"]
# How far one process's measurement may sit below another's of the same program on a shared
# machine, beyond both intervals: the load drifts between them.
PROCESS_DRIFT = 1.1


def _set_args(config: dict) -> list[str]:
    sets = []
    for name, value in config.items():
        text = ",".join(value) if isinstance(value, list) else str(value).lower()
        sets += ["--set", f"{name}={text}"]
    return sets


@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.slow
def test_tune_finds_the_best_of_a_known_set_and_verifies_it(tmp_path):
    module = _write_module(tmp_path / "nbody.hlo", nbody_step, (64, 3), (64, 3), (64,))
    home = tmp_path / "home"
    # Two fresh workers per comparison and verification (the default's three cost the suite a
    # third more worker starts; the median's logic is the same).
    # The known moves lead the flags' cold ranks; the shipped prior orders by the zoo (below).
    result = fdo(home, "tune", str(module), "--budget-evals", "6", "--verify-workers", "2",
                 "--no-shipped-prior", "--json")
    assert result.returncode == 0, result.stderr
    tuned = json.loads(result.stdout)
    assert checked_config(tuned["config"]) == tuned["config"]  # allowlisted, as the store takes it
    # What it delivers relaxes no numerics; a relaxing winner is the opt-in beside it.
    assert relaxes_numerics(checked_config(tuned["config"])) == []
    assert tuned["relaxed"] is None or relaxes_numerics(checked_config(tuned["relaxed"]["config"]))
    # What each phase spent adds up to the totals; the search kept to its 6 evaluations.
    phases = {p["phase"]: p for p in tuned["phases"]}
    assert list(phases) == ["search", "race", "prune", "verify"]
    # The verification: the winner, and the opt-in too where the best config relaxed numerics.
    assert phases["search"]["evaluations"] <= 6 and phases["verify"]["configs"] <= 2
    for total in ("evaluations", "measured"):
        assert tuned[total] == sum(p[total] for p in phases.values())
    # The schedule tried the known moves first (library placement, XLA's emitters first).
    trials = Warehouse(home).read(TRIALS).to_pylist()
    # The search's own screens of the known moves, each against the default in the same worker:
    # the best of the set (a shared machine's load drifts between two processes by more than an
    # interval is wide, so an evaluation of its own would be a worse yardstick).
    known = {next(iter(json.loads(t["config"]).items())): t for t in trials if t["index"] < 3}
    assert {tuple(m.split("=")) for m in KNOWN_MOVES} == set(known)
    best_move, best = max(known.items(), key=lambda item: item[1]["speedup"] or 0.0)
    if not (best["ci_low"] or 0.0) > 1.0:  # no lever in the set on this CPU: nothing to find
        assert not tuned["accepted"] or tuned["ci_low"] > 1.01
        return
    assert tuned["accepted"] and tuned["numerics_ok"], (tuned, known)
    assert 0 < tuned["seconds_to_best"] < sum(p["seconds"] for p in phases.values())
    # Verified in fresh workers, each figure kept: the one reported is their median.
    assert len(tuned["speedups"]) == 2
    assert tuned["speedup"] == statistics.median(tuned["speedups"])
    # As good as the best of the set (or better: a combination), within the noise and the load's
    # drift between the search's worker and the verification's (5% seen on 2 busy cores).
    assert tuned["ci_high"] * PROCESS_DRIFT >= best["ci_low"], (tuned, best_move, best)
    # An independent evaluation of the returned config, in a process of its own, agrees that it
    # is faster (`fdo evaluate --workers N`'s median: tests/execution/test_evaluate.py).
    check = json.loads(fdo(home, "evaluate", str(module), *_set_args(tuned["config"]),
                           "--max-seconds", "3", "--json").stdout)
    assert check["significant"] and check["numerics_ok"]
    results = Warehouse(home).read(TUNING_RESULTS).to_pylist()
    assert [r["status"] for r in results] == ["accepted"]
    # The next graph's search starts with what won here, and leaves what did nothing for last.
    prior = move_prior(home, "graph", "0" * 32, compiler_defaults()).scores
    ordered = order_moves(list(prior), prior)
    assert prior[ordered[0]] > 0 and ordered[0] in {tuple(m.split("=")) for m in KNOWN_MOVES}
    assert prior[("placement:INDIVIDUAL_CONVOLUTION", "xla")] == NO_CHANGE  # no convolution here


@pytest.mark.slow
@pytest.mark.subprocess
def test_tune_reports_no_gain_where_there_is_none(tmp_path):
    module = _write_module(tmp_path / "add.hlo", lambda a, b: a + b, (64,), (64,))
    home = tmp_path / "home"
    result = fdo(home, "tune", str(module), "--budget-evals", "5", "--verify-workers", "1", "--json")
    assert result.returncode == 0, result.stderr
    tuned = json.loads(result.stdout)
    assert not tuned["accepted"] and tuned["status"] == "no significant gain"
    # A fresh home's search starts from the prior the tuner ships for this platform: its best
    # move first, and none of the moves it skips (catastrophic across the zoo) among its screens.
    shipped = prior_for(current_environment().device_kind)
    if shipped is None:
        return
    prior = move_prior(home / "none", Kind.GRAPH, "f" * 32, compiler_defaults(), shipped)
    schedule = Scheduled(STRATEGIES["evolution"](graph_space("cpu", accepted_flags("cpu"), compiler_defaults()),
                                                 budget=5, seed=0), prior.scores, skip=prior.skipped)
    configs = [trusted_config(json.loads(t.config))
               for t in sorted(trials_of(Warehouse(home).read(TRIALS)), key=lambda t: t.index)]
    singles = [next(iter(c.items())) for c in configs if len(c) == 1]
    assert shipped.skipped() and singles[0] == schedule.tiers[0][0]
    assert not set(singles) & shipped.skipped() and len(singles) > 5


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.subprocess
def test_tune_on_a_url_home_journals_lands_and_resumes_there(tmp_path):
    module = from_text(_write_module(tmp_path / "add.hlo", lambda a, b: a + b, (64,), (64,)).read_text())
    local = tmp_path / "home"
    home = open_home(url_of(local))
    short = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=40, max_seconds=1.0)
    quick = TuneSettings(budget_evals=3, search=short, compare=short, verify=short,
                         verify_workers=1)
    UrlFileSystem.used.clear()
    result = tune_module(module, home, quick)
    task = local / "tuner" / "tasks" / result.task_id
    journal = (task / "trials.jsonl").read_text().splitlines()
    assert (task / "result.json").exists()
    # What each phase spent: the search within its budget, the whole adding up to the totals.
    assert [p.phase for p in result.phases] == list(Phase)
    assert 1 <= result.phases[0].evaluations <= quick.budget_evals
    assert len(journal) == sum(p.configs for p in result.phases if p.phase != Phase.VERIFY)
    assert result.evaluations == sum(p.evaluations for p in result.phases)
    assert result.measured == sum(p.measured for p in result.phases)
    # Verified: the delivered config where there is one (found `seconds_to_best` into the
    # task), and the opt-in where the best config relaxed numerics.
    strict_verified = result.seconds_to_best is not None
    assert strict_verified <= result.phases[-1].configs <= strict_verified + 1
    trials = Warehouse(local).read(TRIALS).sort_by("index")
    against_default = [i for i, line in enumerate(journal) if json.loads(line)["baseline"] is None]
    assert trials.column("index").to_pylist() == against_default
    for column in ("finished_at", "elapsed_seconds"):  # stamped in the order they finished
        stamps = trials.column(column).to_pylist()
        assert None not in stamps and stamps == sorted(stamps)
    assert Warehouse(local).read(TUNING_RESULTS).column("task_id").to_pylist() == [result.task_id]
    places = (f"/tuner/tasks/{result.task_id}/trials.jsonl", "/warehouse/trials/", "/warehouse/tuning_results/")
    for place in places:
        assert any(place in path for path in UrlFileSystem.used), place
    # Cut short before its result: resumed from the journal on the URL home, nothing redone.
    (task / "result.json").unlink()
    resumed = tune_module(module, home, quick)
    assert (task / "trials.jsonl").read_text().splitlines() == journal
    assert (resumed.task_id, resumed.status) == (result.task_id, result.status)
    # The same files as a local home: the task is found finished there, and nothing lands twice.
    assert tune_module(module, local, quick).task_id == result.task_id
    assert Warehouse(local).read(TRIALS).num_rows == len(against_default)
    assert Warehouse(local).read(TUNING_RESULTS).num_rows == 1
    assert not [p for p in local.rglob("*") if ".tmp-" in p.name]


# The interrupted search's timed evaluations: enough that a stop lands before its end.
INTERRUPTED_EVALS = 4


def interrupted_tune(tmp_path: Path) -> tuple[Path, list[str]]:
    """A home, and the `fdo tune` command of INTERRUPTED_EVALS random evaluations of a conv
    net's module that the interruption tests stop mid-search."""
    module = _write_module(tmp_path / "conv.hlo", conv_net, (8, 16, 16, 16), (3, 3, 16, 32), (3, 3, 32, 32))
    home = tmp_path / "home"
    return home, [sys.executable, "-m", "pipelines.cli", "--home", str(home), "tune", str(module),
                          "--budget-evals", str(INTERRUPTED_EVALS), "--strategy", "random", "--verify-workers", "1",
                          "--json"]


def timed(records) -> int:
    """How many of a task journal's records are timed evaluations."""
    return sum(record["outcome"] not in UNTIMED for record in records)


@pytest.mark.slow
@pytest.mark.subprocess
def test_kill_9_mid_search_then_rerun_loses_and_duplicates_nothing(tmp_path):
    home, command = interrupted_tune(tmp_path)
    journal = kill_9_once_journaled(command, home / "tuner" / "tasks", "*/trials.jsonl", lines=2)
    assert journal is not None
    before = journal.read_text().splitlines()
    assert len(before) >= 2 and timed(map(json.loads, before)) < INTERRUPTED_EVALS
    rerun = fdo(home, *command[command.index("tune"):])
    assert rerun.returncode == 0, rerun.stderr
    after = journal.read_text().splitlines()
    assert after[: len(before)] == before  # nothing redone, nothing lost
    # The budget's timed evaluations searched (and any configs whose program was known, free),
    # then the finalists' race (when several are close) and the winner's pruning (when it has
    # several changes), in that order.
    records = [json.loads(line) for line in after]
    phases = [r["phase"] for r in records]
    assert phases == sorted(phases, key=["search", "race", "prune"].index)
    searched = [r for r in records if r["phase"] == "search"]
    assert timed(searched) == INTERRUPTED_EVALS
    # The trials table holds each trial against the default once; the race's and pruning's
    # comparisons (against another config) stay in the task's files.
    against_default = [r["index"] for r in records if r["baseline"] is None]
    assert all(r["phase"] != "search" for r in records if r["baseline"] is not None)
    trials = Warehouse(home).read(TRIALS).to_pylist()
    assert sorted(t["index"] for t in trials) == against_default
    assert len({t["trial_id"] for t in trials}) == len(against_default)
    again = fdo(home, *command[command.index("tune"):])
    assert json.loads(again.stdout)["task_id"] == json.loads(rerun.stdout)["task_id"]
    assert Warehouse(home).read(TRIALS).num_rows == len(against_default)
    assert Warehouse(home).read(TUNING_RESULTS).num_rows == 1


@pytest.mark.slow
@pytest.mark.subprocess
def test_ctrl_c_stops_cleanly_and_keeps_what_was_measured(tmp_path):
    home, command = interrupted_tune(tmp_path)
    journal, code = signal_once_journaled(command, home / "tuner" / "tasks", "*/trials.jsonl",
                                          2, signal.SIGINT)
    assert code == 130 and journal is not None
    kept = journal.read_text().splitlines()
    assert len(kept) >= 2 and timed(map(json.loads, kept)) < INTERRUPTED_EVALS
    assert not (journal.parent / "result.json").exists()  # stopped, not finished
    assert all(json.loads(line)["outcome"] for line in kept)  # whole records: the kill test resumes them



def _stamped_result() -> TuneResult:
    """A finished task as today's tuner leaves it: three screens (the second, timed 20 s into
    the search, the best), a race comparison, and the verification."""
    at = datetime.datetime(2026, 11, 2, 8, 0, tzinfo=datetime.UTC)
    trials = [Trial(i, config, outcome, program,
                    speedup=Interval(speedup, speedup * 0.98, speedup * 1.02), numerics_ok=True,
                    compile_seconds=0.5, finished_at=at + datetime.timedelta(seconds=seconds),
                    elapsed_seconds=seconds)
              for i, (config, outcome, program, speedup, seconds) in enumerate([
                  ({"a": 1}, TrialOutcome.MEASURED, "A", 1.10, 8.0),
                  ({"a": 2}, TrialOutcome.MEASURED, "B", 1.30, 20.0),
                  ({"b": 1}, TrialOutcome.IDENTICAL, "default", 1.0, 21.0)])]
    trials.append(dataclasses.replace(trials[0], index=3, program="A",
                                      speedup=dataclasses.replace(trials[0].speedup, estimate=0.9),
                                      phase=Phase.RACE, baseline={"a": 2}, elapsed_seconds=31.0))
    phases = [*spending(trials, 33.0, {Phase.RACE: 2}), PhaseSpend(Phase.VERIFY, 1, 1, 1, 6, 40.0)]
    return TuneResult("new", "f" * 32, "e", Verdict.ACCEPTED, {"a": 2}, Interval(1.28, 1.2, 1.3),
                      True, sum(p.evaluations for p in phases), sum(p.measured for p in phases),
                      "evolution", "jaxlib-test", trials=trials, phases=phases,
                      speedups=[1.27, 1.28, 1.3], seconds_to_best=20.0, search_stop=StopReason.STALLED,
                      budget_share=0.25, budget_reason="25.0% of the candidates' worth")


def test_the_tables_rows_read_into_their_records_of_every_version(tmp_path):
    """A row of `trials` or `tuning_results` is a record (tuner.tables): a row of the first
    version reads its nulls as the tables' comments say (a status with its reason after a
    colon, no origin: a search, no measure mode: whole), a landed result's rows read back as
    the result, and a record's row reads back the same record."""
    first = [TableSchema(t.name, 1, pa.schema([f for f in t.schema if f.name not in dict(t.added)]))
             for t in (TRIALS, TUNING_RESULTS)]
    warehouse = Warehouse(tmp_path)
    key = {"dt": datetime.date(2026, 11, 1), "task_id": "old", "kind": "graph", "fingerprint": "f" * 32,
           "env_key": "e", "strategy": "evolution", "config": "{}"}
    warehouse.append(first[0], pa.Table.from_pylist(
        [{**key, "trial_id": "t0", "index": 0, "outcome": "failed", "error": "x"}], first[0].schema), "task-old")
    warehouse.append(first[1], pa.Table.from_pylist(
        [{**key, "compiler_version": "jaxlib-test", "accepted": False, "status": "default fails: does not compile: x",
          "evaluations": 1, "measured": 0}], first[1].schema), "task-old")
    new = _stamped_result()
    land_result(tmp_path, new, on=datetime.date(2026, 11, 2))
    by_task = {r.task_id: r for r in results_of(warehouse.read(TUNING_RESULTS))}
    old_result, new_result = by_task["old"], by_task["new"]
    assert (old_result.status, old_result.reason, old_result.origin, old_result.measure_mode,
            old_result.search_stop, old_result.interval) == (
        Verdict.DEFAULT_FAILS, "does not compile: x", Origin.SEARCH, MeasureMode.WHOLE, None, None)
    assert (new_result.status, new_result.kind, new_result.interval, new_result.search_stop,
            new_result.budget_share, json.loads(new_result.config)) == (
        Verdict.ACCEPTED, Kind.GRAPH, new.speedup, StopReason.STALLED, 0.25, {"a": 2})
    trials = sorted(trials_of(warehouse.read(TRIALS)), key=lambda t: (t.task_id != "old", t.index))
    assert (trials[0].outcome, trials[0].measure_mode, trials[0].finished_at) == (
        TrialOutcome.FAILED, MeasureMode.WHOLE, None)
    landed = [t for t in new.trials if t.baseline is None]
    assert [(t.index, t.outcome, t.interval, t.finished_at) for t in trials[1:]] == [
        (t.index, t.outcome, t.speedup, t.finished_at) for t in landed]
    for record in (old_result, new_result, *trials):
        assert type(record).from_row(record.to_row()) == record
    with pytest.raises(ValueError, match="tuning_results row t: no dt, kind, "):
        ResultRow.from_row({"task_id": "t"})


def test_trials_and_results_landed_before_the_stamps_still_read_beside_new_ones(tmp_path):
    # Partitions as schema version 1 wrote them: no stamps, no seconds_to_best.
    stamps = ("finished_at", "elapsed_seconds", "seconds_to_best")
    old_trials, old_results = (
        TableSchema(t.name, 1, pa.schema([f for f in t.schema if f.name not in stamps]))
        for t in (TRIALS, TUNING_RESULTS))
    warehouse = Warehouse(tmp_path)
    day = datetime.date(2026, 11, 1)
    key = {"dt": day, "task_id": "old", "kind": "graph", "fingerprint": "f" * 32, "env_key": "e",
           "strategy": "evolution", "config": "{}"}
    warehouse.append(old_trials, pa.Table.from_pylist(
        [{**key, "trial_id": "t0", "index": 0, "outcome": "measured", "speedup": 1.1}],
        old_trials.schema), "task-old")
    warehouse.append(old_results, pa.Table.from_pylist(
        [{**key, "compiler_version": "jaxlib-test", "accepted": False,
          "status": "no significant gain", "evaluations": 12, "measured": 9}],
        old_results.schema), "task-old")
    new = _stamped_result()
    land_result(tmp_path, new, on=datetime.date(2026, 11, 2))
    rows = warehouse.read(TRIALS).sort_by("dt").to_pylist()
    assert [(r["task_id"], r["finished_at"], r["elapsed_seconds"]) for r in rows] == [
        ("old", None, None), *(("new", t.finished_at, t.elapsed_seconds)
                               for t in new.trials if t.baseline is None)]
    results = warehouse.read(TUNING_RESULTS, ["task_id", "seconds_to_best", "search_stop",
                                              "budget_share"]).to_pylist()
    assert sorted(results, key=lambda r: r["task_id"]) == [
        {"task_id": "new", "seconds_to_best": 20.0, "search_stop": "stalled", "budget_share": 0.25},
        {"task_id": "old", "seconds_to_best": None, "search_stop": None, "budget_share": None}]
    # DuckDB reads the files as they are, old and new together, naming columns.
    minutes = duckdb.sql(f"""
        select r.task_id, r.seconds_to_best / 60, max(t.elapsed_seconds)
        from read_parquet('{tmp_path}/warehouse/tuning_results/*/*.parquet',
                          hive_partitioning = true, union_by_name = true) r
        join read_parquet('{tmp_path}/warehouse/trials/*/*.parquet',
                          hive_partitioning = true, union_by_name = true) t using (task_id)
        group by all order by r.task_id""").fetchall()
    assert minutes == [("new", 20.0 / 60, 21.0), ("old", None, None)]
    # A file of a version this code does not know yet is refused, naming it.
    newer = TableSchema(TRIALS.name, TRIALS.version + 1, TRIALS.schema)
    warehouse.append(newer, warehouse.read(TRIALS).filter(pc.field("task_id") == "new"),
                     "task-newer")
    with pytest.raises(SchemaError, match=f"schema version {TRIALS.version + 1}"):
        warehouse.read(TRIALS)
    with pytest.raises(ValueError, match="must be nullable"):
        TableSchema("t", 2, pa.schema([added_column(pa.field("x", pa.int64(), nullable=False), 2)]))


def test_fdo_tune_tells_what_each_phase_spent_and_when_the_winner_was_found(tmp_path, capsys):
    result = _stamped_result()
    home = open_home(tmp_path)
    save_result(home, result)
    assert finished_result(home, result.task_id) == result  # as `fdo tune` finds it again
    _print_tune_result("m.hlo", result)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["m.hlo: accepted 1.280x [1.200, 1.300] (workers 1.270x, 1.280x, 1.300x); "
                         "config a=2",
                         "  best config found after 0.3 minutes of 1.2 in all",
                         "  search ended: stalled (after its cold-start screen, none of its last "
                         "evaluations was a significant improvement on its best)",
                         "  budget: 25.0% of the candidates' worth"]
    table = {line.split()[0]: line.split()[1:] for line in lines[4:]}
    assert table == {"phase": ["configs", "evaluations", "measured", "compiles", "seconds"],
                     "search": ["3", "2", "2", "3", "21.0"], "race": ["1", "1", "1", "2", "12.0"],
                     "prune": ["0", "0", "0", "0", "0.0"], "verify": ["1", "1", "1", "6", "40.0"],
                     "total": ["5", "4", "4", "11", "73.0"]}
    payload = json.loads(json.dumps(result.to_json()))  # what --json prints
    assert [p["phase"] for p in payload["phases"]] == ["search", "race", "prune", "verify"]
    assert sum(p["evaluations"] for p in payload["phases"]) == payload["evaluations"] == 4
    assert payload["seconds_to_best"] == 20.0 and "trials" not in payload
    assert payload["seconds"] == 73.0  # the phases' sum
    assert (payload["search_stop"], payload["budget_share"]) == ("stalled", 0.25)


def test_a_result_written_before_speedups_were_intervals_still_reads(tmp_path):
    home = open_home(tmp_path)
    trial = {"index": 0, "config": {"a": 2}, "outcome": "measured", "program": "B", "speedup": 1.3,
             "ci_low": 1.27, "ci_high": 1.33, "numerics_ok": True, "compile_seconds": 0.5,
             "error": None}
    old = {"task_id": "old", "fingerprint": "f" * 32, "env_key": "e", "status": "accepted",
           "accepted": True, "config": {"a": 2}, "speedup": 1.28, "ci_low": 1.2, "ci_high": 1.3,
           "numerics_ok": True, "evaluations": 4, "measured": 4, "strategy": "evolution",
           "compiler_version": "jaxlib-test", "kind": "graph", "sources": [], "failure": None,
           "speedups": [1.27, 1.28, 1.3],
           "relaxed": {"config": {"b": 1}, "speedup": 1.4, "ci_low": 1.35, "ci_high": 1.45}}
    home.atomic_write(task_file(home, "old", "result.json"),
                      json.dumps({**old, "trials": [trial]}) + "\n")
    read = finished_result(home, "old")
    assert read.speedup == Interval(1.28, 1.2, 1.3)
    assert read.relaxed.speedup == Interval(1.4, 1.35, 1.45)
    assert read.trials[0].outcome is TrialOutcome.MEASURED
    assert read.trials[0].speedup == Interval(1.3, 1.27, 1.33)
    assert (read.status, read.reason, read.accepted) == (Verdict.ACCEPTED, "", True)
    # Written again, the same keys with the same values, but `failure`: the verdict says it.
    assert {k: v for k, v in read.to_json().items() if k in old} == {
        k: v for k, v in old.items() if k != "failure"}
