"""The default search schedule: start where wins are, combine them, climb, then search.

A compiler's best moves are few and mostly single: one fusion type to another backend, one
scheduler. So a search does not start from random mutations. `Scheduled` is a strategy (the
interface of `tuner.strategies`) in four phases; the strategy that `--strategy` names runs the
last one:

1. neighbours: the one-move neighbourhood of the default (each param of the space to each of
   its values), in two tiers: first the likeliest moves (`likely`: those of cold rank
   `LIKELY_RANK` or better, and those that won on other graphs of this warehouse), the
   cold-start screen, then the others; each tier in the order of a prior (`order_moves`): what
   won on other graphs first (`tuner.prior`), then a cold-start order (each flag's
   `FlagSpec.rank`: fusion types to XLA's own emitters first, known-slow flags last;
   `cold_rank`), until they have taken the budget but a reserve (`reserve`) for the next
   phases. Compiles come first in the search loop: a neighbour whose program equals one already
   known costs no timing and no evaluation (about half of them, on a real module: they move a
   fusion type it does not have), so the phase goes on down the order; a screen stops early
   once its interval leaves no doubt (`execution.measure.early_decision`), against the
   default or against the best so far.
2. combine, after each tier: the significant single moves so far (interval above the noise
   band), best first, the best of each param, accumulated greedily: the best single, plus the
   next one when together they measure better, and so on, then (`HOPEFUL`) the best moves that
   screened faster but not significantly so, each kept only if it measures better on top (with
   no significant single, the chain is those alone: small gains add up); then the pairs of the
   best significant singles not tried yet. Once the first tier and its combinations are tried
   (`screened`: the cold-start screen), a search that has stalled may end
   (`tuner.search.Stall`): the other tiers are moves that rarely gain.
3. around the best, after each tier's combinations: the one-move neighbours of the best config
   so far, by the moves of the tiers so far that changed the default's program (a timed single;
   a move that compiled to the default's program moves a fusion type the module does not have),
   those that did least harm alone first; when one beats the best, the phase goes on around the
   new best. A big lever changes the program the other flags act on: on an n-body step, vector
   width 512 does nothing alone (0.999x) and adds 18% once REDUCE runs in XLA's emitters. So the
   climb over the likeliest moves comes before the next tier: a search that stalls after its
   cold-start screen has climbed first (the stall rule's patience counts from the screen's end).
4. search: the wrapped strategy, which sees every trial so far (anneal starts from the best,
   evolution's tournament holds it: see tuner.strategies), once the best's neighbourhood is
   tried; a new best it finds is searched around first.

Every decision is a function of the trials so far, so a resumed search (tuner.tune journals
trials) takes up where it stopped. Where a phase needs results still being measured (the
compile pool works ahead), `sample` returns None: wait.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from execution.flags import BACKEND_RANK_OFFSETS, PLACEMENT, CompilerConfig, FlagValue, spec_of
from tuner.space import SearchSpace, config_key
from tuner.strategies import FAILED, Strategy, TrialRecord

Move = tuple[str, FlagValue]
NOISE_BAND = math.log1p(0.01)  # a single move counts when its interval's low end clears this
# The cold-start screen: moves of this cold rank or better (`cold_rank`; on CPU the placements
# to XLA's emitters and to YNNPACK, the scheduler, loop unrolling, copy insertion, fast math,
# vector width, optimization level, XNNPACK and the fusion emitters: 16 moves), where the
# levers of the zoo's oracles lie but a few (docs/tuner.md, "When the search ends").
LIKELY_RANK = 3
PAIRS_OF = 4  # pairs are formed among this many best significant singles
HOPEFUL = 4  # single moves faster but not significantly so, tried on top of the best


def neighbourhood(space: SearchSpace) -> list[Move]:
    """Every config one move away from the default: each param to each of its values."""
    return [(param.name, value) for param in space.params for value in param.values]


def cold_rank(move: Move) -> tuple[int, int]:
    """Where a move stands with no evidence: its flag's rank; a placement's rank is
    PLACEMENT.rank plus its backend's offset (XLA's own emitters first, then YNNPACK, then
    XNNPACK and oneDNN: `BACKEND_RANK_OFFSETS`), so moves to the libraries interleave with the
    other flags, before those of equal rank (routing is the big lever on CPU: sending ELTWISE
    to YNNPACK is an LSTM's best single move, ahead of the scheduler's)."""
    name, value = move
    spec = spec_of(name)
    if spec is None:
        return (100, 1)
    if spec is PLACEMENT:
        return (spec.rank + BACKEND_RANK_OFFSETS.get(str(value), len(BACKEND_RANK_OFFSETS)), 0)
    return (spec.rank, 1)


def likely(move: Move, prior: dict[Move, float] | None = None) -> bool:
    """Whether `move` belongs to the cold-start screen: its cold rank is `LIKELY_RANK` or
    better, or it won on other graphs (a prior score above the noise band: a mean of a few
    tenths of a percent is no win, and the shipped prior's fast min/max, +0.2%, which relaxes
    numerics, drew an opt-in verification of its own into a slow module's task). Evidence only
    adds moves: one that lost elsewhere is still screened where its rank says so (a lever of
    one graph loses on most others)."""
    return cold_rank(move)[0] <= LIKELY_RANK or (prior or {}).get(move, 0.0) > NOISE_BAND


def order_moves(moves: Sequence[Move], prior: dict[Move, float] | None = None) -> list[Move]:
    """`moves` best first: by the prior's score (mean log speedup seen elsewhere; unseen 0),
    then by `cold_rank`, then as given."""
    prior = prior or {}
    indexed = list(enumerate(moves))
    indexed.sort(key=lambda item: (-prior.get(item[1], 0.0), cold_rank(item[1]), item[0]))
    return [move for _, move in indexed]


class Scheduled(Strategy):
    """Neighbours by prior, then greedy combination, then `final` (see the module docstring);
    the moves of `skip` are no neighbours (`tuner.platform_prior`: slower on every zoo workload
    whose program they changed)."""

    name = "schedule"

    def __init__(self, final: Strategy, prior: dict[Move, float] | None = None,
                 reserve: int | None = None, skip: frozenset[Move] = frozenset()) -> None:
        super().__init__(final.space, final.budget, prior=final.prior)
        self.final = final
        reserve = max(2, final.budget // 4) if reserve is None else reserve
        moves = order_moves([m for m in neighbourhood(final.space) if m not in skip], prior)
        screen = [move for move in moves if likely(move, prior)]
        # The neighbours by tier: the cold-start screen, then the rest (`likely`).
        self.tiers = [screen, [move for move in moves if move not in screen]]
        # Evaluations the neighbour phase may spend; free (untimed) neighbours do not count.
        self.neighbour_evaluations = max(1, final.budget - reserve)

    def sample(self, history: list[TrialRecord],
               pending: Sequence[CompilerConfig] = ()) -> CompilerConfig | None:
        done = {config_key(t.config): t for t in history}
        waiting = {config_key(c) for c in pending}
        neighbours, spent = [], 0  # spent: timed neighbours, and pending ones (until known)
        for tier in self.tiers:
            capped = False
            for name, value in tier:
                config = {name: value}
                key = config_key(config)
                if key not in done and key not in waiting:
                    if spent >= self.neighbour_evaluations:
                        capped = True
                        break
                    return config
                spent += 1 if key in waiting else done[key].timed
                neighbours.append(config)
            if pending and any(config_key(c) in waiting for c in neighbours):
                return None  # combining needs every neighbour's result
            combined = self._combine(neighbours, done, waiting)
            if combined is not None:
                return combined or None  # {}: wait for a combination being measured
            climbed = _around_best(history, neighbours, done, waiting)
            if climbed is not None:
                return climbed
            if capped:
                break
        return self.final.sample(history, pending)

    def screened(self, history: list[TrialRecord]) -> bool:
        """Whether the cold-start screen is over: every move of the first tier tried, and the
        combinations of what the tier found (`_combine`) too."""
        done = {config_key(t.config): t for t in history}
        screen = [{name: value} for name, value in self.tiers[0]]
        return (all(config_key(c) in done for c in screen)
                and self._combine(screen, done, set()) is None)

    def _combine(self, neighbours: list[CompilerConfig], done: dict[str, TrialRecord],
                 waiting: set[str]) -> CompilerConfig | None:
        """The next combination to try; {} to wait for one being measured; None when done."""
        measured = [done[config_key(c)] for c in neighbours if config_key(c) in done]
        singles = _best_per_param([t for t in measured if t.low > NOISE_BAND])
        # A small gain can hide in a screen's noise alone and show on top of a big one, or add
        # up with other small ones (two 2.5% moves: a 5% config no single screen clears).
        hopeful = [t for t in _best_per_param([t for t in measured if t.fitness > 0])
                   if t.config.keys().isdisjoint(set().union(*(s.config for s in singles)))]
        chain = singles + hopeful[:HOPEFUL]
        if len(chain) < 2:
            return None
        current = chain[0]
        for single in chain[1:]:
            candidate = {**current.config, **single.config}
            key = config_key(candidate)
            if key in waiting:
                return {}
            if key not in done:
                return candidate
            if done[key].fitness > current.fitness:
                current = done[key]
        for first, second in itertools.combinations(singles[:PAIRS_OF], 2):
            candidate = {**first.config, **second.config}
            key = config_key(candidate)
            if key not in done and key not in waiting:
                return candidate
        return None


def _around_best(history: list[TrialRecord], neighbours: list[CompilerConfig],
                 done: dict[str, TrialRecord], waiting: set[str]) -> CompilerConfig | None:
    """The next untried one-move neighbour of the best config so far, by a move that changed the
    default's program (a timed single that ran), those that did least harm alone first; None
    when every one is tried or pending."""
    best = max(history, key=lambda t: t.fitness).config
    singles = [done[config_key(c)] for c in neighbours if config_key(c) in done]
    movers = sorted((t for t in singles if t.timed and t.fitness != FAILED),
                    key=lambda t: -t.fitness)  # stable: equal ones keep the schedule's order
    for single in movers:
        ((name, value),) = single.config.items()
        candidate = {**best, name: value}
        key = config_key(candidate)
        if best.get(name) != value and key not in done and key not in waiting:
            return candidate
    return None


def _best_per_param(singles: list[TrialRecord]) -> list[TrialRecord]:
    """Single-move trials, the best of each param, best first."""
    best: dict[str, TrialRecord] = {}
    for trial in singles:
        (name,) = trial.config
        if name not in best or trial.fitness > best[name].fitness:
            best[name] = trial
    return sorted(best.values(), key=lambda t: -t.fitness)
