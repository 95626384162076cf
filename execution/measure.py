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
Its error rate, stated and tested (tests/test_schedule.py): at each look the interval's upper
end falls below the candidate's true median ratio with probability at most early_alpha / (2L),
so over all looks together a candidate whose true median ratio is 1 is decided faster with
probability at most early_alpha / 2, and one whose true median ratio is at least the threshold
(1, or `stop_below`) is stopped below it with probability at most early_alpha / 2, whatever
the noise's distribution, as long as pairs are independent (the interval's coverage is exact
for any continuous distribution, and the union bound covers the looks).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import binom

from vocabulary.interval import Interval

# Runs the executable `n` times back to back and returns the elapsed seconds.
Runner = Callable[[int], float]


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


@dataclass(frozen=True)
class Measurement:
    """The speedup of the candidate over the default (>1: candidate faster), with its interval."""

    speedup: Interval
    pairs: int
    default_seconds: float  # median seconds per execution
    candidate_seconds: float
    significant: bool  # ci_low above 1 + noise band
    stop_reason: str


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
    tail = (1.0 - confidence) / 2.0
    # The largest k with P(Binomial(n, 1/2) < k) <= tail: [x_(k), x_(n+1-k)] covers the median.
    k = int(binom.ppf(tail, n, 0.5))  # the smallest k with P(B <= k) >= tail
    k = max(1, k + 1 if binom.cdf(k, n, 0.5) <= tail else k)
    low, high = ordered[k - 1], ordered[n - k]
    return Interval(math.exp(float(np.median(ordered))), math.exp(float(low)),
                    math.exp(float(high)))


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


def measure_pair(run_default: Runner, run_candidate: Runner, settings: MeasureSettings) -> Measurement:
    """Time default vs candidate interleaved until the speedup's interval settles, or for
    `settings.max_seconds` times `time_scale()`."""
    started = time.perf_counter()
    limit = settings.max_seconds * time_scale()
    warm = _warm_up(run_default, run_candidate, settings.warmup_runs)
    repeats = max(1, math.ceil(settings.min_sample_seconds / max(warm, 1e-7)))
    default_times: list[float] = []
    candidate_times: list[float] = []
    stop_reason = "max pairs"
    while len(default_times) < settings.max_pairs:
        if len(default_times) % 2 == 0:
            a = run_default(repeats)
            b = run_candidate(repeats)
        else:
            b = run_candidate(repeats)
            a = run_default(repeats)
        default_times.append(a / repeats)
        candidate_times.append(b / repeats)
        n = len(default_times)
        decided = early_decision(_log_ratios(default_times, candidate_times), settings)
        if decided:
            stop_reason = decided
            break
        if n < settings.min_pairs or (n - settings.min_pairs) % settings.batch_pairs:
            continue
        interval = _interval(default_times, candidate_times, settings)
        half_width = (interval.high - interval.low) / 2.0
        tight = half_width <= settings.target_half_width * interval.estimate
        # A tight interval across the noise band decides nothing: a small gain needs more pairs.
        conclusive = (interval.low > 1.0 + settings.noise_band
                      or interval.high < 1.0 + settings.noise_band)
        if tight and conclusive:
            stop_reason = "interval tight"
            break
        # Not on the first batches: a short burst of load can make a few pairs look one-sided.
        if settings.stop_when_no_gain and interval.high < 1.0 + settings.noise_band \
                and n >= 2 * settings.min_pairs:
            stop_reason = "clearly no gain"
            break
        if time.perf_counter() - started > limit:
            stop_reason = "time budget"
            break
    speedup = _interval(default_times, candidate_times, settings)
    return Measurement(
        speedup=speedup,
        pairs=len(default_times),
        default_seconds=float(np.median(default_times)),
        candidate_seconds=float(np.median(candidate_times)),
        significant=speedup.low > 1.0 + settings.noise_band,
        stop_reason=stop_reason,
    )


def _warm_up(run_default: Runner, run_candidate: Runner, runs: int) -> float:
    """Up to `runs` warm-up runs of each (at least one); one is enough for a program that runs
    for long (caches and the thread pool are warm after it), and saves seconds per screen.
    Returns the faster of the last pair's times: what sets the repeats per sample, with no runs
    of its own (on a slow module two runs are a second)."""
    for done in range(max(runs, 1)):
        default, candidate = run_default(1), run_candidate(1)
        if max(default, candidate) * (done + 1) > 0.2:
            break
    return min(default, candidate)


def _log_ratios(default_times: list[float], candidate_times: list[float]) -> np.ndarray:
    return np.log(np.asarray(default_times)) - np.log(np.asarray(candidate_times))


def _interval(default_times: list[float], candidate_times: list[float],
              settings: MeasureSettings) -> Interval:
    return median_interval(_log_ratios(default_times, candidate_times), settings.confidence)
