"""Paired, interleaved timing of a default and a candidate, and its statistics.

The machine is shared and noisy, so one time means nothing: after warm-ups, default (A) and
candidate (B) run in alternating order (A B, B A, ...) in the same process, each sample repeats
the executable long enough to be timed well, and the speedup is the median of the per-pair
ratios A/B with a distribution-free (order-statistic) confidence interval. Pairs are added in
batches until the interval is tight enough and wholly on one side of the noise band, clearly
shows no gain, or the time budget is spent. A speedup counts only when the whole interval clears
the noise band.

Early decisions (a search's screens, `MeasureSettings.early_looks`): a candidate far from the
default is clear after a few pairs, and a slow module pays seconds per pair. At each look, after
n pairs for n in `early_looks`, the median's order-statistic interval is taken at confidence
1 - early_alpha / L (L looks: Bonferroni), and the measurement stops when that interval lies
wholly above 1 + noise_band ("decided faster"), wholly below 1 ("decided slower"), or wholly
below `stop_below` ("below the incumbent": a search's best so far, its screen's lower end, which
this candidate cannot beat; sequential testing against the incumbent, not only the default).
Its error rate, stated and tested (tests/tuner/test_schedule.py): at each look the interval's upper
end falls below the candidate's true median ratio with probability at most early_alpha / (2L),
so over all looks together a candidate whose true median ratio is 1 is decided faster with
probability at most early_alpha / 2, and one whose true median ratio is at least the threshold
(1, or `stop_below`) is stopped below it with probability at most early_alpha / 2, whatever
the noise's distribution, as long as pairs are independent (the interval's coverage is exact
for any continuous distribution, and the union bound covers the looks).

Catastrophic candidates (a search's screens, `MeasureSettings.catastrophe_ratio`, R): some
configs are many times slower than the default (no backend optimization, for one), and on a
module that runs for a second ten pairs of one cost a minute. Two rules stop them early; neither
acts in a comparison or a verification (R is None there: they compare near-equal programs).
- The rule: a candidate is stopped ("catastrophic") at its CATASTROPHE_RUNS-th (second) run,
  warm-up runs included, when each of its runs took more than R times the slowest run of the
  default so far, where every run of the default took CATASTROPHE_MIN_SECONDS or more. It is
  decided then, once: the runs so far are A B A B (two warm-up pairs, or one and the first
  timed pair), a default's run between the candidate's two; a candidate it does not stop then,
  it never stops (the candidate's fastest run only gets faster, the default's slowest slower).
- Its error rate: for a candidate whose true ratio is 1 to be stopped (or one faster than the
  default, as one near an incumbent above 1 is: harder still), each of its two runs must be
  slowed more than R-fold against the slowest of the default's runs around it, the one between
  them included. One stall of one run cannot do it, however long; nor can one burst of load,
  which slows the default's run between as well: it takes two stalls, each longer than R - 1
  times a run, that hit the candidate's two runs and spare the default's. Where single runs are slowed
  more than R-fold independently with probability p, the rate is at most p squared. Programs
  faster than CATASTROPHE_MIN_SECONDS are left out: a scheduler's slice of a few milliseconds
  multiplies a run of one, so p is large there, and ten pairs of them cost little anyway. The
  A/A figures of a loaded machine (p and the largest statistic seen) are in docs/tuner.md;
  simulated noise in tests/tuner/test_schedule.py. A candidate stopped is slower than the default in
  every pairing of its runs with the default's, by more than R: its decision, slower, stands.
- Its interval, from the runs it has (one or two pairs, warm-ups included): the median default
  run over the median candidate run, between the fastest default run over the slowest candidate
  run and the slowest default run over the fastest candidate run: every ratio of a default run
  to a candidate run lies in it. It lies wholly below 1 / R, so a search treats the candidate as
  slower; it is the range of what was seen, not an interval at `confidence`.
- Its time budget: where R is set, the candidate's timed runs may take at most R times the
  default's share of a screen (min_pairs of the default's median run, or half the time budget,
  whichever is longer); past it the screen stops ("time budget"), before min_pairs if need be.
  A candidate R times slower than the default or less reaches its min_pairs first; a slower one
  that the rule let go (a slow run of the default) costs its warm-up run, R times the default's
  share and one run more, not its slowness times a screen.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from vocabulary.interval import Interval

# Runs the executable `n` times back to back and returns the elapsed seconds.
Runner = Callable[[int], float]

# The catastrophe rule (module docstring): decided at the candidate's second run, and only where
# the default's runs take 20 ms or more (shorter ones are tripled by a scheduler's slice).
CATASTROPHE_RUNS = 2
CATASTROPHE_MIN_SECONDS = 0.02


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure. Defaults are tuned for a 2-core shared machine."""

    warmup_runs: int = 3
    min_pairs: int = 20
    batch_pairs: int = 20
    # A cap, not the budget: a pair takes at least 2 x min_sample_seconds, so a 30 s budget ends
    # first. A fast module's small gain needs thousands of pairs on a loaded machine.
    max_pairs: int = 4000
    min_sample_seconds: float = 0.004
    max_seconds: float = 30.0
    confidence: float = 0.99
    target_half_width: float = 0.015  # relative half width of the interval that is tight enough
    noise_band: float = 0.01  # a gain must clear 1 + noise_band at the interval's lower end
    early_looks: tuple[int, ...] = ()  # pair counts at which a clear candidate stops (docstring)
    early_alpha: float = 0.01  # the early decisions' total error rate, both sides together
    # At an early look, stop a candidate whose interval lies wholly below this speedup (the
    # search's incumbent: see the module docstring); None: only the default's tests.
    stop_below: float | None = None
    # Stop once the interval clearly shows no gain (its upper end below 1 + noise_band). Off for
    # a comparison of two candidates (tuner.winner), whose figure below 1 matters as much: it
    # runs until its interval is tight, or its time is spent.
    stop_when_no_gain: bool = True
    # Stop a candidate far slower than the default at its second run, and bound a slow
    # candidate's time by the default's (module docstring): this many times the default's
    # slowest run. A search's screens; None (off) for comparisons of near-equal programs.
    catastrophe_ratio: float | None = None


@dataclass(frozen=True)
class Measurement:
    """The speedup of the candidate over the default (>1: candidate faster), with its interval."""

    speedup: Interval
    pairs: int
    default_seconds: float  # median seconds per execution
    candidate_seconds: float
    significant: bool  # ci_low above 1 + noise band
    # why it stopped: interval tight, clearly no gain, time budget, max pairs, decided faster,
    # decided slower, below the incumbent, catastrophic (the module docstring)
    stop_reason: str
    # How many times the candidate's executable ran, warm-ups included (a sample of a fast
    # module repeats it; not EvaluationResult.candidate_runs, whether a candidate runs a module
    # whose default fails).
    candidate_runs: int = 0


TIME_SCALE_VARIABLE = "FDO_MEASURE_SCALE"
TIME_SCALE_RANGE = (0.05, 20.0)


def time_scale() -> float:
    """The factor on every measurement's time budget (`MeasureSettings.max_seconds`), from
    $FDO_MEASURE_SCALE (default 1): below 1 a quicker, wider look (the test suite runs at 0.4:
    tests/conftest.py), above 1 a longer one on a noisy machine. ValueError naming the variable
    when it is not a number in TIME_SCALE_RANGE."""
    text = os.environ.get(TIME_SCALE_VARIABLE, "").strip()
    if not text:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    low, high = TIME_SCALE_RANGE
    if not low <= scale <= high:  # a NaN fails too
        raise ValueError(f"{TIME_SCALE_VARIABLE}={text!r}: not a number from {low} to {high}")
    return scale


def median_interval(log_ratios: np.ndarray, confidence: float) -> Interval:
    """Median of the per-pair ratios and its distribution-free interval, as ratios.

    The interval runs between the order statistics that a Binomial(n, 1/2) count puts around
    the median: exact coverage for independent pairs, with no small-sample optimism (a
    percentile bootstrap of a median is too narrow at 20 pairs).
    """
    ordered = np.sort(log_ratios)
    n = len(ordered)
    k = _order_statistic(n, (1.0 - confidence) / 2.0)
    low, high = ordered[k - 1], ordered[n - k]
    return Interval(math.exp(float(np.median(ordered))), math.exp(float(low)),
                    math.exp(float(high)))


@functools.cache
def _order_statistic(n: int, tail: float) -> int:
    """The largest k with P(Binomial(n, 1/2) < k) <= tail, at least 1: [x_(k), x_(n+1-k)]
    covers the median."""
    # Counted exactly in integers (outcomes out of 2**n): no rounding at the boundary, and no
    # scipy.stats, whose import is 0.45 s at the start of every command and worker that measures.
    limit = Fraction(tail) * (1 << n)
    k, count, below = 0, 1, 1  # `below`: the outcomes with B <= k; `count`: C(n, k)
    while k < n and below <= limit:
        k += 1
        count = count * (n - k + 1) // k
        below += count
    return max(1, k)


def early_decision(log_ratios: np.ndarray, settings: MeasureSettings) -> str | None:
    """'decided slower', 'below the incumbent' or 'decided faster' when the pairs so far, at
    one of the settings' early looks, leave no doubt (see the module docstring); None
    otherwise. A candidate faster than the default but wholly below the incumbent stops as
    below the incumbent."""
    if len(log_ratios) not in settings.early_looks:
        return None
    confidence = 1.0 - settings.early_alpha / len(settings.early_looks)
    interval = median_interval(np.asarray(log_ratios), confidence)
    if interval.high < 1.0:
        return "decided slower"
    if settings.stop_below is not None and interval.high < settings.stop_below:
        return "below the incumbent"
    if interval.low > 1.0 + settings.noise_band:
        return "decided faster"
    return None


def catastrophic(default_runs: Sequence[float], candidate_runs: Sequence[float],
                 ratio: float | None) -> bool:
    """Whether the rule of the module docstring stops a candidate now: `ratio` set, its
    CATASTROPHE_RUNS-th run just done (`candidate_runs`, seconds per execution, warm-ups
    included), the default's runs so far (`default_runs`) all CATASTROPHE_MIN_SECONDS or more,
    and every run of the candidate more than `ratio` times the default's slowest."""
    if ratio is None or len(candidate_runs) != CATASTROPHE_RUNS or not default_runs:
        return False
    if min(default_runs) < CATASTROPHE_MIN_SECONDS:
        return False
    return min(candidate_runs) > ratio * max(default_runs)


def range_interval(default_runs: Sequence[float], candidate_runs: Sequence[float]) -> Interval:
    """The speedups that the runs so far span (a catastrophic candidate's interval, module
    docstring): the median default run over the median candidate run, between the fastest
    default run over the slowest candidate run and the slowest over the fastest."""
    return Interval(float(np.median(default_runs)) / float(np.median(candidate_runs)),
                    min(default_runs) / max(candidate_runs), max(default_runs) / min(candidate_runs))


class _Runs:
    """Both runners, and every run of each so far, in seconds per execution (a warm-up run is one
    execution, a sample `repeats`), with the candidate's executions and their seconds in the
    timed pairs."""

    def __init__(self, run_default: Runner, run_candidate: Runner) -> None:
        self.run_default, self.run_candidate = run_default, run_candidate
        self.default: list[float] = []
        self.candidate: list[float] = []
        self.candidate_runs = 0
        self.candidate_timed_seconds = 0.0  # in the timed pairs, not the warm-ups

    def default_run(self, repeats: int) -> float:
        seconds = self.run_default(repeats) / repeats
        self.default.append(seconds)
        return seconds

    def candidate_run(self, repeats: int, timed: bool) -> float:
        elapsed = self.run_candidate(repeats)
        self.candidate.append(elapsed / repeats)
        self.candidate_runs += repeats
        self.candidate_timed_seconds += elapsed if timed else 0.0
        return elapsed / repeats

    def catastrophic(self, settings: MeasureSettings) -> bool:
        return catastrophic(self.default, self.candidate, settings.catastrophe_ratio)

    def over_budget(self, settings: MeasureSettings, limit: float) -> bool:
        """Whether the candidate's timed runs took more than the catastrophe ratio times the
        default's share of a screen (module docstring); never without a ratio."""
        if settings.catastrophe_ratio is None:
            return False
        share = max(settings.min_pairs * float(np.median(self.default)), limit / 2.0)
        return self.candidate_timed_seconds > settings.catastrophe_ratio * share


def measure_pair(run_default: Runner, run_candidate: Runner, settings: MeasureSettings) -> Measurement:
    """Time default vs candidate interleaved until the speedup's interval settles, or for
    `settings.max_seconds` times `time_scale()`; a catastrophic candidate (a screen's,
    `settings.catastrophe_ratio`) stops at its second run (module docstring)."""
    started = time.perf_counter()
    limit = settings.max_seconds * time_scale()
    runs = _Runs(run_default, run_candidate)
    warm = _warm_up(runs, settings)
    repeats = max(1, math.ceil(settings.min_sample_seconds / max(warm, 1e-7)))
    default_times: list[float] = []
    candidate_times: list[float] = []
    stop_reason: str | None = "catastrophic" if runs.catastrophic(settings) else None
    while stop_reason is None and len(default_times) < settings.max_pairs:
        if len(default_times) % 2 == 0:
            a = runs.default_run(repeats)
            b = runs.candidate_run(repeats, timed=True)
        else:
            b = runs.candidate_run(repeats, timed=True)
            a = runs.default_run(repeats)
        default_times.append(a)
        candidate_times.append(b)
        stop_reason = _stop(runs, default_times, candidate_times, settings,
                            time.perf_counter() - started > limit, limit)
    if stop_reason == "catastrophic":
        speedup = range_interval(runs.default, runs.candidate)
        default_seconds, candidate_seconds = np.median(runs.default), np.median(runs.candidate)
    else:
        speedup = _interval(default_times, candidate_times, settings)
        default_seconds, candidate_seconds = np.median(default_times), np.median(candidate_times)
    return Measurement(
        speedup=speedup,
        pairs=len(default_times),
        default_seconds=float(default_seconds),
        candidate_seconds=float(candidate_seconds),
        significant=speedup.low > 1.0 + settings.noise_band,
        stop_reason=stop_reason or "max pairs",
        candidate_runs=runs.candidate_runs,
    )


def _stop(runs: _Runs, default_times: list[float], candidate_times: list[float],
          settings: MeasureSettings, late: bool, limit: float) -> str | None:
    """Why the measurement stops after its latest pair (None: it goes on): a catastrophic
    candidate, an early decision, a slow candidate's time spent, or, at the end of a batch, a
    tight and conclusive interval, clearly no gain, or the time budget spent (`late`)."""
    n = len(default_times)
    if runs.catastrophic(settings):
        return "catastrophic"
    decided = early_decision(_log_ratios(default_times, candidate_times), settings)
    if decided:
        return decided
    if runs.over_budget(settings, limit):
        return "time budget"
    if n < settings.min_pairs or (n - settings.min_pairs) % settings.batch_pairs:
        return None
    interval = _interval(default_times, candidate_times, settings)
    half_width = (interval.high - interval.low) / 2.0
    tight = half_width <= settings.target_half_width * interval.estimate
    # A tight interval across the noise band decides nothing: a small gain needs more pairs.
    conclusive = interval.low > 1.0 + settings.noise_band or interval.high < 1.0 + settings.noise_band
    if tight and conclusive:
        return "interval tight"
    # Not on the first batches: a short burst of load can make a few pairs look one-sided.
    if settings.stop_when_no_gain and interval.high < 1.0 + settings.noise_band and n >= 2 * settings.min_pairs:
        return "clearly no gain"
    return "time budget" if late else None


def _warm_up(runs: _Runs, settings: MeasureSettings) -> float:
    """Up to `settings.warmup_runs` warm-up runs of each (at least one); one is enough for a
    program that runs for long (caches and the thread pool are warm after it), and saves seconds
    per screen; none after the one that makes the candidate catastrophic. Returns the faster of
    the last pair's times: what sets the repeats per sample, with no runs of its own (on a slow
    module two runs are a second)."""
    for done in range(max(settings.warmup_runs, 1)):
        default, candidate = runs.default_run(1), runs.candidate_run(1, timed=False)
        if max(default, candidate) * (done + 1) > 0.2 or runs.catastrophic(settings):
            break
    return min(default, candidate)


def _log_ratios(default_times: list[float], candidate_times: list[float]) -> np.ndarray:
    return np.log(np.asarray(default_times)) - np.log(np.asarray(candidate_times))


def _interval(default_times: list[float], candidate_times: list[float],
              settings: MeasureSettings) -> Interval:
    return median_interval(_log_ratios(default_times, candidate_times), settings.confidence)
