"""A JAX job for the sharded-ingestion tests: an MLP train step, data- and tensor-parallel over a
2 x 2 mesh of host devices (`--devices 4`), or on one device (`--devices 1`), nothing fleet-fdo
in it. Run it under `fdo run`.

    python tests/support/jobs/sharded_job.py [--devices N] [--steps N] [--trace DIR] [--meshes 2x2,4x1]

--trace DIR profiles the steps with JAX's profiler. --meshes jits the same step for each mesh
(data x model) in turn, the same program partitioned several ways. Prints one JSON line: the
steps traced and their wall seconds.
"""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--devices", type=int, default=4)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--trace")
parser.add_argument("--meshes", default="2x2")
args = parser.parse_args()
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + f" --xla_force_host_platform_device_count={args.devices}")

import contextlib  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


def loss(params, x, y):
    hidden = jnp.tanh(x @ params["w1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


@jax.jit
def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)


def placed(shape: str | None):
    """The step's parameters and batch: over a `data` x `model` mesh of that shape (parameters
    split along `model`, the batch along `data`), or on the default device."""
    keys = jax.random.split(jax.random.key(0), 4)
    values = {"w1": jax.random.normal(keys[0], (256, 512)) * 0.05,
              "w2": jax.random.normal(keys[1], (512, 256)) * 0.05,
              "x": jax.random.normal(keys[2], (512, 256)), "y": jax.random.normal(keys[3], (512, 256))}
    if shape is None:
        return {"w1": values["w1"], "w2": values["w2"]}, values["x"], values["y"]
    data, model = map(int, shape.split("x"))
    mesh = Mesh(np.array(jax.devices()[:data * model]).reshape(data, model), ("data", "model"))

    def put(name: str, *spec) -> jax.Array:
        return jax.device_put(values[name], NamedSharding(mesh, PartitionSpec(*spec)))

    return ({"w1": put("w1", None, "model"), "w2": put("w2", "model", None)},
            put("x", "data", None), put("y", "data", None))


shapes = [None] if args.devices == 1 else args.meshes.split(",")
for shape in shapes:
    params, x, y = placed(shape)
    params = jax.block_until_ready(step(params, x, y))  # compiled outside the trace
profiling = jax.profiler.trace(args.trace) if args.trace else contextlib.nullcontext()
with profiling:
    started = time.perf_counter()
    for _ in range(args.steps):
        # A step at a time: with many steps in flight, XLA:CPU's collectives on a loaded 2-core
        # machine can wait on each other past their rendezvous timeout and abort the process.
        params = jax.block_until_ready(step(params, x, y))
    wall = time.perf_counter() - started
print(json.dumps({"steps": args.steps, "wall_seconds": wall}))
