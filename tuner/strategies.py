"""Search strategies behind one interface, in the spirit of Optuna's samplers.

A strategy proposes the next config from the trials so far (`sample`); the search driver
(`propose`) asks until it gets a config never tried before, so no strategy repeats itself, and
every search starts from the compiler's default (trial 0, the reference, fitness 0). Fitness is
the log of the measured speedup; a failed, wrong or crashed trial scores FAILED.

- random: a few flags at random values, the rest default;
- anneal: simulated annealing over one-flag moves, Metropolis acceptance, cooling with the budget;
- evolution: regularized (aging) evolution, XTAT's default: tournament of 3 from the last P
  trials, mutate one or two flags of the winner;
- exhaustive: every config with one flag changed, then two, ... in a fixed order (small spaces);
- model: warm-starts from configs that won on similar graphs, then picks by an additive
  surrogate of each flag value's effect learned from all trials (this graph's and others').
"""

from __future__ import annotations

import itertools
import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator, Sequence

from execution.flags import CompilerConfig
from tuner.space import SearchSpace, config_key

FAILED = -1.0  # the fitness of a trial that failed, crashed or got the numerics wrong


@dataclass(frozen=True)
class TrialRecord:
    """What a strategy learns from one trial."""

    config: CompilerConfig
    fitness: float  # log(speedup); FAILED when it failed
    low: float = FAILED  # log of its interval's lower end: above log(1 + band), a sure gain
    # False when its program was known (the default's, or measured earlier in the search): it
    # cost a compile and no timing, and no evaluation of the budget (tuner.search).
    timed: bool = True


class Strategy(ABC):
    """Proposes configs for one search over `space` with `budget` evaluations."""

    name = ""

    def __init__(self, space: SearchSpace, budget: int, seed: int = 0,
                 prior: Sequence[TrialRecord] = ()) -> None:
        self.space, self.budget, self.prior = space, budget, list(prior)
        self.rng = random.Random(seed)

    @abstractmethod
    def sample(self, history: list[TrialRecord],
               pending: Sequence[CompilerConfig] = ()) -> CompilerConfig | None:
        """A config to try next, given the trials so far and the configs `pending` (proposed,
        being compiled or measured: like Optuna's running trials). The driver skips a config
        already tried or pending. None: nothing until a pending config's result is in."""

    def screened(self, history: list[TrialRecord]) -> bool:
        """Whether its cold-start screen of the likeliest moves is over, after which a search
        that has stalled may end before its budget (`tuner.search.Stall`). A strategy alone
        screens no likeliest moves first: never, and it runs its budget."""
        return False

    def mutate(self, config: CompilerConfig, changes: int = 1) -> CompilerConfig:
        """`config` with `changes` flags set to another value or back to the default."""
        mutated = dict(config)
        for param in self.rng.sample(self.space.params, min(changes, len(self.space.params))):
            options = [v for v in param.values if mutated.get(param.name) != v]
            # A param whose only value is set already can only go back to the default.
            if param.name in mutated and (not options or self.rng.random() < 0.25):
                del mutated[param.name]
            else:
                mutated[param.name] = self.rng.choice(options)
        return mutated


def random_config(space: SearchSpace, rng: random.Random) -> CompilerConfig:
    """About two flags at random values, the rest at the default."""
    probability = min(1.0, 2.0 / max(len(space.params), 1))
    return {p.name: rng.choice(p.values) for p in space.params if rng.random() < probability}


class RandomStrategy(Strategy):
    name = "random"

    def sample(self, history: list[TrialRecord], pending: Sequence[CompilerConfig] = ()) -> CompilerConfig:
        return random_config(self.space, self.rng)


class AnnealStrategy(Strategy):
    name = "anneal"
    start_temperature, end_temperature = 0.05, 0.002

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current: TrialRecord | None = None

    def sample(self, history: list[TrialRecord], pending: Sequence[CompilerConfig] = ()) -> CompilerConfig:
        if self.current is None:  # from the best so far (the default, or a schedule's best)
            self.current = max(history, key=lambda t: t.fitness)
        elif history[-1].fitness != FAILED:
            progress = min(1.0, len(history) / max(self.budget, 1))
            temperature = self.start_temperature * (self.end_temperature / self.start_temperature) ** progress
            delta = history[-1].fitness - self.current.fitness
            if delta >= 0 or self.rng.random() < math.exp(delta / temperature):
                self.current = history[-1]
        return self.mutate(self.current.config)


class EvolutionStrategy(Strategy):
    name = "evolution"
    tournament = 3

    def sample(self, history: list[TrialRecord], pending: Sequence[CompilerConfig] = ()) -> CompilerConfig:
        population = history[-max(4, min(10, self.budget // 4)):]
        best = max(history, key=lambda t: t.fitness)
        if best not in population:  # an earlier phase's best seeds the population
            population = [best, *population]
        contestants = self.rng.sample(population, min(self.tournament, len(population)))
        parent = max(contestants, key=lambda t: t.fitness)
        return self.mutate(parent.config, changes=self.rng.choice((1, 1, 2)))


class ExhaustiveStrategy(Strategy):
    name = "exhaustive"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._order = self.configs()

    def sample(self, history: list[TrialRecord], pending: Sequence[CompilerConfig] = ()) -> CompilerConfig:
        return next(self._order, {})

    def configs(self) -> Iterator[CompilerConfig]:
        """Every config but the default: one flag changed, then two, ..."""
        for changed in range(1, len(self.space.params) + 1):
            for params in itertools.combinations(self.space.params, changed):
                for values in itertools.product(*(p.values for p in params)):
                    yield {p.name: v for p, v in zip(params, values)}


class ModelStrategy(Strategy):
    """Warm start from winners elsewhere, then an additive surrogate with an exploration bonus."""

    name = "model"
    exploration = 0.05
    prior_weight = 0.5  # trials of other graphs count half

    def sample(self, history: list[TrialRecord], pending: Sequence[CompilerConfig] = ()) -> CompilerConfig:
        tried = {config_key(t.config) for t in history} | {config_key(c) for c in pending}
        for trial in sorted(self.prior, key=lambda t: -t.fitness):
            if trial.fitness > 0 and config_key(trial.config) not in tried:
                return dict(trial.config)
        effects = self._effects(history)
        best = max(history, key=lambda t: t.fitness).config
        candidates = [self.mutate(best, self.rng.choice((1, 2))) for _ in range(64)]
        candidates += [random_config(self.space, self.rng) for _ in range(16)]
        # Score only untried candidates: the best-scoring one is often tried already, and
        # asking again would redraw until `propose` gives up and falls back to random configs.
        untried = [c for c in candidates if config_key(c) not in tried] or candidates
        return max(untried, key=lambda c: self._score(c, effects))

    def _effects(self, history: list[TrialRecord]) -> dict[tuple[str, str], tuple[float, float]]:
        """Per (flag, value): (weighted mean fitness of trials that set it, total weight)."""
        sums: dict[tuple[str, str], list[float]] = {}
        for weight, trials in ((1.0, history), (self.prior_weight, self.prior)):
            for trial in trials:
                for name, value in trial.config.items():
                    entry = sums.setdefault((name, repr(value)), [0.0, 0.0])
                    entry[0] += weight * trial.fitness
                    entry[1] += weight
        return {key: (total / weight, weight) for key, (total, weight) in sums.items()}

    def _score(self, config: CompilerConfig, effects: dict) -> float:
        score = 0.0
        for name, value in config.items():
            mean, weight = effects.get((name, repr(value)), (0.0, 0.0))
            score += mean + self.exploration / math.sqrt(weight + 1.0)
        return score


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (RandomStrategy, AnnealStrategy, EvolutionStrategy,
                              ExhaustiveStrategy, ModelStrategy)
}


def propose(strategy: Strategy, history: list[TrialRecord],
            pending: Sequence[CompilerConfig] = (), attempts: int = 200) -> CompilerConfig | None:
    """The strategy's next config that no trial has had yet and none `pending` (proposed, not
    yet measured) has. A strategy stuck where every neighbour was tried gets a random untried
    config instead, then the first untried one in enumeration order; None when the whole
    space has been tried, or when the strategy waits for a `pending` result."""
    tried = {config_key(t.config) for t in history} | {config_key(c) for c in pending}
    samplers = ([lambda: strategy.sample(history, pending)] * attempts
                + [lambda: random_config(strategy.space, strategy.rng)] * attempts)
    for sample in samplers:
        config = sample()
        if config is None and pending:
            return None  # the strategy waits for a result
        if config is not None and config_key(config) not in tried:
            return config
    enumeration = ExhaustiveStrategy(strategy.space, strategy.budget)
    return next((c for c in enumeration.configs() if config_key(c) not in tried), None)
