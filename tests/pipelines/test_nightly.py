"""The nightly loop and its scheduler, as real processes: a run killed mid-stage finishes on the
next try without duplicating anything; a night with ops tunes them after its graphs; the daemon
runs the loop on its cron, stops cleanly on SIGTERM and picks its schedule up again after a
restart, even after kill -9."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.nightly import STAGES, NightlySettings, StageStatus, ledger_rows, run_nightly, task_seconds
from pipelines.tables import RUNS
from ranking.tables import CANDIDATES
from storage.home_factory import open_home
from storage.warehouse import Warehouse
from tests.support.processes import wait_for
from tests.support.serving import fdo
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.task_seconds import TaskSeconds
from workloads.simulator.run import simulate

# These tests assert what the stages leave behind, not what a measurement finds.
pytestmark = pytest.mark.measure_scale(0.2)

DATE = datetime.date(2026, 5, 2)
FAST = ["--top", "1", "--top-ops", "0", "--tune-evals", "4", "--tune-minutes", "4", "--validate-minutes", "1",
        "--verify-workers", "1",
        "--direct_running_mode=in_memory"]


@pytest.fixture(scope="module")
def fleet_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("nightly")
    simulate(home, days=2, jobs=600, seed=3, start=DATE - datetime.timedelta(days=1), workloads=["mlp-s"])
    return home


def test_a_ledger_written_before_statuses_were_an_enum_still_reads(tmp_path):
    # Rows as the ledger has always held them: the statuses as plain strings, a failed attempt
    # then a done one for the first stage.
    started = datetime.datetime(2026, 5, 3, 2, tzinfo=datetime.UTC)
    rows = [{"dt": DATE, "stage": stage, "attempt": attempt, "status": status,
             "started_at": started, "seconds": 1.0, "counts": "{}", "error": None}
            for stage, attempt, status in [(STAGES[0], 1, "failed"), *((s, 2 if s == STAGES[0] else 1, "done")
                                                                       for s in STAGES)]]
    Warehouse(tmp_path).append(RUNS, pa.Table.from_pylist(rows, RUNS.schema), "before")
    report = run_nightly(tmp_path, NightlySettings(DATE))
    assert report.ok and [s.status for s in report.stages] == [StageStatus.SKIPPED] * len(STAGES)
    assert {s["status"] for s in json.loads(json.dumps(report.to_json()))["stages"]} == {"skipped"}
    assert ledger_rows(tmp_path, DATE).num_rows == len(rows)  # a skipped stage writes no row


def test_a_nights_plan_expects_the_seconds_a_check_and_a_search_took_on_the_week_before(tmp_path):
    tonight = DATE + datetime.timedelta(days=4)
    assert task_seconds(open_home(tmp_path), tonight, 3) == TaskSeconds()  # no night yet: the defaults
    started = datetime.datetime(2026, 5, 3, 2, tzinfo=datetime.UTC)
    nights = [(-10, "done", {"checks": 10, "checks_seconds": 9000.0}),  # beyond the week before
              (1, "done", {"checks": 4, "checks_seconds": 100.0, "searches": 2, "searches_seconds": 300.0}),
              (2, "done", {"checks": 6, "checks_seconds": 200.0, "searches": 0}),
              (3, "failed", {"checks": 1, "checks_seconds": 900.0}),  # a failed stage's counts: none
              (4, "done", {"checks": 1, "checks_seconds": 900.0})]  # tonight's own, a rerun's
    rows = [{"dt": DATE + datetime.timedelta(days=night), "stage": "tune", "attempt": 1, "status": status,
             "started_at": started, "seconds": 1.0, "counts": json.dumps(counts), "error": None}
            for night, status, counts in nights]
    Warehouse(tmp_path).append(RUNS, pa.Table.from_pylist(rows, RUNS.schema), "nights")
    assert task_seconds(open_home(tmp_path), tonight, 1) == TaskSeconds(check=30.0, search=150.0, verify_workers=1)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_a_nightly_run_killed_mid_stage_finishes_without_duplicates(fleet_home):
    home = fleet_home
    command = [sys.executable, "-m", "pipelines.cli", "--home", str(home), "nightly",
               "--date", DATE.isoformat(), *FAST]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    journals = lambda: [p for p in (home / "tuner" / "tasks").glob("*/trials.jsonl")  # noqa: E731
                        if p.read_text().count("\n") >= 1]
    try:
        wait_for(lambda: (home / "tuner" / "tasks").exists() and journals(), 300, "the tune stage")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the run and its tuner workers, mid-stage
        process.wait()
    done = {r["stage"] for r in ledger_rows(home, DATE).to_pylist() if r["status"] == "done"}
    assert done == {"ingest", "rank"}

    result = fdo(home, "nightly", "--date", DATE.isoformat(), "--json", *FAST)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [s["status"] for s in report["stages"]] == ["skipped"] * 2 + ["done"] * 4
    assert report["stages"][2]["counts"]["tuned"] == 1

    ledger = ledger_rows(home, DATE).to_pylist()
    assert sorted(r["stage"] for r in ledger if r["status"] == "done") == sorted(STAGES)
    warehouse = Warehouse(home)
    candidates = warehouse.read(CANDIDATES, filter_dt=lambda dt: dt == DATE.isoformat())
    keys = list(zip(*(candidates.column(c).to_pylist() for c in ("kind", "fingerprint", "env_key"))))
    assert keys and len(keys) == len(set(keys))
    trials = warehouse.read(TRIALS, ["trial_id", "dt"]).to_pylist()
    assert trials and len(trials) == len({t["trial_id"] for t in trials})
    landed = warehouse.read(TUNING_RESULTS, ["task_id", "origin", "budget_share", "budget_reason",
                                             "search_stop", "dt"]).to_pylist()
    tasks = [r["task_id"] for r in landed]
    assert len(tasks) == len(set(tasks))  # nothing landed twice
    # Under the night's date, not the day it ran: a decision's age counts from its night.
    assert {r["dt"] for r in landed + trials} == {DATE}
    # One task ran (the keys measured alike took its result, each once); it had the whole
    # stage's budget, said why, and why its search ended.
    (result,) = [r for r in landed if r["origin"] != "shared"]
    assert result["budget_share"] == 1.0 and result["budget_reason"].startswith("100.0% of the candidates' worth")
    assert result["search_stop"] in {"budget", "stalled", "time", "exhausted"}
    assert report["stages"][5]["counts"]["coverage"]["tunable_keys"] > 0

    again = fdo(home, "nightly", "--date", DATE.isoformat(), "--json", *FAST)
    assert again.returncode == 0
    assert {s["status"] for s in json.loads(again.stdout)["stages"]} == {"skipped"}
    assert ledger_rows(home, DATE).num_rows == len(ledger)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_a_nightly_run_on_a_url_home_runs_every_stage_there(fleet_home, tmp_path, capsys):
    """The whole loop on an `fdotest://` home, its inputs the simulated fleet's local files."""
    from pipelines.cli import main
    from tests.support.url_home import UrlFileSystem, url_of

    home = url_of(tmp_path / "home")
    UrlFileSystem.used.clear()
    code = main(["--home", home, "nightly", "--date", DATE.isoformat(), "--json", *FAST,
                 "--inbox", str(fleet_home / "fleet")])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    counts = {s["stage"]: s["counts"] for s in report["stages"]}
    assert counts["ingest"]["modules"] > 0 and counts["ingest"]["graph_runs"] > 0
    assert counts["rank"]["graph_candidates"] > 0 and counts["tune"]["tuned"] == 1
    assert counts["tune"]["kernels"] == 0  # XLA:CPU autotunes nothing: no kernels task here
    assert "compile_chip_hours_saved" in counts["savings"]
    assert ledger_rows(tmp_path / "home", DATE).num_rows == len(STAGES)  # the same layout, locally
    for place in ("/warehouse/graph_runs/", "/warehouse/candidates/", "/warehouse/trials/",
                  "/warehouse/runs/", "/tuner/tasks/", "/store/", "/validator/runs/"):
        assert any(place in path for path in UrlFileSystem.used), place


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_a_night_with_ops_tunes_them_in_the_minutes_its_graphs_left(fleet_home, tmp_path, capsys):
    from pipelines.cli import main

    home = tmp_path / "home"
    ops = [*FAST[:2], "--top-ops", "1", *FAST[4:]]
    code = main(["--home", str(home), "nightly", "--date", DATE.isoformat(), "--json", *ops,
                 "--inbox", str(fleet_home / "fleet")])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    tune = next(s for s in report["stages"] if s["stage"] == "tune")["counts"]
    assert tune["tuned"] == 1 and tune["ops"] == 1, tune
    kinds = Warehouse(home).read(TUNING_RESULTS, ["kind"]).column("kind").to_pylist()
    assert kinds.count("op") == 1 and "graph" in kinds  # the graph's result, shared with its keys measured alike


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_scheduler_runs_nightly_on_its_cron_and_survives_restarts(tmp_path):
    home = tmp_path / "home"
    fired = home / "pipelines" / "scheduler-runs.jsonl"
    command = [sys.executable, "-m", "pipelines.cli", "--home", str(home), "scheduler",
               "--cron", "*/3 * * * * *", "--nightly-args=--direct_running_mode=in_memory --top-ops 0"]

    def start() -> subprocess.Popen:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def firings() -> int:
        return fired.read_text().count("\n") if fired.exists() else 0

    daemon = start()
    wait_for(lambda: firings() >= 1, 180, "the first scheduled run")
    today = datetime.datetime.now(datetime.UTC).date()
    done = {r["stage"] for r in ledger_rows(home, today).to_pylist() if r["status"] == "done"}
    assert done == set(STAGES)
    assert json.loads(fired.read_text().splitlines()[0])["exit_code"] == 0

    second = start()  # one daemon per home
    assert second.wait(timeout=60) == 1
    assert "another fdo scheduler holds" in second.stdout.read()

    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=60) == 0
    assert "fdo scheduler: stopped" in daemon.stdout.read()

    for stop in (signal.SIGKILL, signal.SIGTERM):  # restart after a clean stop, then after kill -9
        seen = firings()
        daemon = start()
        wait_for(lambda: firings() > seen, 180, "a scheduled run after the restart")
        daemon.send_signal(stop)
        daemon.wait(timeout=60)
    runs = ledger_rows(home, today)
    # Later firings found the date finished: the ledger holds each stage once.
    assert sorted(pc.unique(runs.column("stage")).to_pylist()) == sorted(STAGES)
    assert runs.num_rows == len(STAGES)
