"""The loop's own cost in chip-seconds, and what its realized savings return on it.

Three costs over a window of days, each in chip-seconds (a measuring machine counts as one chip:
the tuner and the validator measure on one device at a time):
- tuning: the tuner's task clock (`trials.elapsed_seconds`, seconds into its task, going on
  across resumes): per task, its last clock reading in the window minus its last before it.
  Trials landed before that column (null) count nothing.
- validation: the `validations` table records no durations. A run's planner stamps its
  decisions made without measuring at the run's start and each measured decision when its
  measurement ends, so per run the span from its first to its last `validated_at` is its
  measuring time (a run that measured nothing spans nothing; the first measurement of a run
  with no such decision is missed).
- holdout: the savings the holdout arm forgoes. A holdout run used h chip-seconds under the
  defaults; with the config it would have used h / s, so it forgoes h x (1 - 1/s), s the
  realized speedup (the same definition as the booked savings', seen from the other arm).
  Decided entries only; negative where the config regressed (the holdout saved chip-time).

The tables are passed in, read by the caller: ranking runs before the tuner and the validator
and does not import their schemas. The columns each function reads are named in its docstring.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ranking.realized import Realized


@dataclass(frozen=True)
class LoopCost:
    """What the loop spent over `days` days, in chip-seconds."""

    days: int
    tuning: float
    validation: float
    holdout: float  # forgone savings of the holdout arm

    @property
    def total(self) -> float:
        """All three costs."""
        return self.tuning + self.validation + self.holdout

    @property
    def per_day(self) -> float:
        """The total per day of the window."""
        return self.total / self.days

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, in chip-seconds."""
        return {"days": self.days, "tuning_chip_seconds": self.tuning,
                "validation_chip_seconds": self.validation, "holdout_chip_seconds": self.holdout,
                "total_chip_seconds": self.total, "chip_seconds_per_day": self.per_day}


def loop_cost(trials: pa.Table, validations: pa.Table, realized: Iterable[Realized],
              first: datetime.date, last: datetime.date) -> LoopCost:
    """The cost of [first, last] from `trials` (dt, task_id, elapsed_seconds; rows up to
    `last`, earlier days included, so that a task's clock before the window is known),
    `validations` (dt, run_id, validated_at; rows of the window) and the realized speedups of
    the window's entries."""
    return LoopCost(days=(last - first).days + 1, tuning=tuning_seconds(trials, first),
                    validation=validation_seconds(validations),
                    holdout=sum(r.holdout.chip_seconds * (1.0 - 1.0 / r.speedup.estimate)
                                for r in realized if r.speedup is not None and r.team is None))


def tuning_seconds(trials: pa.Table, first: datetime.date) -> float:
    """Seconds the tuner's tasks ran from `first` on: per task, its last clock reading minus
    its last before `first` (0 if none)."""
    trials = trials.filter(pc.is_valid(trials.column("elapsed_seconds")))
    before = pc.less(trials.column("dt"), pa.scalar(first, pa.date32()))
    earlier, until = _last_clock(trials.filter(before)), _last_clock(trials.filter(pc.invert(before)))
    return sum(clock - earlier.get(task, 0.0) for task, clock in until.items())


def validation_seconds(validations: pa.Table) -> float:
    """Seconds the validator's runs spent measuring: per run, its decisions' time span."""
    per = validations.group_by("run_id").aggregate([("validated_at", "min"), ("validated_at", "max")])
    spans = pc.subtract(per.column("validated_at_max"), per.column("validated_at_min"))
    return sum(span.total_seconds() for span in spans.to_pylist())


def return_on_cost(realized_savings: float | None, cost: LoopCost) -> float | None:
    """Realized chip-seconds saved per chip-second the loop spent; None when it spent none, or
    when nothing is realized yet (`realized_savings` None: no entry decided)."""
    if realized_savings is None or cost.total <= 0:
        return None
    return realized_savings / cost.total


def _last_clock(trials: pa.Table) -> dict[str, float]:
    """Each task's last clock reading among `trials`."""
    per = trials.group_by("task_id").aggregate([("elapsed_seconds", "max")])
    return dict(zip(per.column("task_id").to_pylist(), per.column("elapsed_seconds_max").to_pylist()))
