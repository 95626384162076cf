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


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_the_dry_run_takes_a_module_through_evaluate_tune_the_hook_and_the_validator(tmp_path):
    out = tmp_path / "out"
    # Part 1's minutes only bound it; parts 2 and 3 search for 0.3 of theirs. One workload: the
    # plan's others take the same code path.
    for part, minutes in ((1, 10), (2, 0.5), (3, 0.5)):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--part", str(part),
                               "--dry-run", "--workloads", "transformer-s", "--minutes", str(minutes),
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
    assert sorted(figures["aa"]) == ["transformer-s"]
    assert all(row["exit"] == 0 and row["numerics_ok"] and row["speedup"] > 0
               for row in figures["aa"].values())
    assert all(row["same_program"] and row["numerics_ok"] for row in figures["aa_across_processes"].values())
    tuned = figures["tune:transformer-s"]
    assert tuned["moves"] == 3 and 1 <= len(tuned["screens"]) <= 3  # as many as its seconds allow
    assert {"status", "accepted", "speedup"} <= set(tuned["oracle"]) and tuned["tuned"]["status"]
    delivered = figures["deliver"]
    assert delivered["hits"].get("applied", 0) >= 1 and delivered["hit_keys"] == [delivered["entry_key"]]
    assert delivered["hooked_run"]["speedup"] > 0
    decisions = [d for found in figures["validate"].values() for d in found]
    assert decisions and all(d["outcome"] in ("kept", "invalidated") for d in decisions)
