"""Numeric check of a candidate's outputs against the default compile's outputs.

Tolerances depend on the dtype: library routing, vector width and fast-math legitimately move
float results by ~1e-7..1e-6 relative, while integers and booleans must match exactly. A NaN or
Inf that the default did not produce is a failure whatever the tolerance.

Some outputs are ill-conditioned: an optimizer's update over a tiny second moment, a variance
taken as the difference of two large means, a softmax over huge logits. There the last-bit
change that reordering a sum makes is amplified into a large one, by the program, not by the
compiler: the default moves as much when its own inputs move by a last bit. So the default is
also run on its inputs perturbed by their dtype's epsilon (`execution.inputs.perturbed`), and
how far each output moves (its `sensitivity`, measured as the error below) widens that output's
tolerance to `SPREAD_FACTOR` times it when that is the larger. Likewise the default may not
agree with itself: a GPU's atomic reductions and scatters add in whatever order their threads
finish, so two runs of one executable differ (its `spread`, the same measure between two runs
on the same inputs). A candidate is held to what the dtype allows, or to a few times what the
default itself moves by (run to run, or under a last-bit change of its inputs), whichever is
looser. A well-conditioned output keeps its dtype's tolerance; on a CPU the spread is zero.

Whether a candidate's numerics fail is decided over sets of inputs (`judge`, docs/tuner.md):
random inputs can make a program ill-conditioned where real ones are not, and a decision that
flips with the seed is noise. A failure on one set of inputs is checked again on `RECHECKS`
more (`recheck`); the candidate fails only where the failure holds up: on most of the sets of
inputs checked, or decisively on any (a NaN or Inf the default did not produce, or outputs of
another count, shape or dtype: no input excuses those).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# (relative, absolute) tolerance by float width in bits; errors are measured against the scale
# of the default output so that values near zero do not dominate.
_FLOAT_TOLERANCE = {8: (1.5e-1, 1e-1), 16: (2e-2, 1e-2), 32: (2e-3, 1e-5), 64: (1e-9, 1e-12)}
# How many times the default's own movement (run-to-run spread, or sensitivity to a last-bit
# change of its inputs) a candidate may differ by (docstring; docs/tuner.md has the figures).
SPREAD_FACTOR = 4.0
# Sets of inputs a failure is checked on again before it decides (`recheck`).
RECHECKS = 2
# Runs of the default on inputs moved by a last bit whose largest movement is an output's
# sensitivity: one run's can miss, by chance, the elements where the program amplifies most.
PROBES = 2


@dataclass(frozen=True)
class OutputCheck:
    """The comparison of one output."""

    index: int
    ok: bool
    max_error: float  # relative to the default output's largest magnitude; integers: values that differ
    detail: str
    tolerance: float = 0.0  # the largest error this output may have (0: exact)
    # No other inputs excuse this failure: a NaN/Inf the default did not produce, or an output
    # of another count, shape or dtype.
    decisive: bool = False


def compare_outputs(default: list[np.ndarray], candidate: list[np.ndarray],
                    spread: Sequence[float] = (),
                    sensitivity: Sequence[float] = ()) -> list[OutputCheck]:
    """Compare outputs pairwise, each within its dtype's tolerance or `SPREAD_FACTOR` times the
    larger of its `spread` (the default's own run-to-run error, by output) and its
    `sensitivity` (the default's error under a last-bit change of its inputs, by output; none:
    zero); a count or shape mismatch fails the whole comparison."""
    if len(default) != len(candidate):
        return [OutputCheck(-1, False, float("inf"),
                            f"{len(candidate)} outputs where the default has {len(default)}",
                            decisive=True)]
    moves = [max(a, b) for a, b in zip(_padded(spread, len(default)),
                                       _padded(sensitivity, len(default)))]
    return [_compare(i, np.asarray(a), np.asarray(b), moves[i])
            for i, (a, b) in enumerate(zip(default, candidate))]


def all_ok(checks: list[OutputCheck]) -> bool:
    """True when every output passed."""
    return all(check.ok for check in checks)


def movement(reference: list[np.ndarray], moved: list[np.ndarray]) -> list[float]:
    """How far each output of `moved` lies from `reference` (two runs of the default: on the
    same inputs, the spread; on inputs a last bit apart, the sensitivity), as `OutputCheck`
    measures a candidate's error; infinite where they cannot be compared at all."""
    return [check.max_error if math.isfinite(check.max_error) and not check.decisive else math.inf
            for check in compare_outputs(reference, moved)]


def _padded(values: Sequence[float], count: int) -> list[float]:
    return [v if math.isfinite(v) else 0.0 for v in values][:count] + [0.0] * (count - len(values))


@dataclass(frozen=True)
class Numerics:
    """A candidate's numerics judged over one or more sets of inputs (`judge`): `ok` by the
    module docstring's rule; `checked` and `failed`: how many sets of inputs were compared and
    how many failed; `outputs`: each output's check on the first set that failed (where none
    did: on the first set), the record of which outputs failed, by how much, against what."""

    ok: bool
    checked: int
    failed: int
    outputs: list[OutputCheck] = field(default_factory=list)

    def failures(self) -> list[OutputCheck]:
        """The outputs that failed (on the first set of inputs that failed)."""
        return [check for check in self.outputs if not check.ok]

    def describe(self) -> str:
        """The verdict, on how many sets of inputs, and which outputs failed, by how much,
        against what tolerance."""
        sets = f"{self.checked} set{'s' if self.checked != 1 else ''} of inputs"
        if not self.failed:
            return f"ok on {sets}" if self.ok else "outputs differ"
        bad = self.failures()
        shown = "; ".join(_failure_text(check) for check in bad[:3])
        more = f"; {len(bad) - 3} more" if len(bad) > 3 else ""
        outputs = f": output {shown}{more}" if bad else ""
        verdict = "ok" if self.ok else "differ"
        return f"{verdict}, failed on {self.failed} of {sets}{outputs}"


def _failure_text(check: OutputCheck) -> str:
    if not math.isfinite(check.max_error) or check.decisive:
        return f"{check.index}: {check.detail}"
    return f"{check.index}: error {check.max_error:.2e} > tolerance {check.tolerance:.2e}"


def judge(checks: Sequence[list[OutputCheck]]) -> Numerics:
    """The verdict over `checks`, one list of output checks per set of inputs, in the order
    they were made: failed where any failed decisively, or most of them failed."""
    failing = [outputs for outputs in checks if not all_ok(outputs)]
    decisive = any(check.decisive for outputs in failing for check in outputs)
    ok = not decisive and 2 * len(failing) <= len(checks)
    first = failing[0] if failing else (checks[0] if checks else [])
    return Numerics(ok, len(checks), len(failing), list(first))


def recheck(first: list[OutputCheck]) -> bool:
    """Whether a failure on one set of inputs is checked on `RECHECKS` more before it decides:
    it failed, and not decisively."""
    return not all_ok(first) and not any(check.decisive for check in first)


def pooled(parts: Sequence[Numerics]) -> Numerics:
    """Independent judgements of one candidate (several workers') as one: the sets of inputs
    of all, judged by the same rule; the outputs of the first that failed (decisively first)."""
    checked = sum(part.checked for part in parts)
    failed = sum(part.failed for part in parts)
    decisive = [p for p in parts if any(c.decisive for c in p.failures())]
    failing = decisive or [p for p in parts if p.failed] or list(parts)
    ok = not decisive and 2 * failed <= checked
    return Numerics(ok, checked, failed, list(failing[0].outputs) if failing else [])


def _compare(index: int, reference: np.ndarray, value: np.ndarray, moves: float) -> OutputCheck:
    if reference.shape != value.shape or reference.dtype != value.dtype:
        return OutputCheck(index, False, float("inf"),
                           f"{value.dtype}{list(value.shape)} vs default "
                           f"{reference.dtype}{list(reference.shape)}", decisive=True)
    if reference.dtype.kind in "biu" or reference.dtype.itemsize == 0:
        mismatches = int(np.count_nonzero(reference != value))
        # Integers derived from floats (an argmax, a count of correct predictions) move with
        # them: a candidate may change a few times as many values as the default's own moves do.
        allowed = math.floor(SPREAD_FACTOR * moves)
        detail = f"{mismatches} of {reference.size} values differ" if mismatches else "exact"
        return OutputCheck(index, mismatches <= allowed, float(mismatches), detail, float(allowed))
    ref = reference.astype(np.complex128 if reference.dtype.kind == "c" else np.float64)
    val = value.astype(ref.dtype)
    ref_finite, val_finite = np.isfinite(ref), np.isfinite(val)
    new_nonfinite = int(np.count_nonzero(ref_finite & ~val_finite))
    if new_nonfinite:
        return OutputCheck(index, False, float("inf"),
                           f"{new_nonfinite} NaN/Inf values the default did not produce",
                           decisive=True)
    if not np.array_equal(ref[~ref_finite], val[~ref_finite], equal_nan=True):
        return OutputCheck(index, False, float("inf"), "non-finite values differ from the default",
                           decisive=True)
    both = ref_finite
    if not both.any():
        return OutputCheck(index, True, 0.0, "no finite values")
    rtol, atol = _FLOAT_TOLERANCE[_float_bits(reference.dtype)]
    rtol = max(rtol, SPREAD_FACTOR * moves)
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
