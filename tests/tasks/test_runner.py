"""The runner's deadline: a search gets its share of the time left, a transfer check runs whole,
and a task expected to outlast the time left is not started."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from hlo.module import from_text
from storage.home_factory import open_home
from tasks.records import TuneTask
from tasks.runner import Deadline, LocalRunner, unstartable, within
from tuner.transfer import TRANSFER_CHECK, Kinship, Transfer
from tuner.tune import TuneSettings
from vocabulary.tasks import TaskStatus
from vocabulary.tuning import Kind

MODULE = from_text("HloModule m\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(p)\n}\n")
TRANSFER = Transfer({"xla_cpu_disable_loop_unrolling": True}, "a" * 32 + "/" + "b" * 32, Kinship.FAMILY, 1.3)


def task(settings: TuneSettings) -> TuneTask:
    return TuneTask(Kind.GRAPH, "m", MODULE, "f" * 32, "e" * 32, settings)


def test_a_search_gets_its_share_of_the_time_and_a_check_screens_its_transfers_whole():
    search = within(task(TuneSettings(transfers=(TRANSFER,))), 0.02)
    assert search.settings.budget_minutes == 0.02
    # Its verification comes on top: the search ends that much sooner, so the task ends within its
    # share; but a share shorter than twice the verification still searches half of it.
    verified = within(task(TuneSettings(verify_seconds=30.0)), 2.0)
    assert verified.settings.budget_minutes == pytest.approx(1.5)
    assert within(task(TuneSettings(verify_seconds=30.0)), 0.6).settings.budget_minutes == pytest.approx(0.3)
    # A check's share among a hundred others would be a second: it would measure none of its
    # configs, and land a verdict on nothing.
    check = within(task(TuneSettings(transfers=(TRANSFER,), transfer_check=True, budget_evals=1)), 0.02)
    assert check.settings.budget_minutes is None


@pytest.mark.xla
@pytest.mark.subprocess
def test_a_task_expected_to_outlast_the_deadline_is_not_started_and_a_later_one_that_fits_still_runs(tmp_path):
    deadline = Deadline(time.time() + 120)
    check = TuneSettings(transfers=(TRANSFER,), transfer_check=True, budget_evals=1)
    long_check, short_check = task(replace(check, expected_seconds=900.0)), task(replace(check, expected_seconds=1.0))
    reason = unstartable(long_check, deadline)
    assert reason is not None and reason.startswith("expected to take 900 s")
    assert unstartable(short_check, deadline) is None
    assert unstartable(task(TuneSettings()), deadline) is None  # a search: no estimate, a share of the time
    assert unstartable(short_check, Deadline(time.time() - 1)) == "the deadline left it no time"
    outcomes = dict(LocalRunner().run([long_check, short_check], open_home(tmp_path), deadline))
    assert outcomes[0].status is TaskStatus.NOT_STARTED and outcomes[0].reason.startswith("expected to take 900 s")
    assert outcomes[1].status is TaskStatus.DONE and outcomes[1].result is not None
    assert outcomes[1].result.strategy == TRANSFER_CHECK
