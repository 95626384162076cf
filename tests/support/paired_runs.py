"""Simulated paired timings for the measurement's early looks (tests/tuner/test_verify_settings.py,
tests/tuner/test_compare_settings.py): per-pair log ratios under noise of a given shape, the first
early decision over them, and runners of a default and a candidate under noise."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from execution.measure import MeasureSettings, Runner, early_decision

# Per-pair log-ratio noise of median 0, as `draw(rng, pairs)`: the looks' error rate holds for
# any continuous distribution, so the tests try a light-tailed, a heavy-tailed and a skewed one.
NOISES: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "normal": lambda rng, n: rng.normal(0, 0.05, n),
    "heavy tails": lambda rng, n: rng.standard_t(2, n) * 0.05,
    "skewed": lambda rng, n: (rng.lognormal(0, 1, n) - 1.0) * 0.05,
}


def first_decision(log_ratios: np.ndarray, settings: MeasureSettings) -> str | None:
    """The first early decision `settings`' looks take over the pairs' `log_ratios` (None: none)."""
    return next((d for n in range(1, len(log_ratios) + 1)
                 if (d := early_decision(log_ratios[:n], settings))), None)


def noisy_runners(ratio: float, seed: int) -> tuple[Runner, Runner]:
    """A default of 10 ms a run and a candidate `ratio` times faster, each run slowed by noise
    of some 8% (no time passes)."""
    rng = np.random.default_rng(seed)

    def runner(seconds: float) -> Runner:
        return lambda repeats: sum(seconds * math.exp(abs(rng.normal(0, 0.1))) for _ in range(repeats))

    return runner(0.01), runner(0.01 / ratio)
