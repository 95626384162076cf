"""The worker side of a tuning search: candidates compiled in compile workers, measured in
the execute worker against the module compiled once with the defaults.

These functions are the jobs of sandboxed `execution.worker` processes (`worker.call(prepare,
...)` and so on). Every compile is of the module as measured (`measurable_module`). The
execute worker keeps the module's state between calls
(`prepare`), so the default is compiled, run and checked once per search instead of once per
candidate. A candidate is compiled in a compile worker (`compile_serialized`), which names its
program (the optimized module's fingerprint plus its machine code, see `program_key`) and hands
the executable back serialized. The caller measures a program once (`measure_serialized`, in the
execute worker) and reuses the result for every other config that yields it. A comparison of two
candidates (`compare_serialized`, in a fresh worker) loads both as compiled, compiling neither
again.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict
from typing import Any

from execution.compile import (CompileError, compile_module, compile_options,
                               compiler_defaults, elf_objects, object_code)
from execution.flags import CompilerConfig, codegen_values, unseen_values, without_defaults
from execution.measure import MeasureSettings, Runner, measure_pair
from execution.tuple_parameters import flatten_tuple_parameters
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule
from hlo.proto import ModuleProto
from hlo.errors import first_line

_STATE: dict[str, Any] = {}


def program_key(optimized_proto: bytes, code: tuple[bytes, ...], config: CompilerConfig) -> str:
    """What a candidate runs: the optimized module, and its machine `code` where the backend
    shows it (CPU: the ELF objects; a GPU's kernels, where its executable holds them as ELF), so
    a flag that changes nothing is seen to; elsewhere the codegen-level flags that differ from
    the compiler's defaults stand in for the code. The flags that change what neither shows
    (GPU command buffers, the schedule: `FlagSpec.unseen`) join it by value."""
    fingerprint = graph_fingerprint(HloModule(optimized_proto, "", "optimized"))
    changed = without_defaults(config, compiler_defaults())
    unseen = unseen_values(changed)
    suffix = f":{unseen!r}" if unseen else ""
    if code:
        digest = hashlib.blake2b(digest_size=16)
        for obj in code:
            digest.update(b"%d:" % len(obj) + obj)
        return f"{fingerprint}:code-{digest.hexdigest()}{suffix}"
    return f"{fingerprint}:{codegen_values(changed)!r}{suffix}"


class RunError(RuntimeError):
    """XLA failed to run a compiled module (it compiled)."""


def prepare(module_proto: bytes, seed: int = 0, default: CompilerConfig | None = None) -> dict[str, Any]:
    """Compile and run the module with `default` (the compiler's defaults unless given); keep
    it for the candidates that follow. Returns its program key and compile time, or {"error":
    why} when it does not compile or run."""
    _STATE.clear()  # a default that fails leaves no earlier module's default to measure against
    module_proto = measurable_module(module_proto)
    try:
        base = compile_module(module_proto, default or {})
    except CompileError as exc:
        return {"error": f"does not compile: {exc}"}
    try:
        _keep(module_proto, seed, base.executable)
    except RunError as exc:
        return {"error": f"fails to run: {exc}"}
    key = program_key(base.optimized_proto, object_code(base.executable), default or {})
    return {"program": key, "compile_seconds": base.compile_seconds}


def compare_serialized(module_proto: bytes, seed: int, baseline: bytes,
                       baseline_config: CompilerConfig, executable: bytes, config: CompilerConfig,
                       settings: MeasureSettings) -> dict[str, Any]:
    """Time one candidate compiled elsewhere against another (`compile_serialized` both: a
    comparison of the tuner's winner, in a fresh worker), as `measure_serialized` times it
    against the default; {"error": why} when the baseline fails to run. Raises RunError when
    the candidate does."""
    _STATE.clear()
    try:
        _keep(measurable_module(module_proto), seed, _loaded(baseline, baseline_config))
    except RunError as exc:
        return {"error": f"the baseline fails to run: {exc}"}
    return measure_serialized(executable, config, settings)


def _keep(module_proto: bytes, seed: int, executable: Any) -> None:
    """Run `executable` twice on the module's inputs for `seed` and keep it as what the next
    candidates are measured against, with its outputs and how far its two runs' outputs differ
    (the `spread` of execution.numerics); raises RunError when it fails to run."""
    from execution.numerics import compare_outputs

    arguments = _arguments(module_proto, seed)
    outputs = run_once(executable, arguments)
    spread = [check.max_error for check in compare_outputs(outputs, run_once(executable, arguments))]
    _STATE.update(arguments=arguments, outputs=outputs, spread=spread,
                  runner=timed_runner(executable, arguments))


def outputs_of(module_proto: bytes, config: CompilerConfig, seed: int) -> tuple[list[Any], float]:
    """The outputs of one run of the module compiled with `config`, on the inputs of `seed`, and
    its compile time; raises CompileError or RunError."""
    compiled = compile_module(module_proto, config)
    return run_once(compiled.executable, _arguments(module_proto, seed)), compiled.compile_seconds


def run_once(executable: Any, arguments: list[Any]) -> list[Any]:
    """The outputs of one run of `executable`, as numpy arrays; raises RunError when XLA fails
    the run."""
    import numpy as np
    from jax.errors import JaxRuntimeError

    try:  # the run is asynchronous: its failure surfaces when the outputs are read
        return [np.asarray(output) for output in executable.execute(arguments)]
    except JaxRuntimeError as exc:
        raise RunError(first_line(exc)) from exc


def _arguments(module_proto: bytes, seed: int) -> list[Any]:
    """The module's inputs for `seed`, on the first device."""
    import jax

    from execution.inputs import make_inputs, parameter_specs

    device = jax.devices()[0]
    return [jax.device_put(a, device) for a in make_inputs(
        parameter_specs(HloModule(module_proto, "", "tuning")), seed)]


def _span(started: float) -> tuple[int, tuple[int, ...], float, float]:
    """This process, the cores it runs on, and when a job of it ran (a span of the caller's
    timeline, see tuner.worker_evaluator.Span)."""
    return os.getpid(), tuple(sorted(os.sched_getaffinity(0))), started, time.monotonic()


def compile_serialized(module_proto: bytes, config: CompilerConfig) -> dict[str, Any]:
    """Compile `config` (in a compile worker); returns its program key and the executable,
    serialized for the execute worker, or the compile error."""
    started = time.monotonic()
    try:
        compiled = compile_module(module_proto, config)
    except CompileError as exc:
        return {"error": f"does not compile: {exc}"}
    serialized = compiled.executable.serialize()  # once: the key's machine code, and the handover
    return {"program": program_key(compiled.optimized_proto, elf_objects(serialized), config),
            "compile_seconds": compiled.compile_seconds,
            "executable": serialized,
            "span": _span(started)}


def measure_serialized(executable: bytes, config: CompilerConfig,
                       settings: MeasureSettings) -> dict[str, Any]:
    """Load a candidate compiled elsewhere (`compile_serialized`), check its numerics and time
    it against what this worker keeps (the prepared default, or a comparison's baseline);
    raises RunError when XLA fails to run it."""
    from execution.numerics import all_ok, compare_outputs

    started = time.monotonic()
    loaded = _loaded(executable, config)
    arguments = _STATE["arguments"]
    checks = compare_outputs(_STATE["outputs"], run_once(loaded, arguments), _STATE["spread"])
    measurement = measure_pair(_STATE["runner"], timed_runner(loaded, arguments), settings)
    return {**asdict(measurement), "numerics_ok": all_ok(checks),
            "numerics": [asdict(check) for check in checks],
            "span": _span(started)}


def _loaded(executable: bytes, config: CompilerConfig) -> Any:
    """An executable serialized by `compile_serialized`, loaded on the first device."""
    import jax
    from jax._src.lib import _jax

    device = jax.devices()[0]
    return device.client.deserialize_executable(executable, _jax.DeviceList((device,)),
                                                compile_options(config))


def measurable_module(module_proto: bytes) -> bytes:
    """The module as the default and every candidate compile it for measurement: without
    buffer aliasing, tuple-shaped parameters flattened (`execution.tuple_parameters`). The very
    same bytes when there is nothing to change, so preparing a prepared module costs a parse."""
    return flatten_tuple_parameters(without_buffer_aliasing(module_proto))


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


def timed_runner(executable: Any, arguments: list[Any]) -> Runner:
    """A Runner (see execution.measure) that executes `executable` on `arguments` and waits."""

    def run(repeats: int) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            for output in executable.execute(arguments):
                output.block_until_ready()
        return time.perf_counter() - started

    return run
