"""The evaluation core: compile with overrides, inputs, numerics, sandbox, statistics."""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from execution.compile import CompileError, backend_extra_options, check_options, compile_options, compiler_defaults
from execution.evaluate import EvaluationResult, evaluate, evaluate_independently, in_fresh_workers, median_of
from execution.flags import FLAGS, FlagError, is_default, parse_assignment, to_xla
from execution.inputs import make_inputs, parameter_specs
from execution.measure import TIME_SCALE_VARIABLE, MeasureSettings, measure_pair, median_interval, time_scale
from execution.numerics import OutputCheck, all_ok, compare_outputs
from execution.worker import Worker, WorkerFailure
from hlo.module import from_lowered, from_text
from pipelines.cli import main
from tests.support import worker_tasks
from tuner.space import graph_space
from validator import rules
from vocabulary.failures import Fault
from vocabulary.flags import Channel
from vocabulary.interval import Interval
from workloads import zoo

QUICK = MeasureSettings(max_seconds=4, max_pairs=120)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


@pytest.mark.subprocess
def test_aa_interval_contains_one(worker) -> None:
    module = from_lowered(zoo.get("mlp-s").lower())
    result = evaluate(module, {}, settings=QUICK, worker=worker)
    assert result.error is None and result.numerics_ok
    assert not result.identical_program and result.pairs >= QUICK.min_pairs
    # Two compiles of one program can differ by a hair in speed (code placement): the interval
    # reaches 1 within the noise band that every gain must clear (seen: [0.956, 0.998]).
    assert result.speedup.low <= 1.0 + QUICK.noise_band
    assert result.speedup.high >= 1.0 - QUICK.noise_band
    assert not result.significant


@pytest.mark.subprocess
def test_known_bad_config_is_measured_slower(worker) -> None:
    module = from_lowered(zoo.get("unet-s").lower())
    result = evaluate(module, {"xla_backend_optimization_level": 0}, settings=QUICK, worker=worker)
    assert result.error is None and result.numerics_ok
    assert result.speedup.high < 1.0


@pytest.mark.slow
@pytest.mark.subprocess
def test_independent_workers_give_their_median_and_each_figure() -> None:
    module = from_lowered(zoo.get("unet-s").lower())
    quick = MeasureSettings(max_seconds=2, max_pairs=60)
    result = evaluate_independently(module, {"xla_backend_optimization_level": 0}, 3,
                                    settings=quick)
    assert result.error is None and result.numerics_ok
    assert len(result.speedups) == 3
    assert result.speedup.estimate == statistics.median(result.speedups)
    assert result.speedup.high < 1.0 and result.pairs >= 3 * quick.min_pairs
    # A program equal to the default's is the answer of the first worker: nothing more runs.
    same = evaluate_independently(from_lowered(zoo.get("gnn-s").lower()),
                                  {"xla_cpu_copy_insertion_use_region_analysis": False}, 3)
    assert same.identical_program and same.speedups == []


def _measured(speedup: float, low: float, numerics_ok: bool = True, checked: int = 1,
              failed: int = 0, outputs: tuple[OutputCheck, ...] = ()) -> EvaluationResult:
    return EvaluationResult(speedup=Interval(speedup, low, speedup * 1.02),
                            significant=low > 1.01, numerics_ok=numerics_ok,
                            identical_program=False, compile_seconds=0.1,
                            default_compile_seconds=0.1, pairs=40, default_seconds=0.01,
                            candidate_seconds=0.01 / speedup, stop_reason="time budget",
                            numerics=list(outputs), inputs_checked=checked, inputs_failed=failed)


def test_the_median_of_workers_is_significant_only_where_most_of_them_are() -> None:
    # One lucky worker (its own interval clear of the band) does not make a gain.
    lucky = median_of([_measured(1.05, 1.03), _measured(1.01, 0.99), _measured(1.00, 0.98)], 0.01)
    assert not lucky.significant and lucky.speedup.estimate == 1.01 and lucky.speedup.low == 0.99
    # One unlucky worker does not take away a gain the other two measure.
    held = median_of([_measured(1.05, 1.03), _measured(1.01, 0.99), _measured(1.06, 1.04)], 0.01)
    assert held.significant and held.speedup.estimate == 1.05
    assert held.speedups == [1.05, 1.01, 1.06]
    assert held.pairs == 120 and held.numerics_ok
    # The numerics are judged over the inputs of every worker: a failure that held up in one
    # worker (2 of its 3 sets of inputs) is outvoted where the others' inputs pass...
    off = OutputCheck(3, False, 5e-3, "max error 5.00e-03 of scale 1", 2e-3)
    outvoted = median_of([_measured(1.05, 1.03), _measured(1.06, 1.04, False, 3, 2, (off,)),
                          _measured(1.06, 1.04)], 0.01)
    assert outvoted.numerics_ok and (outvoted.inputs_checked, outvoted.inputs_failed) == (5, 2)
    assert outvoted.numerics == [off]  # the record keeps the failure, though it did not decide
    # ... not where it holds up over all of them, and a NaN the default did not produce decides
    # in any worker.
    wrong = median_of([_measured(1.05, 1.03, False, 3, 3, (off,)),
                       _measured(1.06, 1.04, False, 3, 2, (off,)), _measured(1.06, 1.04)], 0.01)
    assert wrong.numerics_ok is False and wrong.judged().describe().startswith("differ, failed on 5 of 7")
    nan = OutputCheck(0, False, float("inf"), "1 NaN/Inf values the default did not produce",
                      decisive=True)
    assert median_of([_measured(1.05, 1.03), _measured(1.06, 1.04, False, 1, 1, (nan,)),
                      _measured(1.06, 1.04)], 0.01).numerics == [nan]
    assert median_of([_measured(1.05, 1.03), _measured(1.06, 1.04, False, 1, 1, (nan,)),
                      _measured(1.06, 1.04)], 0.01).numerics_ok is False
    # A result that does not count its inputs (made before they were) counts as one set.
    assert median_of([_measured(1.05, 1.03, False, 0), _measured(1.06, 1.04, False, 0),
                      _measured(1.06, 1.04, True, 0)], 0.01).numerics_ok is False


def test_a_result_in_json_keeps_the_keys_results_were_written_with() -> None:
    data = json.loads(json.dumps(_measured(1.05, 1.03).to_json()))
    assert (data["speedup"], data["ci_low"], data["ci_high"]) == (1.05, 1.03, 1.05 * 1.02)
    assert data["failure"] is None and data["pairs"] == 40


def test_more_fresh_workers_run_only_while_the_median_is_unsettled() -> None:
    # Scripted figures, one per worker in turn (the job never starts its worker's process):
    # two slow processes of three, then three that measure the gain.
    figures = [1.03, 0.80, 0.82, 1.03, 1.02, 1.04, 1.03]
    ran: list[int] = []

    def job(worker, index: int) -> EvaluationResult:
        ran.append(index)
        return _measured(figures[index], figures[index] - 0.02)

    def firm(median: EvaluationResult) -> bool:  # the validator's: a removal nobody disputes
        return rules.settled(median, same_compiler=True, noise_band=0.01)

    # Unsettled after three (the median 0.82 would remove what one worker measured at 1.03):
    # one more at a time until the median holds the gain, at five.
    result = in_fresh_workers(job, 3, 0.01, settled=firm, most=7)
    assert ran == [0, 1, 2, 3, 4] and result.speedup.estimate == 1.02 and len(result.speedups) == 5
    ran.clear()  # never more than `most`, settled or not
    assert len(in_fresh_workers(job, 3, 0.01, settled=lambda _: False, most=4).speedups) == 4
    ran.clear()  # without a rule, exactly `workers`
    assert in_fresh_workers(job, 3, 0.01, most=7).speedup.estimate == 0.82 and ran == [0, 1, 2]


@pytest.mark.subprocess
def test_config_that_changes_nothing_is_not_run(worker) -> None:
    module = from_lowered(zoo.get("gnn-s").lower())
    result = evaluate(module, {"xla_cpu_copy_insertion_use_region_analysis": False}, worker=worker)
    assert result.identical_program and result.pairs == 0


@pytest.mark.subprocess
def test_codegen_flags_at_their_defaults_compile_the_default_program(worker) -> None:
    module = from_lowered(zoo.get("mlp-s").lower())
    defaults = compiler_defaults()
    for name in ("xla_llvm_disable_expensive_passes", "xla_backend_optimization_level",
                 "xla_cpu_prefer_vector_width"):
        assert FLAGS[name].codegen
        result = evaluate(module, {name: defaults[name]}, worker=worker)
        assert result.identical_program and result.pairs == 0, name


def test_compiler_defaults_agree_with_jaxlib_and_leave_the_graph_space() -> None:
    options = compile_options({})  # held: its debug options are a view into it
    debug = options.executable_build_options.debug_options
    defaults = compiler_defaults()
    for name in ("xla_backend_optimization_level", "xla_cpu_enable_fast_math",
                 "xla_llvm_disable_expensive_passes"):  # the fields jaxlib has accessors for
        assert defaults[name] == getattr(debug, name), name
    assert set(defaults) <= set(FLAGS)
    space = graph_space("cpu", None, defaults)
    assert all(not is_default(p.name, v, defaults) for p in space.params for v in p.values)
    assert sum(map(len, (p.values for p in space.params))) < sum(
        map(len, (p.values for p in graph_space("cpu").params)))


@pytest.mark.xla
def test_overrides_are_typed_and_backend_extra_options_are_map_entries() -> None:
    options = compile_options({"xla_cpu_use_xnnpack": False, "xla_cpu_prefer_vector_width": 512,
                               "xla_cpu_disable_loop_unrolling": True,
                               "xla_cpu_optimize_for_size": False, "xla_llvm_dot_tiling_factor": 4})
    assert ("xla_cpu_use_xnnpack", False) in list(options.env_option_overrides)
    assert ("xla_cpu_prefer_vector_width", 512) in list(options.env_option_overrides)
    assert not any(name in FLAGS and FLAGS[name].channel == Channel.BACKEND_EXTRA
                   for name, _ in options.env_option_overrides)
    # XLA tests its boolean keys for presence: a false one is left out.
    assert backend_extra_options(options) == {"xla_cpu_disable_loop_unrolling": "true",
                                              "xla_llvm_dot_tiling_factor": "4"}
    # A name the table does not declare never reaches the map; XLA checks it as an override.
    settings = to_xla({"xla_force_enable_experimental_llvm_ir_gemm": True})
    assert settings.backend_extra == {}
    with pytest.raises(CompileError, match="xla_force_enable_experimental_llvm_ir_gemm"):
        check_options({"xla_force_enable_experimental_llvm_ir_gemm": True})


@pytest.mark.xla
def test_unknown_flag_is_rejected_by_name() -> None:
    with pytest.raises(CompileError, match="xla_no_such_flag"):
        check_options({"xla_no_such_flag": "1"})
    with pytest.raises(FlagError, match="never applied"):
        parse_assignment("xla_dump_to=/tmp/x")
    with pytest.raises(FlagError, match="not a bool"):
        parse_assignment("xla_cpu_use_xnnpack=maybe")


def test_flag_values_parse_by_type() -> None:
    assert parse_assignment("xla_cpu_use_xnnpack=false") == ("xla_cpu_use_xnnpack", False)
    assert parse_assignment("xla_cpu_prefer_vector_width=512")[1] == 512
    assert parse_assignment("xla_cpu_experimental_ynn_fusion_type=individual_dot,REDUCE")[1] == (
        "INDIVIDUAL_DOT", "REDUCE")
    assert parse_assignment("xla_cpu_experimental_ynn_fusion_type=")[1] == ()
    assert to_xla({"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED",
                   "xla_cpu_experimental_ynn_fusion_type": ("REDUCE",)}).overrides == {
        "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
        "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE",
    }
    assert parse_assignment("xla_some_undeclared_flag=false")[1] is False


@pytest.mark.parametrize("name,low,high", [("recommender-s", 0, None), ("gnn-s", 0, None),
                                           ("attention_kv-s", 0, None)])
def test_index_parameters_get_valid_ranges(name: str, low: int, high) -> None:
    specs = parameter_specs(from_lowered(zoo.get(name).lower()))
    indexed = [s for s in specs if s.dtype.kind in "iu" and s.low == 0]
    assert indexed, "no integer parameter was recognised as an index"
    arrays = make_inputs(specs, seed=3)
    again = make_inputs(specs, seed=3)
    for spec, array, same in zip(specs, arrays, again):
        assert array.shape == spec.shape and array.dtype == spec.dtype
        np.testing.assert_array_equal(array, same)
        if spec in indexed:
            assert array.min() >= 0 and array.max() < spec.high


@pytest.mark.xla
def test_gather_index_bound_is_the_table_size() -> None:
    def f(table, ids):
        return jnp.take(table, ids, axis=0).sum()

    module = from_lowered(jax.jit(f).lower(jnp.ones((37, 4)), jnp.ones((100,), jnp.int32)))
    assert (parameter_specs(module)[1].low, parameter_specs(module)[1].high) == (0, 37)


def test_numerics() -> None:
    a = np.linspace(0, 1, 100, dtype=np.float32)
    assert all_ok(compare_outputs([a], [a * (1 + 1e-6)]))
    assert not all_ok(compare_outputs([a], [a * 1.1]))
    nan = a.copy()
    nan[3] = np.nan
    assert not all_ok(compare_outputs([a], [nan]))
    assert all_ok(compare_outputs([nan], [nan]))
    assert not all_ok(compare_outputs([np.arange(4)], [np.arange(4) + (np.arange(4) == 2)]))
    assert not all_ok(compare_outputs([a], [a, a]))


@pytest.mark.parametrize("pairs", [20, 41, 64, 200, 2000])  # 64: past int64 sums; 2000: past 2.0**1023
def test_median_interval_covers_the_truth_as_often_as_it_claims(pairs: int) -> None:
    rng = np.random.default_rng(pairs)
    trials = 2000
    covered = 0
    for _ in range(trials):  # heavy-tailed noise, like a shared machine's
        logs = np.log(1.1) + 0.05 * rng.standard_t(2, size=pairs)
        interval = median_interval(logs, 0.95)
        covered += interval.low <= 1.1 <= interval.high
    assert 0.94 <= covered / trials <= 0.995


def _noisy_runner(seconds: float, seed: int):
    """A Runner (execution.measure) of a program that takes `seconds` +-3% per run, no clock."""
    rng = np.random.default_rng(seed)
    return lambda repeats: repeats * seconds * float(np.exp(0.03 * rng.standard_normal()))


def test_a_comparison_runs_past_no_gain_until_its_interval_is_tight() -> None:
    # A candidate 1% slower: a measurement against the default stops once it clearly shows no
    # gain; a comparison of two candidates (stop_when_no_gain off) goes on to a tight interval.
    settings = MeasureSettings(warmup_runs=1, max_pairs=5000, target_half_width=0.004,
                               max_seconds=60.0)
    quick = measure_pair(_noisy_runner(1.0, 1), _noisy_runner(1.01, 2), settings)
    tight = measure_pair(_noisy_runner(1.0, 1), _noisy_runner(1.01, 2),
                         replace(settings, stop_when_no_gain=False))
    assert quick.stop_reason == "clearly no gain" and tight.stop_reason == "interval tight"
    assert tight.pairs > quick.pairs
    interval = tight.speedup
    assert (interval.high - interval.low) / 2 <= 0.004 * interval.estimate
    assert interval.low <= 1 / 1.01 <= interval.high


def test_a_slow_program_is_warmed_once_and_its_pairs_follow_with_no_runs_of_their_own() -> None:
    # Half a second a run: one warm-up run of each sets the repeats per sample (one), and every
    # run after it is a timed pair's.
    calls: list[int] = []

    def runner(repeats: int) -> float:
        calls.append(repeats)
        return repeats * 0.5

    measured = measure_pair(runner, runner, MeasureSettings(max_pairs=12, min_pairs=10))
    assert measured.pairs == 10 and calls == [1] * (2 + 2 * 10)  # tight and decided at 10


def test_the_time_budget_is_scaled_by_the_environment_and_a_bad_scale_is_named(monkeypatch) -> None:
    # A candidate equal to the default, never tight: only the time budget ends its measurement.
    settings = MeasureSettings(warmup_runs=1, max_pairs=10**9, target_half_width=1e-9, max_seconds=0.4,
                               stop_when_no_gain=False)
    spent = {}
    for scale in ("0.5", "2"):
        monkeypatch.setenv(TIME_SCALE_VARIABLE, scale)
        started = time.perf_counter()
        assert measure_pair(_noisy_runner(1e-4, 1), _noisy_runner(1e-4, 2), settings).stop_reason == "time budget"
        spent[scale] = time.perf_counter() - started
    assert spent["0.5"] < 0.4 < 0.8 <= spent["2"]
    for bad in ("fast", "0", "-1", "nan", "1e9"):
        monkeypatch.setenv(TIME_SCALE_VARIABLE, bad)
        with pytest.raises(ValueError, match=f"{TIME_SCALE_VARIABLE}='{re.escape(bad)}': not a number"):
            time_scale()


@pytest.mark.subprocess
def test_sandbox_survives_crash_timeout_and_oom() -> None:
    w = Worker(memory_limit=2 * 1024**3)
    try:
        with pytest.raises(WorkerFailure) as crash:
            w.call(worker_tasks.crash, timeout=60)
        assert crash.value.kind is Fault.CRASH and "SIGABRT" in crash.value.reason
        with pytest.raises(WorkerFailure) as hang:
            w.call(worker_tasks.hang, timeout=1)
        assert hang.value.kind is Fault.TIMEOUT
        with pytest.raises(WorkerFailure) as oom:
            w.call(worker_tasks.allocate, timeout=60, gib=4)
        assert oom.value.kind is Fault.OOM
        assert w.call(worker_tasks.echo, timeout=60, value=7) == 7
    finally:
        w.close()


def test_cli_fingerprint_json(tmp_path, capsys) -> None:
    path = tmp_path / "m.hlo"
    path.write_text(zoo.get("mlp-s").lower().as_text(dialect="hlo"))
    assert main(["fingerprint", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"fingerprint", "family", "env_key", "key", "n_instructions"}
    assert main(["fingerprint", str(path)]) == 0
    assert capsys.readouterr().out.strip() == payload["fingerprint"]
    assert main(["fingerprint", str(path), "--family"]) == 0
    assert capsys.readouterr().out == payload["family"] + "\n"


@pytest.mark.xla
def test_cli_evaluate_rejects_unknown_flag(tmp_path, capsys) -> None:
    path = tmp_path / "m.hlo"
    path.write_text(from_text("HloModule m\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n").to_text())
    assert main(["evaluate", str(path), "--set", "xla_no_such_flag=1"]) == 2
    assert "xla_no_such_flag" in capsys.readouterr().err


@pytest.mark.xla
@pytest.mark.subprocess
def test_cli_evaluate_sets_a_backend_extra_option(tmp_path, capsys) -> None:
    path = tmp_path / "m.hlo"
    path.write_text(zoo.get("gnn-s").lower().as_text(dialect="hlo"))
    code = main(["evaluate", str(path), "--set", "xla_cpu_optimize_for_size=true",
                 "--max-seconds", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["config"] == {"xla_cpu_optimize_for_size": True}
    # Measured, not skipped: the option changed the program (its machine code only).
    assert not result["identical_program"] and result["pairs"] > 0 and result["numerics_ok"]
    assert result["ci_low"] <= result["speedup"] <= result["ci_high"]
