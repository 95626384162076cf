"""Evaluate a compiler config on an HLO module: default vs candidate, measured and checked.

`evaluate` is what callers use; it sends the job to a sandboxed worker, where `run_evaluation`
compiles both configs, skips the timing when the candidate compiles to the very same program,
runs both on the same deterministic inputs, checks the candidate's numerics against the default,
and measures the speedup with paired interleaved timing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ingest.hlo_module import HloModule
from ingest.hlo_proto import ModuleProto
from tuner.compile import CompileError
from tuner.flags import CompilerConfig
from tuner.measure import MeasureSettings
from tuner.worker import Worker, WorkerFailure

_EVALUATE_TASK = "tuner.evaluate:run_evaluation"


@dataclass(frozen=True)
class EvaluationResult:
    """The outcome of one default-vs-candidate evaluation."""

    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool
    numerics_ok: bool | None
    identical_program: bool
    compile_seconds: float | None  # the candidate's compile
    default_compile_seconds: float | None
    pairs: int = 0
    default_seconds: float | None = None
    candidate_seconds: float | None = None
    stop_reason: str = ""
    numerics: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # why the evaluation failed, when it did

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def evaluate(
    module: HloModule,
    candidate: CompilerConfig,
    default: CompilerConfig | None = None,
    settings: MeasureSettings | None = None,
    worker: Worker | None = None,
    timeout: float = 600.0,
    seed: int = 0,
) -> EvaluationResult:
    """Evaluate `candidate` against `default` (the compiler's defaults) in a sandboxed worker."""
    own_worker = worker is None
    worker = worker or Worker()
    try:
        payload = worker.call(
            _EVALUATE_TASK,
            timeout=timeout,
            module_proto=module.proto,
            candidate=dict(candidate),
            default=dict(default or {}),
            settings=settings or MeasureSettings(),
            seed=seed,
        )
        return EvaluationResult(**payload)
    except WorkerFailure as failure:
        return failed_result(f"{failure.kind}: {failure.reason}")
    finally:
        if own_worker:
            worker.close()


def failed_result(error: str, compile_seconds: float | None = None) -> EvaluationResult:
    """The result of an evaluation that could not produce a measurement."""
    return EvaluationResult(
        speedup=None, ci_low=None, ci_high=None, significant=False, numerics_ok=None,
        identical_program=False, compile_seconds=compile_seconds, default_compile_seconds=None,
        error=error,
    )


def run_evaluation(
    module_proto: bytes,
    candidate: CompilerConfig,
    default: CompilerConfig,
    settings: MeasureSettings,
    seed: int,
) -> dict[str, Any]:
    """The worker side of `evaluate`; returns the fields of an EvaluationResult."""
    from tuner import session

    try:
        base = session.prepare(module_proto, seed, default)
    except CompileError as exc:
        return asdict(failed_result(f"default config does not compile: {exc}"))
    config = {**default, **candidate}
    tuned = session.compile_serialized(without_buffer_aliasing(module_proto), config)
    if "error" in tuned:
        return asdict(failed_result(f"candidate {tuned['error']}"))
    if tuned["program"] == base["program"] and candidate:  # an empty candidate is an A/A check
        return asdict(EvaluationResult(
            speedup=1.0, ci_low=1.0, ci_high=1.0, significant=False, numerics_ok=True,
            identical_program=True, compile_seconds=tuned["compile_seconds"],
            default_compile_seconds=base["compile_seconds"],
            stop_reason="optimized module and codegen flags identical to the default's",
        ))
    measured = session.measure_serialized(tuned["executable"], config, settings)
    return asdict(EvaluationResult(
        speedup=measured["speedup"],
        ci_low=measured["ci_low"],
        ci_high=measured["ci_high"],
        significant=measured["significant"],
        numerics_ok=measured["numerics_ok"],
        identical_program=False,
        compile_seconds=tuned["compile_seconds"],
        default_compile_seconds=base["compile_seconds"],
        pairs=measured["pairs"],
        default_seconds=measured["default_seconds"],
        candidate_seconds=measured["candidate_seconds"],
        stop_reason=measured["stop_reason"],
        numerics=measured["numerics"],
    ))


def without_buffer_aliasing(module_proto: bytes) -> bytes:
    """The module without input/output aliasing and buffer donation."""
    # Donated parameters would be consumed by the first run; aliasing only changes memory reuse,
    # and both configs are compiled without it, so the comparison stays fair.
    view = ModuleProto.FromString(module_proto)
    if not view.input_output_alias and not view.buffer_donor:
        return module_proto
    view.ClearField("input_output_alias")
    view.ClearField("buffer_donor")
    return view.SerializeToString()


def timed_runner(executable: Any, arguments: list[Any]):
    """A Runner (see tuner.measure) that executes `executable` on `arguments` and waits."""
    import time

    def run(repeats: int) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            for output in executable.execute(arguments):
                output.block_until_ready()
        return time.perf_counter() - started

    return run
