"""`fdo validate`: re-check every store entry on the current compiler (CATWILD 3.4, 4.3).

A run, under one toolchain (validator.toolchains; default: the running interpreter):
1. Plans over the live entries. Decisions that need no measurement come first: expired
   entries, entries the fleet reported fallbacks for, entries that regressed in the fleet over
   the last `fleet_window` (their realized interval wholly below 1), and entries that cannot be
   measured here (validator.rules). The rest are queued by priority: most
   fleet hits first (validator.signals), then least recently measured; an entry whose realized
   speedup falls far short of its expected one is queued even if measured recently.
2. Re-measures queued entries one by one, within the time budget, as the tuner verifies a
   winner: the entry's graph (unoptimized HLO from the blob store) compiled with its config
   against the defaults, paired timing and numeric check, in `workers` fresh sandboxed workers
   running under the toolchain, decided on their median (one process now and then runs a
   library's kernels 20% slow: one worker's verdict would remove good configs); a removal
   that one of them contradicts takes more workers first, up to `most_workers`. An entry with
   XLA:GPU autotune results is first compiled with them delivered, in a fresh worker
   (`check_results`): what XLA took, and how XLA keys its results now (its dump); results XLA
   keys otherwise are relabelled so and delivered again; results it does not take invalidate
   the entry unmeasured; else that executable is timed against the default
   (`execution.evaluate.evaluate_built`) and decided as any config (validator.rules). What
   the budget does not reach is deferred to the next run. An entry's relaxed-numerics config,
   where its strict one was kept or re-keyed, is measured next, the same way (with the
   results as XLA took them), and decided by the same rules: kept, re-keyed with it, or
   dropped from the entry (validator.rules).
3. Publishes one new store version with every decision applied to the entries live at that
   moment (Store.update retries when deliver, an import or the service published meanwhile).
4. Writes one `validations` audit row per decision.

Every decision is journaled (`<home>/validator/runs/<run>/journal.jsonl`, durably) before the
next entry is looked at. A run killed at any point is resumed by the next run under the same
toolchain: decided entries are not measured again, the publish is not repeated (the run finds
its version by the writer the manifest names), and the audit rows land once (their part is
named after the run). One run at a time per home (a file lock; on a URL home, which has none,
one per process: `storage.home`). The home may be local or a URL.
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from delivery.store_writer import DEFAULT_TTL, Store
from execution.autotune.per_fusion_directory import AutotuneOutcome
from execution.autotune.results import AutotuneResults
from execution.evaluate import (
    FRESH_WORKERS,
    DefaultFails,
    EvaluationResult,
    compile_with_results,
    evaluate_built,
    evaluate_independently,
    per_device_program,
    prepare_default,
    worker_for,
)
from execution.flags import CompilerConfig, FlagError, checked_config
from execution.measure import MeasureSettings
from execution.per_device import PerDeviceError, gain_bar
from execution.session import Built
from execution.sharded import Placement
from execution.worker import WorkerFailure
from hlo.module import HloLoadError, HloModule, from_text
from storage.blobs import BlobError, BlobStore
from storage.home import Home
from storage.home_factory import open_home
from storage.warehouse import Warehouse
from validator import rules
from validator.plan import Planner, Queued
from validator.rules import Decision, ResultsCheck, ResultsFate
from validator.run import Run, exclusive
from validator.signals import FLEET_WINDOW
from validator.toolchains import Registry, Toolchain
from vocabulary.confidence import VALIDATED_LEVEL
from vocabulary.decisions import DecisionOutcome, StoreChange
from vocabulary.failures import Failure
from vocabulary.measure import MeasureMode

MEASURE_SETTINGS = MeasureSettings(confidence=VALIDATED_LEVEL, min_pairs=20, max_seconds=10.0)
MAX_AGE = datetime.timedelta(days=180)


@dataclass(frozen=True)
class ValidateSettings:
    """A run's budget and rules."""

    budget_minutes: float | None = None  # None: measure every entry that needs it
    ttl: datetime.timedelta = DEFAULT_TTL  # a kept or re-keyed entry's fresh lease
    max_age: datetime.timedelta = MAX_AGE  # absolute lifetime since first measured
    # Entries measured more recently on the same compiler are not measured again: the budget
    # goes to the stale ones (entries on another compiler are checked however fresh).
    revalidate_after: datetime.timedelta = datetime.timedelta(days=1)
    # The days of fleet profiles whose realized speedups guard the entries (and flag the ones far
    # short of their expected gain for measuring now).
    fleet_window: datetime.timedelta = FLEET_WINDOW
    measure: MeasureSettings = MEASURE_SETTINGS
    timeout: float = 600.0  # per measurement, in each worker
    seed: int = 0
    workers: int = FRESH_WORKERS  # fresh workers per entry, decided on their median
    # More, one at a time, while the median would remove an entry a worker measured faster
    # (`validator.rules.settled`): where one process in five is slow, two of three are slow
    # one time in ten, four of seven about one time in thirty.
    most_workers: int = 7


@dataclass
class RunReport:
    """What a run decided."""

    run_id: str
    toolchain: str
    compiler_version: str
    version: int | None  # the live store version after the run
    published: bool  # whether the run published that version
    resumed: bool
    skipped: int  # nothing to do: measured recently, or re-keyed or decided for this compiler
    deferred: int  # not reached within the budget
    decisions: list[Decision] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Decisions per outcome (every outcome present, zero or not)."""
        found = Counter(d.outcome for d in self.decisions)
        return {outcome: found[outcome] for outcome in DecisionOutcome}

    def to_json(self) -> dict[str, Any]:
        """The counts, the version and the run, JSON-ready."""
        return {**self.counts(), "version": self.version, "published": self.published,
                "skipped": self.skipped, "deferred": self.deferred, "run_id": self.run_id,
                "toolchain": self.toolchain, "compiler_version": self.compiler_version,
                "resumed": self.resumed}


class Measurer(Protocol):
    """Measures queued entries (each as `measure` does) until a deadline (time.time(); None: no
    deadline) and yields each decision as it comes, in any order; an entry it leaves out (out of
    time, no machine to measure it) is deferred to the next run. The default measures here, in
    order (`measure_in_order`); a cluster runner measures on the nodes (`tasks`)."""

    def __call__(self, queue: list[Queued], home: Home, chain: Toolchain, settings: ValidateSettings,
                 deadline: float | None) -> Iterable[Decision]: ...


def validate(home: Home, toolchain: str | None = None,
             settings: ValidateSettings = ValidateSettings(), progress: bool = False,
             now: datetime.datetime | None = None, measurer: Measurer | None = None) -> RunReport:
    """Run (or resume) one validation pass over the store of `home` under `toolchain`; the
    queued entries are measured by `measurer` (default: here, in order)."""
    home = open_home(home)
    with exclusive(home):
        chain = Registry(home).get(toolchain)
        run = Run.open(home, chain)
        skipped = deferred = 0
        if run.published is None:
            planner = Planner(home, chain, now or datetime.datetime.now(datetime.UTC),
                              settings.max_age, settings.revalidate_after, settings.fleet_window)
            free, queue, skipped = planner.plan(decided={d.key for d in run.decisions})
            for decision in free:
                run.record(decision)
            deferred = _measure_queue(queue, planner, run, settings, progress,
                                      measurer or measure_in_order)
            run.publish(Store(home))
        published = run.land(Warehouse(home))
        return RunReport(run.run_id, chain.name, chain.compiler_version, published.version,
                         published.published, run.resumed, skipped, deferred, run.decisions)


def _measure_queue(queue: list[Queued], planner: Planner, run: Run, settings: ValidateSettings,
                   progress: bool, measurer: Measurer) -> int:
    """Measure the queue until the budget is spent, journaling each decision as it comes;
    returns how many were deferred."""
    from console.progress import progress_bar

    deadline = None if settings.budget_minutes is None else time.time() + 60 * settings.budget_minutes
    bar = progress_bar(total=len(queue), desc=f"validate on {planner.chain.compiler_version}",
                       unit="entry", enabled=progress)
    done = 0
    try:
        for decision in measurer(queue, planner.home, planner.chain, settings, deadline):
            run.record(decision)
            done += 1
            bar.update()
    finally:
        bar.close()
    return len(queue) - done


def measure_in_order(queue: list[Queued], home: Home, chain: Toolchain, settings: ValidateSettings,
                     deadline: float | None) -> Iterable[Decision]:
    """The default `Measurer`: each entry here, in order, while the deadline is not past."""
    for queued in queue:
        if deadline is not None and time.time() > deadline:
            return
        yield measure(queued, home, chain, settings)


def measure(queued: Queued, home: Home, chain: Toolchain, settings: ValidateSettings) -> Decision:
    """Re-measure one entry's config against the defaults under `chain` and decide; its graph
    comes from the blob store of `home`."""
    entry = queued.entry
    cv = chain.compiler_version
    invalidated = queued.invalidates

    def decide(outcome: DecisionOutcome, reason: str, change: StoreChange, result: Any = None) -> Decision:
        return queued.decide(outcome, reason, change, datetime.datetime.now(datetime.UTC),
                             settings.ttl, settings.max_age, result)

    try:
        config = checked_config(json.loads(entry.config))
    except (FlagError, json.JSONDecodeError) as exc:
        return decide(DecisionOutcome.INVALIDATED, f"its config is no longer accepted: {exc}", invalidated)
    try:
        module = from_text(BlobStore(home).get_text(queued.blob), source=queued.blob)
    except (BlobError, HloLoadError) as exc:
        return decide(DecisionOutcome.UNMEASURED, str(exc), StoreChange.NONE)
    placement = queued.placement
    if placement.mode is MeasureMode.PER_DEVICE:
        assert placement.partitioning is not None
        try:
            module = per_device_program(module, placement.partitioning, settings.timeout)
        except PerDeviceError as exc:
            return decide(DecisionOutcome.UNMEASURED, str(exc), StoreChange.NONE)
    band = gain_bar(settings.measure.noise_band, placement.mode)

    def settled(median: EvaluationResult) -> bool:
        return rules.settled(median, queued.same_compiler, band)

    check = None
    if queued.results is None:
        result = evaluate_independently(
            module, config, settings.workers, settings=settings.measure, timeout=settings.timeout,
            seed=settings.seed, python=chain.python, most=settings.most_workers, settled=settled,
            partitioning=placement.compiled_for)
    else:
        check, built = check_results(module, queued.results, config, chain.python, settings.timeout)
        if check is None:  # the compile failed: `built.error` says why
            return _blamed(f"its compile with its autotune results failed ({built.error})", module,
                           chain, settings, decide, invalidated)
        if check.fate == ResultsFate.NOT_TAKEN:  # timing it would time XLA's own autotuning
            result = None
        else:
            result = evaluate_built(module, built, settings.workers, config, settings.measure,
                                    settings.timeout, settings.seed, chain.python, settled,
                                    settings.most_workers)
    if result is None or result.error is None:
        decision = queued.measured(result, cv, band, datetime.datetime.now(datetime.UTC), settings.ttl,
                                   settings.max_age, check)
        return _relaxed(decision, queued, module, check, chain, settings, settled, band)
    if result.failure == Failure.DEFAULT_FAILS:
        return decide(DecisionOutcome.UNMEASURED, f"its graph fails on {cv}: {result.error}", StoreChange.NONE)
    if result.failure == Failure.CANDIDATE_FAILS:
        return decide(DecisionOutcome.INVALIDATED, f"{result.error} on {cv}", invalidated)
    return _blamed(f"{result.error} with this config", module, chain, settings, decide, invalidated,
                   placement)


def _relaxed(decision: Decision, queued: Queued, module: HloModule, check: ResultsCheck | None,
             chain: Toolchain, settings: ValidateSettings, settled: Callable[[EvaluationResult], bool],
             band: float) -> Decision:
    """`decision` with the entry's relaxed-numerics config measured as its strict one was (on
    `module`, with the autotune results as `check` left them) and decided by the same rules
    (validator.rules.relaxed_outcome); as it is where the entry has none, or its strict
    config was not kept or re-keyed (the entry goes, or gains nothing on this compiler)."""
    text = queued.entry.relaxed_config
    if text is None or not decision.outcome.renewed:
        return decision
    cv = chain.compiler_version
    try:
        config = checked_config(json.loads(text))
    except (FlagError, json.JSONDecodeError) as exc:
        return rules.with_relaxed(decision, DecisionOutcome.INVALIDATED, f"is no longer accepted: {exc}")
    partitioning = queued.placement.compiled_for
    if check is None:
        result = evaluate_independently(
            module, config, settings.workers, settings=settings.measure, timeout=settings.timeout,
            seed=settings.seed, python=chain.python, most=settings.most_workers, settled=settled,
            partitioning=partitioning)
    else:
        built = compile_with_results(module, check.results, config, settings.timeout, chain.python)
        if built.error is not None:
            return rules.with_relaxed(decision, DecisionOutcome.INVALIDATED,
                                      f"fails to compile with its autotune results on {cv} ({built.error})")
        result = evaluate_built(module, built, settings.workers, config, settings.measure, settings.timeout,
                                settings.seed, chain.python, settled, settings.most_workers)
    outcome, reason = rules.relaxed_outcome(result, queued.same_compiler, cv, band)
    return rules.with_relaxed(decision, outcome, reason, result)


def _blamed(failed: str, module: HloModule, chain: Toolchain, settings: ValidateSettings,
            decide: Callable[..., Decision], invalidated: str,
            placement: Placement = Placement()) -> Decision:
    """The decision where the entry's compile or run `failed` (a crash, out of memory or time,
    a compile error): the entry is blamed only if the defaults run (measured as `placement`
    says)."""
    cv = chain.compiler_version
    try:
        with worker_for(placement.compiled_for, python=chain.python) as worker:
            prepare_default(worker, module.proto, settings.seed, settings.timeout,
                            placement.compiled_for)
    except (DefaultFails, WorkerFailure) as failure:
        return decide(DecisionOutcome.UNMEASURED, f"its graph fails on {cv} with the defaults too: {failure}",
                      StoreChange.NONE)
    return decide(DecisionOutcome.INVALIDATED, f"{failed} on {cv}; the defaults run", invalidated)


def check_results(module: HloModule, results: AutotuneResults, config: CompilerConfig,
                  python: str, timeout: float) -> tuple[ResultsCheck | None, Built]:
    """The module compiled with `config` and `results` delivered under `python` (a fresh
    worker each), and what XLA did with them: where it took not every one and its dump keys
    its results otherwise (another key version or device description), the results relabelled
    so and delivered again. The last compile's Built (its executable, to time), and the check
    (None where that compile failed: `Built.error`)."""
    built = compile_with_results(module, results, config, timeout, python)
    if built.error is not None:
        return None, built
    relabelled = rules.relabelled(results, _results_outcome(built))
    if relabelled is None:
        return ResultsCheck(results, _results_outcome(built).uptake), built
    built = compile_with_results(module, relabelled, config, timeout, python)
    if built.error is not None:
        return None, built
    return ResultsCheck(relabelled, _results_outcome(built).uptake, results.keying()), built


def _results_outcome(built: Built) -> AutotuneOutcome:
    """What XLA did with the autotune results delivered to a compile that succeeded, which such
    a compile always reports (`Built.autotune`)."""
    if built.autotune is None:
        raise ValueError("a compile given autotune results reported nothing of them")
    return built.autotune
