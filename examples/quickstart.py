"""The README's quickstart job: a plain JAX program, an n-body simulation stepped by a jitted
function, nothing fleet-fdo in it. Run it under `fdo run` and the compiler hook sees each compile.

Each step sums Plummer-softened gravity over every pair of bodies: reductions, which XLA's CPU
backend routes to a library by default and which run several times faster on some CPUs
routed back to XLA's own emitters. That is what the tuner finds for it.

    python examples/quickstart.py [--steps N] [--systems N] [--trace DIR]

--trace DIR profiles the steps with JAX's profiler (a `*.xplane.pb` under DIR, which
`fdo ingest profiles DIR` reads).
"""

from __future__ import annotations

import argparse
import contextlib

import jax
import jax.numpy as jnp

SYSTEMS, BODIES = 4, 256  # independent systems stepped side by side
SOFTENING = 0.05
DT = 1e-3


@jax.jit
def step(pos: jax.Array, vel: jax.Array, mass: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One kick-drift step of every system: all-pairs gravity, summed over the other bodies."""
    d = pos[:, None, :, :] - pos[:, :, None, :]
    inv_r = jax.lax.rsqrt(jnp.sum(d * d, axis=-1) + SOFTENING**2)
    acc = jnp.sum(d * (mass[:, None, :] * inv_r**3)[..., None], axis=2)
    vel = vel + DT * acc
    return pos + DT * vel, vel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--systems", type=int, default=SYSTEMS,
                        help="systems stepped side by side: the same program at another shape")
    parser.add_argument("--trace", help="write a JAX profiler trace of the steps here")
    args = parser.parse_args()
    keys = jax.random.split(jax.random.key(0), 3)
    pos = jax.random.normal(keys[0], (args.systems, BODIES, 3))
    vel = 0.1 * jax.random.normal(keys[1], (args.systems, BODIES, 3))
    mass = jax.random.uniform(keys[2], (args.systems, BODIES), minval=0.5, maxval=1.5) / BODIES
    pos, vel = step(pos, vel, mass)  # compile outside the trace
    profiling = jax.profiler.trace(args.trace) if args.trace else contextlib.nullcontext()
    with profiling:
        for _ in range(args.steps):
            pos, vel = step(pos, vel, mass)
        pos.block_until_ready()
    print(f"{args.steps} steps of {args.systems} x {BODIES} bodies; mean speed "
          f"{float(jnp.linalg.norm(vel, axis=-1).mean()):.4f}")


if __name__ == "__main__":
    main()
