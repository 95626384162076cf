"""A search's prior: which single moves won on the other graphs of this warehouse.

The schedule (`tuner.schedule`) tries the one-move neighbourhood of the default first, and in
what order matters when the budget is short. Every trial the tuner ran lands in the `trials`
table, and every verified winner in `tuning_results`. For each move (a param set to a value,
in the placement form: old configs that set the library lists are read as the moves they make,
`execution.flags.as_placement`), the evidence is:
- each single-move trial of another graph of the same kind: its log speedup
  (`tuner.platform_prior.MoveScreen.evidence`: a program identical to the default's counts a
  little below 0, a failure or wrong numerics as the strategies' FAILED);
- each accepted result of another graph whose config makes the move: the log of its verified
  interval's lower end.
A move's score is the mean of its evidence. The graph being tuned is left out: its own trials
are the search's history, not its prior. This is the idea of `fdo analyze flags` (per-value
effects across graphs) in its simplest form, the one a search order needs.

Where the tuner ships a prior for the platform (`tuner.platform_prior`: what each move did
across the zoo), its mean counts as `SHIPPED_WEIGHT` graphs of evidence, so a fresh home's
first search starts from it and the home's own evidence outweighs it as it accumulates; the
moves it marks skipped are skipped, but for one that won on another graph here.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import pyarrow.compute as pc

from execution.flags import CompilerConfig, FlagError, as_placement, checked_config
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.platform_prior import SHIPPED_WEIGHT, MoveScreen, PlatformPrior
from tuner.schedule import Move
from tuner.tables import TRIALS, TUNING_RESULTS, results_of, trials_of
from vocabulary.tuning import Kind


@dataclass(frozen=True)
class MovePrior:
    """What a search starts from: per move, its score (mean log speedup elsewhere), and the
    moves it skips."""

    scores: dict[Move, float]
    skipped: frozenset[Move] = frozenset()


def move_prior(home: Home, kind: Kind, exclude_fingerprint: str, defaults: CompilerConfig,
               shipped: PlatformPrior | None = None) -> MovePrior:
    """Per move, the mean of its evidence on other graphs of `kind`, beside the `shipped` prior
    of the platform (see the module docstring)."""
    warehouse = Warehouse(home)
    evidence: dict[Move, list[float]] = defaultdict(list)
    for trial in trials_of(_others(warehouse.read(TRIALS), kind, exclude_fingerprint)):
        moves = _moves(trial.config, defaults)
        if moves is None or len(moves) != 1:
            continue
        evidence[moves[0]].append(MoveScreen(trial.outcome, trial.speedup, trial.numerics_ok is not False).evidence)
    for result in results_of(_others(warehouse.read(TUNING_RESULTS), kind, exclude_fingerprint)):
        if result.accepted and result.ci_low:
            for move in _moves(result.config, defaults) or ():
                evidence[move].append(math.log(result.ci_low))
    if shipped is None:
        return MovePrior({move: sum(values) / len(values) for move, values in evidence.items()})
    base = shipped.scores()
    scores = {move: (SHIPPED_WEIGHT * base.get(move, 0.0) + sum(evidence.get(move, ())))
              / (SHIPPED_WEIGHT + len(evidence.get(move, ())))
              for move in base.keys() | evidence.keys()}
    won_here = {move for move, values in evidence.items() if max(values) > 0}
    return MovePrior(scores, shipped.skipped() - won_here)


def _others(table, kind: Kind, exclude_fingerprint: str):
    """Rows of `kind` of every graph (or op) but `exclude_fingerprint`."""
    if table.num_rows == 0:
        return table
    return table.filter(pc.and_(pc.equal(table.column("kind"), kind),
                                pc.not_equal(table.column("fingerprint"), exclude_fingerprint)))


def _moves(config_json: str, defaults: CompilerConfig) -> list[Move] | None:
    """The moves a stored config makes, in placement form; None if it cannot be read."""
    try:
        config = as_placement(checked_config(json.loads(config_json)), defaults)
    except (FlagError, ValueError):
        return None
    return sorted(config.items(), key=lambda item: item[0])
