"""The runner's deadline: a search gets its share of the time left, a transfer check runs whole."""

from __future__ import annotations

from hlo.module import from_text
from tasks.records import TuneTask
from tasks.runner import within
from tuner.transfer import Kinship, Transfer
from tuner.tune import TuneSettings
from vocabulary.tuning import Kind

MODULE = from_text("HloModule m\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(p)\n}\n")
TRANSFER = Transfer({"xla_cpu_disable_loop_unrolling": True}, "a" * 32 + "/" + "b" * 32, Kinship.FAMILY, 1.3)


def task(settings: TuneSettings) -> TuneTask:
    return TuneTask(Kind.GRAPH, "m", MODULE, "f" * 32, "e" * 32, settings)


def test_a_search_gets_its_share_of_the_time_and_a_check_screens_its_transfers_whole():
    search = within(task(TuneSettings(transfers=(TRANSFER,))), 0.02)
    assert search.settings.budget_minutes == 0.02
    # A check's share among a hundred others would be a second: it would measure none of its
    # configs, and land a verdict on nothing.
    check = within(task(TuneSettings(transfers=(TRANSFER,), transfer_check=True, budget_evals=1)), 0.02)
    assert check.settings.budget_minutes is None
