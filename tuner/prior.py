"""A search's prior: which single moves won on the other graphs of this warehouse.

The schedule (`tuner.schedule`) tries the one-move neighbourhood of the default first, and in
what order matters when the budget is short. Every trial the tuner ran lands in the `trials`
table, and every verified winner in `tuning_results`. For each move (a param set to a value,
in the placement form: old configs that set the library lists are read as the moves they make,
`execution.flags.as_placement`), the evidence is:
- each single-move trial of another graph of the same kind: its log speedup (a program
  identical to the default's counts a little below 0, `NO_CHANGE`; a failure counts as the
  strategies' FAILED);
- each accepted result of another graph whose config makes the move: the log of its verified
  interval's lower end.
A move's score is the mean of its evidence. The graph being tuned is left out: its own trials
are the search's history, not its prior. This is the idea of `fdo analyze flags` (per-value
effects across graphs) in its simplest form, the one a search order needs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import pyarrow.compute as pc

from execution.flags import CompilerConfig, FlagError, as_placement, checked_config
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.schedule import Move
from tuner.strategies import FAILED
from tuner.tables import TRIALS, TUNING_RESULTS, results_of, trials_of
from vocabulary.tuning import Kind, TrialOutcome

# A move that compiled to the default's program: known to do nothing there, so it waits
# behind moves never tried, which might do something.
NO_CHANGE = -1e-3


def move_prior(home: Home, kind: Kind, exclude_fingerprint: str,
               defaults: CompilerConfig) -> dict[Move, float]:
    """Per move, the mean of its evidence on other graphs of `kind` (see the module docstring)."""
    warehouse = Warehouse(home)
    evidence: dict[Move, list[float]] = defaultdict(list)
    for trial in trials_of(_others(warehouse.read(TRIALS), kind, exclude_fingerprint)):
        moves = _moves(trial.config, defaults)
        if moves is None or len(moves) != 1:
            continue
        if trial.outcome == TrialOutcome.FAILED or not trial.speedup:
            evidence[moves[0]].append(FAILED)
        elif trial.outcome == TrialOutcome.IDENTICAL:
            evidence[moves[0]].append(NO_CHANGE)
        else:
            evidence[moves[0]].append(math.log(trial.speedup))
    for result in results_of(_others(warehouse.read(TUNING_RESULTS), kind, exclude_fingerprint)):
        if result.accepted and result.ci_low:
            for move in _moves(result.config, defaults) or ():
                evidence[move].append(math.log(result.ci_low))
    return {move: sum(values) / len(values) for move, values in evidence.items()}


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
