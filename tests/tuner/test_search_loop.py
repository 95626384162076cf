"""The search loop (tuner.search) against a pure-Python evaluator: a table of config -> program
and speedup, no XLA. What the loop does with whatever evaluates: it finds the best of a known
set, never measures a program twice, times the finalists against each other and each undo
against the winner (pruning a change that does not matter), builds ahead without proposing a pending config again, and
resumes from its journal without repeating a trial; it stamps each trial with the time it finished
and says what each phase spent."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from typing import Callable

import pytest

from execution.flags import CompilerConfig
from tests.support.table_evaluator import COMPARE, SCREEN, SPREAD, TableEvaluator, listed, table
from tuner.schedule import Scheduled
from tuner.search import (
    LOOP_PHASES,
    UNTIMED_PER_EVALUATION,
    Builds,
    Stall,
    TaskClock,
    evaluations,
    evaluations_since_gain,
    proposals,
    run_search,
    screen_settings,
    search,
    seconds_to_find,
    spending,
)
from tuner.space import Param, SearchSpace, config_key
from tuner.strategies import STRATEGIES, Strategy
from tuner.trial import Trial
from vocabulary.interval import Interval
from vocabulary.tuning import Phase, StopReason, TrialOutcome


def run(evaluator: TableEvaluator, next_config, budget: int, trials: list[Trial] | None = None,
        journal: list[Trial] | None = None) -> tuple[list[Trial], Trial | None]:
    """`run_search` from `trials` (journaled), on the evaluator's clock: every trial and the
    winner (these flags relax no numerics: no opt-in beside it)."""
    trials = list(trials or [])
    evaluator.outcome = run_search(evaluator, next_config, trials, budget, SCREEN, COMPARE,
                                   lambda: True, (journal if journal is not None else []).append,
                                   clock=TaskClock(trials, now=evaluator.now))
    assert evaluator.outcome.winners.relaxed is None
    return evaluator.outcome.trials, evaluator.outcome.winners.strict


def timings(evaluator: TableEvaluator) -> list[tuple[str, str]]:
    """What the evaluator timed: each program (or comparison) and whether it was a screen,
    against the best so far where it had one (`stop_below`), or a comparison."""
    return [(label, "compare" if settings == COMPARE else
             "screen" if replace(settings, stop_below=None) == SCREEN else "other")
            for label, settings in evaluator.measured]


# A small space with a known best: a and c each give a gain, together the most; b changes
# nothing (every config with it compiles to the program without it); c=Y does not compile.
SPACE = SearchSpace((Param("a", (1, 2)), Param("b", (True,)), Param("c", ("X", "Y"))))
GAIN = {("a", 1): 1.10, ("a", 2): 1.20, ("c", "X"): 1.05}
# Levers close enough that the screens cannot tell the best configs apart: they race, and the
# winner's changes are pruned by comparisons.
CLOSE = {("a", 1): 1.10, ("a", 2): 1.12, ("c", "X"): 1.01}


def _known(config: CompilerConfig, gains: dict = GAIN) -> tuple[str | None, float, None]:
    if config.get("c") == "Y":
        return None, 0.0, None
    effective = {k: v for k, v in config.items() if k != "b"}
    if not effective:
        return "default", 1.0, None
    speedup = 1.0
    for move in effective.items():
        speedup *= gains[move]
    return config_key(effective), speedup, None


def known_set(gains: dict = GAIN) -> TableEvaluator:
    configs = [{}]
    for param in SPACE.params:
        configs = configs + [{**c, param.name: v} for c in configs for v in param.values]
    return TableEvaluator(table(*((c, *_known(c, gains)) for c in configs)))


def test_the_schedule_finds_the_best_of_a_known_set_and_drops_the_change_that_does_nothing():
    evaluator = known_set()
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=12, seed=0), prior={})
    trials, best = run(evaluator, proposals(strategy), budget=12)
    assert best is not None and best.config == {"a": 2, "c": "X"}
    assert abs(best.speedup.estimate - 1.20 * 1.05) < 1e-9
    # Every config that does not compile failed, and none was measured.
    failed = [t for t in trials if t.config.get("c") == "Y"]
    assert failed and all(t.outcome == "failed" for t in failed)


def test_the_search_never_measures_a_program_twice():
    evaluator = known_set()
    trials: list[Trial] = []
    search(evaluator, proposals(STRATEGIES["exhaustive"](SPACE, budget=SPACE.size())), trials,
           SPACE.size(), SCREEN, lambda: True, lambda trial: None)
    assert len(trials) == SPACE.size() - 1  # every config but the default, each once
    programs = [program for program, _ in evaluator.measured]
    assert len(programs) == len(set(programs)) == 5  # a=1, a=2, c=X, a=1+c=X, a=2+c=X
    by_program = {t.program: t for t in trials if t.outcome == "measured"}
    for trial in trials:
        if trial.outcome == "duplicate":  # b set too: the program measured without it
            assert trial.speedup == by_program[trial.program].speedup
        if trial.outcome == "identical":
            assert trial.config == {"b": True} and trial.speedup.estimate == 1.0
    assert {t.outcome for t in trials} == {"measured", "duplicate", "identical", "failed"}


def test_the_race_times_each_finalist_against_the_one_ahead_and_the_fastest_wins():
    # A screened luckiest; measured again, it is the slowest of the three.
    lucky, steady, quiet = {"a": 1}, {"a": 2}, {"c": "X"}
    evaluator = TableEvaluator(table((lucky, "A", 1.30, 1.10), (steady, "B", 1.27, 1.25),
                                     (quiet, "C", 1.26, 1.26)))
    journal: list[Trial] = []
    trials, best = run(evaluator, listed([lucky, steady, quiet]), budget=3, journal=journal)
    assert best.config == quiet and best.phase == "search" and best.speedup.estimate == 1.26
    assert [(t.phase, t.baseline) for t in journal] == [("search", None)] * 3 + [
        ("race", lucky), ("race", steady)]
    # Each program screened once; then B against A, and C against B, the winner so far.
    assert timings(evaluator) == [("A", "screen"), ("B", "screen"), ("C", "screen"),
                                  ("B/A", "compare"), ("C/B", "compare")]


def test_pruning_times_each_undo_against_the_winner_and_drops_a_change_that_costs_nothing():
    evaluator = TableEvaluator(table(({"b": 1}, "B", 1.0, None),
                                     ({"a": 1, "b": 1}, "AB", 1.20, None),
                                     ({"a": 1}, "A", 1.202, None)))
    journal: list[Trial] = []
    trials, best = run(evaluator, listed([{"b": 1}, {"a": 1, "b": 1}]), budget=2, journal=journal)
    assert best.config == {"a": 1} and best.phase == "prune"
    # A single finalist: no race. Undoing a leaves {"b": 1}, whose screen lies wholly below
    # AB's: a stays, no comparison needed. Undoing b is timed against the winner (no screen
    # of {"a": 1} to go by); without b it is no slower: b goes.
    assert [(t.phase, t.config, t.baseline) for t in journal][2:] == [
        ("prune", {"a": 1}, {"a": 1, "b": 1})]
    assert timings(evaluator) == [("B", "screen"), ("AB", "screen"), ("A/AB", "compare")]


def test_no_comparison_starts_once_the_tasks_time_is_spent():
    # The race's and the pruning's tables above, with the task's time spent at the last screen:
    # the best screen is the winner as screened, its changes as they are.
    lucky, steady, quiet = {"a": 1}, {"a": 2}, {"c": "X"}
    raced = TableEvaluator(table((lucky, "A", 1.30, 1.10), (steady, "B", 1.27, 1.25), (quiet, "C", 1.26, 1.26)))
    pruned = TableEvaluator(table(({"b": 1}, "B", 1.0, None), ({"a": 1, "b": 1}, "AB", 1.20, None),
                                  ({"a": 1}, "A", 1.202, None)))
    for evaluator, configs, winner in ((raced, [lucky, steady, quiet], lucky),
                                       (pruned, [{"b": 1}, {"a": 1, "b": 1}], {"a": 1, "b": 1})):
        journal: list[Trial] = []
        outcome = run_search(evaluator, listed(configs), [], len(configs), SCREEN, COMPARE,
                             lambda: len(journal) < len(configs), journal.append,
                             clock=TaskClock([], now=evaluator.now))
        assert outcome.winners.strict.config == winner and outcome.winners.strict.phase == "search"
        assert [kind for _, kind in timings(evaluator)] == ["screen"] * len(configs)
        assert [t.phase for t in journal] == ["search"] * len(configs)


def test_a_comparison_the_race_made_is_not_made_again_in_the_pruning():
    both, a_only = {"a": 1, "b": 1}, {"a": 1}
    evaluator = TableEvaluator(table((both, "AB", 1.30, 1.25), (a_only, "A", 1.28, 1.24),
                                     ({"b": 1}, "B", 1.0, None)))
    journal: list[Trial] = []
    _, best = run(evaluator, listed([both, a_only, {"b": 1}]), budget=3, journal=journal)
    # The race timed A against AB (slower); undoing b from AB is that very comparison. Undoing
    # a leaves B, screened wholly below AB: no comparison.
    assert best.config == both
    assert [(t.phase, t.config) for t in journal[3:]] == [("race", a_only)]
    assert [m for m, _ in evaluator.measured] == ["AB", "A", "B", "A/AB"]


def test_a_search_without_a_significant_screen_makes_no_comparison():
    # Two configs within the noise of the default (1.005 +-2%): the verification alone decides.
    evaluator = TableEvaluator(table(({"a": 1}, "A", 1.005, None), ({"a": 2}, "B", 1.004, None)))
    _, best = run(evaluator, listed([{"a": 1}, {"a": 2}]), budget=2)
    assert best.config == {"a": 1} and [m for m, _ in evaluator.measured] == ["A", "B"]


def test_a_fixed_list_is_evaluated_in_order_and_its_best_wins_as_measured():
    configs = [{"c": "X"}, {"a": 2}, {"a": 1}]
    evaluator = known_set()
    outcome = run_search(evaluator, listed(configs), [], 10, SCREEN, COMPARE,
                         lambda: True, lambda trial: None, listed=True)
    assert [t.config for t in outcome.trials] == configs
    assert outcome.winners.strict.config == {"a": 2}
    assert [kind for _, kind in timings(evaluator)] == ["screen"] * 3  # no race, no prune
    assert outcome.stop == StopReason.EXHAUSTED


def test_the_loop_builds_ahead_without_proposing_a_pending_config_again():
    evaluator = known_set()
    evaluator.depth = 3
    seen_pending: list[int] = []
    propose = proposals(STRATEGIES["random"](SPACE, budget=8, seed=3))

    def next_config(trials, pending):
        seen_pending.append(len(pending))
        return propose(trials, pending)

    trials: list[Trial] = []
    search(evaluator, next_config, trials, 8, SCREEN, lambda: True, lambda trial: None)
    assert len(trials) == len(evaluator.built) and evaluations(trials) == 8  # the budget
    assert max(seen_pending) == 2  # two more building while one is measured
    keys = [config_key(c) for c in evaluator.built]
    assert len(keys) == len(set(keys))
    assert [t.index for t in trials] == list(range(len(trials)))


def test_a_resumed_task_repeats_no_trial_and_ends_the_same():
    lucky, steady, quiet = {"a": 1}, {"a": 2}, {"c": "X"}
    rows = table((lucky, "A", 1.30, 1.10), (steady, "B", 1.27, 1.25), (quiet, "C", 1.26, 1.26))
    journal: list[Trial] = []
    _, first = run(TableEvaluator(rows), listed([lucky, steady, quiet]), 3, journal=journal)
    again = TableEvaluator(rows)
    trials, best = run(again, listed([lucky, steady, quiet]), 3, trials=journal)
    assert best == first and again.measured == [] and trials == journal


def test_a_config_whose_program_is_known_costs_no_evaluation():
    # b changes nothing: {b} compiles to the default's program, {a=1, b} to a=1's. Neither is
    # timed, and neither takes an evaluation of the budget.
    evaluator = known_set()
    configs = [{"b": True}, {"a": 1}, {"a": 1, "b": True}, {"a": 2}, {"c": "X"}]
    trials: list[Trial] = []
    search(evaluator, listed(configs), trials, 3, SCREEN, lambda: True, lambda trial: None)
    assert [t.outcome for t in trials] == ["identical", "measured", "duplicate", "measured",
                                           "measured"]
    assert evaluations(trials) == 3 and len(evaluator.measured) == 3


def test_a_strategy_that_only_proposes_known_programs_still_ends():
    evaluator = known_set()

    def endless(trials, pending):
        return {"b": True, "n": len(trials) + len(pending)}

    trials: list[Trial] = []
    search(evaluator, endless, trials, 4, SCREEN, lambda: True, lambda trial: None)
    assert evaluations(trials) == 0 and evaluator.measured == []
    assert len(trials) == 4 * (1 + UNTIMED_PER_EVALUATION)


def test_the_search_stops_when_time_is_up():
    evaluator = known_set()
    calls = iter([True, True, False])
    trials: list[Trial] = []
    search(evaluator, proposals(STRATEGIES["exhaustive"](SPACE, budget=20)), trials, 20, SCREEN,
           lambda: next(calls), lambda trial: None)
    assert len(trials) == 2


class ScreenedAfter(Strategy):
    """Every config of the space in order (`ExhaustiveStrategy`'s), its cold-start screen over
    after `screen` trials."""

    name = "screened-after"

    def __init__(self, space: SearchSpace, budget: int, screen: int) -> None:
        super().__init__(space, budget)
        self.screen, self.order = screen, STRATEGIES["exhaustive"](space, budget)

    def sample(self, history, pending=()):
        return self.order.sample(history, pending)

    def screened(self, history) -> bool:
        return len(history) - 1 >= self.screen


def flat(config: CompilerConfig) -> tuple[str, float, None]:
    """Every config its own program, a=2 alone a gain (1.2x): nothing else ever beats it."""
    return config_key(config), 1.2 if config == {"a": 2} else 1.0, None


def every_config(row: Callable[[CompilerConfig], tuple]) -> TableEvaluator:
    configs = [{}]
    for param in SPACE.params:
        configs = configs + [{**c, param.name: v} for c in configs for v in param.values]
    return TableEvaluator(table(*((c, *row(c)) for c in configs[1:])))


def test_evaluations_since_a_gain_count_the_timed_trials_after_the_last_significant_one():
    def screen(speedup, timed=True, spread=0.02):
        return Trial(0, {}, TrialOutcome.MEASURED if timed else TrialOutcome.DUPLICATE, "P",
                     speedup=Interval(speedup, speedup * (1 - spread), speedup * (1 + spread)),
                     numerics_ok=True)
    trials = [screen(1.005), screen(1.3), screen(1.31), screen(1.2, timed=False), screen(1.0)]
    # 1.3 lies wholly above the default; 1.31's interval reaches below 1.3: no significant gain
    # on it; the duplicate is free.
    assert evaluations_since_gain(trials) == 2
    assert evaluations_since_gain(trials + [screen(1.4)]) == 0
    # A lucky, wide screen raises the bar; a gain must clear its estimate.
    lucky = [screen(1.3), screen(1.5, spread=0.3), screen(1.45)]
    assert evaluations_since_gain(lucky) == 2
    assert evaluations_since_gain([screen(1.005), screen(0.9)]) == 2  # none cleared the default
    # Counted from a start (a cold-start screen's end), or from the last gain after it.
    assert evaluations_since_gain(trials, start=4) == 1
    assert evaluations_since_gain(trials + [screen(1.4), screen(1.0)], start=2) == 1


def screened_search(screen: int, patience: int) -> tuple[StopReason, list[Trial]]:
    """A search of `flat` that screens `screen` moves cold, then stalls after `patience`
    evaluations without a gain: why it ended, and its trials."""
    strategy = ScreenedAfter(SPACE, budget=40, screen=screen)
    trials: list[Trial] = []
    stop = search(every_config(flat), proposals(strategy), trials, 40, SCREEN, lambda: True,
                  lambda trial: None, stalled=Stall(strategy, patience=patience))
    return stop, trials


def test_a_stalled_search_ends_after_its_cold_start_screen_and_says_so():
    stop, trials = screened_search(screen=3, patience=2)
    # a=1 (no gain), a=2 (the gain), b: the screen; then two evaluations after it without a
    # significant gain: stalled.
    assert stop == StopReason.STALLED and evaluations(trials) == 5
    assert [t.config for t in trials][:2] == [{"a": 1}, {"a": 2}]


def test_a_search_never_stalls_before_its_cold_start_screen():
    stop, trials = screened_search(screen=9, patience=1)
    # Patience ran out long before; it counts from the screen's end.
    assert stop == StopReason.STALLED and len(trials) == 10
    # A strategy alone has no cold-start screen: it runs its budget.
    alone = STRATEGIES["exhaustive"](SPACE, budget=5)
    trials = []
    stop = search(every_config(flat), proposals(alone), trials, 5, SCREEN, lambda: True,
                  lambda trial: None, stalled=Stall(alone, patience=1))
    assert stop == StopReason.BUDGET and evaluations(trials) == 5


def test_a_search_says_why_it_ended():
    def ended(budget: int, in_time=lambda: True) -> StopReason:
        return search(every_config(flat), proposals(STRATEGIES["exhaustive"](SPACE, budget)), [],
                      budget, SCREEN, in_time, lambda trial: None)
    assert ended(3) == StopReason.BUDGET
    assert ended(100) == StopReason.EXHAUSTED  # every config of the space tried
    calls = iter([True, False])
    assert ended(100, lambda: next(calls)) == StopReason.TIME


def test_each_screen_stops_below_the_best_so_far_where_it_clears_the_default():
    evaluator = TableEvaluator(table(({"c": "X"}, "C", 1.005, None), ({"a": 1}, "A", 1.30, None),
                                     ({"a": 2}, "B", 1.1, None)))
    trials: list[Trial] = []
    search(evaluator, listed([{"c": "X"}, {"a": 1}, {"a": 2}]), trials, 3, SCREEN, lambda: True,
           lambda trial: None)
    # No incumbent for the first two (1.005x reaches below 1); then A's interval's lower end.
    assert [settings.stop_below for _, settings in evaluator.measured] == [None, None,
                                                                          pytest.approx(1.30 * (1 - SPREAD))]
    assert screen_settings(SCREEN, []) == SCREEN


def test_the_search_keeps_the_builds_of_what_might_still_win():
    evaluator = TableEvaluator(table(({"a": 1}, "A", 1.30, None), ({"a": 2}, "B", 1.28, None),
                                     ({"c": "X"}, "C", 1.1, None), ({"a": 1, "b": 1}, "A", 1.30, None)))
    trials: list[Trial] = []
    kept = Builds()
    search(evaluator, listed([{"a": 1}, {"a": 2}, {"c": "X"}, {"a": 1, "b": 1}]), trials, 4,
           SCREEN, lambda: True, lambda trial: None, builds=kept)
    # C lies wholly below A: let go. B's interval reaches A's; the duplicate of A adds nothing.
    assert set(kept.kept) == {"A", "B"} and kept.get("A").artifact == {"a": 1}
    assert kept.get("C") is None and kept.get(None) is None


def test_each_trial_is_stamped_as_it_finishes_and_the_winner_with_when_it_was_found():
    # The race of test_the_race_times_each_finalist_...: three screens, then B against A and C
    # against B; C, screened third, wins.
    lucky, steady, quiet = {"a": 1}, {"a": 2}, {"c": "X"}
    evaluator = TableEvaluator(table((lucky, "A", 1.30, 1.10), (steady, "B", 1.27, 1.25),
                                     (quiet, "C", 1.26, 1.26)))
    before = datetime.datetime.now(datetime.UTC)
    trials, best = run(evaluator, listed([lucky, steady, quiet]), budget=3)
    assert [t.phase for t in trials] == [Phase.SEARCH] * 3 + [Phase.RACE] * 2
    assert [t.elapsed_seconds for t in trials] == [10.0, 20.0, 30.0, 40.0, 50.0]
    stamps = [t.finished_at for t in trials]
    assert before <= stamps[0] and stamps == sorted(stamps)
    assert all(stamp.utcoffset() == datetime.timedelta(0) for stamp in stamps)
    # Found when the search screened it, though the race chose it at 50 s.
    assert best.config == quiet and seconds_to_find(trials, best) == 30.0
    assert seconds_to_find(trials, None) is None
    # Each phase from the end of the one before; the last one to when the loop ended.
    evaluator.seconds += 5.0  # the workers stopping
    spent = spending(trials, evaluator.now(), evaluator.outcome.compiles)
    # The race compares the three programs as the search built them: no compile.
    assert [(p.phase, p.configs, p.evaluations, p.measured, p.compiles, p.seconds)
            for p in spent] == [(Phase.SEARCH, 3, 3, 3, 3, 30.0), (Phase.RACE, 2, 2, 2, 0, 25.0),
                                (Phase.PRUNE, 0, 0, 0, 0, 0.0)]


def test_the_winner_cut_down_by_pruning_was_found_when_its_program_first_ran():
    # Undoing b from AB (timed against AB, at 30 s) leaves A: never screened, found then.
    evaluator = TableEvaluator(table(({"b": 1}, "B", 1.0, None),
                                     ({"a": 1, "b": 1}, "AB", 1.20, None),
                                     ({"a": 1}, "A", 1.202, None)))
    trials, best = run(evaluator, listed([{"b": 1}, {"a": 1, "b": 1}]), budget=2)
    assert best.phase == Phase.PRUNE and seconds_to_find(trials, best) == 30.0
    spent = spending(trials, evaluator.now(), evaluator.outcome.compiles)
    # {a} is compiled for the pruning; AB, the baseline, is compared as the search built it.
    assert [(p.phase, p.compiles, p.seconds) for p in spent] == [
        (Phase.SEARCH, 2, 20.0), (Phase.RACE, 0, 0.0), (Phase.PRUNE, 1, 10.0)]


def test_the_race_and_the_pruning_compile_only_what_the_search_did_not_build():
    # AC beats AB in the race, both compared as the search built them; pruning AC times {c} and
    # {a} (never screened) against it: two compiles, AC's not again.
    ab, ac = {"a": 1, "b": 1}, {"a": 1, "c": "X"}
    evaluator = TableEvaluator(table((ab, "AB", 1.30, 1.25), (ac, "AC", 1.29, 1.27)))
    trials, best = run(evaluator, listed([ab, ac]), budget=2)
    assert best.config == ac
    spent = spending(trials, evaluator.now(), evaluator.outcome.compiles)
    assert [(p.phase, p.configs, p.compiles) for p in spent] == [
        (Phase.SEARCH, 2, 2), (Phase.RACE, 1, 0), (Phase.PRUNE, 2, 2)]
    assert sum(p.compiles for p in spent) == len(evaluator.built)
    assert [config_key(c) for c in evaluator.built] == [config_key(c) for c in (ab, ac, {"c": "X"}, {"a": 1})]


def test_a_resumed_search_goes_on_from_the_seconds_of_its_last_journaled_trial():
    configs = [{"a": 1}, {"a": 2}, {"c": "X"}]
    first = known_set()
    journal: list[Trial] = []
    search(first, listed(configs), journal, 2, SCREEN, lambda: True, lambda trial: None,
           TaskClock(now=first.now))
    assert [t.elapsed_seconds for t in journal] == [10.0, 20.0]
    # Resumed in a new process, whose clock starts again: the time between does not count.
    again = known_set()
    trials = list(journal)
    search(again, listed(configs), trials, 3, SCREEN, lambda: True, lambda trial: None,
           TaskClock(trials, now=again.now))
    assert [t.elapsed_seconds for t in trials] == [10.0, 20.0, 30.0]


@pytest.mark.parametrize("gains", [GAIN, CLOSE], ids=["apart", "close"])
@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("budget", [1, 2, 5, 9, 17])
def test_what_each_phase_spent_adds_up_to_the_loop_and_the_search_keeps_to_its_budget(
        budget, depth, gains):
    evaluator = known_set(gains)
    evaluator.depth = depth
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=budget, seed=budget), prior={})
    trials, _ = run(evaluator, proposals(strategy), budget)
    spent = spending(trials, evaluator.now(), evaluator.outcome.compiles)
    assert [p.phase for p in spent] == list(LOOP_PHASES)
    assert spent[0].evaluations == evaluations([t for t in trials if t.phase == Phase.SEARCH])
    assert spent[0].evaluations <= budget
    assert sum(p.configs for p in spent) == len(trials)
    assert sum(p.evaluations for p in spent) == evaluations(trials)
    # Every timing the evaluator ran, every compile it started, every second of its clock.
    assert sum(p.measured for p in spent) == len(evaluator.measured)
    assert sum(p.compiles for p in spent) == len(evaluator.built)
    assert sum(p.seconds for p in spent) == evaluator.now()


def test_a_trial_reads_back_as_journaled_and_a_journal_line_from_before_stamps_still_reads():
    trial = Trial(3, {"a": 1}, TrialOutcome.MEASURED, "A", speedup=Interval(1.2, 1.1, 1.3),
                  numerics_ok=True, compile_seconds=0.5, phase=Phase.RACE, baseline={"c": "X"},
                  finished_at=datetime.datetime(2026, 11, 27, 3, 19, 1, 615393, datetime.UTC),
                  elapsed_seconds=57.25)
    line = json.dumps(trial.to_json())
    written = json.loads(line)
    assert (written["phase"], written["outcome"]) == ("race", "measured")
    assert (written["speedup"], written["ci_low"], written["ci_high"]) == (1.2, 1.1, 1.3)
    assert Trial.from_json(written) == trial
    old = {k: v for k, v in trial.to_json().items() if k not in ("finished_at", "elapsed_seconds")}
    read = Trial.from_json(old)
    assert read.phase is Phase.RACE and read.finished_at is None and read.elapsed_seconds is None


def test_a_journal_line_written_before_intervals_and_outcomes_were_records_still_reads():
    line = ('{"index": 4, "config": {"a": 2}, "outcome": "duplicate", "program": "B", '
            '"speedup": 1.25, "ci_low": 1.2, "ci_high": 1.3, "numerics_ok": true, '
            '"compile_seconds": 0.5, "error": null, "phase": "search", "baseline": null, '
            '"finished_at": "2026-11-27T03:19:01+00:00", "elapsed_seconds": 12.5}')
    failed = ('{"index": 5, "config": {"c": "Y"}, "outcome": "failed", "program": null, '
              '"speedup": null, "ci_low": null, "ci_high": null, "numerics_ok": null, '
              '"compile_seconds": null, "error": "does not compile: no", "phase": "search"}')
    read = Trial.from_json(json.loads(line))
    assert read.outcome is TrialOutcome.DUPLICATE and read.speedup == Interval(1.25, 1.2, 1.3)
    # Written again as read, with the screen's stop reason and runs, which it did not tell, null.
    assert read.to_json() == {**json.loads(line), "stop_reason": None, "candidate_runs": None}
    gone = Trial.from_json(json.loads(failed))
    assert gone.outcome is TrialOutcome.FAILED and gone.speedup is None and gone.timed
