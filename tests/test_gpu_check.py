"""benchmarks/gpu_check.py, the device script of the GPU checks, in its dry run: the same parts
on this machine's CPU with the small zoo sizes and budgets of seconds, run as the device runs
them (a process per part, resuming from the state the earlier parts left)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The dry run checks that every step runs and what it records, not what a measurement finds.
pytestmark = pytest.mark.measure_scale(0.2)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_the_dry_run_takes_a_module_through_evaluate_tune_the_hook_and_the_validator(tmp_path):
    out = tmp_path / "out"
    # The minutes only bound each part: the dry run's searches end at their evaluations. One
    # workload: the plan's others take the same code path.
    for part, minutes in ((1, 10), (2, 0.5), (3, 0.5)):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--part", str(part),
                               "--dry-run", "--workloads", "mlp-s", "--minutes", str(minutes),
                               "--state", str(tmp_path / "state"), "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "gpu_check.json").read_text())
    assert (out / "gpu_check.md").read_text().startswith("# GPU check figures")
    # Nothing the GPU machine lacks was imported, in any part.
    assert all(figures[f"part {part}"]["imports"] == [] for part in (1, 2, 3))
    flags = figures["environment"]["gpu_flags"]
    assert flags["xla_gpu_enable_triton_gemm"]["accepted"]
    assert flags["xla_gpu_autotune_level"]["default"] == 4
    assert figures["gpu_tests"]["exit"] == 0
    assert sorted(figures["aa"]) == ["mlp-s"]
    assert all(row["exit"] == 0 and row["numerics_ok"] and row["speedup"] > 0
               for row in figures["aa"].values())
    assert all(row["same_program"] and row["numerics_ok"] for row in figures["aa_across_processes"].values())
    tuned = figures["tune:mlp-s"]
    assert tuned["moves"] == 2 and len(tuned["screens"]) == 2  # its 2 evaluations, however long they take
    assert {"status", "accepted", "speedup"} <= set(tuned["oracle"]) and tuned["tuned"]["status"]
    delivered = figures["deliver"]
    assert delivered["hits"].get("applied", 0) >= 1 and delivered["hit_keys"] == [delivered["entry_key"]]
    assert delivered["hooked_run"]["speedup"] > 0
    decisions = [d for found in figures["validate"].values() for d in found]
    assert decisions and all(d["outcome"] in ("kept", "invalidated") for d in decisions)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_the_dry_run_delivers_autotune_results_through_the_store_to_hooked_compiles(tmp_path):
    out = tmp_path / "out"
    # Part 6 on the smallest workload with a GEMM: each of its steps is a process of its own.
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--part", "6", "--dry-run",
                           "--workloads", "mlp-s", "--minutes", "2", "--state", str(tmp_path / "state"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "gpu_check.json").read_text())
    assert figures["part 6"]["imports"] == []
    kernels = figures["kernels:mlp-s"]
    # XLA:CPU autotunes nothing and dumps nothing (the kernels kind's offline compile, run as
    # the kind runs it); the dry run's own results take its place.
    assert kernels["tune"]["files_written"] == 0 and not kernels["tune"]["dumped"]
    assert kernels["tune"]["compile_seconds"] > 0
    assert kernels["results"]["delivered"] >= 1 and kernels["results"]["kinds"] == ["triton"]
    (without,), (delivered,) = kernels["compiles"]["without"]["hits"], kernels["compiles"]["delivered"]["hits"]
    assert without["outcome"] == "holdout"  # the hooked compile with the job's own options
    assert delivered == {**delivered, "outcome": "applied",
                         "reason": "autotune results not delivered: cpu compiles do not autotune"}
    assert all(kernels["compiles"][arm]["median_seconds"] > 0 for arm in ("without", "delivered"))
    assert sorted(kernels["foreign"]) == ["another GPU", "another XLA version"]
    assert all(f["outcome"] == "applied" and "not delivered" in f["reason"] for f in kernels["foreign"].values())
    # The measured compile (the product's channel) delivered every result to XLA:CPU, which read
    # none and compiled the default's program: nothing to time.
    assert kernels["delivered_compile"]["delivered"] == kernels["results"]["delivered"]
    assert kernels["delivered_compile"]["taken"] in (0, None)
    measured = kernels["measured"]
    assert measured["identical_program"] and measured["speedup"] == 1.0 and measured["numerics_ok"]
    # The validator leaves entries with autotune results on a CPU unmeasured, saying why.
    decisions = [d for found in kernels["validate"].values() for d in found]
    assert len(decisions) == 3 and all(d["outcome"] == "unmeasured" and "cannot be re-checked on cpu" in d["reason"]
                                       for d in decisions)
    assert "## Offline autotune results delivered: mlp-s" in (out / "gpu_check.md").read_text()
