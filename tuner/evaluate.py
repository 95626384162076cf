"""Evaluate a compiler config on an HLO module: default vs candidate, measured and checked.

`evaluate` is what callers use; it sends the job to a sandboxed worker, where `run_evaluation`
compiles both configs, skips the timing when the candidate compiles to the very same program,
runs both on the same deterministic inputs, checks the candidate's numerics against the default,
and measures the speedup with paired interleaved timing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ingest.fingerprint import graph_fingerprint
from ingest.hlo_module import HloModule
from ingest.hlo_proto import ModuleProto
from tuner.compile import CompileError, compile_module
from tuner.flags import CompilerConfig, codegen_values
from tuner.measure import MeasureSettings, measure_pair
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
    import jax

    from tuner.inputs import make_inputs, parameter_specs
    from tuner.numerics import all_ok, compare_outputs

    module_proto = _without_buffer_aliasing(module_proto)
    module = HloModule(module_proto, "", "evaluation")
    try:
        base = compile_module(module_proto, default)
    except CompileError as exc:
        return asdict(failed_result(f"default config does not compile: {exc}"))
    try:
        tuned = compile_module(module_proto, {**default, **candidate})
    except CompileError as exc:
        return asdict(failed_result(f"candidate does not compile: {exc}"))
    identical = _same_program(base.optimized_proto, tuned.optimized_proto, default, candidate)
    if identical and candidate:  # an empty candidate is an A/A check: measure it anyway
        return asdict(EvaluationResult(
            speedup=1.0, ci_low=1.0, ci_high=1.0, significant=False, numerics_ok=True,
            identical_program=True, compile_seconds=tuned.compile_seconds,
            default_compile_seconds=base.compile_seconds,
            stop_reason="optimized module and codegen flags identical to the default's",
        ))
    device = jax.devices()[0]
    arguments = [jax.device_put(a, device) for a in make_inputs(parameter_specs(module), seed)]
    checks = compare_outputs(_outputs(base.executable, arguments), _outputs(tuned.executable, arguments))
    measurement = measure_pair(timed_runner(base.executable, arguments),
                               timed_runner(tuned.executable, arguments), settings)
    return asdict(EvaluationResult(
        speedup=measurement.speedup,
        ci_low=measurement.ci_low,
        ci_high=measurement.ci_high,
        significant=measurement.significant,
        numerics_ok=all_ok(checks),
        identical_program=False,
        compile_seconds=tuned.compile_seconds,
        default_compile_seconds=base.compile_seconds,
        pairs=measurement.pairs,
        default_seconds=measurement.default_seconds,
        candidate_seconds=measurement.candidate_seconds,
        stop_reason=measurement.stop_reason,
        numerics=[asdict(check) for check in checks],
    ))


def _same_program(base: bytes, tuned: bytes, default: CompilerConfig, candidate: CompilerConfig) -> bool:
    """Same optimized module and same codegen-level flags: the same machine code, in effect."""
    merged = {**default, **candidate}
    if codegen_values(merged) != codegen_values(default):
        return False
    return graph_fingerprint(HloModule(base, "", "default")) == graph_fingerprint(
        HloModule(tuned, "", "candidate")
    )


def _without_buffer_aliasing(module_proto: bytes) -> bytes:
    # Donated parameters would be consumed by the first run; aliasing only changes memory reuse,
    # and both configs are compiled without it, so the comparison stays fair.
    view = ModuleProto.FromString(module_proto)
    if not view.input_output_alias and not view.buffer_donor:
        return module_proto
    view.ClearField("input_output_alias")
    view.ClearField("buffer_donor")
    return view.SerializeToString()


def _outputs(executable: Any, arguments: list[Any]) -> list[Any]:
    import numpy as np

    return [np.asarray(output) for output in executable.execute(arguments)]


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
