"""After the search: which config a task verifies.

The best screen of a search is biased upward: among forty noisy screens, the luckiest wins,
and where several configs are close (three levers of 3% to 12% each) it is often not the
fastest one. And a screen stops as soon as it tells a candidate from the default, so two
screens cannot tell a change worth 1% from none. So the winner is chosen by comparisons
(`Compare`): one config timed against another, paired and interleaved, so the difference
between two close programs is measured directly, not as the difference of two measurements
against the default taken at other times (each +-2%: the whole gain of a small lever, which is
how a 40-evaluation search once pruned a 1.2% change out of a 2.8% win).

1. race: the finalists (`finalists`: the best screened programs whose intervals reach the best
   one's) meet in turn: the best screened first, each next finalist timed against the one
   ahead, taking its place when faster.
2. prune: the winner is cut down to the changes that matter (`prune`). The changes the
   search screened alone and found no gain alone (intervals reaching 1) go first, together, in one
   comparison: they all go unless the config without them is shown slower (its interval wholly
   below 1). Then each change left is undone in turn and the undone config timed against the
   winner; a change stays only where undoing it is slower. A change that does nothing goes
   half the time (a coin toss of noise), one that costs goes most of the time, one that gains
   stays most of the time: a stored config is the gain first, minimal second.

Each comparison is a journaled trial of its phase (`race`, `prune`) that names its `baseline`,
so a resumed task does not repeat it; a comparison made in the race is not made again in the
pruning.

Numerics-relaxing flags are opt-in (`execution.flags.relaxes_numerics`): where the winner sets
one, a second race and pruning among the strict finalists alone (those that relax nothing)
choose the config delivered by default, and the winner is kept beside it as the opt-in one
(`Winners`). Pruning a strict config leaves it strict: undoing a change relaxes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from execution.flags import CompilerConfig, relaxes_numerics
from tuner.strategies import FAILED
from tuner.trial import Trial
from vocabulary.tuning import Phase, TrialOutcome

# (index, config, baseline) -> the trial of `config` timed against `baseline` (its speedup over
# the baseline's program).
Compare = Callable[[int, CompilerConfig, CompilerConfig], Trial]
FINALISTS = 3  # at most this many programs race for the win


@dataclass(frozen=True)
class Winners:
    """What a search chose, each the trial that chose it (None: nothing of its kind beat the
    default). `strict`: the best config that relaxes no numerics, delivered by default.
    `relaxed`: the best config overall where it relaxes numerics (None where the best relaxes
    nothing: it is then `strict`), offered to jobs that opt in."""

    strict: Trial | None
    relaxed: Trial | None = None


def strict(config: CompilerConfig) -> bool:
    """Whether `config` relaxes no numerics: the configs delivered by default."""
    return not relaxes_numerics(config)


def split_winners(best: Trial | None, best_strict: Callable[[], Trial | None]) -> Winners:
    """`best` as the winner where it is strict; else the opt-in one, beside the strict winner
    that `best_strict()` chooses (called only then)."""
    if best is None or strict(best.config):
        return Winners(best)
    return Winners(best_strict(), best)


def best_trial(trials: list[Trial]) -> Trial | None:
    """The measured trial with the best speedup, if any beat the default."""
    measured = [t for t in trials if t.outcome in (TrialOutcome.MEASURED, TrialOutcome.DUPLICATE) and t.fitness > 0]
    return max(measured, key=lambda t: t.fitness) if measured else None


def finalists(trials: list[Trial], count: int = FINALISTS) -> list[Trial]:
    """Up to `count` screened programs that beat the default, best first: the best, and those
    whose interval's upper end reaches the best one's lower end (the screens cannot tell them
    apart). One trial per program: the first measured."""
    measured = sorted((t for t in trials if t.outcome == TrialOutcome.MEASURED and t.fitness > 0),
                      key=lambda t: -t.fitness)
    if not measured:
        return []
    best = measured[0]
    return [t for t in measured if t is best or t.high >= best.low][:count]


def race(compare: Compare, trials: list[Trial], record: Callable[[Trial], None],
         admits: Callable[[CompilerConfig], bool] = lambda config: True,
         in_time: Callable[[], bool] = lambda: True) -> Trial | None:
    """The fastest finalist of the search trials whose config `admits` takes (None: none beat
    the default): the best screened, unless the next finalist, timed against it by `compare`,
    is faster, and so on; returns the winner's search trial. Race trials are `record`ed and
    appended to `trials`; those already there (a resumed task) are reused. No comparison
    starts once `in_time()` says the task's time is spent: the winner so far stays."""
    contenders = finalists([t for t in trials if t.phase == Phase.SEARCH and admits(t.config)])
    if not contenders:
        return None
    winner = contenders[0]
    for challenger in contenders[1:]:
        timed = _compared(compare, trials, record, Phase.RACE, challenger.config, winner.config, in_time)
        if timed is not None and timed.fitness > 0:
            winner = challenger
    return winner


def prune(compare: Compare, trials: list[Trial], record: Callable[[Trial], None],
          best: Trial | None, in_time: Callable[[], bool] = lambda: True) -> Trial | None:
    """`best` cut down to the changes that matter. First the changes the search screened alone
    without a gain (`_idle_alone`), where there are two or more and another change
    is left: undone together, in one comparison, and gone unless the config without them is
    shown slower. Then each change left undone in turn (the one that did least alone first) and
    the undone config timed against the winner so far by `compare`; kept undone where its
    program is the winner's, or where it is no slower (a stored config is then minimal: easier
    to read, and fewer ways to break on the next compiler). Where the search screened both
    configs and their intervals lie apart, the undone one below, the change stays without a
    comparison (a 7x lever needs no paired timing to show). Each comparison is a trial of phase
    'prune' (`record`ed, appended to `trials`: a resumed task does not redo it); none starts
    once `in_time()` says the task's time is spent (the changes left stay). Returns the
    winner: the trial that chose it."""
    if best is None or len(best.config) < 2:
        return best
    alone = {next(iter(t.config.items())): t for t in trials
             if len(t.config) == 1 and t.baseline is None and t.phase == Phase.SEARCH}
    idle = [name for name in best.config if _idle_alone(alone.get((name, best.config[name])))]
    if 2 <= len(idle) < len(best.config):
        best = _undone(compare, trials, record, best, idle, in_time, keep_unless_slower=True)
    chosen = best.config
    order = sorted(chosen, key=lambda name: _fitness(alone.get((name, chosen[name]))))
    for name in order:
        if len(best.config) == 1:  # the last change is the gain itself
            break
        best = _undone(compare, trials, record, best, [name], in_time)
    return best


def _idle_alone(screen: Trial | None) -> bool:
    """Whether a change's screen alone (against the default) was measured and showed no
    significant gain: its interval reaches 1 or lies below it."""
    return screen is not None and screen.fitness != FAILED and screen.low <= 0.0


def _fitness(screen: Trial | None) -> float:
    """A screen's fitness; below every fitness where there is none."""
    return screen.fitness if screen is not None else -math.inf


def _undone(compare: Compare, trials: list[Trial], record: Callable[[Trial], None], best: Trial,
            names: list[str], in_time: Callable[[], bool], keep_unless_slower: bool = False) -> Trial:
    """The winner after `names` are undone from `best`'s config: the undone config where its
    program is `best`'s, or where its comparison against `best` is no slower (with
    `keep_unless_slower`: not shown slower, its interval reaching 1); else `best`. No comparison
    where the screens already show the undone config slower, nor a new one out of time."""
    config = {k: v for k, v in best.config.items() if k not in names}
    if _clearly_slower(_screen(trials, config), _screen(trials, best.config)):
        return best  # the screens alone show the changes matter
    undone = _compared(compare, trials, record, Phase.PRUNE, config, best.config, in_time)
    if undone is None:
        return best
    if undone.program == best.program:
        return replace(best, config=config)
    no_slower = undone.high >= 0 if keep_unless_slower else undone.fitness >= 0
    return undone if no_slower else best


def _screen(trials: list[Trial], config: CompilerConfig) -> Trial | None:
    """The search's screen of exactly `config` against the default, if it has one."""
    return next((t for t in trials if t.phase == Phase.SEARCH and t.config == config
                 and t.fitness != FAILED), None)


def _clearly_slower(undone: Trial | None, best: Trial | None) -> bool:
    """Whether screen `undone` lies wholly below screen `best` (both known)."""
    return undone is not None and best is not None and undone.high < best.low


def _compared(compare: Compare, trials: list[Trial], record: Callable[[Trial], None],
              phase: Phase, config: CompilerConfig, baseline: CompilerConfig,
              in_time: Callable[[], bool]) -> Trial | None:
    """`config` timed against `baseline`: the trial among `trials` (of any phase: the race's,
    or a resumed task's), or a new one of `phase`, `record`ed and appended; None where it is
    new and `in_time()` says the task's time is spent."""
    known = next((t for t in trials if t.config == config and t.baseline == baseline), None)
    if known is None:
        if not in_time():
            return None
        known = replace(compare(len(trials), config, baseline), phase=phase, baseline=baseline)
        record(known)
        trials.append(known)
    return known
