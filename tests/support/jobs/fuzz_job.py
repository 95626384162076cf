"""A JAX job for the hook's fuzz test: one small program per row count 1..N (so N modules with N
fingerprints), each with a dot, a reduction and elementwise math, the fusion types and codegen
paths the tuned flags act on. Prints one JSON line: each program's result, summed."""

import json
import sys

import jax
import jax.numpy as jnp


def program(x, w):
    y = jnp.tanh(x @ w)
    return y.sum(axis=1) + jnp.exp(-jnp.abs(y)).max(axis=1)


count = int(sys.argv[1])
w = jnp.linspace(-0.5, 0.5, 16 * 8).reshape(16, 8)
sums = [float(jax.jit(program)(jnp.linspace(-1.0, 1.0, rows * 16).reshape(rows, 16), w).sum())
        for rows in range(1, count + 1)]
print(json.dumps({"sums": sums}))
