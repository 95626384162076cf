"""benchmarks/gpu_check.py, the device script of the GPU checks, in its dry run: the same three
runs on this machine's CPU with the small zoo sizes and budgets of seconds, run as the device
runs them (a process per run, resuming from the state the earlier runs left)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support import ROOT
from vocabulary.tuning import Phase

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
# The dry run checks that every step runs and what it records, not what a measurement finds.
pytestmark = pytest.mark.measure_scale(0.2)


def gpu_check(*args: str, state: Path, out: Path, minutes: float = 10) -> dict:
    """One run of the script's dry run (the minutes only bound it: its searches end at their
    evaluations); the figures it returned in `out`."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--dry-run", "--minutes", str(minutes),
                           "--state", str(state), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "gpu_check.json").read_text())


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_runs_1_and_3_take_modules_through_evaluate_the_tuner_the_hook_and_the_validator_and_resume(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    figures = gpu_check("--run", "1", "--workloads", "mlp-s,nbody-s", state=state, out=out)
    # Nothing the GPU machine lacks was imported.
    assert figures["run 1"]["imports"] == [] and not any("skipped" in v for v in figures.values())
    flags = figures["environment"]["gpu_flags"]
    assert flags["xla_gpu_enable_triton_gemm"]["accepted"]
    assert flags["xla_gpu_autotune_level"]["default"] == 4
    aa = figures["aa:mlp-s"]
    assert aa["exit"] == 0 and aa["numerics_ok"] and aa["speedup"] > 0
    assert figures["aa_across:mlp-s"]["same_program"] and figures["aa_across:mlp-s"]["numerics_ok"]
    tuned = figures["tune:mlp-s"]
    # The tuner's schedule screens single moves first, within its 2 evaluations however long
    # they take: the neighbours' share of 2 is one; the other goes to the strategy (a mutation
    # of the best, or none where it proposes only programs already known).
    (search,) = [p for p in tuned["phases"] if p["phase"] == Phase.SEARCH]
    assert tuned["moves"] > 2 and tuned["screens"] and 1 <= search["evaluations"] <= 2
    assert not tuned["cut_short"]
    assert all(len(s["config"]) == 1 for s in tuned["screens"])
    assert {"status", "accepted", "speedup"} <= set(tuned["tuned"])
    assert "share_of_oracle" in figures["oracle:mlp-s"]
    delivered = figures["deliver:mlp-s"]
    assert delivered["hits"].get("applied", 0) >= 1 and delivered["hit_keys"] == [delivered["entry_key"]]
    assert delivered["hooked_run"]["speedup"] > 0 and delivered["within_claimed_interval"] in (True, False)
    decisions = [d for found in figures["validate:mlp-s"].values() for d in found]
    assert decisions and all(d["outcome"] in ("kept", "invalidated") for d in decisions)

    # A run out of time records the steps it did not start, and still returns its figures and
    # the state a fresh machine's run starts from.
    cut = gpu_check("--run", "3", "--workloads", "mlp-s,nbody-s", state=state, out=out, minutes=0)
    assert cut["tune:nbody-s"] == {"skipped": "out of the run's time"} and "oracle:nbody-s" not in cut
    assert (out / "gpu_check.md").read_text().startswith("# GPU check figures")
    restored = tmp_path / "restored"
    done = subprocess.run([sys.executable, str(SCRIPT), "--restore", str(out), "--state", str(restored)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((restored / "gpu_check.json").read_text()) == cut

    # The next run takes up what was skipped.
    figures = gpu_check("--run", "3", "--workloads", "mlp-s,nbody-s", state=state, out=out)
    assert figures["run 3"]["imports"] == [] and figures["tune:mlp-s"] == cut["tune:mlp-s"]
    assert figures["tune:nbody-s"]["screens"] and "share_of_oracle" in figures["oracle:nbody-s"]
    report = (out / "gpu_check.md").read_text()
    assert "| mlp-s |" in report and "| nbody-s |" in report
    with tarfile.open(out / "gpu_check_state.tar.gz") as archive:
        journals = [n for n in archive.getnames() if n.endswith("trials.jsonl")]
    assert {Path(n).parts[1] for n in journals} == {"mlp-s-tune", "nbody-s-tune"}

    # A run again measures nothing measured before.
    again = gpu_check("--run", "1", "--workloads", "mlp-s,nbody-s", state=state, out=out)
    assert {k: v for k, v in again.items() if not k.startswith("run ")} == {
        k: v for k, v in figures.items() if not k.startswith("run ")}


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_run_2_delivers_autotune_results_to_hooked_compiles_with_and_without_jax_persistent_cache(tmp_path):
    out = tmp_path / "out"
    # Run 2 on the smallest workload with a GEMM: each of its compiles is a process of its own.
    figures = gpu_check("--run", "2", "--workloads", "mlp-s", state=tmp_path / "state", out=out)
    assert figures["run 2"]["imports"] == [] and not any("skipped" in v for v in figures.values())
    # XLA:CPU autotunes nothing and dumps nothing (the default compile, and the kernels kind's
    # offline compile run as the kind runs it); the dry run's own results take their place.
    for check in ("kernels_default:mlp-s", "kernels_exhaustive:mlp-s"):
        assert figures[check]["files_written"] == 0 and not figures[check]["dumped"]
        assert figures[check]["compile_seconds"] > 0
    kernels = figures["kernels:mlp-s"]
    assert kernels["delivered"] >= 1 and kernels["kinds"] == ["triton"] and "synthetic" in kernels["results_source"]
    delivered = f"autotune results: {kernels['delivered']} delivered, 0 taken, 0 fusions autotuned by XLA"
    compiles = figures["kernels_compiles:mlp-s"]
    (without,), (tuned,) = compiles["without"]["runs"], compiles["delivered"]["runs"]
    assert without["outcome"] == "holdout"  # the hooked compile with the job's own options
    # The dry run counts the CPU among the platforms that autotune: the delivery is made, and
    # XLA:CPU reads none of it.
    assert tuned["outcome"] == "applied" and tuned["reason"] == delivered
    assert all(compiles[arm]["median_seconds"] > 0 for arm in ("without", "delivered"))
    assert sorted(figures["kernels_foreign:mlp-s"]) == ["another GPU", "another XLA version"]
    assert all(f["outcome"] == "applied" for f in figures["kernels_foreign:mlp-s"].values())
    # With JAX's persistent cache: the delivered compile is keyed apart from the default's and
    # hits the next time; the default's executable is still there.
    persistent = figures["persistent_cache:mlp-s"]["compiles"]
    assert [persistent[label]["persistent_cache_hits"] for label in
            ("default", "delivered", "delivered again", "default again")] == [0, 0, 1, 1]
    assert persistent["delivered"]["reason"] == (
        f"{delivered} (in place of the job's own per-fusion cache directory, for this compile)")
    assert "executable from JAX's persistent cache" in persistent["delivered again"]["reason"]
    assert figures["persistent_cache:mlp-s"]["cache_entries"] == 2
    # The measured compile (the product's channel) delivered every result to XLA:CPU, which read
    # none and compiled the default's program: nothing to time.
    measured = figures["kernels_measured:mlp-s"]
    assert measured["compile"]["delivered"] == kernels["delivered"] and measured["compile"]["taken"] in (0, None)
    assert measured["measured"]["identical_program"] and measured["measured"]["speedup"] == 1.0
    # The validator leaves entries with autotune results on a CPU unmeasured, saying why.
    decisions = [d for found in figures["kernels_validate:mlp-s"].values() for d in found]
    assert len(decisions) == 3 and all(d["outcome"] == "unmeasured" and "cannot be re-checked on cpu" in d["reason"]
                                       for d in decisions)
    report = (out / "gpu_check.md").read_text()
    assert "## Offline autotune results delivered: mlp-s" in report and "persistent compilation cache" in report
