"""`fdo analyze flags` on the trials of a real tuning task, and on an empty warehouse."""

from __future__ import annotations

import datetime
import json
import math
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from execution.compile import compiler_defaults
from execution.measure import MeasureSettings
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_lowered
from storage.warehouse import Warehouse
from tuner.analyze import RIDGE, analyze_flags
from tuner.space import accepted_flags, config_key, graph_space
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.target import TuneTarget
from tuner.tune import TuneSettings, run_task
from workloads import zoo

# One flag each, evaluated in this order as a fixed list, so every trial sets exactly one flag
# (a search would go on past a config that compiles to the default's program: it costs no
# evaluation). Optimization level 0 and the SSE4.2 cap are known to slow code down; a split
# count of 0 is accepted but fails the compile.
WARM_START = [
    {"xla_backend_optimization_level": 0},
    {"xla_cpu_max_isa": "SSE4_2"},
    {"xla_cpu_parallel_codegen_split_count": 0},
    {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"},
    {"xla_cpu_enable_fast_math": True},
    {"xla_cpu_copy_insertion_use_region_analysis": True},
    {"xla_cpu_experimental_ynn_fusion_type": ()},
    {"xla_cpu_prefer_vector_width": 128},
]
QUICK = TuneSettings(  # short timings: the test needs real trials, not precise ones
    budget_evals=len(WARM_START),
    search=MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=40, max_seconds=1.0),
    verify=MeasureSettings(min_pairs=20, batch_pairs=20, max_pairs=60, max_seconds=3.0),
    verify_workers=1,  # the analysis reads the trials and whether a winner was accepted, not by how many
)


def fdo(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tuned_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("analyze") / "home"
    module = from_lowered(zoo.get("mlp-s").lower(), source="zoo:mlp-s")
    space = graph_space("cpu", accepted_flags("cpu"), compiler_defaults())
    run_task(TuneTarget(module, graph_fingerprint(module), "graph", space, "mlp-s",
                        configs=tuple(WARM_START)), home, QUICK)
    return home


@pytest.mark.slow
@pytest.mark.subprocess
def test_analysis_ranks_flags_by_their_measured_effect(tuned_home):
    rows = Warehouse(tuned_home).read(TRIALS).to_pylist()
    searched = [r for r in rows if r["index"] < len(WARM_START)]
    assert sorted(r["config"] for r in searched) == sorted(config_key(c) for c in WARM_START)
    # Every trial sets one flag, and a flag has one trial (a fixed list has no race).
    logs: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        (flag,) = json.loads(r["config"])
        logs[flag] += [math.log(r["speedup"])] if r["outcome"] != "failed" and r["numerics_ok"] else []
    measured = {flag: values for flag, values in logs.items() if values}
    failed = set(logs) - set(measured)
    assert "xla_cpu_parallel_codegen_split_count" in failed
    # The ridge solution of a flag set alone: its trials' summed log speedups, shrunk.
    effects = {flag: sum(values) / (len(values) + RIDGE) for flag, values in measured.items()}
    strongest = max(effects, key=lambda flag: abs(effects[flag]))

    analysis = analyze_flags(tuned_home)
    assert (analysis.trials, analysis.usable, analysis.failed, analysis.graphs) == \
        (len(rows), sum(map(len, measured.values())), len(failed), 1)
    ranked = [f for f in analysis.flags if f.importance is not None]
    assert ranked[0].flag == strongest
    assert [abs(effects[f.flag]) for f in ranked] == sorted((abs(v) for v in effects.values()), reverse=True)
    for flag in ranked:
        (value,) = flag.values
        assert value.effect == pytest.approx(effects[flag.flag])
        assert flag.importance == pytest.approx(abs(value.effect))
        assert value.low <= value.effect <= value.high and flag.low <= flag.importance <= flag.high
        trials = len(measured[flag.flag])
        assert (flag.trials, flag.failed, value.trials) == (trials, 0, trials)
    unmeasured = [f for f in analysis.flags if f.importance is None]
    assert {f.flag for f in unmeasured} == failed and all(f.failed == f.trials == 1 for f in unmeasured)
    # Winners: the accepted result's flags, if the search found one that held up.
    accepted = [json.loads(r["config"]) for r in Warehouse(tuned_home).read(TUNING_RESULTS).to_pylist()
                if r["accepted"]]
    assert analysis.winners == len(accepted)
    assert {f.flag: f.winners for f in analysis.flags if f.winners} == \
        {flag: 1 for config in accepted for flag in config}


@pytest.mark.slow
@pytest.mark.subprocess
def test_cli_prints_the_top_flags_as_text_and_json(tuned_home):
    result = fdo(tuned_home, "analyze", "flags", "--json", "--top", "2")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    expected = analyze_flags(tuned_home)
    assert [f["flag"] for f in payload["flags"]] == [f.flag for f in expected.flags[:2]]
    assert payload["trials"] == expected.trials
    text = fdo(tuned_home, "analyze", "flags")
    assert text.returncode == 0, text.stderr
    assert f"{expected.trials} trials" in text.stdout
    assert all(f.flag in text.stdout for f in expected.flags)


@pytest.mark.subprocess
def test_empty_warehouse_says_so(tmp_path):
    result = fdo(tmp_path / "empty", "analyze", "flags")
    assert result.returncode == 1
    assert "no tuning trials in the warehouse" in result.stderr and "fdo tune" in result.stderr
    assert analyze_flags(tmp_path / "empty").flags == []


def test_known_additive_effects_are_recovered_with_intervals(tmp_path):
    """Trials written with effects chosen here (plus noise): the fit must find them again."""
    truth = {("xla_cpu_enable_fast_math", "true"): 0.3, ("xla_backend_optimization_level", "3"): -0.1,
             ("xla_cpu_use_xnnpack", "false"): 0.0}
    rng = random.Random(0)
    rows = []
    for index in range(80):
        config = {flag: json.loads(value) for (flag, value) in truth if rng.random() < 0.5}
        log_speedup = sum(truth[(f, json.dumps(v))] for f, v in config.items()) + rng.gauss(0, 0.01)
        rows.append(dict(dt=datetime.date.today(), trial_id=str(index), task_id="t", kind="graph",
                         fingerprint="g", env_key="e", strategy="random", index=index,
                         config=json.dumps(config), program=None, outcome="measured",
                         speedup=math.exp(log_speedup), ci_low=None, ci_high=None, numerics_ok=True,
                         compile_seconds=None, error=None))
    Warehouse(tmp_path).append(TRIALS, pa.Table.from_pylist(rows, TRIALS.schema), "synthetic")
    analysis = analyze_flags(tmp_path)
    assert [f.flag for f in analysis.flags] == ["xla_cpu_enable_fast_math", "xla_backend_optimization_level",
                                                "xla_cpu_use_xnnpack"]
    for flag in analysis.flags:
        (value,) = flag.values
        expected = truth[(flag.flag, value.value)]
        assert value.low <= expected <= value.high and abs(value.effect - expected) < 0.02
