"""Which flags matter: the effect of each flag and flag value on speed, from every trial.

The warehouse's `trials` table holds every config the tuner tried, with its measured speedup
over the default of its own graph. Per graph (kind, fingerprint, environment) the log speedup
is fitted with an additive model, one coefficient per flag value that the graph's trials set
and no intercept: the default config is each graph's reference, at log speedup 0. The fit is a
ridge least-squares solve (a small penalty keeps values that always appeared together
identifiable and pulls values seen once part-way to "no effect").

- A flag value's effect is its coefficient (in log speedup, shown as a speed factor), averaged
  over the graphs by how many of their trials set it.
- A flag's importance is the mean absolute Shapley value of the flag over the trials that set
  it, with the default config as the baseline. For an additive model Shapley values are exact
  and closed-form: a flag's share of a trial's prediction is its value's coefficient.
- Uncertainty: a percentile bootstrap over trials (resampled within each graph), refitting the
  model each time.

Why not a tree ensemble with permutation importance (scikit-learn)? A search leaves a few dozen
trials per graph, most of them one or two flags away from the default; a tree model would fit
the noise, while the additive model is the assumption the `model` strategy already makes and
gives per-value effects directly. Interactions between flags are not modelled: a flag that
only helps together with another shows up as a smaller effect of each.

Failed trials (no compile, crash, wrong numerics) carry no speedup: they are counted per flag
and value, not fitted. Winners are the configs of accepted tuning results.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from storage.home import Home
from storage.warehouse import Warehouse
from tuner.tables import TRIALS, TUNING_RESULTS, ResultRow, TrialRow, results_of, trials_of
from vocabulary.confidence import FLAG_LEVEL
from vocabulary.tuning import TrialOutcome

RIDGE = 0.1
RESAMPLES = 200
CONFIDENCE = FLAG_LEVEL  # the bootstrap interval's two-sided level

FlagValueKey = tuple[str, str]  # (flag, value as JSON text)


@dataclass(frozen=True)
class ValueEffect:
    """The estimated effect of setting a flag to one value."""

    value: str  # JSON text of the value
    effect: float | None  # on log speedup; None when every trial that set it failed
    low: float | None
    high: float | None
    trials: int  # trials that set it (failed ones included)
    failed: int
    winners: int  # accepted winners that set it

    @property
    def speedup(self) -> float | None:
        """The effect as a speed factor (>1: faster than the default)."""
        return None if self.effect is None else math.exp(self.effect)


@dataclass(frozen=True)
class FlagImportance:
    """How much a flag moves the speed of the trials that set it."""

    flag: str
    importance: float | None  # mean |Shapley value| in log speedup over the trials that set it
    low: float | None
    high: float | None
    trials: int
    failed: int
    winners: int
    values: list[ValueEffect] = field(default_factory=list)


@dataclass(frozen=True)
class FlagAnalysis:
    """The analysis of every trial in a warehouse."""

    trials: int
    usable: int  # trials with a speedup and correct numerics: the ones fitted
    failed: int
    graphs: int
    winners: int  # accepted tuning results
    flags: list[FlagImportance]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with each value's speed factor added."""
        data = asdict(self)
        for flag, original in zip(data["flags"], self.flags):
            for value, effect in zip(flag["values"], original.values):
                value["speedup"] = effect.speedup
        data.update(ridge=RIDGE, confidence=CONFIDENCE, resamples=RESAMPLES)
        return data


@dataclass(frozen=True)
class _Trial:
    graph: tuple[str, str, str]
    values: tuple[FlagValueKey, ...]
    log_speedup: float | None  # None: failed


def analyze_flags(home: Home, fingerprint: str | None = None, resamples: int = RESAMPLES,
                  seed: int = 0) -> FlagAnalysis:
    """Flag importances and per-value effects from the trials under `home` (only the graph
    `fingerprint` when given), flags by importance, most important first."""
    warehouse = Warehouse(home)
    return analyze_trials([t for t in trials_of(warehouse.read(TRIALS))
                           if fingerprint is None or t.fingerprint == fingerprint],
                          [r for r in results_of(warehouse.read(TUNING_RESULTS))
                           if fingerprint is None or r.fingerprint == fingerprint],
                          resamples, seed)


def analyze_trials(trial_rows: list[TrialRow], result_rows: list[ResultRow],
                   resamples: int = RESAMPLES, seed: int = 0) -> FlagAnalysis:
    """Flag importances and per-value effects from rows of the `trials` table (the winners from
    rows of `tuning_results`), flags by importance, most important first."""
    trials = [_trial(row) for row in trial_rows]
    winners = [_values(json.loads(row.config)) for row in result_rows if row.accepted]
    usable = [t for t in trials if t.log_speedup is not None]
    effects, importance = _estimate(usable)
    rng = np.random.default_rng(seed)
    boot_effects: dict[FlagValueKey, list[float]] = defaultdict(list)
    boot_importance: dict[str, list[float]] = defaultdict(list)
    for _ in range(resamples if usable else 0):
        sample_effects, sample_importance = _estimate(_resample(usable, rng))
        for key in effects:
            boot_effects[key].append(sample_effects.get(key, 0.0))
        for flag in importance:
            boot_importance[flag].append(sample_importance.get(flag, 0.0))
    counts = _counts(trials, winners)
    flags = []
    for flag in sorted({flag for flag, value in counts if value}):
        keys = sorted((k for k in counts if k[0] == flag and k[1]), key=lambda k: -abs(effects.get(k, 0.0)))
        values = [ValueEffect(key[1], effects.get(key), *_interval(boot_effects[key], effects.get(key)),
                              *counts[key]) for key in keys]
        score = importance.get(flag)
        flags.append(FlagImportance(flag, score, *_interval(boot_importance[flag], score),
                                    *counts[(flag, "")], values))
    flags.sort(key=lambda f: (f.importance is None, -(f.importance or 0.0)))
    return FlagAnalysis(trials=len(trials), usable=len(usable), failed=len(trials) - len(usable),
                        graphs=len({t.graph for t in trials}), winners=len(winners), flags=flags)


def _trial(row: TrialRow) -> _Trial:
    ok = row.outcome != TrialOutcome.FAILED and row.numerics_ok and row.speedup and row.speedup > 0
    return _Trial((row.kind, row.fingerprint, row.env_key), _values(json.loads(row.config)),
                  math.log(row.speedup) if ok and row.speedup else None)


def _values(config: dict[str, Any]) -> tuple[FlagValueKey, ...]:
    return tuple(sorted((name, json.dumps(value)) for name, value in config.items()))


def _estimate(trials: list[_Trial]) -> tuple[dict[FlagValueKey, float], dict[str, float]]:
    """Per-value effects (averaged over graphs, weighted by trials) and per-flag importance."""
    weighted: dict[FlagValueKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    shapley: dict[str, list[float]] = defaultdict(list)
    for group in _by_graph(trials):
        coefficients = _fit(group)
        for trial in group:
            for key in trial.values:
                weighted[key][0] += coefficients[key]
                weighted[key][1] += 1.0
                shapley[key[0]].append(abs(coefficients[key]))
    effects = {key: total / weight for key, (total, weight) in weighted.items()}
    return effects, {flag: float(np.mean(values)) for flag, values in shapley.items()}


def _by_graph(trials: list[_Trial]) -> list[list[_Trial]]:
    groups: dict[tuple[str, str, str], list[_Trial]] = defaultdict(list)
    for trial in trials:
        groups[trial.graph].append(trial)
    return list(groups.values())


def _fit(trials: list[_Trial]) -> dict[FlagValueKey, float]:
    """Ridge least squares of log speedup on flag-value indicators, no intercept."""
    columns = sorted({key for trial in trials for key in trial.values})
    index = {key: i for i, key in enumerate(columns)}
    design = np.zeros((len(trials), len(columns)))
    for row, trial in enumerate(trials):
        for key in trial.values:
            design[row, index[key]] = 1.0
    target = np.array([trial.log_speedup for trial in trials])
    gram = design.T @ design + RIDGE * np.eye(len(columns))
    solution = np.linalg.solve(gram, design.T @ target) if columns else np.zeros(0)
    return {key: float(solution[i]) for key, i in index.items()}


def _resample(trials: list[_Trial], rng: np.random.Generator) -> list[_Trial]:
    """A bootstrap sample: each graph's trials drawn with replacement, as many as it has."""
    sample = []
    for group in _by_graph(trials):
        sample += [group[i] for i in rng.integers(0, len(group), len(group))]
    return sample


def _interval(samples: list[float], estimate: float | None) -> tuple[float | None, float | None]:
    if estimate is None or not samples:
        return estimate, estimate
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def _counts(trials: list[_Trial], winners: list[tuple[FlagValueKey, ...]]) -> dict[FlagValueKey, tuple[int, int, int]]:
    """(trials, failed, winners) per flag value, and per flag under the value ""."""
    tally: Counter[tuple[FlagValueKey, str]] = Counter()
    for trial in trials:
        for flag, value in trial.values:
            for key in ((flag, value), (flag, "")):
                tally[key, "trials"] += 1
                tally[key, "failed"] += trial.log_speedup is None
    for config in winners:
        for flag, value in config:
            tally[(flag, value), "winners"] += 1
            tally[(flag, ""), "winners"] += 1
    return {key: (tally[key, "trials"], tally[key, "failed"], tally[key, "winners"])
            for key in {key for key, _ in tally}}


def format_analysis(analysis: FlagAnalysis, top: int | None = None) -> str:
    """The analysis as text: flags by importance, each with its values by effect."""
    lines = [f"{analysis.trials} trials ({analysis.usable} with a speedup, {analysis.failed} failed) "
             f"on {analysis.graphs} graph(s); {analysis.winners} accepted winner(s)",
             f"importance: mean |Shapley value| of the flag on log speedup over the trials that set it "
             f"(additive model per graph); effect: speed factor of the value vs the default; "
             f"[{CONFIDENCE:.0%} bootstrap interval]",
             f"{'flag / value':<48}{'importance / effect':>28}{'trials':>8}{'failed':>8}{'winners':>8}"]
    for flag in analysis.flags[:top]:
        estimate = (f"{flag.importance:.3f} [{flag.low:.3f}, {flag.high:.3f}]"
                    if flag.importance is not None else "all failed")
        lines.append(f"{flag.flag:<48}{estimate:>28}{flag.trials:>8}{flag.failed:>8}{flag.winners:>8}")
        for value in flag.values:
            estimate = (f"{value.speedup:.3f}x [{math.exp(value.low):.3f}, {math.exp(value.high):.3f}]"
                        if value.effect is not None and value.low is not None and value.high is not None
                        else "all failed")
            lines.append(f"  = {value.value:<44}{estimate:>28}{value.trials:>8}{value.failed:>8}"
                         f"{value.winners:>8}")
    return "\n".join(lines)
