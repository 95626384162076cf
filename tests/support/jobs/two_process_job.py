"""One process of a two-process JAX job on loopback, for the multi-process hook tests.

`python two_process_job.py PROCESS PORT [GATE]` joins the job (gloo collectives, two host
devices a process), jits a data-parallel train step over both processes' four devices and runs
it. With GATE it waits for that file before its first compile (nothing before it compiles: the
inputs are built from NumPy). With FDO_TEST_STEPS=K it also compiles and runs K small steps
across both processes, a store key each; with FDO_TEST_RECOMPILE=1 it compiles the step a
second time after dropping JAX's caches (a new decision for one key). Prints one JSON line: its pid, whether the step's
optimized module has a YNNPACK fusion (an observable effect of a config the tests store), a
digest of that module's text, and the step's and the small steps' results.
"""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

process, port = int(sys.argv[1]), sys.argv[2]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process)

mesh = Mesh(np.array(jax.devices()), ("data",))
rows, replicated = NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def global_array(value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


x = global_array(np.linspace(-1.0, 1.0, 64 * 128, dtype=np.float32).reshape(64, 128), rows)
w = global_array(np.linspace(-0.5, 0.5, 128 * 32, dtype=np.float32).reshape(128, 32), replicated)
if len(sys.argv) > 3:
    while not Path(sys.argv[3]).exists():
        time.sleep(0.02)


def loss(w, x):
    return jnp.tanh(x @ w).sum()


@jax.jit
def step(w, x):
    return w - 0.01 * jax.grad(loss)(w, x)


def local_sum(array: jax.Array) -> float:
    """The sum of magnitudes of a replicated result, read on the host: no compile of its own."""
    return float(np.abs(np.asarray(array.addressable_data(0))).sum())


compiled = step.lower(w, x).compile()
text = compiled.as_text()
out = {"pid": os.getpid(), "ynn": "ynn_fusion" in text,
       "optimized": hashlib.blake2b(text.encode(), digest_size=8).hexdigest(),
       "step": local_sum(compiled(w, x))}
if os.environ.get("FDO_TEST_RECOMPILE") == "1":
    jax.clear_caches()
    again = step.lower(w, x).compile().as_text()
    out["recompiled"] = {"ynn": "ynn_fusion" in again,
                         "optimized": hashlib.blake2b(again.encode(), digest_size=8).hexdigest()}
out["small"] = [local_sum(jax.jit(lambda x, k=k: jnp.tanh(x * (k + 2.0)).sum(axis=0), out_shardings=replicated)(x))
                for k in range(int(os.environ.get("FDO_TEST_STEPS", "0")))]
print(json.dumps(out), flush=True)
