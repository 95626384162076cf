"""The search loop, whatever evaluates its configs: proposals in, trials out.

An `Evaluator` turns a config into a trial in two steps, as TVM MetaSchedule's builder and runner
do: `build(config)` compiles it (in the background, up to `depth` configs at once) and names the
program it compiles to; `measure` times a program new to the search against the default. Between
the two the loop reuses what it knows: a config that compiles to the default's program is
"identical" (speedup 1, nothing timed), one that compiles to a program measured before is a
"duplicate" of that measurement; no program is measured twice in a search. The budget counts
evaluations, the trials that cost a timing (measured or failed): an identical or duplicate trial
cost one compile, and is free, up to `UNTIMED_PER_EVALUATION` of them per evaluation (a strategy
that keeps proposing known programs still ends: `most_trials`). On a real module about half of
the one-move neighbours compile to the default's program (they move a fusion type the module
does not have). The tuner's evaluator
compiles and measures in sandboxed workers (`tuner.worker_evaluator`); a benchmark replays
recorded screens through this same loop with an evaluator that answers from its cache
(`benchmarks/bench_search_quality.py`), and the unit tests drive it with a table
(`tests/tuner/test_search_loop.py`).

A task's phases (`run_search`, `vocabulary.tuning.Phase`): the search proper (`search`: the
strategy's proposals until the budget, the time, or a stall: `Stall`, and it says which,
`vocabulary.tuning.StopReason`), then the finalists' race and the winner's pruning (`tuner.winner`),
each a comparison of one config against another (`measure` with `against`; the tuner's
evaluator runs it in fresh workers) and a trial of its phase. The evaluations' budget bounds
the search alone: the race and the pruning come on top (at most `tuner.winner.FINALISTS` - 1 comparisons,
and at most one per change of the winner but the last, plus one for the changes that did
nothing alone; twice that where the winner relaxes
numerics and the strict configs race again: `tuner.winner.Winners`). The task's time (`in_time`)
bounds the three together: no comparison starts once it is spent, and the winner so far is
verified as it stands. Each trial is stamped as
it finishes with the time and the seconds into its task (`TaskClock`); `spending` says what each
phase spent.

Two economies. A screen is timed against the default with the search's best so far as its
incumbent (`screen_settings`): it stops as soon as its interval lies wholly below the
incumbent's (`execution.measure`, with its stated error rate), since it cannot win.
And the search keeps what it built for the programs that might still win (`Builds`: those not
screened wholly below the best), so the race and the pruning compare them as built, compiling
only configs the search never built (or whose build it let go).
"""

from __future__ import annotations

import datetime
import math
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence

from execution.flags import CompilerConfig
from execution.measure import MeasureSettings
from tuner.space import config_key
from tuner.strategies import Strategy, TrialRecord, propose
from tuner.trial import Trial
from tuner.winner import Winners, best_trial, prune, race, split_winners, strict
from vocabulary.interval import Interval
from vocabulary.tuning import Phase, StopReason, TrialOutcome

# Free (untimed) trials a search may make per evaluation of its budget, at most.
UNTIMED_PER_EVALUATION = 2
# The speedup of a program over itself, known without timing it (an identical trial's).
SAME_PROGRAM = Interval(1.0, 1.0, 1.0)

# The next config to try, from the trials so far and the configs still pending (built or
# building, not yet a trial); None when there is none now.
Propose = Callable[[list[Trial], list[CompilerConfig]], CompilerConfig | None]


@dataclass(frozen=True)
class Build:
    """What a config compiled to: its program (a key: equal keys run the same code) and compile
    time, or why it did not compile (`error`); `artifact` is what the evaluator measures."""

    program: str | None = None
    compile_seconds: float | None = None
    error: str | None = None
    artifact: Any = None


# A config and what it compiled to: the baseline of a comparison (`Evaluator.measure`).
Against = tuple[CompilerConfig, Build]
# The phases of the loop, in the order they run (the verification follows: `tuner.tune`).
LOOP_PHASES = (Phase.SEARCH, Phase.RACE, Phase.PRUNE)


class TaskClock:
    """Seconds into a task (its search, race and pruning), which each trial is stamped with
    (`stamp`): since this run of the task began, plus the seconds its `journaled` trials had
    reached (a task cut short and resumed goes on from its last trial: the time between the kill
    and the rerun does not count). `now` is the time source, in seconds."""

    def __init__(self, journaled: Sequence[Trial] = (),
                 now: Callable[[], float] = time.monotonic) -> None:
        self.now = now
        self.started = now() - max((t.elapsed_seconds or 0.0 for t in journaled), default=0.0)

    def __call__(self) -> float:
        """Seconds into the task now."""
        return self.now() - self.started

    def stamp(self, trial: Trial) -> Trial:
        """`trial`, finished now."""
        return replace(trial, finished_at=datetime.datetime.now(datetime.UTC),
                       elapsed_seconds=self())


@dataclass(frozen=True)
class PhaseSpend:
    """What one phase of a task spent. `configs`: configs evaluated (the verification: the one
    verified). `evaluations`: those that cost a timing, measured or failed (a config whose
    program was known costs a compile and none): the unit of `--budget-evals`, which bounds the
    search's. `measured`: timings that gave a result. A comparison or the verification is one
    timing, however many fresh workers it takes. `compiles`: compiles started. `seconds`: wall
    time, from the end of the phase before."""

    phase: Phase
    configs: int
    evaluations: int
    measured: int
    compiles: int
    seconds: float


class Evaluator(Protocol):
    """Config -> trial, in two steps the loop sits between (see the module docstring)."""

    @property
    def default_program(self) -> str:
        """The program the default config compiles to."""

    @property
    def depth(self) -> int:
        """How many configs may be built ahead of the one being measured (at least 1)."""

    def build(self, config: CompilerConfig) -> Future[Build]:
        """Start compiling `config`; the future's Build says what came out."""

    def measure(self, index: int, config: CompilerConfig, build: Build,
                settings: MeasureSettings, against: Against | None = None) -> Trial:
        """Trial `index` of `config`, whose `build` is a program new to the search: measured
        against the default, or against another config's program (`against`: the trial's
        speedup is then over that program), or failed, saying why."""


def ready(build: Build) -> Future[Build]:
    """A Build already done: what `build` returns in an evaluator that answers at once."""
    future: Future[Build] = Future()
    future.set_result(build)
    return future


def history(trials: list[Trial]) -> list[TrialRecord]:
    """What a strategy learns from `trials`: the default (trial zero), then each of them."""
    return [TrialRecord({}, 0.0, 0.0)] + [t.record() for t in trials]


def proposals(strategy: Strategy) -> Propose:
    """The strategy's proposals, from the trials so far after the default (trial zero)."""

    def next_config(trials: list[Trial], pending: list[CompilerConfig]) -> CompilerConfig | None:
        return propose(strategy, history(trials), pending)

    return next_config


@dataclass(frozen=True)
class Stall:
    """The rule that ends a search before its budget (docs/tuner.md): once its strategy's
    cold-start screen of the likeliest moves is over (`Strategy.screened`: the schedule's first
    tier of single moves and their combinations), the search has stalled when `patience`
    evaluations have passed, after the screen, since the last that improved significantly on
    the incumbent (`evaluations_since_gain`). A strategy alone has no such screen and never
    stalls."""

    strategy: Strategy
    patience: int

    def __call__(self, trials: list[Trial]) -> bool:
        """Whether the search of `trials` (its search phase) has stalled."""
        screen = self.screen_end(trials)
        return screen is not None and evaluations_since_gain(trials, screen) >= self.patience

    def screen_end(self, trials: list[Trial]) -> int | None:
        """How many of `trials` the cold-start screen took (None: it is not over). Once over,
        a screen stays over: later trials try no single move of its tier, nor any of its
        combinations it has not tried."""
        return next((n for n in range(len(trials) + 1)
                     if self.strategy.screened(history(trials[:n]))), None)


def evaluations_since_gain(trials: list[Trial], start: int = 0) -> int:
    """Evaluations (timed trials) among `trials[start:]` since the last of `trials` that
    improved significantly on the incumbent: whose interval lies wholly above the best screen's
    estimate before it (the default's speedup of 1 to begin with). A screen that only estimates
    a little higher than the best, as the luckiest of many noisy screens does, is no such
    improvement."""
    best, since = 0.0, 0
    for index, trial in enumerate(trials):
        since = 0 if trial.low > best else since + (trial.timed and index >= start)
        best = max(best, trial.fitness)
    return since


def screen_settings(settings: MeasureSettings, trials: list[Trial]) -> MeasureSettings:
    """`settings` for the next screen of a search of `trials`: it stops below the incumbent
    (`MeasureSettings.stop_below`), the best screen so far, at its interval's lower end, where
    that clears the default (below 1 the default's own test is the stricter)."""
    incumbent = best_trial(trials)
    if incumbent is None or incumbent.speedup is None or incumbent.speedup.low <= 1.0:
        return settings
    return replace(settings, stop_below=incumbent.speedup.low)


class Builds:
    """What a search built, by program, for the programs that might still win: measured, and
    not screened wholly below the best so far (a finalist's interval reaches the best one's; a
    pruning compares no config screened wholly below the winner). The race and the pruning
    compare these as built (`run_search`) instead of compiling them again; the others are let
    go as the search goes (an executable can weigh megabytes)."""

    def __init__(self) -> None:
        self.kept: dict[str, Build] = {}

    def add(self, trial: Trial, build: Build, trials: list[Trial]) -> None:
        """Keep `build` of measured `trial`; let go of what `trials` (every trial so far, it
        included) now show cannot win."""
        if trial.outcome == TrialOutcome.MEASURED and trial.program is not None:
            self.kept[trial.program] = build
        best = best_trial(trials)
        if best is None:
            return
        below = {t.program for t in trials
                 if t.outcome == TrialOutcome.MEASURED and t.program is not None and t.high < best.low}
        for program in below & self.kept.keys():
            del self.kept[program]

    def get(self, program: str | None) -> Build | None:
        """The build kept for `program`, if any."""
        return self.kept.get(program) if program is not None else None


def evaluations(trials: list[Trial]) -> int:
    """How many of `trials` count against a search's budget: those that cost a timing."""
    return sum(trial.timed for trial in trials)


def most_trials(budget: int) -> int:
    """The most trials, free ones included, that a search of `budget` evaluations makes."""
    return budget * (1 + UNTIMED_PER_EVALUATION)


def search(evaluator: Evaluator, next_config: Propose, trials: list[Trial], budget: int,
           settings: MeasureSettings, in_time: Callable[[], bool],
           record: Callable[[Trial], None], clock: TaskClock | None = None,
           stalled: Callable[[list[Trial]], bool] | None = None,
           builds: Builds | None = None) -> StopReason:
    """Evaluate configs from `next_config(trials, pending)` until `budget` evaluations (see
    `evaluations`; a config being built counts as one until it turns out free), `in_time()`
    says stop, `stalled(trials)` says the search has (`Stall`), or it has none left; returns
    which. Each new trial is screened against the best so far (`screen_settings`), stamped by
    `clock` (default: one from `trials`), `record`ed, then appended to `trials`; what it built
    goes to `builds` where given. While one candidate is measured, up to `evaluator.depth - 1`
    more are built (a stall leaves those unmeasured)."""
    clock = TaskClock(trials) if clock is None else clock
    queue: deque[tuple[CompilerConfig, Future[Build]]] = deque()  # building, in proposal order
    spent = evaluations(trials)
    while True:
        if not queue and (spent >= budget or len(trials) >= most_trials(budget)):
            return StopReason.BUDGET
        if not in_time():
            return StopReason.TIME
        if stalled is not None and stalled(trials):
            return StopReason.STALLED
        while (len(queue) < evaluator.depth and spent + len(queue) < budget
               and len(trials) + len(queue) < most_trials(budget)):
            config = next_config(trials, [c for c, _ in queue])
            if config is None:
                break
            queue.append((config, evaluator.build(config)))
        if not queue:
            return StopReason.EXHAUSTED
        config, building = queue.popleft()
        build = building.result()
        trial = clock.stamp(finish(evaluator, len(trials), config, build, trials,
                                   screen_settings(settings, trials)))
        record(trial)
        trials.append(trial)
        spent += trial.timed
        if builds is not None:
            builds.add(trial, build, trials)


def run_one(evaluator: Evaluator, index: int, config: CompilerConfig, earlier: list[Trial],
            settings: MeasureSettings) -> Trial:
    """Build and evaluate one config, reusing the measurement of a program among `earlier`."""
    return finish(evaluator, index, config, evaluator.build(config).result(), earlier, settings)


def finish(evaluator: Evaluator, index: int, config: CompilerConfig, build: Build,
           earlier: list[Trial], settings: MeasureSettings) -> Trial:
    """The trial of `config` once built: failed, identical to the default, a duplicate of an
    `earlier` measurement of its program, or measured now."""
    if build.error is not None:
        return Trial(index, config, TrialOutcome.FAILED, error=build.error)
    program, seconds = build.program, build.compile_seconds
    if program == evaluator.default_program:
        return Trial(index, config, TrialOutcome.IDENTICAL, program, speedup=SAME_PROGRAM,
                     numerics_ok=True, compile_seconds=seconds)
    known = next((t for t in earlier
                  if t.program == program and t.outcome == TrialOutcome.MEASURED), None)
    if known is not None:
        return Trial(index, config, TrialOutcome.DUPLICATE, program, speedup=known.speedup,
                     numerics_ok=known.numerics_ok, compile_seconds=seconds)
    return evaluator.measure(index, config, build, settings)


@dataclass(frozen=True)
class SearchOutcome:
    """What `run_search` did: every trial, search phase first; the winners; why its search
    phase ended; and the compiles its race and pruning started, per phase (a config whose
    program the search built and kept is compared as built, and costs none)."""

    trials: list[Trial]
    winners: Winners
    stop: StopReason
    compiles: dict[Phase, int]


def run_search(evaluator: Evaluator, next_config: Propose, trials: list[Trial], budget: int,
               settings: MeasureSettings, compare_settings: MeasureSettings,
               in_time: Callable[[], bool], record: Callable[[Trial], None],
               listed: bool = False, clock: TaskClock | None = None,
               stalled: Callable[[list[Trial]], bool] | None = None) -> SearchOutcome:
    """A task's search from its journaled `trials` (a resumed task repeats none): the search
    phase to `budget` (or until `stalled`: `Stall`), then, where the best screen is a
    significant gain and the configs are no fixed list (`listed`), the finalists' race and the
    winner's pruning, each a comparison of one config against another measured with
    `compare_settings`, of the programs as the search built them where it kept them
    (`Builds`), while `in_time()` (a comparison made before is reused whenever); otherwise the
    best screen as measured. Where that winner relaxes numerics, the strict winner is chosen
    the same way among the strict configs alone
    (`tuner.winner.Winners`). Every new trial is stamped by `clock` (default: one from
    `trials`)."""
    clock = TaskClock(trials) if clock is None else clock
    searched = [t for t in trials if t.phase == Phase.SEARCH]
    kept = Builds()
    stop = search(evaluator, next_config, searched, budget, settings, in_time, record, clock,
                  stalled, kept)
    trials = searched + [t for t in trials if t.phase != Phase.SEARCH]
    compiles = {Phase.RACE: 0, Phase.PRUNE: 0}
    leader = best_trial(searched)
    if listed or leader is None or leader.low <= math.log1p(settings.noise_band):
        # A fixed list is measured as it is; a search whose best screen is no significant gain
        # leaves it to the verification to say so, without comparisons.
        return SearchOutcome(trials, split_winners(
            leader, lambda: best_trial([t for t in searched if strict(t.config)])), stop, compiles)
    builds: dict[str, Future[Build]] = {}  # the winner is a baseline again and again
    programs = {config_key(t.config): t.program for t in searched if t.program is not None}

    def build(config: CompilerConfig, phase: Phase) -> Future[Build]:
        key = config_key(config)
        if key not in builds:
            known = kept.get(programs.get(key))
            if known is None:
                compiles[phase] += 1
            builds[key] = ready(known) if known is not None else evaluator.build(config)
        return builds[key]

    def comparing(phase: Phase) -> Callable[[int, CompilerConfig, CompilerConfig], Trial]:
        def compare(index: int, config: CompilerConfig, baseline: CompilerConfig) -> Trial:
            building, base = build(config, phase), build(baseline, phase)
            return clock.stamp(finish_against(evaluator, index, config, building.result(),
                                              (baseline, base.result()), compare_settings))
        return compare

    def winner(admits: Callable[[CompilerConfig], bool]) -> Trial | None:
        raced = race(comparing(Phase.RACE), trials, record, admits, in_time)
        return prune(comparing(Phase.PRUNE), trials, record, raced, in_time)

    winners = split_winners(winner(lambda config: True), lambda: winner(strict))
    return SearchOutcome(trials, winners, stop, compiles)


def seconds_to_find(trials: list[Trial], best: Trial | None) -> float | None:
    """Seconds into the task when the program of `best` (the winner of `run_search`) was
    first run: the earliest of `trials` that compiled to it. That is the search's screen where
    it had one, though a race or a pruning's comparison chose it later. None: no winner, or
    trials journaled before they were stamped."""
    if best is None:
        return None
    found = [t.elapsed_seconds for t in trials
             if t.program == best.program and t.elapsed_seconds is not None]
    return min(found, default=None)


def spending(trials: list[Trial], ended: float, compiles: dict[Phase, int]) -> list[PhaseSpend]:
    """What the search, the race and the pruning of a task (`run_search`'s `trials`, stamped)
    spent, in that order. A phase's seconds run from the end of the one before (the search's
    from the clock's zero) to its last trial; those of the last phase that made a trial, to
    `ended` (when the loop ended, on the trials' clock: a search that made none spent it all).
    Compiles: one per search trial; in the race and the pruning, `compiles` of the phase (what
    `run_search` started: `SearchOutcome.compiles`)."""
    last = next((p for p in reversed(LOOP_PHASES) if any(t.phase == p for t in trials)),
                Phase.SEARCH)
    spent, start = [], 0.0
    for phase in LOOP_PHASES:
        made = [t for t in trials if t.phase == phase]
        end = ended if phase == last else max((t.elapsed_seconds or 0.0 for t in made),
                                                default=start)
        spent.append(PhaseSpend(phase, len(made), evaluations(made),
                                sum(t.outcome == TrialOutcome.MEASURED for t in made),
                                len(made) if phase == Phase.SEARCH else compiles.get(phase, 0),
                                max(end - start, 0.0)))
        start = max(start, end)
    return spent


def finish_against(evaluator: Evaluator, index: int, config: CompilerConfig, build: Build,
                   baseline: Against, settings: MeasureSettings) -> Trial:
    """The trial of `config` once built, timed against `baseline`'s program: failed (either
    did not compile), identical to the baseline's program (nothing timed), or measured."""
    base_config, base = baseline
    if build.error is not None:
        return Trial(index, config, TrialOutcome.FAILED, error=build.error, baseline=base_config)
    if base.error is not None:
        return Trial(index, config, TrialOutcome.FAILED, build.program,
                     error=f"the baseline {base.error}", baseline=base_config)
    if build.program == base.program:
        return Trial(index, config, TrialOutcome.IDENTICAL, build.program, speedup=SAME_PROGRAM,
                     numerics_ok=True, compile_seconds=build.compile_seconds,
                     baseline=base_config)
    return evaluator.measure(index, config, build, settings, against=baseline)
