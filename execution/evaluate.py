"""Evaluate a compiler config on an HLO module: default vs candidate, measured and checked.

`evaluate` is what callers use; it sends the job to a sandboxed worker, where `run_evaluation`
compiles both configs, skips the timing when the candidate compiles to the very same program,
runs both on the same deterministic inputs, checks the candidate's numerics against the default,
and measures the speedup with paired interleaved timing. Both compile the module as prepared for
measurement (`execution.session.measurable_module`: no buffer aliasing, no tuple-shaped
parameters). `evaluate_independently` runs it in several fresh workers and takes the median
(`in_fresh_workers`, which the tuner's comparisons and the validator use too): one worker's
interval covers the noise within its process, not the spread from one process to the next (two
processes measure the same pair of programs a percent or more apart, and now and then one runs
a library's kernels 20% slow), which is as large as the gains a tuner accepts.

An evaluation that produces no measurement says why as data (`EvaluationResult.failure`, a
`vocabulary.failures.Failure`) and as a message (`error`). When the default fails (it does not compile or
run), nothing can be timed; the candidate is still tried, and if it runs the module, its
numerics are checked against `REFERENCE_CONFIG`, the default with every fusion type routed to
XLA's own emitters instead of a library.

Autotune results (XLA:GPU's per-fusion kernel configs, `execution.autotune`) are
evaluated in two steps that the kernels tuner and the validator share: `compile_with_results`
compiles the module with them delivered, once, in a fresh worker of its own, and says what XLA
did with them; `evaluate_built` times that executable against the default in fresh workers.
`autotune_offline` runs XLA's own exhaustive autotuning, in a fresh worker, for the results.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence, TypeVar

from execution import session
from execution.autotune.results import AutotuneResults
from execution.compile import CompileError
from execution.flags import CompilerConfig
from execution.measure import MeasureSettings
from execution.numerics import Numerics, OutputCheck, pooled
from execution.per_device import PerDeviceError, per_device_module
from execution.sharded import spans
from execution.worker import DEFAULT_TIMEOUT, Worker, WorkerFailure
from hlo.environment import Partitioning
from hlo.module import HloModule
from vocabulary.failures import Failure
from vocabulary.interval import Interval, as_flat

Reply = TypeVar("Reply", session.Built, session.Offline)

# How many fresh workers a decision between two programs takes (`evaluate_independently`; the
# tuner's comparisons and verification): the median of three outvotes one unlucky process.
FRESH_WORKERS = 3
# The library routing flags all empty: every fusion type goes to XLA's own emitters.
REFERENCE_CONFIG: CompilerConfig = {"xla_cpu_experimental_ynn_fusion_type": (),
                                    "xla_cpu_experimental_xnn_fusion_type": (),
                                    "xla_cpu_experimental_onednn_fusion_type": ()}


@dataclass(frozen=True)
class EvaluationResult:
    """The outcome of one default-vs-candidate evaluation: the candidate's speedup over the
    default with its interval (None: nothing was timed, `error` says why)."""

    speedup: Interval | None
    significant: bool
    numerics_ok: bool | None
    identical_program: bool
    compile_seconds: float | None  # the candidate's compile
    default_compile_seconds: float | None
    pairs: int = 0
    default_seconds: float | None = None
    candidate_seconds: float | None = None
    stop_reason: str = ""
    # The candidate's outputs as checked (`execution.numerics.Numerics.outputs`: on the first
    # set of inputs that failed, where one did), and how many sets of inputs were checked and
    # failed (a failure is checked on more inputs before it decides: `numerics.judge`).
    numerics: list[OutputCheck] = field(default_factory=list)
    error: str | None = None  # why the evaluation failed, when it did, for people
    failure: Failure | None = None  # why the evaluation failed, when it did, as data
    candidate_runs: bool | None = None  # when the default fails: whether the candidate runs it
    numerics_against: str = "default"  # whose outputs `numerics` checks: default | reference
    speedups: list[float] = field(default_factory=list)  # each worker's (evaluate_independently)
    inputs_checked: int = 0
    inputs_failed: int = 0

    def judged(self) -> Numerics:
        """Its numerics as judged: `numerics_ok` their verdict, over one set of inputs where it
        does not say how many (a result made before they were counted)."""
        if self.inputs_checked:
            return Numerics(bool(self.numerics_ok), self.inputs_checked, self.inputs_failed,
                            list(self.numerics))
        return Numerics(self.numerics_ok is not False, 1, int(self.numerics_ok is False),
                        list(self.numerics))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, the speedup as `speedup`, `ci_low`, `ci_high`."""
        return as_flat(self)


def numerics_fields(numerics: Numerics) -> dict[str, Any]:
    """The EvaluationResult fields that record `numerics`."""
    return dict(numerics_ok=numerics.ok, numerics=list(numerics.outputs),
                inputs_checked=numerics.checked, inputs_failed=numerics.failed)


class DefaultFails(RuntimeError):
    """The module fails with the default config: it does not compile or run, or its worker dies
    (crash, out of memory, timeout) running it."""


def prepare_default(worker: Worker, module_proto: bytes, seed: int,
                    timeout: float = DEFAULT_TIMEOUT,
                    partitioning: Partitioning | None = None) -> str:
    """Compile and run the module with the compiler's defaults in `worker`, which keeps it for
    the candidates measured there next (`execution.session.prepare`); returns the default's
    program key. Raises DefaultFails when it cannot; an exception of the worker's job (our code,
    not the compiler's) stays a WorkerFailure."""
    try:
        prepared = worker.call(session.prepare, timeout=timeout, module_proto=module_proto,
                               seed=seed, partitioning=partitioning)
    except WorkerFailure as failure:
        if not failure.died:
            raise
        raise DefaultFails(f"{failure.kind}: {failure.reason}") from None
    if prepared.program is None:  # then `error` says why
        raise DefaultFails(str(prepared.error))
    return prepared.program


def evaluate(
    module: HloModule,
    candidate: CompilerConfig,
    default: CompilerConfig | None = None,
    settings: MeasureSettings | None = None,
    worker: Worker | None = None,
    timeout: float = 600.0,
    seed: int = 0,
    partitioning: Partitioning | None = None,
) -> EvaluationResult:
    """Evaluate `candidate` against `default` (the compiler's defaults) in a sandboxed worker,
    the module compiled for one device, or whole as `partitioning` partitions it (the worker,
    given or made here, has the devices it spans: `worker_for`)."""
    own_worker = worker is None
    worker = worker or worker_for(partitioning)
    try:
        return worker.call(
            run_evaluation,
            timeout=timeout,
            module_proto=module.proto,
            candidate=dict(candidate),
            default=dict(default or {}),
            settings=settings or MeasureSettings(),
            seed=seed,
            partitioning=partitioning,
        )
    except WorkerFailure as failure:
        return failed_result(Failure.of_fault(failure.kind), f"{failure.kind}: {failure.reason}")
    finally:
        if own_worker:
            worker.close()


def evaluate_independently(module: HloModule, candidate: CompilerConfig, workers: int,
                           default: CompilerConfig | None = None,
                           settings: MeasureSettings | None = None, timeout: float = 600.0,
                           seed: int = 0, python: str | None = None,
                           settled: Callable[[EvaluationResult], bool] | None = None,
                           most: int = 0,
                           partitioning: Partitioning | None = None) -> EvaluationResult:
    """`evaluate` in `workers` fresh workers under the interpreter `python` (default: this one),
    seeds `seed`, `seed + 1`, ..., as one result (`in_fresh_workers`, which takes `settled`
    and `most`); the module compiled whole as `partitioning` partitions it, where given."""
    settings = settings or MeasureSettings()
    return in_fresh_workers(
        lambda worker, index: evaluate(module, candidate, default, settings, worker, timeout,
                                       seed + index, partitioning),
        workers, settings.noise_band, functools.partial(worker_for, partitioning, python=python),
        settled, most)


def worker_for(partitioning: Partitioning | None, python: str | None = None,
               **options: Any) -> Worker:
    """A worker (under `python`, with the Worker's other `options`) that has the devices a
    program compiled with `partitioning` spans (one for None)."""
    return Worker(python=python, devices=spans(partitioning), **options)


def in_fresh_workers(job: Callable[[Worker, int], EvaluationResult], workers: int,
                     noise_band: float, new_worker: Callable[[], Worker] = Worker,
                     settled: Callable[[EvaluationResult], bool] | None = None,
                     most: int = 0) -> EvaluationResult:
    """`job(worker, index)` for index 0, 1, ..., each in a fresh worker from `new_worker()`, one
    after another, as one result (`median_of`): `workers` of them, then, while `settled` says
    their median is not, one more at a time up to `most`. The first failure, or a candidate
    that compiles to the default's program, is the answer: nothing more is run."""
    results: list[EvaluationResult] = []
    while True:
        with new_worker() as worker:
            result = job(worker, len(results))
        if result.error is not None or result.identical_program:
            return result
        results.append(result)
        if len(results) < workers:
            continue
        median = median_of(results, noise_band)
        if settled is None or len(results) >= most or settled(median):
            return median


def median_of(results: list[EvaluationResult], noise_band: float) -> EvaluationResult:
    """Independent measurements of one candidate as one: the median speedup, the medians of the
    intervals' ends (significant when that lower end clears 1 + `noise_band`: most of the
    workers agree), the numerics judged over the inputs of all (`numerics.pooled`: they fail
    where the failure holds up over them); `speedups` lists each."""
    median = statistics.median
    worst = min(results, key=lambda r: bool(r.numerics_ok))
    timed = [_timed(r) for r in results]
    speedup = Interval(median(s.estimate for s, _, _ in timed), median(s.low for s, _, _ in timed),
                       median(s.high for s, _, _ in timed))
    numerics = pooled([r.judged() for r in results])
    return replace(worst, speedup=speedup, significant=speedup.low > 1.0 + noise_band,
                   **numerics_fields(numerics),
                   pairs=sum(r.pairs for r in results),
                   default_seconds=median(d for _, d, _ in timed),
                   candidate_seconds=median(c for _, _, c in timed),
                   stop_reason="; ".join(r.stop_reason for r in results),
                   speedups=[s.estimate for s, _, _ in timed])


def _timed(result: EvaluationResult) -> tuple[Interval, float, float]:
    """A measured result's speedup and its default's and candidate's seconds; ValueError for a
    result that timed nothing (an error, an identical program)."""
    if result.speedup is None or result.default_seconds is None or result.candidate_seconds is None:
        raise ValueError(f"not a measured result: {result.error or 'nothing was timed'}")
    return result.speedup, result.default_seconds, result.candidate_seconds


def failed_result(failure: Failure, error: str,
                  compile_seconds: float | None = None) -> EvaluationResult:
    """The result of an evaluation that could not produce a measurement."""
    return EvaluationResult(
        speedup=None, significant=False, numerics_ok=None, identical_program=False,
        compile_seconds=compile_seconds, default_compile_seconds=None, error=error,
        failure=failure,
    )


def run_evaluation(
    module_proto: bytes,
    candidate: CompilerConfig,
    default: CompilerConfig,
    settings: MeasureSettings,
    seed: int,
    partitioning: Partitioning | None = None,
) -> EvaluationResult:
    """The worker side of `evaluate`."""
    module_proto = session.measurable_module(module_proto)
    config = {**default, **candidate}
    base = session.prepare(module_proto, seed, default, partitioning)
    if base.error is not None:
        return _without_default(module_proto, candidate, default, seed, base.error, partitioning)
    tuned = session.compile_serialized(module_proto, config, partitioning=partitioning)
    if tuned.executable is None:  # then `error` says why
        return failed_result(Failure.CANDIDATE_FAILS, f"candidate config {tuned.error}")
    if tuned.program == base.program and candidate:  # an empty candidate is an A/A check
        return identical_result(tuned.compile_seconds, base.compile_seconds)
    timed = session.measure_serialized(tuned.executable, config, settings)
    if timed.error is not None:
        return failed_result(Failure.CANDIDATE_FAILS, f"candidate config {timed.error}",
                             tuned.compile_seconds)
    return measured_result(timed, tuned.compile_seconds, base.compile_seconds)


def identical_result(compile_seconds: float | None,
                     default_compile_seconds: float | None) -> EvaluationResult:
    """The result of a candidate that compiles to the default's program: not timed."""
    return EvaluationResult(
        speedup=Interval(1.0, 1.0, 1.0), significant=False, numerics_ok=True,
        identical_program=True, compile_seconds=compile_seconds,
        default_compile_seconds=default_compile_seconds,
        stop_reason="optimized module and codegen flags identical to the default's",
    )


def compile_with_results(module: HloModule, results: AutotuneResults,
                         config: CompilerConfig | None = None, timeout: float = DEFAULT_TIMEOUT,
                         python: str | None = None) -> session.Built:
    """The module as measured, compiled with `config` and autotune `results` delivered, in a
    fresh worker under `python` (this interpreter by default): its executable, serialized, and
    what XLA did with the results (`Built.autotune`); `Built.error` says why there is none (the
    compile failed, or the worker died)."""
    return _in_fresh_worker(session.compile_serialized, session.Built, timeout, python,
                            module_proto=session.measurable_module(module.proto),
                            config=dict(config or {}), results=results)


def autotune_offline(module: HloModule, config: CompilerConfig | None = None,
                     timeout: float = DEFAULT_TIMEOUT, python: str | None = None) -> session.Offline:
    """XLA's own autotuner run exhaustively over the module compiled with `config`, in a fresh
    worker (`session.autotune_exhaustively`); `Offline.error` says why it did not run."""
    return _in_fresh_worker(session.autotune_exhaustively, session.Offline, timeout, python,
                            module_proto=session.measurable_module(module.proto),
                            config=dict(config or {}))


def per_device_program(module: HloModule, partitioning: Partitioning,
                       timeout: float = DEFAULT_TIMEOUT) -> HloModule:
    """The per-device program of `module` as `partitioning` partitions it, its collectives
    replaced by local stand-ins (`execution.per_device`): what per-device mode measures on one
    device. Partitioned in a fresh CPU worker with the partitioning's devices as host devices;
    PerDeviceError says why there is none (the worker's failure included)."""
    with Worker(devices=partitioning.devices, platform="cpu") as worker:
        try:
            proto = worker.call(per_device_module, timeout=timeout,
                                module_proto=session.measurable_module(module.proto),
                                partitioning=partitioning)
        except WorkerFailure as failure:
            raise PerDeviceError(f"partitioning {module.name or module.source} failed "
                                 f"({failure.kind}): {failure.reason}") from None
    return HloModule(proto, module.name, f"{module.source} (per device of {partitioning.devices})")


def per_device_programs(jobs: Sequence[tuple[HloModule, Partitioning]],
                        timeout: float = DEFAULT_TIMEOUT) -> list[HloModule | PerDeviceError]:
    """The per-device program of each (module, partitioning) of `jobs`, as `per_device_program`
    builds one, or the PerDeviceError that says why there is none: in one CPU worker given the
    most devices any partitioning spans (the partitioner takes the first devices of its process,
    so more do not change its output), a fresh one after a job that killed it."""
    found: list[HloModule | PerDeviceError] = []
    pending = list(jobs)
    devices = max((partitioning.devices for _, partitioning in jobs), default=1)
    while pending:
        with Worker(devices=devices, platform="cpu") as worker:
            while pending:
                module, partitioning = pending.pop(0)
                try:
                    proto = worker.call(per_device_module, timeout=timeout,
                                        module_proto=session.measurable_module(module.proto),
                                        partitioning=partitioning)
                except WorkerFailure as failure:
                    found.append(PerDeviceError(f"partitioning {module.name or module.source} failed "
                                                f"({failure.kind}): {failure.reason}"))
                    if failure.died:
                        break  # the rest in a fresh worker
                    continue
                found.append(HloModule(proto, module.name,
                                       f"{module.source} (per device of {partitioning.devices})"))
    return found


def _in_fresh_worker(job: Callable[..., Reply], reply: type[Reply], timeout: float,
                     python: str | None, **kwargs: Any) -> Reply:
    """`job(**kwargs)` in a fresh worker; a worker that dies running it is a `reply` whose
    error says so (an exception of the job, ours, stays a WorkerFailure)."""
    with Worker(python=python) as worker:
        try:
            return worker.call(job, timeout=timeout, **kwargs)
        except WorkerFailure as failure:
            if not failure.died:
                raise
            return reply(error=f"{failure.kind}: {failure.reason}")


def evaluate_built(module: HloModule, built: session.Built, workers: int,
                   config: CompilerConfig | None = None, settings: MeasureSettings | None = None,
                   timeout: float = 600.0, seed: int = 0, python: str | None = None,
                   settled: Callable[[EvaluationResult], bool] | None = None,
                   most: int = 0) -> EvaluationResult:
    """`built`, a candidate compiled elsewhere with `config` (`compile_with_results`, no error),
    against the module compiled with the compiler's defaults, in `workers` fresh workers under
    `python`, seeds `seed`, `seed + 1`, ...: each compiles and runs the default, checks the
    candidate's numerics against it and times the two, paired; one result (`in_fresh_workers`,
    which takes `settled` and `most`). A candidate whose program is the default's is not
    timed."""
    settings = settings or MeasureSettings()
    config = dict(config or {})
    module_proto = session.measurable_module(module.proto)

    def job(worker: Worker, index: int) -> EvaluationResult:
        try:
            base = worker.call(session.prepare, timeout=timeout, module_proto=module_proto,
                               seed=seed + index)
            if base.error is not None:
                return failed_result(Failure.DEFAULT_FAILS, f"default fails: {base.error}")
            if base.program == built.program:
                return identical_result(built.compile_seconds, base.compile_seconds)
            timed = worker.call(session.measure_serialized, timeout=timeout,
                                executable=built.executable, config=config, settings=settings)
        except WorkerFailure as failure:
            return failed_result(Failure.of_fault(failure.kind), f"{failure.kind}: {failure.reason}")
        if timed.error is not None:
            return failed_result(Failure.CANDIDATE_FAILS, f"candidate {timed.error}")
        return measured_result(timed, built.compile_seconds, base.compile_seconds)

    return in_fresh_workers(job, workers, settings.noise_band,
                            functools.partial(Worker, python=python), settled, most)


def measured_result(timed: session.Timed, compile_seconds: float | None,
                    default_compile_seconds: float | None) -> EvaluationResult:
    """The result of a candidate timed in a worker (`session.measure_serialized`, no error),
    compiled in `compile_seconds` and its baseline in `default_compile_seconds`."""
    measured, numerics = timed.measurement, timed.numerics
    if measured is None or numerics is None:
        raise ValueError(f"a run that failed is no measured result: {timed.error}")
    return EvaluationResult(
        speedup=measured.speedup,
        significant=measured.significant,
        identical_program=False,
        compile_seconds=compile_seconds,
        default_compile_seconds=default_compile_seconds,
        pairs=measured.pairs,
        default_seconds=measured.default_seconds,
        candidate_seconds=measured.candidate_seconds,
        stop_reason=measured.stop_reason,
        **numerics_fields(numerics),
    )


def _without_default(module_proto: bytes, candidate: CompilerConfig, default: CompilerConfig,
                     seed: int, reason: str,
                     partitioning: Partitioning | None = None) -> EvaluationResult:
    """The result when the default fails (`reason`): whether the candidate runs the module
    instead, and if it does, its numerics checked against REFERENCE_CONFIG (an A/A check tries
    nothing)."""
    failed = failed_result(Failure.DEFAULT_FAILS, f"default fails: {reason}")
    if not candidate:
        return failed
    try:
        tuned, seconds = session.compiled_and_run(module_proto, {**default, **candidate}, seed,
                                                  partitioning)
    except (CompileError, session.RunError):
        return replace(failed, candidate_runs=False)
    ran = replace(failed, candidate_runs=True, compile_seconds=seconds)
    try:
        reference, _ = session.compiled_and_run(module_proto, {**default, **REFERENCE_CONFIG}, seed,
                                                partitioning)
        numerics = session.Reference(module_proto, seed, reference, partitioning).judge(tuned)
    except (CompileError, session.RunError) as exc:
        return replace(ran, error=f"{failed.error}; the reference config fails too, so the "
                                  f"candidate's numerics are unchecked: {exc}")
    return replace(ran, **numerics_fields(numerics), numerics_against="reference")
