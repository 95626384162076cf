"""One evaluated config of a search, as the task's journal and the `trials` table hold it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from execution.flags import CompilerConfig
from tuner.strategies import FAILED, TrialRecord

# Outcomes of a config whose program the search knew already: compiled, not timed.
UNTIMED = ("identical", "duplicate")


@dataclass
class Trial:
    """One evaluated config of a search."""

    index: int
    config: CompilerConfig
    outcome: str  # measured | duplicate | identical | failed
    program: str | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    numerics_ok: bool | None = None
    compile_seconds: float | None = None
    error: str | None = None
    # search | race (a finalist against the best so far) | prune (the winner without one
    # change, against the winner): see tuner.winner
    phase: str = "search"
    # What it was timed against: None for the default; a race or prune trial's speedup is over
    # this config's program instead.
    baseline: CompilerConfig | None = None

    @property
    def fitness(self) -> float:
        """log(speedup) of a correct trial; FAILED otherwise."""
        if self.outcome == "failed" or not self.numerics_ok or not self.speedup:
            return FAILED
        return math.log(self.speedup)

    @property
    def low(self) -> float:
        """log of the interval's lower end of a correct trial; FAILED otherwise."""
        if self.fitness == FAILED or not self.ci_low:
            return FAILED
        return math.log(self.ci_low)

    @property
    def high(self) -> float:
        """log of the interval's upper end of a correct trial; FAILED otherwise."""
        if self.fitness == FAILED or not self.ci_high:
            return FAILED
        return math.log(self.ci_high)

    @property
    def timed(self) -> bool:
        """Whether it cost a timing (an evaluation of the budget): not when its program was
        the default's or one measured before."""
        return self.outcome not in UNTIMED

    def record(self) -> TrialRecord:
        """What a strategy learns from it."""
        return TrialRecord(self.config, self.fitness, self.low, self.timed)
