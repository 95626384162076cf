"""The race's and the pruning's comparisons (`tuner.tune.COMPARE_SETTINGS`): a worker whose pairs
leave no doubt stops at an early look, and two programs within the noise band of each other are
stopped early no more often than the looks' error rate, so they are measured as before."""

from __future__ import annotations

import math

import numpy as np
import pytest

from execution.measure import measure_pair
from tests.support.paired_runs import NOISES, first_decision, noisy_runners
from tuner.tune import COMPARE_SETTINGS
from vocabulary.confidence import SCREENED_LEVEL

EARLY = {"decided faster", "decided slower", "below the incumbent"}


@pytest.mark.parametrize("noise", sorted(NOISES))
@pytest.mark.parametrize("edge", ["equal", "at the noise band"])
def test_programs_within_the_noise_band_of_each_other_are_rarely_stopped_early(noise, edge):
    # A true median ratio of 1, or of 1 + the noise band: over every look, each side's early
    # decision is taken at most early_alpha / 2 of the time, so a close comparison runs to its
    # tight interval or its time, as it did without the looks.
    rng = np.random.default_rng(11)
    true = 0.0 if edge == "equal" else math.log1p(COMPARE_SETTINGS.noise_band)
    runs = 4000
    decisions = [first_decision(true + NOISES[noise](rng, 30), COMPARE_SETTINGS) for _ in range(runs)]
    claimed = COMPARE_SETTINGS.early_alpha / 2
    assert COMPARE_SETTINGS.early_alpha == pytest.approx(1.0 - SCREENED_LEVEL)
    slack = 3 * math.sqrt(claimed * (1 - claimed) / runs)
    for side in ("decided faster", "decided slower"):
        assert decisions.count(side) / runs <= claimed + slack, (side, decisions.count(side))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clear_difference_stops_at_the_first_look_and_a_close_one_is_measured_on(seed):
    # Undoing a change worth 1.3x: slower, decided at 10 pairs; a challenger 1.3x faster: faster.
    undone = measure_pair(*noisy_runners(1 / 1.3, seed), COMPARE_SETTINGS)
    assert (undone.stop_reason, undone.pairs) == ("decided slower", 10)
    assert undone.speedup.high < 1.0
    faster = measure_pair(*noisy_runners(1.3, seed), COMPARE_SETTINGS)
    assert (faster.stop_reason, faster.pairs) == ("decided faster", 10)
    # Two programs 0.5% apart: no look decides them; measured past every look, as before.
    close = measure_pair(*noisy_runners(1.005, seed), COMPARE_SETTINGS)
    assert close.stop_reason not in EARLY and close.pairs > max(COMPARE_SETTINGS.early_looks)
