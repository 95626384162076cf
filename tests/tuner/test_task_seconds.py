"""What a night's checks are expected to take: a power of the program's step time, fitted to the
home's past checks, read from real warehouse tables."""

from __future__ import annotations

import datetime
import math

import pyarrow as pa
import pytest

from execution.measure import TIME_SCALE_VARIABLE
from ingest.tables import GRAPH_RUNS
from storage.home_factory import open_home
from storage.warehouse import Warehouse
from tuner.tables import TUNING_RESULTS
from tuner.task_seconds import (
    MIN_CHECKS,
    WORKER_START,
    CheckFit,
    TaskSeconds,
    check_runs,
    past_checks,
    step_seconds,
)
from tuner.transfer import TRANSFER_CHECK
from tuner.tune import VERIFY_SETTINGS
from vocabulary.tuning import Origin, Verdict

DAY = datetime.date(2026, 5, 2)
ENV = "e" * 32


def fp(n: int) -> str:
    return f"{n:032x}"


def test_the_fit_finds_the_power_of_the_step_time_and_never_makes_a_slower_program_cheaper():
    law = [(step, 40 * step ** 0.3) for step in (0.0005, 0.002, 0.01, 0.1, 0.9)]
    fit = CheckFit.of(law)
    assert fit is not None and fit.power == pytest.approx(0.3)
    assert fit.seconds(0.05) == pytest.approx(40 * 0.05 ** 0.3)
    # Checks that happened to take less on slower programs: the power is held at 0, the mean.
    falling = CheckFit.of([(0.001, 30.0), (0.01, 20.0), (0.1, 10.0)])
    assert falling is not None and falling.power == 0.0
    assert falling.seconds(5.0) == pytest.approx(math.exp(sum(map(math.log, (30, 20, 10))) / 3))
    # Too few checks, or no spread in step time: no fit.
    assert CheckFit.of(law[:MIN_CHECKS - 1]) is None
    assert CheckFit.of([(0.01, 10.0), (0.01, 20.0), (0.01, 30.0)]) is None


def test_a_check_of_a_key_without_a_step_time_or_a_fit_is_expected_to_take_the_ledgers_average():
    steps = {(fp(1), ENV): 0.9, (fp(2), ENV): 0.001}
    fitted = TaskSeconds(check=25.0, steps=steps, checks=((0.001, 12.0), (0.01, 20.0), (0.9, 130.0)))
    assert fitted.check_of((fp(1), ENV)) > 100 > 15 > fitted.check_of((fp(2), ENV))
    assert fitted.check_of((fp(3), ENV)) == 25.0  # no profile of it
    assert TaskSeconds(check=25.0, steps=steps, checks=((0.001, 12.0),)).check_of((fp(2), ENV)) == 25.0


def test_a_check_of_a_program_slower_than_any_checked_is_expected_to_take_at_least_its_timed_runs():
    steps = {(fp(1), ENV): 0.5, (fp(2), ENV): 0.002}
    # Past checks of fast programs only: a flat fit at about 15 s.
    flat = TaskSeconds(check=15.0, steps=steps, checks=((0.001, 14.0), (0.002, 16.0), (0.004, 15.0)))
    assert flat.fit is not None and flat.fit.seconds(0.5) < 20
    assert flat.check_of((fp(1), ENV)) == pytest.approx(check_runs() * 0.5)
    assert flat.check_of((fp(1), ENV), configs=1) == pytest.approx(check_runs(1) * 0.5)
    assert flat.check_of((fp(2), ENV)) == pytest.approx(flat.fit.seconds(0.002))  # its runs are a fraction of a second
    assert TaskSeconds(check=15.0, steps=steps).check_of((fp(1), ENV)) == pytest.approx(check_runs() * 0.5)
    # More configs screened, more runs: each screen and each verification worker times its pairs.
    assert check_runs(3) > check_runs(1) > 0
    # A stage verifying in one fresh worker (--verify-workers 1) expects one worker's runs.
    one = TaskSeconds(check=15.0, steps=steps, verify_workers=1)
    assert check_runs(3, 1) < check_runs(3)
    assert one.check_of((fp(1), ENV)) == pytest.approx(check_runs(3, 1) * 0.5)
    assert one.check_of((fp(1), ENV)) < flat.check_of((fp(1), ENV))


def test_a_searchs_verification_is_expected_to_take_its_workers_starts_and_pairs_up_to_their_limit(monkeypatch):
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "1")
    steps = {(fp(1), ENV): 0.001, (fp(2), ENV): 0.05, (fp(3), ENV): 2.0}
    seconds = TaskSeconds(steps=steps, verify_workers=3)
    fast, slow, slowest, unknown = (seconds.verify_of((fp(n), ENV)) for n in (1, 2, 3, 4))
    assert unknown == 3 * WORKER_START
    assert fast == pytest.approx(3 * (WORKER_START + 2 * VERIFY_SETTINGS.min_pairs * 0.001))
    assert unknown < fast < slow
    # A worker stops at its time limit however slow the program (the n-body's: 37 s in three).
    assert slowest == pytest.approx(3 * (WORKER_START + VERIFY_SETTINGS.max_seconds))
    assert TaskSeconds(steps=steps, verify_workers=1).verify_of((fp(3), ENV)) == pytest.approx(slowest / 3)


def run_row(n: int, job: str, chips: int, executions: int, chip_seconds: float, day: datetime.date = DAY) -> dict:
    return {"dt": day, "job_id": job, "team": "t", "fingerprint": fp(n), "env_key": ENV, "device_kind": "cpu",
            "compiler_version": "c", "chips": chips, "executions": executions, "chip_seconds": chip_seconds,
            "opted_out": False}


def result_row(n: int, task: str, strategy: str, origin: Origin, seconds: float | None) -> dict:
    return {"dt": DAY, "task_id": task, "kind": "graph", "fingerprint": fp(n), "env_key": ENV, "config": "{}",
            "compiler_version": "c", "accepted": False, "status": str(Verdict.NO_GAIN), "strategy": strategy,
            "evaluations": 1, "measured": 1, "origin": str(origin), "seconds": seconds}


def test_step_times_weigh_each_job_by_its_runs_and_past_checks_are_the_checks_that_ran(tmp_path):
    warehouse = Warehouse(tmp_path)
    runs = [run_row(1, "a", 8, 100, 8 * 100 * 0.5), run_row(1, "b", 1, 300, 300 * 0.1),
            run_row(2, "c", 1, 10, 20.0), run_row(3, "d", 1, 10, 99.0, DAY - datetime.timedelta(days=30))]
    warehouse.append(GRAPH_RUNS, pa.Table.from_pylist(runs, GRAPH_RUNS.schema), "runs")
    days = {DAY.isoformat()}
    steps = step_seconds(open_home(tmp_path), days)
    # Job a's 800 chip-executions at 0.5 s and job b's 300 at 0.1 s; graph 3 ran outside the days.
    assert steps == {(fp(1), ENV): pytest.approx((400 + 30) / 1100), (fp(2), ENV): 2.0}
    results = [result_row(1, "check", TRANSFER_CHECK, Origin.TRANSFER, 40.0),
               result_row(2, "shared", TRANSFER_CHECK, Origin.SHARED, 40.0),  # ran as another key's
               result_row(2, "search", "evolution", Origin.SEARCH, 300.0),
               result_row(2, "untold", TRANSFER_CHECK, Origin.SEARCH, None),  # landed before seconds
               result_row(3, "no step", TRANSFER_CHECK, Origin.TRANSFER, 50.0)]
    for row in results:
        warehouse.append(TUNING_RESULTS, pa.Table.from_pylist([row], TUNING_RESULTS.schema), row["task_id"])
    assert past_checks(open_home(tmp_path), days, steps) == ((steps[(fp(1), ENV)], 40.0),)
