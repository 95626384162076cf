"""Programs the numerics check is tried on (tests/execution/test_conditioning.py,
benchmarks/bench_numerics_seeds.py): one built to be ill-conditioned, and a Flax train step of
the kind fleets run (convolutions, self-attention, optax's AdamW; needs flax and optax, the
`dev` extra)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from hlo.module import HloModule, from_lowered


def ill_conditioned(p: jax.Array, q: jax.Array, level: float = 40.0
                    ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A program built to be ill-conditioned: a layer norm whose variance is the difference of
    two large means (x's level, from q, is `level` times its spread), as `use_fast_variance`
    norms compute it: at 40, a last-bit change of a sum becomes a change of ~3e-3 of the output's
    scale (the amplification grows with the level squared). Beside it a well-conditioned mean,
    and a ReLU over a log of values that go negative (NaN there)."""
    x = p + level * q[:, None]
    mean = x.mean(axis=1)
    variance = (x * x).mean(axis=1) - mean**2
    normed = (x - mean[:, None]) * jax.lax.rsqrt(variance + 1e-6)[:, None]
    return normed, mean, jnp.maximum(jnp.log(p - 0.5), 0.0)


def ill_conditioned_module(level: float = 40.0) -> HloModule:
    """`ill_conditioned` over a [64, 256] p and a [64] q, at `level`, lowered."""
    return from_lowered(jax.jit(functools.partial(ill_conditioned, level=level)).lower(
        jax.ShapeDtypeStruct((64, 256), jnp.float32), jax.ShapeDtypeStruct((64,), jnp.float32)),
        f"test:ill-conditioned-{level:g}")


def flax_train_step_module() -> HloModule:
    """`flax_train_step`, lowered."""
    step, abstract = flax_train_step()
    return from_lowered(jax.jit(step).lower(*abstract), "flax:cnn-attention-adamw")


def flax_train_step(image: int = 16, batch: int = 8, width: int = 32) -> tuple[Callable, tuple]:
    """`(train_step, abstract_args)`: one AdamW step of a conv stem and a pre-LN attention block
    over its patches, classifying `image`-sized RGB images into 10 classes."""
    import flax.linen as nn
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, t: Any) -> Any:
            t = t + nn.MultiHeadDotProductAttention(num_heads=4)(nn.LayerNorm()(t))
            return t + nn.Dense(width)(nn.gelu(nn.Dense(2 * width)(nn.LayerNorm()(t))))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Conv(width // 2, (3, 3))(x))
            x = nn.relu(nn.Conv(width, (3, 3), strides=(2, 2))(x))
            b, h, w, c = x.shape
            t = Block()(x.reshape(b, h * w, c))
            return nn.Dense(10)(nn.LayerNorm()(t.mean(axis=1)))

    model, optimizer = Net(), optax.adamw(1e-3, weight_decay=1e-4)
    images, labels = jnp.zeros((batch, image, image, 3)), jnp.zeros((batch,), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), images)

    def flax_train_step(params: Any, opt_state: Any, images: Any, labels: Any) -> Any:
        def loss(p: Any) -> Any:
            logits = model.apply(p, images)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                            (params, optimizer.init(params), images, labels))
    return flax_train_step, abstract
