"""Numerics-relaxing flags are opt-in: the flag table marks the values that relax IEEE
semantics, a search still measures them, but what a task delivers by default relaxes nothing;
where the best config found relaxes numerics, the result carries it as the opt-in beside the
strict one, with its verified speedup, and delivery puts it into the store entry."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pyarrow as pa
import pytest

from delivery.deliver import deliver
from delivery.store_writer import Store
from execution.evaluate import EvaluationResult
from execution.flags import FLAGS, relaxes_numerics
from execution.measure import MeasureSettings
from hlo.environment import current_environment
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_lowered
from pipelines.cli.tune import _print_tune_result
from storage.home_factory import open_home
from storage.warehouse import TableSchema, Warehouse
from tests.support.table_evaluator import COMPARE, SCREEN, TableEvaluator, listed, table
from tuner.persist import finished_result, journal_trial, land_result, save_result
from tuner.result import RelaxedOption, TuneResult
from tuner.search import TaskClock, run_search
from tuner.space import SearchSpace, config_key
from tuner.tables import TUNING_RESULTS
from tuner.target import TuneTarget
from tuner.trial import Trial
from tuner.tune import RELAXED_OUT_OF_MINUTES, TuneSettings, _relaxed_option, _task_id, run_task
from tuner.winner import best_trial
from vocabulary.interval import Interval
from vocabulary.tuning import Phase, StopReason, TrialOutcome, Verdict

FAST_MATH = "xla_cpu_enable_fast_math"
HONOR = [f"xla_cpu_fast_math_honor_{what}" for what in ("nans", "infs", "division", "functions")]


# --- the flag table ---------------------------------------------------------------------------

def test_the_table_marks_each_value_that_relaxes_ieee_semantics():
    relaxing = {name: spec.relaxing for name, spec in FLAGS.items() if spec.relaxes_numerics}
    assert relaxing == {FAST_MATH: (True,), "xla_cpu_enable_fast_min_max": (True,),
                        "xla_gpu_enable_fast_min_max": (True,), **{name: (False,) for name in HONOR}}
    # No flag of a relaxing kind is left unmarked, whatever the table comes to hold: fast math
    # and its honor flags, fast min/max, reassociation, flushing denormals to zero.
    kinds = ("fast_math", "fast_min_max", "reassociat", "ftz")
    assert all(FLAGS[name].relaxes_numerics for name in FLAGS if any(k in name for k in kinds))
    # Both platforms' relaxing flags are marked, and each relaxing value is one the flag takes.
    assert {FLAGS[name].platform for name in relaxing} == {"cpu", "gpu"}
    assert all(FLAGS[name].type == "bool" for name in relaxing)


def test_a_config_relaxes_numerics_by_its_values():
    assert relaxes_numerics({}) == []
    assert relaxes_numerics({FAST_MATH: True}) == [FAST_MATH]
    assert relaxes_numerics({FAST_MATH: False, "xla_cpu_enable_fast_min_max": False}) == []
    assert relaxes_numerics({name: True for name in HONOR}) == []  # honoring is the default
    assert relaxes_numerics({"xla_cpu_fast_math_honor_nans": False, FAST_MATH: True,
                             "placement:REDUCE": "xla", "xla_cpu_prefer_vector_width": 128}) == [
        FAST_MATH, "xla_cpu_fast_math_honor_nans"]
    assert relaxes_numerics({"xla_gpu_enable_fast_min_max": True,
                             "xla_gpu_enable_triton_gemm": False}) == ["xla_gpu_enable_fast_min_max"]


# --- the search: a table of screens, no XLA ----------------------------------------------------

def _run(evaluator: TableEvaluator, configs: list[dict], listed_only: bool = False):
    journal: list[Trial] = []
    outcome = run_search(evaluator, listed(configs), [], len(configs), SCREEN, COMPARE,
                         lambda: True, journal.append, listed=listed_only,
                         clock=TaskClock([], now=evaluator.now))
    return outcome.trials, outcome.winners, journal


def test_a_search_whose_best_relaxes_numerics_chooses_the_best_strict_config_too():
    fast, dot, both = {FAST_MATH: True}, {"placement:DOT": "xla"}, {FAST_MATH: True, "placement:DOT": "xla"}
    width = {"xla_cpu_prefer_vector_width": 128}
    evaluator = TableEvaluator(table((fast, "F", 1.30, 1.30), (dot, "D", 1.10, 1.10),
                                     (both, "FD", 1.40, 1.40), (width, "W", 1.09, 1.09)))
    trials, winners, journal = _run(evaluator, [fast, dot, both, width])
    assert winners.relaxed is not None and winners.relaxed.config == both
    assert winners.strict is not None and winners.strict.config == dot
    assert relaxes_numerics(winners.relaxed.config) and not relaxes_numerics(winners.strict.config)
    # The strict race compared strict configs only: the width lever against the DOT move.
    strict_race = [t for t in journal if t.phase == Phase.RACE and not relaxes_numerics(t.config)]
    assert all(not relaxes_numerics(t.baseline) for t in strict_race)
    assert ("W/D", COMPARE) in evaluator.measured


def test_a_search_whose_best_is_strict_offers_no_opt_in():
    fast, dot = {FAST_MATH: True}, {"placement:DOT": "xla"}
    evaluator = TableEvaluator(table((fast, "F", 1.05, 1.05), (dot, "D", 1.30, 1.30)))
    _, winners, _ = _run(evaluator, [fast, dot])
    assert winners.strict.config == dot and winners.relaxed is None


def test_a_fixed_list_whose_best_relaxes_numerics_keeps_the_best_strict_screen():
    fast, dot = {FAST_MATH: True}, {"placement:DOT": "xla"}
    evaluator = TableEvaluator(table((fast, "F", 1.30, None), (dot, "D", 1.10, None)))
    _, winners, _ = _run(evaluator, [fast, dot], listed_only=True)
    assert (winners.strict.config, winners.relaxed.config) == (dot, fast)
    # Where only relaxing configs gain, nothing strict wins: the opt-in alone.
    evaluator = TableEvaluator(table((fast, "F", 1.30, None), (dot, "D", 0.95, None)))
    _, winners, _ = _run(evaluator, [fast, dot], listed_only=True)
    assert winners.strict is None and winners.relaxed.config == fast


# --- the verification's verdict -----------------------------------------------------------------

def _check(speedup: float, significant: bool = True, numerics_ok: bool = True) -> EvaluationResult:
    return EvaluationResult(speedup=Interval(speedup, speedup - 0.02, speedup + 0.02),
                            significant=significant, numerics_ok=numerics_ok,
                            identical_program=False, compile_seconds=0.1,
                            default_compile_seconds=0.1)


def test_the_opt_in_is_offered_only_where_it_holds_up_and_gains_more():
    relaxed = Trial(3, {FAST_MATH: True}, TrialOutcome.MEASURED, "F", speedup=Interval(1.3, 1.28, 1.32),
                    numerics_ok=True)
    check = _check(1.30)
    option = _relaxed_option(relaxed, check, _check(1.10))
    assert option == RelaxedOption({FAST_MATH: True}, check.speedup)
    assert _relaxed_option(relaxed, _check(1.30), None) == option  # nothing strict to deliver
    assert _relaxed_option(relaxed, _check(1.30), _check(1.10, significant=False)) == option
    assert _relaxed_option(relaxed, _check(1.08), _check(1.10)) is None  # gains nothing more
    assert _relaxed_option(relaxed, _check(1.30, numerics_ok=False), _check(1.10)) is None
    assert _relaxed_option(relaxed, _check(1.005, significant=False), None) is None
    assert _relaxed_option(None, None, _check(1.10)) is None


def _result_with_opt_in() -> TuneResult:
    return TuneResult("relaxed-task", "f" * 32, "e" * 32, Verdict.ACCEPTED,
                      {"placement:DOT": "xla"}, Interval(1.10, 1.08, 1.12), True, 5, 5, "evolution",
                      "jaxlib-test", relaxed=RelaxedOption({FAST_MATH: True, "placement:DOT": "xla"},
                                                           Interval(1.40, 1.37, 1.43)))


def test_the_opt_in_is_saved_landed_and_told(tmp_path, capsys):
    result = _result_with_opt_in()
    home = open_home(tmp_path)
    save_result(home, result)
    assert finished_result(home, result.task_id) == result
    land_result(home, result, on=datetime.date(2026, 11, 27))
    [row] = Warehouse(home).read(TUNING_RESULTS).to_pylist()
    assert json.loads(row["relaxed_config"]) == {FAST_MATH: True, "placement:DOT": "xla"}
    assert (row["relaxed_speedup"], row["relaxed_ci_low"], row["relaxed_ci_high"]) == (1.40, 1.37, 1.43)
    assert json.loads(row["config"]) == {"placement:DOT": "xla"}
    payload = json.loads(json.dumps(result.to_json()))  # what `fdo tune --json` prints
    assert (payload["speedup"], payload["ci_low"], payload["ci_high"]) == (1.10, 1.08, 1.12)
    assert payload["relaxed"] == {"config": {FAST_MATH: True, "placement:DOT": "xla"},
                                  "speedup": 1.40, "ci_low": 1.37, "ci_high": 1.43}
    _print_tune_result("m.hlo", result)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("m.hlo: accepted 1.100x") and lines[0].endswith("config placement:DOT=xla")
    assert lines[1] == (f"  opt-in, relaxes numerics ({FAST_MATH}): 1.400x [1.370, 1.430]; config "
                        f"placement:DOT=xla {FAST_MATH}=true (for jobs run with FDO_RELAXED_NUMERICS=1)")


# --- delivery -----------------------------------------------------------------------------------

@pytest.mark.subprocess
def test_deliver_puts_the_opt_in_into_the_entry_and_reads_results_landed_before_it(tmp_path):
    home = tmp_path / "home"
    land_result(home, _result_with_opt_in())
    # A result landed before tuning_results had the opt-in's columns (version 2).
    before = TableSchema(TUNING_RESULTS.name, 2, pa.schema(
        [f for f in TUNING_RESULTS.schema if not f.name.startswith("relaxed_")]))
    Warehouse(home).append(before, pa.Table.from_pylist([{
        "dt": datetime.date.today(), "task_id": "older", "kind": "graph", "fingerprint": "1" * 32,
        "env_key": "e" * 32, "config": '{"xla_cpu_use_xnnpack": false}', "speedup": 1.2,
        "ci_low": 1.1, "ci_high": 1.3, "numerics_ok": True, "compiler_version": "jaxlib-test",
        "accepted": True, "status": "accepted", "strategy": "evolution", "evaluations": 9,
        "measured": 9}], before.schema), "older")
    assert deliver(home) == 1
    entries = {e["source"]: e for e in Store(home).entries().to_pylist()}
    assert set(entries) == {"relaxed-task", "older"}
    tuned = entries["relaxed-task"]
    assert json.loads(tuned["config"]) == {"placement:DOT": "xla"} and tuned["speedup"] == 1.10
    assert json.loads(tuned["relaxed_config"]) == {FAST_MATH: True, "placement:DOT": "xla"}
    assert tuned["relaxed_speedup"] == 1.40
    assert (entries["older"]["relaxed_config"], entries["older"]["relaxed_speedup"]) == (None, None)


# --- a real tuning run --------------------------------------------------------------------------

def _activations(x):
    """Transcendentals and a softmax: where fast math's approximations can gain."""
    return jax.nn.softmax(x, axis=-1) * jnp.tanh(x) + jnp.log1p(jnp.exp(x))


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.subprocess
def test_a_tuning_run_over_fast_math_delivers_a_strict_config_and_offers_the_relaxed_one(tmp_path: Path):
    module = from_lowered(jax.jit(_activations).lower(jax.ShapeDtypeStruct((256, 1024), jnp.float32)))
    relaxed = {FAST_MATH: True, **{name: False for name in HONOR}}
    configs = ({FAST_MATH: True}, relaxed, {"placement:REDUCE": "xla"},
               {"xla_cpu_prefer_vector_width": 128})
    short = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=60, max_seconds=1.0)
    settings = TuneSettings(budget_evals=len(configs), search=short, compare=short,
                            verify=MeasureSettings(min_pairs=20, max_seconds=3.0), verify_workers=1)
    target = TuneTarget(module, graph_fingerprint(module), "graph", SearchSpace(()), "activations",
                        configs=configs)
    result = run_task(target, tmp_path / "home", settings)
    # The tuner still measures the relaxing configs; what it delivers relaxes nothing.
    screened = [t for t in result.trials if t.phase == Phase.SEARCH]
    assert [t.config for t in screened] == list(configs)
    assert all(t.outcome != "failed" for t in screened), [t.error for t in screened]
    assert relaxes_numerics(result.config) == []
    leader = best_trial(screened)
    strict = best_trial([t for t in screened if not relaxes_numerics(t.config)])
    verify = result.phases[-1]
    assert verify.phase == Phase.VERIFY
    if leader is None or not relaxes_numerics(leader.config):
        # Which lever wins differs between machines: here no relaxing one did.
        assert result.relaxed is None and verify.configs == int(strict is not None)
        return
    # The best screen relaxed numerics: it was verified too, after the strict winner.
    assert verify.configs == 1 + int(strict is not None)
    row = Warehouse(tmp_path / "home").read(TUNING_RESULTS).to_pylist()[0]
    if result.relaxed is None:  # it did not hold up in its verification, or gained no more
        assert row["relaxed_config"] is None
        return
    assert result.relaxed.config == leader.config and relaxes_numerics(result.relaxed.config)
    assert result.relaxed.speedup.low > 1.0
    if result.accepted:
        assert result.relaxed.speedup.estimate > result.speedup.estimate
    assert row["relaxed_config"] == config_key(result.relaxed.config)
    assert row["relaxed_speedup"] == result.relaxed.speedup.estimate


RELAXED, STRICT = {FAST_MATH: True}, {"xla_cpu_prefer_vector_width": 128}


def _resumed_out_of_minutes(tmp_path: Path, journaled: list[tuple[dict, float, float]]) -> TuneResult:
    """The result of a task resumed from a journal of screens (config, speedup, seconds) that
    took all of its 30-s budget, on a real module."""
    module = from_lowered(jax.jit(_activations).lower(jax.ShapeDtypeStruct((256, 1024), jnp.float32)))
    short = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=60, max_seconds=1.0)
    settings = TuneSettings(budget_evals=10, budget_minutes=0.5, search=short, compare=short,
                            verify=MeasureSettings(min_pairs=20, max_seconds=2.0), verify_workers=1)
    target = TuneTarget(module, graph_fingerprint(module), "graph", SearchSpace(()), "activations",
                        configs=tuple(config for config, _, _ in journaled))
    environment = current_environment()
    home = open_home(tmp_path / "home")
    task_id = _task_id(target, settings, environment.key(), environment.compiler_version)
    for index, (config, speedup, seconds) in enumerate(journaled):
        journal_trial(home, task_id, Trial(index, config, TrialOutcome.MEASURED, f"program-{index}",
                                           Interval(speedup, speedup * 0.98, speedup * 1.02),
                                           numerics_ok=True, elapsed_seconds=seconds))
    result = run_task(target, home, settings)
    assert result.task_id == task_id and result.search_stop == StopReason.TIME
    assert [t.phase for t in result.trials] == [Phase.SEARCH, Phase.SEARCH]  # no race, no pruning
    return result


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.subprocess
def test_a_task_out_of_its_minutes_verifies_its_strict_winner_alone(tmp_path: Path):
    """A task resumed with the relaxing config its best, then a strict one, starts nothing
    more, verifies the strict winner alone and offers no opt-in: its minutes were not renewed
    by the rerun."""
    result = _resumed_out_of_minutes(tmp_path, [(RELAXED, 1.5, 30.0), (STRICT, 1.2, 60.0)])
    verify = result.phases[-1]
    assert verify.phase == Phase.VERIFY and verify.configs == 1
    assert result.relaxed is None and result.config in ({}, STRICT)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.subprocess
def test_a_task_out_of_its_minutes_whose_only_winner_relaxes_says_it_was_not_verified(tmp_path: Path):
    """Where only the relaxing config beat the default, nothing is verified, and the reason
    says why: the minutes, not the search, which found something."""
    result = _resumed_out_of_minutes(tmp_path, [(RELAXED, 1.5, 30.0), (STRICT, 0.8, 60.0)])
    assert result.phases[-1].configs == 0 and result.relaxed is None and result.config == {}
    assert result.status == Verdict.NO_GAIN and result.reason == RELAXED_OUT_OF_MINUTES
