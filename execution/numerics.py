"""Numeric check of a candidate's outputs against the default compile's outputs.

Tolerances depend on the dtype: library routing, vector width and fast-math legitimately move
float results by ~1e-7..1e-6 relative (1e-4 after an optimizer's division amplifies it), while
integers and booleans must match exactly. A NaN or Inf that the default did not produce is a
failure whatever the tolerance.

The default may not even agree with itself: a GPU's atomic reductions and scatters add in
whatever order their threads finish, so two runs of one executable differ. Its run-to-run
difference per output (`spread`: the same measure of error, between two runs of the default on
the same inputs) widens that output's tolerance to `SPREAD_FACTOR` times it when that is the
larger: a candidate is held to what the dtype allows, or to a few times what the default's own
runs differ by, whichever is looser. On CPU the runs agree exactly and nothing changes. The
factor is a prior until docs/gpu.md's A/A runs on a GPU measure the spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# (relative, absolute) tolerance by float width in bits; errors are measured against the scale
# of the default output so that values near zero do not dominate.
_FLOAT_TOLERANCE = {8: (1.5e-1, 1e-1), 16: (2e-2, 1e-2), 32: (2e-3, 1e-5), 64: (1e-9, 1e-12)}
# How many times the default's own run-to-run difference a candidate may differ by (docstring).
SPREAD_FACTOR = 4.0


@dataclass(frozen=True)
class OutputCheck:
    """The comparison of one output."""

    index: int
    ok: bool
    max_error: float  # relative to the default output's largest magnitude; integers: values that differ
    detail: str
    tolerance: float = 0.0  # the largest relative error a float output may have (0: exact)


def compare_outputs(default: list[np.ndarray], candidate: list[np.ndarray],
                    spread: Sequence[float] = ()) -> list[OutputCheck]:
    """Compare outputs pairwise, each float output within its dtype's tolerance or
    `SPREAD_FACTOR` times its `spread` (the default's own run-to-run error, by output; none:
    zero); a count or shape mismatch fails the whole comparison."""
    if len(default) != len(candidate):
        return [OutputCheck(-1, False, float("inf"),
                            f"{len(candidate)} outputs where the default has {len(default)}")]
    spreads = list(spread) + [0.0] * (len(default) - len(spread))
    return [_compare(i, np.asarray(a), np.asarray(b), spreads[i])
            for i, (a, b) in enumerate(zip(default, candidate))]


def all_ok(checks: list[OutputCheck]) -> bool:
    """True when every output passed."""
    return all(check.ok for check in checks)


def _compare(index: int, reference: np.ndarray, value: np.ndarray, spread: float) -> OutputCheck:
    if reference.shape != value.shape or reference.dtype != value.dtype:
        return OutputCheck(index, False, float("inf"),
                           f"{value.dtype}{list(value.shape)} vs default "
                           f"{reference.dtype}{list(reference.shape)}")
    if reference.dtype.kind in "biu" or reference.dtype.itemsize == 0:
        mismatches = int(np.count_nonzero(reference != value))
        return OutputCheck(index, mismatches == 0, float(mismatches),
                           f"{mismatches} of {reference.size} values differ" if mismatches else "exact")
    ref = reference.astype(np.complex128 if reference.dtype.kind == "c" else np.float64)
    val = value.astype(ref.dtype)
    ref_finite, val_finite = np.isfinite(ref), np.isfinite(val)
    new_nonfinite = int(np.count_nonzero(ref_finite & ~val_finite))
    if new_nonfinite:
        return OutputCheck(index, False, float("inf"),
                           f"{new_nonfinite} NaN/Inf values the default did not produce")
    if not np.array_equal(ref[~ref_finite], val[~ref_finite], equal_nan=True):
        return OutputCheck(index, False, float("inf"), "non-finite values differ from the default")
    both = ref_finite
    if not both.any():
        return OutputCheck(index, True, 0.0, "no finite values")
    rtol, atol = _FLOAT_TOLERANCE[_float_bits(reference.dtype)]
    if math.isfinite(spread):
        rtol = max(rtol, SPREAD_FACTOR * spread)
    scale = float(np.max(np.abs(ref[both])))
    error = float(np.max(np.abs(ref[both] - val[both])))
    relative = error / scale if scale > 0 else error
    ok = error <= atol or relative <= rtol
    return OutputCheck(index, ok, relative, f"max error {relative:.2e} of scale {scale:.3g}", rtol)


def _float_bits(dtype: np.dtype) -> int:
    bits = dtype.itemsize * 8
    if dtype.kind == "c":
        bits //= 2
    return min(_FLOAT_TOLERANCE, key=lambda width: abs(width - bits))
