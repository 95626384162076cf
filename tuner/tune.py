"""One tuning task: search a module's compiler flags, then verify the best config afresh.

A task tunes a graph (`tune_module`: the unoptimized module, the graph-level space, results
keyed by the graph fingerprint) or an op (`tune_op`: a kernel cut out of its optimized graph,
the op-level space of its class, results keyed by the op fingerprint); both run `run_task`,
as does every task of a searched kind that `tuner.task.tune` runs (a GPU graph's kernels are
`tuner.kernels`', which searches nothing itself).

The search loop (`tuner.search`) runs over the tuner's evaluator (`tuner.worker_evaluator`):
candidates compile in a pool of sandboxed compile workers and are measured, one at a time, in a
separate execute worker that compiled the default once (`execution.session`); the two sets of
workers are pinned to disjoint cores (`execution.cores`), so compiles of the next candidates go
on while one is measured without disturbing it. If a candidate's program (optimized module +
machine code, `execution.session.program_key`) equals the default's or one already measured,
the known result is reused instead of running it again. Each trial is appended to the task's
journal (`<home>/tuner/tasks/<task>/trials.jsonl`, durable before the next: `storage.journal`),
so a task killed at any moment resumes without repeating a finished trial. A crash or timeout is
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
names why (`verdict_of`), and its `reason` gives the figures. The trials and the result land in the warehouse under the task id, so finishing a task
twice adds nothing. The home may be local or a URL (`storage.home.Home`): every file is named by
its place under it.

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
import hashlib
import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from execution.compile import compiler_defaults
from execution.cores import plan_cores
from execution.evaluate import FRESH_WORKERS, DefaultFails, EvaluationResult, evaluate_independently
from execution.flags import CompilerConfig, config_from_json
from execution.measure import MeasureSettings
from execution.numerics import OutputCheck
from execution.per_device import PER_DEVICE_ERROR
from execution.sharded import MeasureMode, Placement
from hlo.environment import current_environment
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule
from storage.home import Home
from storage.homes import open_home
from storage.journal import append_record, read_records
from storage.warehouse import Warehouse
from tuner.allot import Allotment
from tuner.kinds import Subject, TuneTarget, make_target
from tuner.op_cut import OpCut
from tuner.prior import move_prior
from tuner.schedule import Scheduled
from tuner.search import (PhaseSpend, Stall, TaskClock, evaluations, proposals, run_search,
                          seconds_to_find, spending)
from tuner.space import config_key
from tuner.strategies import STRATEGIES, Strategy, TrialRecord
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.trial import STALL_AFTER, Phase, StopReason, Trial
from tuner.winner import Winners
from tuner.worker_evaluator import WorkerEvaluator
from vocabulary.failures import Failure
from vocabulary.interval import Interval, as_flat, columns, from_columns, from_flat
from vocabulary.tuning import Kind, Verdict

# Screens stop as soon as a candidate is clearly faster or slower (execution.measure): a clear
# candidate of a module that runs for half a second costs seconds, not a minute.
SEARCH_SETTINGS = MeasureSettings(max_seconds=6.0, target_half_width=0.02, max_pairs=200,
                                  early_looks=(10, 15, 20, 30), min_pairs=10)
# The winner's race and pruning time one config against another (tuner.winner), in fresh
# workers (`TuneSettings.verify_workers` of them), each to a tight interval or 3 s, with no
# early stop: they tell apart programs a percent apart, where a screen only tells a candidate
# from the default.
COMPARE_SETTINGS = replace(SEARCH_SETTINGS, early_looks=(), max_pairs=MeasureSettings().max_pairs,
                           min_pairs=MeasureSettings().min_pairs, max_seconds=3.0,
                           target_half_width=0.005, stop_when_no_gain=False)
VERIFY_SETTINGS = MeasureSettings(confidence=0.999, min_pairs=40, max_seconds=10.0)


@dataclass(frozen=True)
class TuneSettings:
    """The budget and the strategy of a task."""

    budget_evals: int = 40
    budget_minutes: float | None = None
    strategy: str = "evolution"  # the last phase of the schedule, or the whole search without
    schedule: bool = True  # neighbours by prior, then combinations, then the strategy
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

    def __post_init__(self) -> None:
        if self.stall_after is not None and self.stall_after < 1:
            raise ValueError(f"stall_after {self.stall_after}: at least 1 evaluation (or None: "
                             "never stop before the budget)")


@dataclass(frozen=True)
class RelaxedOption:
    """A config that relaxes numerics (`execution.flags.relaxes_numerics`), verified a
    significant gain with numerics ok, and a larger one than the task's strict config where that
    was accepted: what a job that opts in to relaxed numerics would gain. Its verification's
    speedup over the default, as a result's."""

    config: CompilerConfig
    speedup: Interval


@dataclass
class TuneResult:
    """How a task ended: `speedup`, the verification's over the default (None: nothing
    verified to a figure)."""

    task_id: str
    fingerprint: str
    env_key: str
    status: Verdict  # why it ended so: `reason` says more
    config: CompilerConfig
    speedup: Interval | None
    numerics_ok: bool | None
    evaluations: int  # configs timed or failed, in every phase (the sum over `phases`)
    measured: int  # those timed to a result, in every phase (the sum over `phases`)
    strategy: str
    compiler_version: str
    kind: Kind = Kind.GRAPH
    sources: list[str] = field(default_factory=list)  # a folded result's op tasks
    trials: list[Trial] = field(default_factory=list)
    reason: str = ""  # the status's details, for people: what failed, or the figures that decided
    # NUMERICS_DIFFER: the outputs that failed (by how much, against what tolerance), on the
    # first set of inputs that failed in the verification; empty otherwise.
    numerics: list[OutputCheck] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # each verification worker's
    # What each phase spent, search first, verify last (none in a result of a task landed
    # before phases were told).
    phases: list[PhaseSpend] = field(default_factory=list)
    # Seconds into the task when the config verified was found: the first trial that ran its
    # program (`tuner.search.seconds_to_find`). None: no config to verify.
    seconds_to_best: float | None = None
    # The opt-in config that relaxes numerics, where the best config found did and it held up
    # in its verification (`RelaxedOption`); None otherwise. `config` relaxes nothing.
    relaxed: RelaxedOption | None = None
    # A kernels task's (`tuner.kernels`): the autotune results it delivered with `config`, an
    # xla.AutotuneResults in XLA's text format; None for every other task.
    autotune_results: str | None = None
    # Why its search ended (`tuner.trial.StopReason`); None where no search ran (a default that
    # fails, a kernels task) or in a result landed before it was told.
    search_stop: StopReason | None = None
    # A nightly stage's task: its share of the stage's budget and why (`tuner.allot`); None
    # for a task given its own budget.
    budget_share: float | None = None
    budget_reason: str | None = None
    # How the graph was measured (execution.sharded): whole, or its per-device program.
    measure_mode: MeasureMode = MeasureMode.WHOLE

    @property
    def accepted(self) -> bool:
        """Whether its config is delivered: the verdict is ACCEPTED."""
        return self.status == Verdict.ACCEPTED

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (without the trials): `accepted` beside `status`; each speedup as
        `speedup`, `ci_low`, `ci_high`, the opt-in's within `relaxed`."""
        data = as_flat(self)
        data.pop("trials")
        data.update(config=json.loads(config_key(self.config)), accepted=self.accepted)
        if self.relaxed is not None:
            data["relaxed"] = {"config": json.loads(config_key(self.relaxed.config)),
                               **columns(self.relaxed.speedup)}
        return data


def tune_module(module: HloModule, home: Home, settings: TuneSettings, env_key: str | None = None,
                progress: bool = False, prior: list[TrialRecord] | None = None,
                placement: Placement = Placement()) -> TuneResult:
    """Tune `module`'s graph-level flags within the budget, measured as `placement` says (a
    sharded graph whole, or per device); resumes the task if interrupted."""
    return run_task(make_target(Kind.GRAPH, graph_subject(module, placement)), home, settings,
                    env_key, progress, prior)


def tune_op(cut: OpCut, home: Home, settings: TuneSettings, env_key: str | None = None,
            progress: bool = False) -> TuneResult:
    """Tune one kernel cut out of its graph (`tuner.op_cut`) over its op-level space; the
    result is keyed by the op fingerprint, with kind 'op'. On CPU it reaches users folded into
    a graph-level config (`tuner.fold`)."""
    return run_task(make_target(Kind.OP, op_subject(cut)), home, settings, env_key, progress)


def graph_subject(module: HloModule, placement: Placement = Placement()) -> Subject:
    """A graph as a task's subject, measured as `placement` says: keyed by its graph
    fingerprint."""
    fingerprint = graph_fingerprint(module)
    return Subject(module, fingerprint, module.name or fingerprint[:8], placement=placement)


def op_subject(cut: OpCut) -> Subject:
    """An op cut out of its graph as a task's subject: keyed by the op fingerprint."""
    return Subject(cut.module, cut.fingerprint, cut.name, cut.op_class)


def run_task(target: TuneTarget, home: Home, settings: TuneSettings, env_key: str | None = None,
             progress: bool = False, prior: list[TrialRecord] | None = None) -> TuneResult:
    """Search `target.space` for `target.module`, verify the best afresh, land the task."""
    from console.progress import progress_bar

    home = open_home(home)
    environment = current_environment()
    env_key = env_key or environment.key()
    strategy_name = settings.strategy if settings.schedule else f"{settings.strategy} (plain)"
    # A sharded graph's mode is part of what a task is; a one-device graph's id is as before.
    measured_as = [target.placement.mode] if target.placement.partitioning is not None else []
    task_id = task_digest(target.kind, target.fingerprint, env_key, strategy_name,
                          settings.seed, settings.budget_evals, environment.compiler_version,
                          *map(config_key, target.configs), *measured_as)
    finished = finished_result(home, task_id)
    if finished is not None:  # landing again is a no-op unless a kill cut it short
        land_result(home, finished)
        return finished
    journal = task_file(home, task_id, "trials.jsonl")
    trials = [Trial.from_json(data) for data in read_records(home, journal)]
    started = time.monotonic()
    clock = TaskClock(trials)
    bar = progress_bar(total=settings.budget_evals,
                       initial=evaluations([t for t in trials if t.phase == Phase.SEARCH]),
                       desc=f"tune {target.label}", unit="eval", enabled=progress)
    def in_time() -> bool:
        return not settings.budget_minutes or time.monotonic() - started < 60 * settings.budget_minutes

    def record(trial: Trial) -> None:
        append_record(home, journal, trial.to_json())
        if trial.phase == Phase.SEARCH:
            bar.update(int(trial.timed))
        else:  # the budget is spent: say what the minute or two after it goes to
            bar.set_postfix_str(f"choosing the winner ({trial.phase})")

    stalled = None
    if target.configs:  # a fixed list, in order
        next_config = functools.partial(_listed, target.configs)
    else:
        strategy = _strategy(target, home, settings, prior)
        next_config = proposals(strategy)
        if settings.stall_after is not None:
            stalled = Stall(strategy, settings.stall_after)
    plan = plan_cores(settings.compile_workers, settings.cores)
    # A target with nothing to measure (`unmeasurable`) ends as one whose default fails.
    default_fails, winners, stop, compiles = target.unmeasurable, Winners(None), None, {}
    if default_fails is None:
        try:
            with WorkerEvaluator(target.module.proto, settings.seed, plan, settings.verify_workers,
                                 target.placement.compiled_for) as evaluator:
                outcome = run_search(evaluator, next_config, trials, settings.budget_evals,
                                     settings.search, settings.compare, in_time, record,
                                     listed=bool(target.configs), clock=clock, stalled=stalled)
                trials, winners, stop, compiles = (outcome.trials, outcome.winners, outcome.stop,
                                                   outcome.compiles)
        except DefaultFails as failed:  # nothing to measure against: the task ends here
            default_fails = str(failed)
    searched = spending(trials, clock(), compiles)  # the workers stopped: the loop ends
    if winners.strict is not None or winners.relaxed is not None:
        bar.set_postfix_str(f"verifying in {settings.verify_workers} fresh workers")
    result = _verify(target, trials, winners, settings, task_id, env_key,
                     environment.compiler_version, searched, default_fails)
    allotment = settings.allotment
    result = replace(result, search_stop=stop,
                     budget_share=allotment.share if allotment is not None else None,
                     budget_reason=allotment.reason if allotment is not None else None)
    bar.close()
    save_result(home, result)
    land_result(home, result)
    return result


def _strategy(target: TuneTarget, home: Home, settings: TuneSettings,
              prior: list[TrialRecord] | None) -> Strategy:
    """The task's strategy: the schedule (tuner.schedule) ending in `settings.strategy`, its
    neighbours ordered by what won on other graphs of `home`; or the strategy alone."""
    strategy = STRATEGIES[settings.strategy](target.space, settings.budget_evals, settings.seed,
                                             prior or [])
    if not settings.schedule:
        return strategy
    return Scheduled(strategy, move_prior(home, target.kind, target.fingerprint, compiler_defaults()))


def _listed(configs: tuple[CompilerConfig, ...], trials: list[Trial],
            pending: list[CompilerConfig]) -> CompilerConfig | None:
    """The next of a fixed list of configs (a `tuner.search.Propose`); None at its end."""
    index = len(trials) + len(pending)
    return dict(configs[index]) if index < len(configs) else None


def task_file(home: Home, task_id: str, name: str) -> Any:
    """Where a task keeps file `name`: its journal (`trials.jsonl`) and, once finished, its
    result (`result.json`), under `tuner/tasks/<task>/` of the home."""
    return home.location("tuner", "tasks", task_id, name)


def save_result(home: Home, result: TuneResult) -> None:
    """Write a finished task's result and trials, atomically: the task is then done."""
    trials = [t.to_json() for t in result.trials]
    home.atomic_write(task_file(home, result.task_id, "result.json"),
                      json.dumps({**result.to_json(), "trials": trials}) + "\n")


def finished_result(home: Home, task_id: str) -> TuneResult | None:
    """The result of task `task_id` finished before, if it was."""
    done = task_file(home, task_id, "result.json")
    return _result_from_json(json.loads(home.read_bytes(done))) if home.exists(done) else None


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
    base = dict(task_id=task_id, fingerprint=target.fingerprint, env_key=env_key,
                evaluations=sum(p.evaluations for p in phases),
                measured=sum(p.measured for p in phases), phases=phases,
                seconds_to_best=seconds_to_find(trials, best),
                strategy=settings.strategy, compiler_version=compiler_version, kind=target.kind,
                sources=list(target.sources), trials=trials,
                relaxed=_relaxed_option(winners.relaxed, relaxed_check, check, target.placement),
                measure_mode=target.placement.mode)
    if default_fails is not None:
        return TuneResult(status=Verdict.DEFAULT_FAILS, reason=default_fails, config={},
                          speedup=None, numerics_ok=None, **base)
    if check is None:  # nothing beat the default: nothing to verify
        return TuneResult(status=Verdict.NO_GAIN, reason="nothing beat the default in the search",
                          config={}, speedup=None, numerics_ok=None, **base)
    status, reason = verdict_of(check, settings.verify.noise_band, target.placement)
    measured = check.error is None
    return TuneResult(status=status, reason=reason, config=best.config,
                      speedup=check.speedup if measured else None,
                      numerics_ok=check.numerics_ok if measured else None,
                      numerics=check.judged().failures() if status == Verdict.NUMERICS_DIFFER else [],
                      speedups=check.speedups if measured else [], **base)


def verdict_of(check: EvaluationResult, noise_band: float,
               placement: Placement = Placement()) -> tuple[Verdict, str]:
    """A verification's verdict, with its reason: the default fails; the verification failed;
    the numerics differ (whatever the speed: a config that changes results is never delivered);
    no significant gain (the interval's lower end under 1 + `noise_band`, measured per device
    under 1 + the mode's error too: `holds_up`; or the default's very program); or accepted."""
    if check.failure == Failure.DEFAULT_FAILS:  # its error says "default fails: <reason>"
        return Verdict.DEFAULT_FAILS, check.error.removeprefix(f"{Verdict.DEFAULT_FAILS}: ")
    if check.error is not None:
        return Verdict.VERIFICATION_FAILED, check.error
    if check.identical_program:
        return Verdict.NO_GAIN, "it compiles to the default's program"
    figure = check.speedup.as_speedup()
    if not check.numerics_ok:
        return Verdict.NUMERICS_DIFFER, f"{check.judged().describe()}; measured {figure}"
    if not check.significant:
        return Verdict.NO_GAIN, (f"measured {figure}: the interval's lower end is under "
                                 f"{1 + noise_band:.3f}")
    if not holds_up(check, placement):
        return Verdict.NO_GAIN, (f"measured {figure} per device: the interval's lower end is "
                                 f"under {1 + PER_DEVICE_ERROR:.3f}, the per-device mode's error")
    return Verdict.ACCEPTED, f"measured {figure}, numerics {check.judged().describe()}"


def _check(target: TuneTarget, winner: Trial | None,
           settings: TuneSettings) -> EvaluationResult | None:
    """`winner`'s config re-measured in `settings.verify_workers` fresh workers (None: no
    winner, nothing to verify)."""
    if winner is None:
        return None
    return evaluate_independently(target.module, winner.config, settings.verify_workers,
                                  settings=settings.verify, seed=settings.seed + 1,
                                  partitioning=target.placement.compiled_for)


def holds_up(check: EvaluationResult, placement: Placement) -> bool:
    """Whether a verification shows a gain to deliver: significant (its interval's lower end
    above the noise band), and measured per device, above the per-device mode's measured error
    too (`execution.per_device.PER_DEVICE_ERROR`): the whole program may gain that much less."""
    if not check.significant or check.speedup is None:
        return False
    return placement.mode is MeasureMode.WHOLE or check.speedup.low > 1.0 + PER_DEVICE_ERROR


def _relaxed_option(relaxed: Trial | None, check: EvaluationResult | None,
                    strict: EvaluationResult | None,
                    placement: Placement = Placement()) -> RelaxedOption | None:
    """The opt-in config: `relaxed`'s where its verification (`check`) holds up as a strict
    winner's must (a significant gain, numerics ok) and gains more than the `strict` winner's
    verification, where that holds up; None otherwise (an opt-in that gains nothing more is
    no option)."""
    if relaxed is None or check is None or check.error or not (
            holds_up(check, placement) and check.numerics_ok):
        return None
    if (strict is not None and not strict.error and holds_up(strict, placement) and strict.numerics_ok
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


def land_result(home: Home, result: TuneResult, on: datetime.date | None = None) -> None:
    """The task's trials and result into the warehouse, named by the task: idempotent. They
    land under the day `on` (default today: the day the task finished). The `trials` table
    holds speedups over the default: the race's and pruning's comparisons of one config with
    another stay in the task's own files (`save_result`)."""
    today = on or datetime.date.today()
    rows = [{"dt": today, "trial_id": task_digest(result.task_id, t.index),
             "task_id": result.task_id, "kind": result.kind, "fingerprint": result.fingerprint,
             "env_key": result.env_key, "strategy": result.strategy, "index": t.index,
             "config": config_key(t.config), "program": t.program, "outcome": t.outcome,
             **columns(t.speedup), "numerics_ok": t.numerics_ok,
             "compile_seconds": t.compile_seconds, "error": t.error, "finished_at": t.finished_at,
             "elapsed_seconds": t.elapsed_seconds, "measure_mode": result.measure_mode}
            for t in result.trials if t.baseline is None]
    warehouse = Warehouse(home)
    warehouse.append(TRIALS, pa.Table.from_pylist(rows, TRIALS.schema), f"task-{result.task_id}")
    summary = {k: v for k, v in result.to_json().items()
               if k in TUNING_RESULTS.schema.names}
    summary.update(dt=today, config=config_key(result.config),
                   numerics=failed_outputs_json(result.numerics) if result.numerics else None)
    if result.relaxed is not None:  # the columns are null without it
        summary.update(relaxed_config=config_key(result.relaxed.config),
                       **columns(result.relaxed.speedup, prefix="relaxed_"))
    warehouse.append(TUNING_RESULTS, pa.Table.from_pylist([summary], TUNING_RESULTS.schema),
                     f"task-{result.task_id}")


def failed_outputs_json(checks: list[OutputCheck]) -> str:
    """The `tuning_results` table's `numerics`: the failed outputs as JSON, an error or
    tolerance that is not a finite number (a NaN the default did not produce) as null."""
    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return json.dumps([{"index": c.index, "max_error": number(c.max_error),
                        "tolerance": number(c.tolerance), "detail": c.detail} for c in checks])


def _result_from_json(data: dict[str, Any]) -> TuneResult:
    """A TuneResult as `save_result` wrote it (or before a field was added): every field as
    written, the config, status, trials, phases and opt-in decoded. A result written before the
    status was a `Verdict` ("default fails: <reason>", with `accepted` and `failure` beside it)
    reads as its verdict and reason."""
    relaxed = data.get("relaxed")
    written = {k: v for k, v in from_flat(data).items() if k not in ("accepted", "failure")}
    if "reason" in data:
        status, reason = Verdict(data["status"]), data["reason"]
    else:
        status, reason = Verdict.parse(data["status"])
    return TuneResult(**{**written, "config": config_from_json(data["config"]),
                         "status": status, "reason": reason,
                         "numerics": [OutputCheck(**check) for check in data.get("numerics", [])],
                         "kind": Kind(data.get("kind", Kind.GRAPH)),
                         "search_stop": (StopReason(data["search_stop"])
                                         if data.get("search_stop") is not None else None),
                         "measure_mode": MeasureMode(data.get("measure_mode", MeasureMode.WHOLE)),
                         "relaxed": (RelaxedOption(config_from_json(relaxed["config"]),
                                                   from_columns(relaxed))
                                     if relaxed is not None else None),
                         "trials": [Trial.from_json(t) for t in data.get("trials", [])],
                         "phases": [PhaseSpend(**{**p, "phase": Phase(p["phase"])})
                                    for p in data.get("phases", [])]})


def task_digest(*parts: object) -> str:
    """A task's (or a trial's) id from what defines it."""
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()
