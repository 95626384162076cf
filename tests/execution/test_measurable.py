"""Every module XLA CPU compiles can be measured: f64/s64 parameters, tuple parameters, and a
status of its own for a module whose default config fails (through the real CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from execution.evaluate import evaluate
from execution.inputs import parameter_specs
from execution.measure import MeasureSettings
from execution.session import measurable_module, without_buffer_aliasing
from execution.worker import Worker
from hlo.module import HloModule, from_text, xla_hlo
from storage.warehouse import Warehouse
from tests.support.serving import fdo
from tuner.tables import TUNING_RESULTS
from vocabulary.failures import Failure

QUICK = MeasureSettings(max_seconds=3, max_pairs=120)

# An n-body step as scientific JAX code writes it: f64 state, an s64 step count.
NBODY = '''
import sys
import jax
import jax.numpy as jnp
from hlo.module import from_lowered

def step(pos, vel, mass, substeps):
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d * d).sum(-1) + 1e-3
    acc = (d * (mass[None, :, None] * r2[:, :, None] ** -1.5)).sum(1)
    dt = 0.01 / substeps.astype(jnp.float64)
    vel = vel + dt * acc
    return pos + dt * vel, vel

f64, s64 = jnp.float64, jnp.int64
args = [jax.ShapeDtypeStruct((128, 3), f64), jax.ShapeDtypeStruct((128, 3), f64),
        jax.ShapeDtypeStruct((128,), f64), jax.ShapeDtypeStruct((), s64)]
sys.stdout.write(from_lowered(jax.jit(step).lower(*args)).to_text())
'''

# Nested tuple parameter: the leaves are read through get-tuple-elements; the s32 leaf indexes
# the rows of its f32[64,256] sibling, so only [0, 64) is in bounds.
TUPLE_READ = """HloModule tuple_read
ENTRY e {
  s = (f32[256]{0}, (s32[], f32[64,256]{1,0})) parameter(0)
  k = f32[256]{0} parameter(1)
  v = f32[256]{0} get-tuple-element(s), index=0
  inner = (s32[], f32[64,256]{1,0}) get-tuple-element(s), index=1
  i = s32[] get-tuple-element(inner), index=0
  t = f32[64,256]{1,0} get-tuple-element(inner), index=1
  z = s32[] constant(0)
  row = f32[1,256]{1,0} dynamic-slice(t, i, z), dynamic_slice_sizes={1,256}
  r = f32[256]{0} reshape(row)
  a = f32[256]{0} add(v, r)
  ROOT out = f32[256]{0} multiply(a, k)
}
"""

# Nested tuple parameter used whole, as a while loop's state.
TUPLE_WHOLE = """HloModule tuple_whole
body {
  st = (s32[], (f32[1024]{0}, f32[1024]{0})) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  one = s32[] constant(1)
  n1 = s32[] add(n, one)
  xs = (f32[1024]{0}, f32[1024]{0}) get-tuple-element(st), index=1
  x = f32[1024]{0} get-tuple-element(xs), index=0
  y = f32[1024]{0} get-tuple-element(xs), index=1
  x1 = f32[1024]{0} add(x, y)
  xs1 = (f32[1024]{0}, f32[1024]{0}) tuple(x1, y)
  ROOT st1 = (s32[], (f32[1024]{0}, f32[1024]{0})) tuple(n1, xs1)
}
cond {
  st = (s32[], (f32[1024]{0}, f32[1024]{0})) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  ten = s32[] constant(10)
  ROOT lt = pred[] compare(n, ten), direction=LT
}
ENTRY e {
  init = (s32[], (f32[1024]{0}, f32[1024]{0})) parameter(0)
  done = (s32[], (f32[1024]{0}, f32[1024]{0})) while(init), condition=cond, body=body
  ROOT r = (f32[1024]{0}, f32[1024]{0}) get-tuple-element(done), index=1
}
"""

# A GPU dump's LU factorization: the cuSOLVER custom call has no CPU handler, so XLA CPU
# refuses to compile it, with any config.
CUSOLVER_GETRF = """HloModule gpu_lu
ENTRY e {
  a = f32[4,4]{1,0} parameter(0)
  lu = (f32[4,4]{1,0}, s32[4]{0}, s32[]) custom-call(a), custom_call_target="cusolver_getrf", api_version=API_VERSION_TYPED_FFI
  ROOT factors = f32[4,4]{1,0} get-tuple-element(lu), index=0
}
"""

# The f32 LAPACK handler called on an f64 matrix: it compiles (the handler exists on CPU), and
# XLA rejects it when it runs, decoding the handler's operands.
WRONG_TYPE_GETRF = """HloModule wrong_type_lu
ENTRY e {
  a = f64[4,4]{1,0} parameter(0)
  lu = (f64[4,4]{1,0}, s32[4]{0}, s32[]) custom-call(a), custom_call_target="lapack_sgetrf_ffi", api_version=API_VERSION_TYPED_FFI
  ROOT factors = f64[4,4]{1,0} get-tuple-element(lu), index=0
}
"""


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


def _x64_module(path: Path, source: str) -> Path:
    """Write the module `source` prints, lowered by JAX with 64-bit types on (in a fresh
    interpreter: the flag is global)."""
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          check=True, env={**os.environ, "JAX_ENABLE_X64": "1"}, timeout=300)
    path.write_text(done.stdout)
    return path


@pytest.mark.slow
@pytest.mark.subprocess
def test_f64_and_s64_parameters_are_measured_and_an_a_a_check_is_no_gain(tmp_path) -> None:
    path = _x64_module(tmp_path / "nbody.hlo", NBODY)
    dtypes = [spec.dtype for spec in parameter_specs(from_text(path.read_text()))]
    assert dtypes == [np.float64, np.float64, np.float64, np.int64]
    done = fdo(tmp_path / "home", "evaluate", str(path), "--max-seconds", "3", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["error"] is None and result["failure"] is None and result["numerics_ok"]
    assert result["pairs"] >= QUICK.min_pairs and not result["identical_program"]
    # Default and candidate are two compiles of one program: their code can sit apart in memory
    # and run apart (a percent, and once 7% slower on 2 busy cores), which is what the noise band
    # is for on the gain's side. An A/A is never a gain, and its figure is near 1.
    assert not result["significant"], result
    assert result["ci_low"] <= 1.0 + QUICK.noise_band and 0.8 < result["speedup"] < 1.25, result


@pytest.mark.parametrize("text", [TUPLE_READ, TUPLE_WHOLE], ids=["read", "whole"])
@pytest.mark.subprocess
def test_nested_tuple_parameters_are_flattened_and_measured(text: str, worker) -> None:
    module = from_text(text)
    flat = HloModule(measurable_module(module.proto), module.name, "flat")
    assert not any(s.is_tuple() for s in _parameter_shapes(flat))
    assert measurable_module(flat.proto) == flat.proto  # idempotent: a prepared module stays
    result = evaluate(module, {}, settings=QUICK, worker=worker)
    assert result.error is None and result.numerics_ok and result.pairs >= QUICK.min_pairs


def test_tuple_leaves_keep_their_own_index_bounds() -> None:
    module = from_text(TUPLE_READ)
    specs = parameter_specs(HloModule(measurable_module(module.proto), module.name, "flat"))
    assert [(s.shape, s.dtype) for s in specs] == [((256,), np.float32), ((), np.int32),
                                                   ((64, 256), np.float32), ((256,), np.float32)]
    assert (specs[1].low, specs[1].high) == (0, 64)  # the row index: in bounds, not clamped
    # Only the entry's parameters change: a module without tuple parameters is left as it is.
    plain = from_text("HloModule plain\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n")
    assert measurable_module(plain.proto) == without_buffer_aliasing(plain.proto) == plain.proto


@pytest.mark.parametrize("text,reason", [(CUSOLVER_GETRF, "does not compile: "),
                                         (WRONG_TYPE_GETRF, "fails to run: ")],
                         ids=["compile", "run"])
@pytest.mark.slow
@pytest.mark.subprocess
def test_fdo_evaluate_says_the_default_fails_and_exits_4(text: str, reason: str,
                                                        tmp_path) -> None:
    path = tmp_path / "module.hlo"
    path.write_text(text)
    home = tmp_path / "home"
    done = fdo(home, "evaluate", str(path))
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"\n  default fails: {reason}" in done.stdout
    # The candidate is still tried: here it fails too, like every config.
    done = fdo(home, "evaluate", str(path), "--set", "xla_cpu_experimental_ynn_fusion_type=",
               "--json")
    result = json.loads(done.stdout)
    assert done.returncode == 4 and result["failure"] == Failure.DEFAULT_FAILS
    assert result["error"].startswith(f"default fails: {reason}")
    assert result["candidate_runs"] is False and result["speedup"] is None


@pytest.mark.parametrize("text", [CUSOLVER_GETRF, WRONG_TYPE_GETRF], ids=["compile", "run"])
@pytest.mark.subprocess
def test_fdo_tune_ends_a_task_whose_default_fails(text: str, tmp_path) -> None:
    path = tmp_path / "module.hlo"
    path.write_text(text)
    home = tmp_path / "home"
    done = fdo(home, "tune", str(path), "--budget-evals", "3", "--json")
    assert done.returncode == 4, done.stdout + done.stderr
    tuned = json.loads(done.stdout)
    assert tuned["status"] == "default fails" and tuned["reason"] and not tuned["accepted"]
    assert tuned["evaluations"] == 0
    [landed] = Warehouse(home).read(TUNING_RESULTS).to_pylist()
    assert (landed["status"], landed["reason"]) == (tuned["status"], tuned["reason"])


@pytest.mark.subprocess
def test_a_candidate_that_runs_where_the_default_fails_is_checked_against_the_reference(
        worker) -> None:
    # No module was found that XLA CPU refuses with its own defaults but runs with another
    # config, so the default given here is one XLA refuses (an unknown library fusion type).
    module = from_text(TUPLE_READ)
    refused = {"xla_cpu_experimental_ynn_fusion_type": ("NO_SUCH_TYPE",)}
    result = evaluate(module, {"xla_cpu_experimental_ynn_fusion_type": ("REDUCE",)},
                      default=refused, worker=worker)
    assert result.failure is Failure.DEFAULT_FAILS and "NO_SUCH_TYPE" in result.error
    assert result.candidate_runs and result.numerics_ok and result.numerics_against == "reference"
    assert result.speedup is None and result.compile_seconds is not None
    # The default runs, the candidate does not: the candidate fails.
    result = evaluate(module, refused, worker=worker)
    assert result.failure is Failure.CANDIDATE_FAILS and result.error.startswith("candidate config")


def _parameter_shapes(module: HloModule) -> list:
    return xla_hlo().XlaComputation(module.proto).program_shape().parameter_shapes()
