"""An Evaluator from a table (`TableEvaluator`): config -> program and speedup, pure Python, no
XLA, on a clock of its own; the search loop's tests and the numerics policy's drive the loop
with it."""

from __future__ import annotations

from concurrent.futures import Future

from execution.flags import CompilerConfig
from execution.measure import MeasureSettings
from tuner.search import Against, Build, SearchOutcome, ready
from tuner.space import config_key
from tuner.trial import Trial
from vocabulary.interval import Interval
from vocabulary.tuning import TrialOutcome

SCREEN = MeasureSettings(max_seconds=1.0)
COMPARE = MeasureSettings(max_seconds=2.0)
SPREAD = 0.02  # each screen's interval: speedup x (1 -/+ SPREAD)
TIGHT = 0.004  # each comparison's: paired against another candidate, to a tight interval
MEASURE_SECONDS = 10.0  # what each measurement takes on a TableEvaluator's clock


class TableEvaluator:
    """An Evaluator from a table: config -> (program, speedup when screened, speedup when
    measured again). A config the table does not hold compiles to the default's program; a
    program of None does not compile. A comparison (`against`) is the ratio of the two
    configs' speedups measured again. Records every measurement: the program (a comparison:
    "program/baseline's program") and the settings. Each measurement takes MEASURE_SECONDS on
    its clock (`now`); a compile, none. `outcome`: what the last `run` returned."""

    default_program = "default"

    def __init__(self, table: dict[str, tuple[str | None, float, float | None]],
                 depth: int = 1) -> None:
        self.table, self.depth = table, depth
        self.measured: list[tuple[str, MeasureSettings]] = []
        self.built: list[CompilerConfig] = []
        self.seconds = 0.0
        self.outcome: SearchOutcome | None = None

    def now(self) -> float:
        return self.seconds

    def build(self, config: CompilerConfig) -> Future[Build]:
        self.built.append(config)
        program = self.table.get(config_key(config), ("default", 1.0, None))[0]
        if program is None:
            return ready(Build(error="does not compile: table says so"))
        return ready(Build(program, 0.5, artifact=config))

    def measure(self, index: int, config: CompilerConfig, build: Build,
                settings: MeasureSettings, against: Against | None = None) -> Trial:
        self.seconds += MEASURE_SECONDS
        if against is not None:
            baseline, base = against
            self.measured.append((f"{build.program}/{base.program}", settings))
            ratio = self.again(config) / self.again(baseline)
            return Trial(index, config, TrialOutcome.MEASURED, build.program,
                         speedup=Interval(ratio, ratio * (1 - TIGHT), ratio * (1 + TIGHT)),
                         numerics_ok=True, compile_seconds=0.5, baseline=baseline)
        _, screened, again = self.table[config_key(config)]
        times = sum(program == build.program for program, _ in self.measured)
        self.measured.append((build.program, settings))
        speedup = screened if times == 0 or again is None else again
        return Trial(index, config, TrialOutcome.MEASURED, build.program,
                     speedup=Interval(speedup, speedup * (1 - SPREAD), speedup * (1 + SPREAD)),
                     numerics_ok=True, compile_seconds=0.5)

    def again(self, config: CompilerConfig) -> float:
        """The config's speedup measured again (its screen's where the table has none)."""
        _, screened, again = self.table.get(config_key(config), ("default", 1.0, None))
        return screened if again is None else again


def table(*rows: tuple[CompilerConfig, str | None, float, float | None]
          ) -> dict[str, tuple[str | None, float, float | None]]:
    return {config_key(config): (program, screened, again)
            for config, program, screened, again in rows}


def listed(configs: list[CompilerConfig]):
    """A fixed list of proposals, in order."""
    return lambda trials, pending: (dict(configs[len(trials) + len(pending)])
                                    if len(trials) + len(pending) < len(configs) else None)
