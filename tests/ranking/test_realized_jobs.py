"""Realized speedups from real jobs (issue 33): a JAX program run under `fdo run` in both arms,
its hits and profiles ingested, gives a realized speedup whose interval overlaps what `fdo
evaluate --workers 3` measures for the same config."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

from ranking.realized import read_realized
from tests.support import ROOT
from tests.support.serving import fdo

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.subprocess]

PROGRAM = str(ROOT / "examples" / "quickstart.py")
CONFIG = {"placement:REDUCE": "xla"}  # the quickstart's step off YNNPACK's reductions: a large gain
JOBS_PER_ARM = 3
STEPS = "20"


def run(home: Path, job: str, *options: str, trace: Path | None = None) -> None:
    trace_args = ()
    if trace is not None:
        trace.mkdir(parents=True)
        (trace / "fdo-job.json").write_text(json.dumps({"job_id": job, "team": "me", "chips": 1}))
        trace_args = ("--trace", str(trace))
    result = fdo(home, "run", "--job-id", job, *options, "--", sys.executable, PROGRAM, "--steps", STEPS,
                 *trace_args)
    assert result.returncode == 0, result.stderr[-3000:]


def test_both_arms_of_a_real_job_give_a_realized_speedup_that_agrees_with_evaluate(tmp_path):
    home = tmp_path / "home"
    run(home, "first", "--spool-hlo")
    hits = json.loads(fdo(home, "hits", "--job", "first", "--json").stdout)["records"]
    [step] = [h for h in hits if h["module_name"] == "jit_step"]
    [module] = (home / "spool" / "symbols").glob(f"*/{step['fingerprint']}-*/*before_optimizations.txt")

    measured = fdo(home, "evaluate", str(module), "--set", "placement:REDUCE=xla", "--workers", "3",
                   "--max-seconds", "4", "--json")
    assert measured.returncode == 0, measured.stderr[-3000:]
    evaluated = json.loads(measured.stdout)
    (tmp_path / "entry.jsonl").write_text(json.dumps(
        {"fingerprint": step["fingerprint"], "env_key": step["env_key"], "kind": "graph",
         "config": CONFIG, "speedup": evaluated["speedup"]}) + "\n")
    assert fdo(home, "store", "import", str(tmp_path / "entry.jsonl")).returncode == 0

    traces = []
    for i in range(JOBS_PER_ARM):  # interleaved, so a slow spell of the machine hits both arms
        for arm, share in (("held", "1"), ("tuned", "0")):
            traces.append(tmp_path / "inbox" / f"{arm}-{i}")
            run(home, f"{arm}-{i}", "--holdout", share, trace=traces[-1])
    assert fdo(home, "ingest", "hits").returncode == 0
    ingested = fdo(home, "ingest", "profiles", *map(str, traces), "--json")
    assert ingested.returncode == 0, ingested.stderr[-3000:]

    outcomes = {(r["job_id"].split("-")[0], r["outcome"]) for r in json.loads(
        fdo(home, "hits", "--json").stdout)["records"] if r["key"] == step["key"] and r["job_id"] != "first"}
    assert outcomes == {("held", "holdout"), ("tuned", "applied")}
    today = datetime.datetime.now(datetime.UTC).date()
    [realized] = read_realized(home, today - datetime.timedelta(days=1), today, min_jobs=JOBS_PER_ARM)
    assert (realized.key, realized.tuned.jobs, realized.holdout.jobs) == (step["key"], JOBS_PER_ARM, JOBS_PER_ARM)
    assert realized.decided and realized.expected_speedup == evaluated["speedup"]
    # The fleet's figure and the tuning machine's agree: their intervals overlap.
    low, high = evaluated["ci_low"], evaluated["ci_high"]
    assert realized.speedup.low <= high and low <= realized.speedup.high, (realized, evaluated)
