"""The worker side of a tuning search: one module compiled once with the defaults, then
candidates compiled, deduplicated and measured against it.

These functions run inside a sandboxed `tuner.worker` process (called as
"tuner.session:prepare" and so on) and keep the module's state in that process between calls,
so the default is compiled, run and checked once per search instead of once per candidate.
A candidate is compiled first (`compile_candidate`), which names its program: the optimized
module's fingerprint plus the codegen-level flag values. The caller measures a program once
(`measure_candidate`) and reuses the result for every other config that yields it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ingest.fingerprint import graph_fingerprint
from ingest.hlo_module import HloModule
from tuner.compile import CompileError, compile_module
from tuner.flags import CompilerConfig, codegen_values
from tuner.measure import MeasureSettings, measure_pair

_STATE: dict[str, Any] = {}


def program_key(optimized_proto: bytes, config: CompilerConfig) -> str:
    """What decides the machine code: the optimized module and the codegen-level flags."""
    return f"{graph_fingerprint(HloModule(optimized_proto, '', 'optimized'))}:{codegen_values(config)!r}"


def prepare(module_proto: bytes, seed: int = 0, default: CompilerConfig | None = None) -> dict[str, Any]:
    """Compile and run the module with `default` (the compiler's defaults unless given); keep
    it for the candidates that follow. Raises CompileError if it does not compile."""
    import jax
    import numpy as np

    from tuner.evaluate import timed_runner, without_buffer_aliasing
    from tuner.inputs import make_inputs, parameter_specs

    module_proto = without_buffer_aliasing(module_proto)
    base = compile_module(module_proto, default or {})
    device = jax.devices()[0]
    arguments = [jax.device_put(a, device) for a in make_inputs(
        parameter_specs(HloModule(module_proto, "", "tuning")), seed)]
    _STATE.clear()
    _STATE.update(module=module_proto, arguments=arguments, base=base,
                  outputs=[np.asarray(o) for o in base.executable.execute(arguments)],
                  runner=timed_runner(base.executable, arguments), pending={})
    key = program_key(base.optimized_proto, default or {})
    return {"program": key, "compile_seconds": base.compile_seconds}


def compile_candidate(config: CompilerConfig) -> dict[str, Any]:
    """Compile `config`; returns its program key (or the compile error)."""
    try:
        compiled = compile_module(_STATE["module"], config)
    except CompileError as exc:
        return {"error": f"does not compile: {exc}"}
    key = program_key(compiled.optimized_proto, config)
    _STATE["pending"] = {key: compiled}
    return {"program": key, "compile_seconds": compiled.compile_seconds}


def discard_candidate(program: str) -> None:
    """Forget a compiled candidate that will not be measured (a duplicate program)."""
    _STATE["pending"].pop(program, None)


def measure_candidate(program: str, settings: MeasureSettings) -> dict[str, Any]:
    """Check the numerics of the compiled candidate `program` and time it against the default."""
    import numpy as np

    from tuner.evaluate import timed_runner
    from tuner.numerics import all_ok, compare_outputs

    compiled = _STATE["pending"].pop(program)
    arguments = _STATE["arguments"]
    checks = compare_outputs(_STATE["outputs"],
                             [np.asarray(o) for o in compiled.executable.execute(arguments)])
    measurement = measure_pair(_STATE["runner"], timed_runner(compiled.executable, arguments), settings)
    return {**asdict(measurement), "numerics_ok": all_ok(checks),
            "numerics": [asdict(check) for check in checks]}
