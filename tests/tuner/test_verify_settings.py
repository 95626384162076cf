"""The verification's settings: a worker whose pairs leave no doubt stops at an early look, at
the claim's own error rate, and measured per device it stops only past the mode's bar."""

from __future__ import annotations

import math

import numpy as np
import pytest

from execution.measure import measure_pair
from execution.per_device import PER_DEVICE_ERROR
from execution.sharded import Placement
from hlo.environment import Partitioning
from tests.support.paired_runs import NOISES, first_decision, noisy_runners
from tuner.tune import VERIFY_SETTINGS, verify_settings
from vocabulary.confidence import VERIFIED_LEVEL
from vocabulary.measure import MeasureMode

PER_DEVICE = Placement(MeasureMode.PER_DEVICE, Partitioning(partitions=4, spmd=True))


@pytest.mark.parametrize("noise", sorted(NOISES))
def test_a_verification_decides_a_gain_at_the_noise_band_faster_no_more_often_than_its_claim_errs(noise):
    # A candidate whose true median ratio is the bar itself (1 + noise band): over every look, it
    # is decided faster at most (1 - VERIFIED_LEVEL) / 2 of the time.
    rng = np.random.default_rng(5)
    runs = 4000
    bar = math.log(1.0 + VERIFY_SETTINGS.noise_band)
    faster = sum(first_decision(bar + NOISES[noise](rng, 80), VERIFY_SETTINGS) == "decided faster"
                 for _ in range(runs)) / runs
    claimed = (1.0 - VERIFIED_LEVEL) / 2
    assert VERIFY_SETTINGS.early_alpha == pytest.approx(1.0 - VERIFIED_LEVEL)
    assert faster <= claimed + 3 * math.sqrt(claimed * (1 - claimed) / runs), faster


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clear_gain_is_verified_in_20_pairs_and_a_small_one_is_measured_to_a_tight_interval(seed):
    clear = measure_pair(*noisy_runners(1.3, seed), VERIFY_SETTINGS)
    assert (clear.stop_reason, clear.pairs, clear.significant) == ("decided faster", 20, True)
    assert clear.speedup.low > 1.0 + VERIFY_SETTINGS.noise_band
    small = measure_pair(*noisy_runners(1.02, seed), VERIFY_SETTINGS)
    assert small.stop_reason == "interval tight" and small.pairs > 80 and small.significant
    half_width = (small.speedup.high - small.speedup.low) / 2
    assert half_width <= VERIFY_SETTINGS.target_half_width * small.speedup.estimate


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measured_per_device_a_gain_under_the_mode_s_error_is_not_decided_early_nor_significant(seed):
    per_device = verify_settings(VERIFY_SETTINGS, PER_DEVICE)
    assert verify_settings(VERIFY_SETTINGS, Placement()) is VERIFY_SETTINGS
    assert per_device.noise_band == PER_DEVICE_ERROR
    # 1.06x: past the whole program's bar (1.01), under the per-device mode's (1.11).
    assert measure_pair(*noisy_runners(1.06, seed), VERIFY_SETTINGS).significant
    measured = measure_pair(*noisy_runners(1.06, seed), per_device)
    assert measured.stop_reason != "decided faster" and not measured.significant
    clear = measure_pair(*noisy_runners(1.5, seed), per_device)
    assert (clear.stop_reason, clear.pairs, clear.significant) == ("decided faster", 20, True)
