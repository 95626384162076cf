"""One tuning task: search a module's compiler flags, then verify the best config afresh.

A task tunes a target (`tuner.target.TuneTarget`): a graph (the unoptimized module, the
graph-level space, results keyed by the graph fingerprint) or an op (a kernel cut out of its
optimized graph, the op-level space of its class, results keyed by the op fingerprint). Every
task of a searched kind runs `run_task` (`tuner.kinds.KindSpec.run`; a GPU graph's kernels are
`tuner.kernels`', which searches nothing itself). This module is the task's orchestration; its
records are kept by `tuner.persist` and its result is a `tuner.result.TuneResult`.

The search loop (`tuner.search`) runs over the tuner's evaluator (`tuner.worker_evaluator`):
candidates compile in a pool of sandboxed compile workers and are measured, one at a time, in a
separate execute worker that compiled the default once (`execution.session`); the two sets of
workers are pinned to disjoint cores (`execution.cores`), so compiles of the next candidates go
on while one is measured without disturbing it. If a candidate's program (optimized module +
machine code, `execution.session.program_key`) equals the default's or one already measured,
the known result is reused instead of running it again. Each trial is appended to the task's
journal, durable before the next (`tuner.persist.journal_trial`), so a task killed at any
moment resumes without repeating a finished trial. A crash or timeout is
recorded for its candidate (after one retry in a new worker) and the search goes on.

What a search proposes comes from its strategy: by default the schedule of `tuner.schedule`
(the default's one-move neighbours by prior, then their combinations, then the named strategy).
The finalists then race (each timed against the one ahead: the best screen is biased upward by
selection), the race's winner is pruned to the changes that matter, each undo timed against the
winner (`tuner.winner`), and it is re-measured
with a stricter interval and the numeric check in `TuneSettings.verify_workers` fresh workers,
one after another (`execution.evaluate.evaluate_independently`: the spread between processes is
as large as a small gain, and one worker's interval leaves it out). Only if the median of their
intervals' lower ends clears the noise band and the numerics hold (judged over the inputs of all
the workers, `execution.numerics`) is the result accepted; otherwise its status, a `Verdict`,
names why (`verdict_of`), and its `reason` gives the figures. The trials and the result land
in the warehouse under the task id (`tuner.persist.land_result`), so finishing a task twice adds
nothing. The home may be local or a URL (`storage.home.Home`): every file is named by its place
under it.

Numerics-relaxing flags are opt-in (`execution.flags.relaxes_numerics`, docs/tuner.md): the
search measures them like any flag, but the config a task delivers by default relaxes nothing.
Where the best config found relaxes numerics, the best strict one is chosen too
(`tuner.winner.Winners`) and both are verified, one after the other; the relaxed one becomes the
result's opt-in (`TuneResult.relaxed`) where it holds up and verifies faster than the strict one.

What a task spent is told per phase (`TuneResult.phases`: search, race, prune, verify; see
`tuner.search.PhaseSpend`); `--budget-evals` bounds the search's evaluations alone, and the
search ends before it when it has stalled (`TuneSettings.stall_after`, `tuner.search.Stall`):
the result says why it ended (`TuneResult.search_stop`). A nightly stage's task carries its
share of the stage's budget and why (`TuneSettings.allotment`, `tuner.allot`), which its result
records (`budget_share`, `budget_reason`). Each trial
carries when it finished and the seconds into its task (`tuner.search.TaskClock`), and the result
the seconds into the task at which the config it verified was found (`seconds_to_best`).
"""

from __future__ import annotations

import datetime
import functools
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from execution.compile import compiler_defaults
from execution.cores import plan_cores
from execution.evaluate import FRESH_WORKERS, DefaultFails, EvaluationResult, evaluate_independently
from execution.flags import CompilerConfig
from execution.measure import MeasureSettings
from execution.per_device import gain_bar
from execution.sharded import Placement
from hlo.environment import current_environment
from storage.home import Home
from storage.home_factory import open_home
from tuner.persist import finished_result, journal_trial, journaled_trials, land_result, save_result, task_digest
from tuner.platform_prior import prior_for
from tuner.prior import move_prior
from tuner.result import RelaxedOption, TuneResult
from tuner.schedule import Scheduled
from tuner.search import (
    PhaseSpend,
    Propose,
    Stall,
    TaskClock,
    evaluations,
    proposals,
    run_search,
    seconds_to_find,
    spending,
)
from tuner.space import config_key
from tuner.strategies import STRATEGIES, Strategy, TrialRecord
from tuner.target import TuneTarget
from tuner.transfer import TRANSFER_CHECK, Transfer, transferred
from tuner.trial import STALL_AFTER, Trial
from tuner.winner import Winners
from tuner.worker_evaluator import WorkerEvaluator
from vocabulary.confidence import SCREENED_LEVEL, VERIFIED_LEVEL
from vocabulary.failures import Failure
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind, Origin, Phase, StopReason, Verdict

if TYPE_CHECKING:
    # The allotment's module reads the ranking's candidates (the pipeline extra); the base
    # install reads this module through the kinds registry for the CLI's help pages.
    from tuner.allot import Allotment

# Screens stop as soon as a candidate is clearly faster or slower (execution.measure): a clear
# candidate of a module that runs for half a second costs seconds, not a minute; one more than
# 3x slower than the default stops at its second run, and a slow one's time is bounded by the
# default's (`catastrophe_ratio`).
SEARCH_SETTINGS = MeasureSettings(confidence=SCREENED_LEVEL, max_seconds=6.0, target_half_width=0.02,
                                  max_pairs=200, early_looks=(10, 15, 20, 30), min_pairs=10,
                                  catastrophe_ratio=3.0)
# The winner's race and pruning time one config against another (tuner.winner), in fresh
# workers (`TuneSettings.verify_workers` of them), each to a tight interval or 3 s: they tell
# apart programs a percent apart, where a screen only tells a candidate from the default. A
# worker whose pairs leave no doubt at a screen's early look stops there, at the screens' error
# rate (undoing a 7x change needs no 3 s to show it slower); two programs within the noise band
# of each other are stopped early at most `early_alpha` of the time, and measured as before
# (tests/tuner/test_compare_settings.py).
COMPARE_SETTINGS = replace(SEARCH_SETTINGS, max_pairs=MeasureSettings().max_pairs,
                           min_pairs=MeasureSettings().min_pairs, max_seconds=3.0,
                           target_half_width=0.005, stop_when_no_gain=False,
                           catastrophe_ratio=None)
# Why a transfer check verified nothing.
NO_TRANSFER_GAIN = "no transferred config screened faster than the default"
# Why a task verified nothing where only a config that relaxes numerics beat the default.
RELAXED_OUT_OF_MINUTES = ("only a config that relaxes numerics beat the default in the search, and "
                          "the task's minutes were spent before its verification")
# The claim: 10 s of timing in each fresh worker, and at least 20 pairs, as the validator's (at
# 99.9%, 20 pairs give the 3rd to the 18th of their ratios). On a module of a second a run the
# pairs, not the 10 s, set a worker's time: 40 pairs made the verification of such a module
# four minutes. A worker whose pairs leave no doubt at 20, 40 or 80 of them stops there
# (`execution.measure.early_decision`, its looks' error rate held to the claim's own 0.1%): a
# clear gain's interval need not be narrowed to 1.5% for its decision, where a fast program's
# three workers took 13 to 36 s of a transfer check's 17 to 40 (docs/bench_reach.md).
VERIFY_SETTINGS = MeasureSettings(confidence=VERIFIED_LEVEL, min_pairs=20, max_seconds=10.0,
                                  early_looks=(20, 40, 80), early_alpha=1.0 - VERIFIED_LEVEL)


@dataclass(frozen=True)
class TuneSettings:
    """The budget and the strategy of a task."""

    budget_evals: int = 40
    budget_minutes: float | None = None  # the search, race and pruning together (not the verification)
    strategy: str = "evolution"  # the last phase of the schedule, or the whole search without
    schedule: bool = True  # neighbours by prior, then combinations, then the strategy
    shipped_prior: bool = True  # a graph's neighbours by the platform's too (tuner.platform_prior)
    seed: int = 0
    cores: frozenset[int] | None = None  # the cores to compile and measure on (default: all)
    compile_workers: int | None = None  # default: one per compile core (see execution.cores)
    search: MeasureSettings = SEARCH_SETTINGS
    compare: MeasureSettings = COMPARE_SETTINGS
    verify: MeasureSettings = VERIFY_SETTINGS
    # Fresh workers per comparison of two candidates and for the winner's verification (`verify`
    # in each): the median decides; the verification keeps each one's (`TuneResult.speedups`).
    verify_workers: int = FRESH_WORKERS
    # Evaluations without a significant gain after which a search that screened its likeliest
    # moves ends (`tuner.search.Stall`); None: it runs its budget.
    stall_after: int | None = STALL_AFTER
    # A nightly stage's task: its share of the stage's budget, and why (`tuner.allot`).
    allotment: Allotment | None = None
    # Configs verified for the graph's siblings (`tuner.transfer`), tried first; with
    # `transfer_check`, alone: the task is a transfer check (no search, no race, no pruning),
    # the best of them verified as any winner is.
    transfers: tuple[Transfer, ...] = ()
    transfer_check: bool = False
    # What the task is expected to take in all, in seconds (a night's transfer check's:
    # `tuner.task_seconds`); a runner under a deadline does not start it with less time left.
    # None: no estimate.
    expected_seconds: float | None = None
    # What a search's verification is expected to take, in seconds (`tuner.task_seconds`): a
    # runner under a deadline ends its search, race and pruning that much before its share of
    # the time is up, so the verification that comes on top ends within it. None: no estimate.
    verify_seconds: float | None = None
    # The day its results land under in the warehouse (None: the day it finishes): a nightly's
    # date, so a decision's age (`tuner.decided`) counts from the night that made it.
    day: datetime.date | None = None

    def __post_init__(self) -> None:
        if self.stall_after is not None and self.stall_after < 1:
            raise ValueError(f"stall_after {self.stall_after}: at least 1 evaluation (or None: "
                             "never stop before the budget)")
        if self.transfer_check and not self.transfers:
            raise ValueError("a transfer check needs transfers to check")


def run_task(target: TuneTarget, home: Home, settings: TuneSettings, env_key: str | None = None,
             progress: bool = False, prior: list[TrialRecord] | None = None) -> TuneResult:
    """Search `target.space` for `target.module`, verify the best afresh, land the task."""
    from console.progress import progress_bar

    home = open_home(home)
    environment = current_environment()
    env_key = env_key or environment.key()
    task_id = _task_id(target, settings, env_key, environment.compiler_version)
    finished = finished_result(home, task_id)
    if finished is not None:  # landing again is a no-op unless a kill cut it short
        land_result(home, finished, settings.day)
        return finished
    trials = journaled_trials(home, task_id)
    clock = TaskClock(trials)
    bar = progress_bar(total=settings.budget_evals,
                       initial=evaluations([t for t in trials if t.phase == Phase.SEARCH]),
                       desc=f"tune {target.label}", unit="eval", enabled=progress)

    def in_time() -> bool:  # a resumed task's journaled seconds count: its minutes are not renewed
        return not settings.budget_minutes or clock() < 60 * settings.budget_minutes

    def record(trial: Trial) -> None:
        journal_trial(home, task_id, trial)
        if trial.phase == Phase.SEARCH:
            bar.update(int(trial.timed))
        else:  # the budget is spent: say what the minute or two after it goes to
            bar.set_postfix_str(f"choosing the winner ({trial.phase})")

    searched = _search(target, home, settings, prior, trials, clock, in_time, record)
    unverified = searched.winners.relaxed is not None and not in_time()
    if unverified:  # the minutes are spent: the claim is the strict winner's alone (docs/tuner.md)
        searched = replace(searched, winners=replace(searched.winners, relaxed=None))
    if searched.winners.strict is not None or searched.winners.relaxed is not None:
        bar.set_postfix_str(f"verifying in {settings.verify_workers} fresh workers")
    result = _verify(target, searched.trials, searched.winners, settings, task_id, env_key,
                     environment.compiler_version, spending(searched.trials, clock(), searched.compiles),
                     searched.default_fails)
    if unverified and searched.winners.strict is None:
        result = replace(result, reason=RELAXED_OUT_OF_MINUTES)
    result = _labelled(result, settings, searched.stop)
    bar.close()
    save_result(home, result)
    land_result(home, result, settings.day)
    return result


def _task_id(target: TuneTarget, settings: TuneSettings, env_key: str, compiler_version: str) -> str:
    """What names a task: its target, environment, compiler and what its search is given."""
    strategy_name = settings.strategy if settings.schedule else f"{settings.strategy} (plain)"
    # A sharded graph's mode is part of what a task is; a one-device graph's id is as before.
    measured_as = [target.placement.mode] if target.placement.partitioning is not None else []
    # A search without the shipped prior is another task; with it (the default), as before.
    unshipped = [] if settings.shipped_prior else ["no shipped prior"]
    return task_digest(target.kind, target.fingerprint, env_key, strategy_name, settings.seed,
                       settings.budget_evals, compiler_version, *map(config_key, target.configs),
                       *measured_as, *_transfer_parts(settings), *unshipped)


@dataclass(frozen=True)
class _Searched:
    """What a task's loop left: its trials, its winners, why its search ended, what its race
    and pruning compiled, and why its default failed (None: it did not)."""

    trials: list[Trial]
    winners: Winners
    stop: StopReason | None
    compiles: dict[Phase, int]
    default_fails: str | None


def _search(target: TuneTarget, home: Home, settings: TuneSettings, prior: list[TrialRecord] | None,
            trials: list[Trial], clock: TaskClock, in_time: Callable[[], bool],
            record: Callable[[Trial], None]) -> _Searched:
    """The task's search, race and pruning from its journaled `trials` (none where its target
    is unmeasurable or its default fails: then `default_fails` says why). A transfer check's
    winner is kept only where its screen showed it faster than the default: three fresh workers
    cost several screens, and a search follows a check that finds nothing."""
    next_config, stalled, listed = _proposals(target, home, settings, prior)
    plan = plan_cores(settings.compile_workers, settings.cores)
    if target.unmeasurable is not None:  # nothing to measure: it ends as one whose default fails
        return _Searched(trials, Winners(None), None, {}, target.unmeasurable)
    try:
        with WorkerEvaluator(target.module.proto, settings.seed, plan, settings.verify_workers,
                             target.placement.compiled_for) as evaluator:
            outcome = run_search(evaluator, next_config, trials, settings.budget_evals, settings.search,
                                 settings.compare, in_time, record, listed=listed, clock=clock,
                                 stalled=stalled)
    except DefaultFails as failed:  # nothing to measure against: the task ends here
        return _Searched(trials, Winners(None), None, {}, str(failed))
    winners = outcome.winners
    if settings.transfer_check and winners.strict is not None and winners.strict.low <= 0.0:
        winners = Winners(None)
    return _Searched(outcome.trials, winners, outcome.stop, outcome.compiles, None)


def _proposals(target: TuneTarget, home: Home, settings: TuneSettings,
               prior: list[TrialRecord] | None) -> tuple[Propose, Stall | None, bool]:
    """What the task's search proposes, the rule that ends it when stalled (None: never), and
    whether its configs are a fixed list (a target's, or a transfer check's transfers)."""
    listed = target.configs or (tuple(t.config for t in settings.transfers) if settings.transfer_check else ())
    if listed:
        return functools.partial(_listed, listed), None, True
    strategy = _strategy(target, home, settings, prior)
    stalled = Stall(strategy, settings.stall_after) if settings.stall_after is not None else None
    return _seeded(tuple(t.config for t in settings.transfers), proposals(strategy)), stalled, False


def _labelled(result: TuneResult, settings: TuneSettings, stop: StopReason | None) -> TuneResult:
    """`result` with what its task was given and why its search ended: its allotment, where its
    config came from (a transfer, and from which key), a check's strategy."""
    allotment = settings.allotment
    source = transferred(result.config, settings.transfers) if result.config else None
    return replace(result, search_stop=stop,
                   budget_share=allotment.share if allotment is not None else None,
                   budget_reason=allotment.reason if allotment is not None else None,
                   origin=Origin.TRANSFER if settings.transfer_check or source is not None else Origin.SEARCH,
                   transferred_from=source.source if source is not None else None,
                   reason=f"{result.reason}; transferred ({source.describe()})" if source else result.reason,
                   strategy=TRANSFER_CHECK if settings.transfer_check else result.strategy)


def _strategy(target: TuneTarget, home: Home, settings: TuneSettings,
              prior: list[TrialRecord] | None) -> Strategy:
    """The task's strategy: the schedule (tuner.schedule) ending in `settings.strategy`, its
    neighbours ordered by what won on other graphs of `home` and, for a graph, by the prior
    the tuner ships for this machine's platform (tuner.platform_prior); or the strategy alone."""
    strategy = STRATEGIES[settings.strategy](target.space, settings.budget_evals, settings.seed,
                                             prior or [])
    if not settings.schedule:
        return strategy
    shipped = (prior_for(current_environment().device_kind)
               if settings.shipped_prior and target.kind == Kind.GRAPH else None)
    start = move_prior(home, target.kind, target.fingerprint, compiler_defaults(), shipped)
    return Scheduled(strategy, start.scores, skip=start.skipped)


def _listed(configs: tuple[CompilerConfig, ...], trials: list[Trial],
            pending: list[CompilerConfig]) -> CompilerConfig | None:
    """The next of a fixed list of configs (a `tuner.search.Propose`); None at its end."""
    index = len(trials) + len(pending)
    return dict(configs[index]) if index < len(configs) else None


def _seeded(seeds: tuple[CompilerConfig, ...], then: Propose) -> Propose:
    """`then`'s proposals after `seeds` (transferred configs), each seed once: the search starts
    from its siblings' winners, and the strategy sees them among its trials (the schedule climbs
    around the best so far, the incumbent's early stop holds later screens to it)."""
    if not seeds:
        return then
    keys = [config_key(seed) for seed in seeds]

    def next_config(trials: list[Trial], pending: list[CompilerConfig]) -> CompilerConfig | None:
        known = {config_key(t.config) for t in trials} | {config_key(c) for c in pending}
        for seed, key in zip(seeds, keys):
            if key not in known:
                return dict(seed)
        return then(trials, pending)

    return next_config


def _transfer_parts(settings: TuneSettings) -> list[str]:
    """What transfers add to a task's id (nothing without: an id is what it was before)."""
    parts = [f"transfer:{config_key(t.config)}" for t in settings.transfers]
    return parts + ["transfer check"] if settings.transfer_check else parts


def _verify(target: TuneTarget, trials: list[Trial], winners: Winners, settings: TuneSettings,
            task_id: str, env_key: str, compiler_version: str, searched: list[PhaseSpend],
            default_fails: str | None = None) -> TuneResult:
    """Re-measure the strict winner in fresh workers; accept it only if it holds up. Where the
    search's best config relaxes numerics (`winners.relaxed`), verify it too, after the strict
    one: the result's opt-in (`_relaxed_option`). A task whose default failed (`default_fails`
    says why) ends DEFAULT_FAILS, as does one whose default fails in the verification.
    `searched`: what the phases before the verification spent."""
    started = time.monotonic()
    best = winners.strict
    check, relaxed_check = None, None
    if default_fails is None:
        check = _check(target, best, settings)
        if check is None or check.failure != Failure.DEFAULT_FAILS:
            relaxed_check = _check(target, winners.relaxed, settings)
    done = [c for c in (check, relaxed_check) if c is not None]
    phases = [*searched, _verification_spent(done, time.monotonic() - started)]
    config: CompilerConfig = {}
    verified: EvaluationResult | None = None  # the strict winner's verification, where it measured a figure
    if check is None or best is None:  # the default failed, or no winner: nothing verified
        status, reason = ((Verdict.DEFAULT_FAILS, default_fails) if default_fails is not None
                          else (Verdict.NO_GAIN, NO_TRANSFER_GAIN if settings.transfer_check
                                else "nothing beat the default in the search"))
    else:
        status, reason = verdict_of(check, settings.verify.noise_band, target.placement)
        config, verified = best.config, (check if check.error is None else None)
    return TuneResult(
        task_id=task_id, fingerprint=target.fingerprint, env_key=env_key, status=status,
        reason=reason, config=config,
        speedup=verified.speedup if verified is not None else None,
        numerics_ok=verified.numerics_ok if verified is not None else None,
        numerics=(verified.judged().failures()
                  if verified is not None and status == Verdict.NUMERICS_DIFFER else []),
        speedups=verified.speedups if verified is not None else [],
        evaluations=sum(p.evaluations for p in phases), measured=sum(p.measured for p in phases),
        phases=phases, seconds_to_best=seconds_to_find(trials, best), strategy=settings.strategy,
        compiler_version=compiler_version, kind=target.kind, sources=list(target.sources),
        trials=trials, relaxed=_relaxed_option(winners.relaxed, relaxed_check, check, target.placement),
        measure_mode=target.placement.mode)


def verdict_of(check: EvaluationResult, noise_band: float,
               placement: Placement = Placement()) -> tuple[Verdict, str]:
    """A verification's verdict, with its reason: the default fails; the verification failed;
    the numerics differ (whatever the speed: a config that changes results is never delivered);
    no significant gain (the interval's lower end under 1 + `noise_band`, measured per device
    under 1 + the mode's error: `holds_up`; or the default's very program); or accepted."""
    if check.error is not None:
        if check.failure == Failure.DEFAULT_FAILS:  # its error says "default fails: <reason>"
            return Verdict.DEFAULT_FAILS, check.error.removeprefix(f"{Verdict.DEFAULT_FAILS}: ")
        return Verdict.VERIFICATION_FAILED, check.error
    if check.identical_program:
        return Verdict.NO_GAIN, "it compiles to the default's program"
    assert check.speedup is not None, "an evaluation without an error timed its candidate"
    figure = check.speedup.as_speedup()
    if not check.numerics_ok:
        return Verdict.NUMERICS_DIFFER, f"{check.judged().describe()}; measured {figure}"
    if not holds_up(check, placement):
        per_device = f" {placement.mode}" if placement.mode is not MeasureMode.WHOLE else ""
        return Verdict.NO_GAIN, (f"measured {figure}{per_device}: the interval's lower end is "
                                 f"under {1 + gain_bar(noise_band, placement.mode):.3f}")
    return Verdict.ACCEPTED, f"measured {figure}, numerics {check.judged().describe()}"


def _check(target: TuneTarget, winner: Trial | None,
           settings: TuneSettings) -> EvaluationResult | None:
    """`winner`'s config re-measured in `settings.verify_workers` fresh workers (None: no
    winner, nothing to verify)."""
    if winner is None:
        return None
    return evaluate_independently(target.module, winner.config, settings.verify_workers,
                                  settings=verify_settings(settings.verify, target.placement),
                                  seed=settings.seed + 1, partitioning=target.placement.compiled_for)


def verify_settings(verify: MeasureSettings, placement: Placement) -> MeasureSettings:
    """`verify` for a target measured as `placement` says: its noise band is the bar a gain
    measured so must clear (`execution.per_device.gain_bar`: per device, the mode's error too),
    so that an early decision stops a worker only where the gain clears it, and a smaller one
    is measured on."""
    band = gain_bar(verify.noise_band, placement.mode)
    return verify if band == verify.noise_band else replace(verify, noise_band=band)


def holds_up(check: EvaluationResult, placement: Placement) -> bool:
    """Whether a verification shows a gain to deliver: significant (its interval's lower end
    above its noise band), and above the bar of the way it was measured, whatever settings
    measured it (`execution.per_device.gain_bar`: per device, the mode's error too)."""
    if not check.significant or check.speedup is None:
        return False
    return check.speedup.low > 1.0 + gain_bar(0.0, placement.mode)


def _relaxed_option(relaxed: Trial | None, check: EvaluationResult | None,
                    strict: EvaluationResult | None,
                    placement: Placement = Placement()) -> RelaxedOption | None:
    """The opt-in config: `relaxed`'s where its verification (`check`) holds up as a strict
    winner's must (a significant gain, numerics ok) and gains more than the `strict` winner's
    verification, where that holds up; None otherwise (an opt-in that gains nothing more is
    no option)."""
    if relaxed is None or check is None or check.error or check.speedup is None or not (
            holds_up(check, placement) and check.numerics_ok):
        return None
    if (strict is not None and not strict.error and strict.speedup is not None
            and holds_up(strict, placement) and strict.numerics_ok
            and check.speedup.estimate <= strict.speedup.estimate):
        return None
    return RelaxedOption(relaxed.config, check.speedup)


def _verification_spent(checks: list[EvaluationResult], seconds: float) -> PhaseSpend:
    """What the verification spent: one config and one evaluation per check (the strict
    winner's, and the relaxed one's where there is one; none where nothing was verified), each
    measured where it gave a figure, compiled twice (the default and the config) in each fresh
    worker that gave one, or in the one whose failure ended it (`in_fresh_workers` keeps no
    more: workers before it go uncounted)."""
    measured = sum(check.error is None and not check.identical_program for check in checks)
    compiles = sum(2 * (len(check.speedups) or 1) for check in checks)
    return PhaseSpend(Phase.VERIFY, len(checks), len(checks), measured, compiles, seconds)
