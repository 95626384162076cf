"""A JAX job for the hook tests: plain jit, grad, vmap and sharded jit over two CPU devices.

Prints one JSON line: whether the compiled layer uses a YNNPACK fusion and the size of the
gradient's machine code (observable effects of the tuned configs the tests import; null when
unreadable, as for an executable from JAX's persistent cache), and the sum of magnitudes of
each result for the numeric comparison.
With TRACE_DIR set, the layer's executions are profiled there.
"""

import json
import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from execution.compile import object_code  # noqa: E402


def layer(x, w):
    return jnp.tanh(x @ w)


def loss(w, x):
    return layer(x, w).sum()


x = jnp.linspace(-1.0, 1.0, 64 * 128).reshape(64, 128)
w = jnp.linspace(-0.5, 0.5, 128 * 32).reshape(128, 32)
compiled = jax.jit(layer).lower(x, w).compile()
grad = jax.jit(jax.grad(loss)).lower(w, x).compile()  # XLA emits its code (the layer's is YNNPACK's)
out = {"ynn": "ynn_fusion" in compiled.as_text(), "jit": float(jnp.abs(jax.jit(layer)(x, w)).sum()),
       "code": sum(map(len, object_code(grad.runtime_executable()))) or None,
       "grad": float(jnp.abs(grad(w, x)).sum())}
out["vmap"] = float(jnp.abs(jax.jit(jax.vmap(layer, in_axes=(0, None)))(x.reshape(4, 16, 128), w)).sum())
mesh = Mesh(jax.devices()[:2], ("d",))
sharded = jax.jit(layer, in_shardings=(NamedSharding(mesh, PartitionSpec("d")), NamedSharding(mesh, PartitionSpec())))
out["sharded"] = float(jnp.abs(sharded(x, w)).sum())
if os.environ.get("TRACE_DIR"):
    run = jax.jit(layer)
    with jax.profiler.trace(os.environ["TRACE_DIR"]):
        for _ in range(20):
            run(x, w).block_until_ready()
print(json.dumps(out))
