"""A JAX job with its persistent compilation cache on, under the compiler hook, for the tests of
autotune results delivered to such a job (tests/execution/test_autotune_results.py).

    python tests/support/jobs/autotune_cache_job.py HOME JAX_CACHE_DIR JOB_ID HOLDOUT

XLA:CPU autotunes nothing: the job counts the CPU among the platforms that autotune, so the
hook takes the branch a GPU job takes (XLA:CPU takes the per-fusion option and ignores it).
Prints one JSON line: the step's value, and for each compile of its module (`jit_step`) the
per-fusion cache directory it was given (the override, else the debug options'), the files
that directory held then, and how many persistent-cache hits JAX recorded during it.
"""

import json
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
from jax._src import compiler, monitoring
from jax._src.lib.mlir import ir

from delivery import hook
from execution.autotune import jax_cache, results
from execution.autotune.per_fusion_directory import CACHE_DIR_OPTION, job_cache_dir

home, cache_dir, job_id, holdout = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
jax.config.update("jax_compilation_cache_dir", cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
results.AUTOTUNING_PLATFORMS = frozenset({"gpu", "cpu"})

compiles: list[dict] = []
local = threading.local()


def on_event(event: str, **_: object) -> None:
    if event == jax_cache.CACHE_HIT_EVENT and getattr(local, "compile", None) is not None:
        local.compile["cache_hits"] += 1


monitoring.register_event_listener(on_event)
jax_compile = compiler.compile_or_get_cached


def noting(backend, computation, devices, options, *args, **kwargs):
    """JAX's compile, noting what a compile of the step was given (the hook calls this)."""
    name = ir.StringAttr(computation.operation.attributes["sym_name"]).value
    if name != "jit_step":
        return jax_compile(backend, computation, devices, options, *args, **kwargs)
    given = dict(options.env_option_overrides).get(CACHE_DIR_OPTION) or job_cache_dir(options)
    local.compile = {"directory": given, "cache_hits": 0,
                     "files": sorted(p.name for p in Path(given).glob("*.textproto")) if given else []}
    try:
        return jax_compile(backend, computation, devices, options, *args, **kwargs)
    finally:
        compiles.append(local.compile)
        local.compile = None


compiler.compile_or_get_cached = noting
hook.install(home=home, job_id=job_id, holdout=holdout)


def step(x):
    return jnp.tanh(x @ x).sum()


value = float(jax.jit(step)(jnp.linspace(-1.0, 1.0, 32 * 32).reshape(32, 32)))
print(json.dumps({"value": value, "compiles": compiles}))
