"""After the search: which config a task verifies.

The best screen of a search is biased upward: among forty noisy screens, the luckiest wins,
and where several configs are close (three levers of 3% to 12% each) it is often not the
fastest one. So the winner is chosen in two steps:

1. race: the finalists (`finalists`: the best screened programs whose intervals reach the best
   one's) are each measured once more, afresh and without early stopping, and the fastest of
   those fresh measurements wins. A screen picks the finalists; a measurement that took no
   part in the selection picks the winner.
2. prune: the winner is cut down to the changes that matter (`prune`), each undo measured as
   the race measures, and compared with the winner's race measurement: like with like (a
   screen stopped early is +-20% at a 6x gain, and the rule keeps a change worth 1%).

Each extra measurement is a journaled trial of its phase (`race`, `prune`), so a resumed task
does not repeat it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from execution.flags import CompilerConfig
from tuner.strategies import FAILED
from tuner.trial import Trial

Run = Callable[[int, CompilerConfig], Trial]
FINALISTS = 3  # at most this many programs race for the win
# A change whose undoing costs less than this (in log speedup: 1%) is no change that matters.
PRUNE_BAND = math.log1p(0.01)


def best_trial(trials: list[Trial]) -> Trial | None:
    """The measured trial with the best speedup, if any beat the default."""
    measured = [t for t in trials if t.outcome in ("measured", "duplicate") and t.fitness > 0]
    return max(measured, key=lambda t: t.fitness) if measured else None


def finalists(trials: list[Trial], count: int = FINALISTS) -> list[Trial]:
    """Up to `count` screened programs that beat the default, best first: the best, and those
    whose interval's upper end reaches the best one's lower end (the screens cannot tell them
    apart). One trial per program: the first measured."""
    measured = sorted((t for t in trials if t.outcome == "measured" and t.fitness > 0),
                      key=lambda t: -t.fitness)
    if not measured:
        return []
    best = measured[0]
    return [t for t in measured if t is best or t.high >= best.low][:count]


def race(remeasure: Run, trials: list[Trial], record: Callable[[Trial], None]) -> Trial | None:
    """The finalists of the search trials measured afresh by `remeasure(index, config)`; the
    fastest fresh measurement, if it beats the default. A single finalist of one change needs
    no race; one of several is measured afresh too, as its pruning compares fresh measurements.
    Race trials are `record`ed and appended to `trials`; those already there (a resumed task)
    are reused."""
    contenders = finalists([t for t in trials if t.phase == "search"])
    if not contenders:
        return None
    if len(contenders) == 1 and len(contenders[0].config) < 2:
        return contenders[0]  # nothing to race, and nothing to prune
    raced = []
    for contender in contenders:
        again = next((t for t in trials if t.phase == "race" and t.config == contender.config),
                     None)
        if again is None:
            again = replace(remeasure(len(trials), contender.config), phase="race")
            record(again)
            trials.append(again)
        raced.append(again)
    winner = max(raced, key=lambda t: t.fitness)
    return winner if winner.fitness > 0 else None


def prune(run: Run, trials: list[Trial], record: Callable[[Trial], None],
          best: Trial | None) -> Trial | None:
    """`best` cut down to the changes that matter: each change undone in turn (the one that did
    least alone first), kept undone while the program stays the same or the gain holds (the
    undone config measures within the noise band of the best). A stored config is then
    minimal: easier to read, and fewer ways to break on the next compiler. Each undo is a trial
    of phase 'prune', evaluated by `run(index, config)` (journaled by `record`, appended to
    `trials`: a resumed task does not redo it); a search trial of the same config is no
    substitute (a screen is no match for `best`'s race measurement)."""
    if best is None or len(best.config) < 2:
        return best
    alone = {next(iter(t.config.items())): t.fitness for t in trials if len(t.config) == 1}
    order = sorted(best.config, key=lambda name: alone.get((name, best.config[name]), FAILED))
    for name in order:
        if len(best.config) == 1:  # the last change is the gain itself
            break
        config = {k: v for k, v in best.config.items() if k != name}
        trial = next((t for t in trials if t.config == config and t.phase != "search"), None)
        if trial is None:
            trial = replace(run(len(trials), config), phase="prune")
            record(trial)
            trials.append(trial)
        holds = trial.fitness != FAILED and trial.fitness >= best.fitness - PRUNE_BAND
        if trial.program == best.program:
            best = replace(best, config=config)
        elif trial.fitness > 0 and holds:
            best = trial
    return best
