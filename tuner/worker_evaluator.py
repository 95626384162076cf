"""The tuner's evaluator (`tuner.search.Evaluator`): candidates compile in a pool of sandboxed
compile workers while the execute worker, which compiled the default once, measures them
(`execution.session`); each set of workers is pinned to its own cores (`execution.cores`), so
a compile never runs beside a measurement on the same core.

A comparison of two candidates (the winner's race and pruning) runs in fresh workers instead, on
the execute cores, each loading both as the compile pool built them (`_compare`).

A crash, out-of-memory or timeout is retried once in a fresh worker; a second one fails the
trial, and the search goes on. An execute worker that dies takes the prepared default with it:
the default is prepared again in its successor.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

from execution import session
from execution.cores import CorePlan, plan_cores
from execution.evaluate import (
    FRESH_WORKERS,
    DefaultFails,
    EvaluationResult,
    failed_result,
    in_fresh_workers,
    measured_result,
    prepare_default,
)
from execution.flags import CompilerConfig
from execution.measure import MeasureSettings
from execution.session import Span, measurable_module
from execution.sharded import spans
from execution.worker import Worker, WorkerFailure, WorkerPool
from hlo.environment import Partitioning
from tuner.search import Against, Build
from tuner.trial import Trial
from vocabulary.failures import Failure
from vocabulary.tuning import TrialOutcome


class WorkerEvaluator:
    """A search's workers, as an Evaluator; a context manager that prepares the default on
    entry (DefaultFails when it does not compile or run) and stops the workers on exit."""

    def __init__(self, module_proto: bytes, seed: int, plan: CorePlan | None = None,
                 fresh_workers: int = FRESH_WORKERS,
                 partitioning: Partitioning | None = None) -> None:
        self.module_proto, self.seed = measurable_module(module_proto), seed
        self.fresh_workers = fresh_workers  # per comparison of two candidates (`_compare`)
        self.plan = plan or plan_cores()
        # Compiled and measured whole as the job partitions it: every worker has its devices.
        self.partitioning = partitioning
        self.executor = Worker(cores=self.plan.execute, devices=spans(partitioning))
        self.compilers = WorkerPool(self.plan.compile_workers, cores=self.plan.compile,
                                    backend_cores=self.plan.execute, devices=spans(partitioning))
        self.threads = ThreadPoolExecutor(self.plan.compile_workers, thread_name_prefix="compile")
        self.default_program = ""
        self.timeline: list[Span] = []  # what each worker ran, and when

    @property
    def depth(self) -> int:
        """How many candidates may be compiling or waiting to be measured: one per compile
        worker beyond the one measured, or just that one when compiles and measurements share
        cores (so they take turns)."""
        return 1 if self.plan.overlapping else self.plan.compile_workers + 1

    def __enter__(self) -> "WorkerEvaluator":
        self._prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.threads.shutdown(wait=True, cancel_futures=True)  # compiles in flight end first
        self.compilers.close()
        self.executor.close()

    def _prepare(self) -> None:
        """Compile and run the default in the execute worker; DefaultFails, with the workers
        stopped, when it does not compile or run."""
        try:
            self.default_program = prepare_default(self.executor, self.module_proto, self.seed,
                                                   partitioning=self.partitioning)
        except DefaultFails:
            self.__exit__()  # raised from __enter__, `with` would leave the workers running
            raise

    def build(self, config: CompilerConfig) -> Future[Build]:
        """Start compiling `config` in the compile pool."""
        return self.threads.submit(self._build, config)

    def _build(self, config: CompilerConfig) -> Build:
        try:
            compiled = _once_more(lambda: self._compile(config), lambda: self._compile(config))
        except WorkerFailure as failure:
            return Build(error=f"compile {failure.kind}: {failure.reason}")
        if compiled.error is not None:
            return Build(error=compiled.error)
        self._ran(compiled.span)
        return Build(compiled.program, compiled.compile_seconds, artifact=compiled.executable)

    def _compile(self, config: CompilerConfig) -> session.Built:
        with self.compilers.worker() as worker:
            return worker.call(session.compile_serialized, module_proto=self.module_proto,
                               config=config, partitioning=self.partitioning)

    def measure(self, index: int, config: CompilerConfig, build: Build,
                settings: MeasureSettings, against: Against | None = None) -> Trial:
        """Time the built executable against the default in the execute worker; or compare it
        with another config (`against`: see `_compare`)."""
        if against is not None:
            return self._compare(index, config, build, against, settings)
        measure = functools.partial(self.executor.call, session.measure_serialized, timeout=300,
                                    executable=build.artifact, config=config, settings=settings)
        error: str | None  # why it failed, if it did
        try:
            timed = _once_more(measure, functools.partial(self._prepared, measure))
        except WorkerFailure as failure:
            if failure.died:
                self._prepare()  # the execute worker died with the default in it
            error = f"{failure.kind}: {failure.reason}"
        else:
            error = timed.error
        if error is not None:
            return Trial(index, config, TrialOutcome.FAILED, build.program,
                         compile_seconds=build.compile_seconds, error=error)
        assert timed.measurement is not None, "a run that did not fail was measured (session.Timed)"
        self._ran(timed.span)
        measured = timed.measurement
        return Trial(index, config, TrialOutcome.MEASURED, build.program, speedup=measured.speedup,
                     numerics_ok=timed.numerics_ok, compile_seconds=build.compile_seconds,
                     stop_reason=measured.stop_reason, candidate_runs=measured.candidate_runs)

    def _prepared(self, measure: Callable[[], session.Timed]) -> session.Timed:
        """`measure()` in a fresh execute worker: the default prepared in it first."""
        self._prepare()
        return measure()

    def _ran(self, span: Span | None) -> None:
        """Add what a worker ran, and when, to the timeline (a run that failed reports none)."""
        if span is not None:
            self.timeline.append(span)

    def _compare(self, index: int, config: CompilerConfig, build: Build,
                 against: Against, settings: MeasureSettings) -> Trial:
        """`config` timed against `against`'s program, paired, in `fresh_workers` fresh workers
        on the execute cores, one after another, each loading both as compiled: the median of
        their speedups over the baseline (`in_fresh_workers`). One process is not enough: two
        processes rank two programs a percent or two apart differently (recommender-s: +1.3% in
        the search's execute worker, -1% in fresh ones)."""
        baseline, base = against

        def compare(worker: Worker, offset: int) -> EvaluationResult:
            try:
                kept = worker.call(session.keep_serialized, timeout=300,
                                   module_proto=self.module_proto, seed=self.seed + offset,
                                   executable=base.artifact, config=baseline,
                                   partitioning=self.partitioning)
                if kept.error is not None:
                    return failed_result(Failure.DEFAULT_FAILS, f"the baseline {kept.error}")
                timed = worker.call(session.measure_serialized, timeout=300,
                                    executable=build.artifact, config=config, settings=settings)
            except WorkerFailure as failure:
                return failed_result(Failure.of_fault(failure.kind),
                                     f"{failure.kind}: {failure.reason}")
            if timed.error is not None:
                return failed_result(Failure.CANDIDATE_FAILS, timed.error)
            self._ran(timed.span)
            return measured_result(timed, build.compile_seconds, base.compile_seconds)

        result = in_fresh_workers(compare, self.fresh_workers, settings.noise_band,
                                  lambda: Worker(cores=self.plan.execute,
                                                 devices=spans(self.partitioning)))
        if result.error is not None:
            return Trial(index, config, TrialOutcome.FAILED, build.program, baseline=baseline,
                         compile_seconds=build.compile_seconds, error=result.error)
        return Trial(index, config, TrialOutcome.MEASURED, build.program, speedup=result.speedup,
                     numerics_ok=result.numerics_ok, compile_seconds=build.compile_seconds,
                     baseline=baseline)


T = TypeVar("T")


def _once_more(first: Callable[[], T], retry: Callable[[], T]) -> T:
    """`first()`; after a crash, out-of-memory or timeout, `retry()` once after a back-off."""
    try:
        return first()
    except WorkerFailure as failure:
        if not failure.died:
            raise
    time.sleep(1.0)
    return retry()
