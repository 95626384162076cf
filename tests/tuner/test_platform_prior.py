"""The prior that ships with the tuner, without XLA: what a summary of screens keeps and skips,
its file's form and checks, which platform a file covers, the checked-in file itself, and how
a home's own evidence outweighs it."""

from __future__ import annotations

import datetime
import json
import math
import platform

import pyarrow as pa
import pytest

from execution.compile import compiler_defaults
from hlo.environment import current_environment
from storage.warehouse import Warehouse
from tuner.platform_prior import (
    CATASTROPHIC,
    FORMAT,
    NO_CHANGE,
    SHIPPED_WEIGHT,
    SKIP_MIN_CHANGED,
    Measured,
    MoveScreen,
    PlatformPrior,
    prior_for,
    shipped_priors,
    summarize,
)
from tuner.prior import move_prior
from tuner.schedule import Scheduled, neighbourhood
from tuner.space import accepted_flags, graph_space
from tuner.strategies import FAILED, STRATEGIES
from tuner.tables import TRIALS, TrialRow
from vocabulary.tuning import Kind, TrialOutcome

WORKLOADS = "abcdef"
MEASURED = Measured("abc1234", "Some CPU", "cpu:x86_64:avx2", "jaxlib-0.0.0", "2026-12-06", tuple(WORKLOADS))
SLOW = ("xla_backend_optimization_level", 0)
ONE_WIN = ("xla_cpu_disable_loop_unrolling", True)
FEW = ("xla_cpu_optimize_for_size", True)
REDUCE = ("placement:REDUCE", "xla")
ALIAS = ("placement:REDUCE", "xnn")


def measured(speedup: float) -> MoveScreen:
    return MoveScreen(TrialOutcome.MEASURED, speedup)


IDENTICAL = MoveScreen(TrialOutcome.IDENTICAL, 1.0)
FAILS = MoveScreen(TrialOutcome.FAILED, None)
WRONG = MoveScreen(TrialOutcome.MEASURED, 2.0, numerics_ok=False)  # fast, and wrong
SCREENS_BY_MOVE = {
    # Slower wherever it changed the program (five workloads; one failure among them): skipped.
    SLOW: [measured(0.1), measured(0.2), FAILS, measured(0.5), measured(0.9), IDENTICAL],
    # Faster on one workload: tried, however slow elsewhere.
    ONE_WIN: [measured(0.2), measured(0.15), measured(1.3), measured(0.1), measured(0.5), measured(0.5)],
    # Slower on the four workloads whose program it changed: too few to skip.
    FEW: [measured(0.1), IDENTICAL, measured(0.1), measured(0.1), measured(0.1), IDENTICAL],
    REDUCE: [measured(11.0), IDENTICAL, IDENTICAL, WRONG, IDENTICAL, IDENTICAL],
    # The program of a move tried before it, wherever it changed one: nothing of its own.
    ALIAS: [MoveScreen(TrialOutcome.DUPLICATE, 11.0)] + [MoveScreen(TrialOutcome.DUPLICATE, 0.5)] * 5,
}
SCREENS = {w: {move: screens[i] for move, screens in SCREENS_BY_MOVE.items()} for i, w in enumerate(WORKLOADS)}


def test_a_summary_skips_what_was_never_faster_on_enough_workloads():
    prior = summarize(SCREENS, "cpu:x86_64:", MEASURED)
    by_move = {m.move: m for m in prior.moves}
    slow = by_move[SLOW]
    assert (slow.workloads, slow.changed, slow.faster, slow.catastrophic) == (6, 5, 0, 3)
    assert slow.mean_log_speedup == pytest.approx(
        (math.log(0.1) + math.log(0.2) + FAILED + math.log(0.5) + math.log(0.9) + NO_CHANGE) / 6)
    assert slow.skipped and prior.skipped() == {SLOW}
    assert by_move[ONE_WIN].faster == 1 and not by_move[ONE_WIN].skipped
    assert by_move[FEW].changed == SKIP_MIN_CHANGED - 1 and not by_move[FEW].skipped
    # A move that only rebuilt an earlier move's program is no evidence either way.
    alias = by_move[ALIAS]
    assert (alias.changed, alias.faster, alias.mean_log_speedup, alias.skipped) == (0, 0, NO_CHANGE, False)
    # Wrong numerics count as a failure, not as the speed they ran at.
    assert by_move[REDUCE].faster == 1 and by_move[REDUCE].catastrophic == 1
    # Best first: the search's order.
    assert prior.moves[0].move == REDUCE and list(prior.scores()) == [m.move for m in prior.moves]
    assert MoveScreen(TrialOutcome.MEASURED, CATASTROPHIC * 0.99).catastrophic
    assert not MoveScreen(TrialOutcome.MEASURED, CATASTROPHIC * 1.01).catastrophic


def test_a_prior_file_reads_back_and_a_bad_one_is_named():
    prior = summarize(SCREENS, "cpu:x86_64:", MEASURED)
    data = json.loads(json.dumps(prior.to_json()))
    assert data["format"] == FORMAT and PlatformPrior.from_json(data, "x.json") == prior
    # A move of a flag this compiler does not accept (another version's) is left out.
    stranger = dict(data, moves=[*data["moves"], {**data["moves"][0], "config": {"xla_no_such_flag": True}}])
    assert PlatformPrior.from_json(stranger, "x.json") == prior
    for bad in ({**data, "format": FORMAT + 1}, {**data, "measured": {}}, [], {**data, "moves": [{}]}):
        with pytest.raises(ValueError, match="platform prior broken.json"):
            PlatformPrior.from_json(bad, "broken.json")


def test_the_shipped_prior_says_where_it_was_measured_and_keeps_its_own_rule():
    priors = shipped_priors()
    assert priors
    space = set(neighbourhood(graph_space("cpu", accepted_flags("cpu"), compiler_defaults())))
    for prior in priors:
        measured = prior.measured
        assert measured.commit and measured.cpu and measured.compiler_version and measured.workloads
        assert measured.device_kind.startswith(prior.device_kinds)
        datetime.date.fromisoformat(measured.date)
        assert all(m.workloads == len(measured.workloads) for m in prior.moves)
        if prior.device_kinds.startswith("cpu:"):
            # Measured on this compiler's space (a flag it does not accept was left out on reading).
            assert {m.move for m in prior.moves} <= space
            assert len(prior.moves) >= len(space) // 2


def test_a_device_kind_gets_the_longest_prior_that_covers_it():
    here = current_environment().device_kind
    covering = prior_for(here)
    if platform.machine() == "x86_64" and here.startswith("cpu:"):
        assert covering is not None and here.startswith(covering.device_kinds)
    assert prior_for("gpu:no such device") is None
    assert prior_for("cpu:riscv64:") is None


def _trials(home, rows):
    """TRIALS rows of other graphs, one graph each: (config, outcome, speedup)."""
    trials = [TrialRow(dt=datetime.date(2026, 12, 1), trial_id=f"t{i}", task_id=f"task{i}", kind=Kind.GRAPH,
                       fingerprint=f"{i:032x}", env_key="e" * 32, strategy="schedule", index=1,
                       config=json.dumps(config), outcome=outcome, speedup=speedup, numerics_ok=True)
              for i, (config, outcome, speedup) in enumerate(rows)]
    Warehouse(home).append(TRIALS, pa.Table.from_pylist([t.to_row() for t in trials], schema=TRIALS.schema),
                           "test")


def test_a_homes_evidence_outweighs_the_shipped_prior_as_it_accumulates(tmp_path):
    shipped = summarize(SCREENS, "cpu:x86_64:", MEASURED)
    empty = move_prior(tmp_path / "empty", Kind.GRAPH, "f" * 32, compiler_defaults(), shipped)
    # A fresh home: the shipped prior alone.
    assert empty.scores == pytest.approx(shipped.scores()) and empty.skipped == {SLOW}
    # Here the skipped move won on one graph, and REDUCE did nothing on three.
    home = tmp_path / "home"
    _trials(home, [({SLOW[0]: SLOW[1]}, TrialOutcome.MEASURED, 1.2)]
            + [({REDUCE[0]: REDUCE[1]}, TrialOutcome.IDENTICAL, 1.0)] * 3)
    prior = move_prior(home, Kind.GRAPH, "f" * 32, compiler_defaults(), shipped)
    assert prior.skipped == frozenset()
    base = shipped.scores()
    assert prior.scores[SLOW] == pytest.approx((SHIPPED_WEIGHT * base[SLOW] + math.log(1.2)) / (SHIPPED_WEIGHT + 1))
    assert prior.scores[REDUCE] == pytest.approx((SHIPPED_WEIGHT * base[REDUCE] + 3 * NO_CHANGE) / (SHIPPED_WEIGHT + 3))
    assert prior.scores[REDUCE] < base[REDUCE] and prior.scores[SLOW] > base[SLOW]


def test_the_schedule_never_screens_a_skipped_move(tmp_path):
    space = graph_space("cpu", accepted_flags("cpu"), compiler_defaults())
    prior = move_prior(tmp_path, Kind.GRAPH, "f" * 32, compiler_defaults(),
                       summarize(SCREENS, "cpu:x86_64:", MEASURED))
    strategy = Scheduled(STRATEGIES["evolution"](space, budget=200, seed=0), prior.scores, skip=prior.skipped)
    tiers = [move for tier in strategy.tiers for move in tier]
    assert SLOW not in tiers and set(tiers) == set(neighbourhood(space)) - {SLOW}
    assert tiers[0] == REDUCE  # the prior's best leads the cold-start screen
