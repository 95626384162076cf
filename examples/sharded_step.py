"""A sharded train step for docs/sharded.md's walk-through: a plain JAX program, nothing fleet-fdo
in it, data-parallel over 4 devices (on a CPU, 4 host devices).

It fits the masses of an ensemble of n-body systems to where the bodies should be after a step:
each step simulates every system (all-pairs gravity: reductions), takes the gradient of the
squared distance to the targets with respect to the masses, and updates them. The systems are
split across the devices (`data`); the masses are replicated, so their gradient is summed over
the devices (an all-reduce). Run it under `fdo run` and the compiler hook sees its step compiled
for 4 partitions.

    python examples/sharded_step.py [--steps N] [--trace DIR] [--devices N]

--trace DIR profiles the steps with JAX's profiler (a `*.xplane.pb` under DIR); the last line
printed is the median seconds per step, which the walk-through compares between runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

SYSTEMS, BODIES = 8, 192
SOFTENING = 0.05
DT = 1e-2
LEARNING_RATE = 1e-3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--trace", help="write a JAX profiler trace of the steps here")
    parser.add_argument("--devices", type=int, default=4, help="host devices to shard over")
    args = parser.parse_args()
    # A CPU has one device unless XLA is told to make more, before JAX starts.
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def simulate(pos, vel, mass):
        d = pos[:, None, :, :] - pos[:, :, None, :]
        inv_r = jax.lax.rsqrt(jnp.sum(d * d, axis=-1) + SOFTENING**2)
        acc = jnp.sum(d * (mass[None, None, :] * inv_r**3)[..., None], axis=2)
        vel = vel + DT * acc
        return pos + DT * vel

    def loss(mass, pos, vel, target):
        return jnp.mean(jnp.sum((simulate(pos, vel, mass) - target) ** 2, axis=-1))

    @jax.jit
    def train_step(mass, pos, vel, target):
        value, grad = jax.value_and_grad(loss)(mass, pos, vel, target)
        return jnp.abs(mass - LEARNING_RATE * grad), value

    devices = jax.devices()[:args.devices]
    mesh = Mesh(devices, ("data",))
    by_system = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    keys = jax.random.split(jax.random.key(0), 4)
    pos = jax.device_put(jax.random.normal(keys[0], (SYSTEMS, BODIES, 3)), by_system)
    vel = jax.device_put(0.1 * jax.random.normal(keys[1], (SYSTEMS, BODIES, 3)), by_system)
    target = jax.device_put(pos + 0.01 * jax.random.normal(keys[2], pos.shape), by_system)
    mass = jax.device_put(jax.random.uniform(keys[3], (BODIES,), minval=0.5, maxval=1.5) / BODIES,
                          replicated)
    mass, value = train_step(mass, pos, vel, target)  # compile outside the trace
    value.block_until_ready()
    seconds = []
    profiling = jax.profiler.trace(args.trace) if args.trace else contextlib.nullcontext()
    with profiling:
        for _ in range(args.steps):
            started = time.perf_counter()
            mass, value = train_step(mass, pos, vel, target)
            value.block_until_ready()
            seconds.append(time.perf_counter() - started)
    print(f"{args.steps} steps of {SYSTEMS} x {BODIES} bodies on {len(devices)} devices; "
          f"loss {float(value):.6f}")
    print(f"median step seconds {statistics.median(seconds):.6f}")


if __name__ == "__main__":
    main()
