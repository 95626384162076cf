"""One evaluated config of a search, as the task's journal and the `trials` table hold it."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

from execution.flags import CompilerConfig, trusted_config
from tuner.strategies import FAILED, TrialRecord
from vocabulary.interval import Interval, as_flat, from_flat
from vocabulary.tuning import UNTIMED, Phase, TrialOutcome

# A search that has screened its likeliest moves ends once this many evaluations in a row
# brought no significant improvement on its best (`tuner.search.Stall`, docs/tuner.md): `fdo
# tune`'s default (`TuneSettings.stall_after`, `--stall-after`).
STALL_AFTER = 8


@dataclass
class Trial:
    """One evaluated config of a search. The journal and `result.json` hold it as `to_json`.
    `speedup`: over the default, or over `baseline`'s program where it has one (None: not
    timed, failed)."""

    index: int
    config: CompilerConfig
    outcome: TrialOutcome
    program: str | None = None
    speedup: Interval | None = None
    numerics_ok: bool | None = None
    compile_seconds: float | None = None
    error: str | None = None
    phase: Phase = Phase.SEARCH  # search, race or prune
    # What it was timed against: None for the default; a race or prune trial's speedup is over
    # this config's program instead.
    baseline: CompilerConfig | None = None
    # When it finished (UTC), and how many seconds into its task (`tuner.search.TaskClock`);
    # None in a journal written before trials were stamped.
    finished_at: datetime.datetime | None = None
    elapsed_seconds: float | None = None
    # Why its screen stopped, and how many times the candidate ran in it (`execution.measure`:
    # "catastrophic" after two runs, ...); None where the evaluator does not say (a comparison,
    # a table's replay, a journal written before).
    stop_reason: str | None = None
    candidate_runs: int | None = None

    @property
    def fitness(self) -> float:
        """log(speedup) of a correct trial; FAILED otherwise."""
        if (self.outcome == TrialOutcome.FAILED or not self.numerics_ok or self.speedup is None
                or not self.speedup.estimate):
            return FAILED
        return math.log(self.speedup.estimate)

    @property
    def low(self) -> float:
        """log of the interval's lower end of a correct trial; FAILED otherwise."""
        if self.fitness == FAILED or self.speedup is None or not self.speedup.low:
            return FAILED
        return math.log(self.speedup.low)

    @property
    def high(self) -> float:
        """log of the interval's upper end of a correct trial; FAILED otherwise."""
        if self.fitness == FAILED or self.speedup is None or not self.speedup.high:
            return FAILED
        return math.log(self.speedup.high)

    @property
    def timed(self) -> bool:
        """Whether it cost a timing (an evaluation of the budget): not when its program was
        the default's or one measured before."""
        return self.outcome not in UNTIMED

    def record(self) -> TrialRecord:
        """What a strategy learns from it."""
        return TrialRecord(self.config, self.fitness, self.low, self.timed)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, the speedup as `speedup`, `ci_low`, `ci_high`, the
        time in ISO 8601."""
        finished = self.finished_at.isoformat() if self.finished_at is not None else None
        return {**as_flat(self), "finished_at": finished}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Trial":
        """The trial `to_json` wrote (or a journal line written before a field was added)."""
        decoded: dict[str, Any] = {name: trusted_config(data[name])
                                   for name in ("config", "baseline") if data.get(name) is not None}
        decoded["outcome"] = TrialOutcome(data["outcome"])
        if "phase" in data:
            decoded["phase"] = Phase(data["phase"])
        if data.get("finished_at") is not None:
            decoded["finished_at"] = datetime.datetime.fromisoformat(data["finished_at"])
        return cls(**{**from_flat(data), **decoded})
