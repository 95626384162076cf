"""Small neural-network building blocks shared by the zoo's workload families.

Everything here works on plain pytrees of arrays so that every parameter and
optimizer state stays a jit argument (closing over big constants would bloat
the HLO and make it unlike what a fleet job compiles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


@dataclass(frozen=True)
class ImageConfig:
    """One size of a convolutional family: image side, channel widths per level (outermost
    first) and batch."""

    image: int
    channels: tuple[int, ...]
    batch: int


def f32(*shape: int) -> jax.ShapeDtypeStruct:
    """Abstract float32 array of the given shape."""
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def i32(*shape: int) -> jax.ShapeDtypeStruct:
    """Abstract int32 array of the given shape (ids, labels, positions)."""
    return jax.ShapeDtypeStruct(shape, jnp.int32)


def dense_specs(n_in: int, n_out: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Weight and bias specs of one affine layer."""
    return {"w": f32(n_in, n_out), "b": f32(n_out)}


def dense(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """Affine layer ``x @ w + b`` over the last axis."""
    return x @ p["w"] + p["b"]


def mlp_specs(widths: tuple[int, ...]) -> list[dict[str, jax.ShapeDtypeStruct]]:
    """Specs of a stack of affine layers with the given widths (input first)."""
    return [dense_specs(a, b) for a, b in zip(widths[:-1], widths[1:])]


def mlp(x: jax.Array, layers: list[dict[str, jax.Array]]) -> jax.Array:
    """ReLU MLP; the last layer is linear (it produces logits)."""
    for p in layers[:-1]:
        x = jax.nn.relu(dense(x, p))
    return dense(x, layers[-1])


def conv(x: jax.Array, p: dict, stride: int) -> jax.Array:
    """SAME-padded NHWC convolution with HWIO weights plus bias."""
    y = jax.lax.conv_general_dilated(
        x, p["w"], (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return y + p["b"]


def conv_specs(c_in: int, c_out: int, k: int = 3) -> dict[str, jax.ShapeDtypeStruct]:
    """Specs of a ``k x k`` conv layer (HWIO weights plus bias)."""
    return {"w": f32(k, k, c_in, c_out), "b": f32(c_out)}


def layernorm_specs(d: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Scale and shift specs of a layernorm over a width-``d`` axis."""
    return {"g": f32(d), "b": f32(d)}


def decoder_specs(vocab: int, d_model: int, d_ff: int, n_layers: int, positions: int) -> dict:
    """A pre-norm decoder's parameters: token and position embeddings, `n_layers` blocks of
    fused QKV attention and a feed-forward pair, a final norm and the vocabulary head."""
    layer = {
        "ln1": layernorm_specs(d_model),
        "wqkv": f32(d_model, 3 * d_model),
        "wo": f32(d_model, d_model),
        "ln2": layernorm_specs(d_model),
        "ff1": dense_specs(d_model, d_ff),
        "ff2": dense_specs(d_ff, d_model),
    }
    return {
        "embed": f32(vocab, d_model),
        "pos": f32(positions, d_model),
        "layers": [layer] * n_layers,
        "ln_f": layernorm_specs(d_model),
        "head": f32(d_model, vocab),
    }


def layernorm(x: jax.Array, p: dict[str, jax.Array], eps: float = 1e-5) -> jax.Array:
    """Layernorm over the last axis."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["g"] + p["b"]


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of integer ``labels`` under ``logits`` (classes last)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, labels[..., None], axis=-1)
    return -jnp.mean(picked)


def sgd(params: PyTree, grads: PyTree, lr: float) -> PyTree:
    """Plain SGD step."""
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def adam_state_specs(param_specs: PyTree) -> dict[str, PyTree]:
    """Specs of Adam's state for parameters with the given specs."""
    return {"m": param_specs, "v": param_specs, "step": i32()}


def adam(
    params: PyTree,
    grads: PyTree,
    state: dict[str, PyTree],
    lr: float = 1e-3,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[PyTree, dict[str, PyTree]]:
    """One Adam step; returns the new parameters and optimizer state."""
    step = state["step"] + 1
    # Bias correction uses the 1-based step so a zero step counter stays finite.
    t = step.astype(jnp.float32)
    scale = lr * jnp.sqrt(1.0 - b2**t) / (1.0 - b1**t)
    m = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g, state["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state["v"], grads)
    # v is never negative in real training; the clamp keeps arbitrary (e.g. randomly
    # generated benchmark) optimizer state from turning the update into NaN.
    params = jax.tree.map(
        lambda p, m, v: p - scale * m / (jnp.sqrt(jnp.maximum(v, 0.0)) + eps), params, m, v
    )
    return params, {"m": m, "v": v, "step": step}


def adamw(
    params: PyTree,
    grads: PyTree,
    state: dict[str, PyTree],
    lr: float = 1e-3,
    weight_decay: float = 1e-2,
) -> tuple[PyTree, dict[str, PyTree]]:
    """One AdamW step (Adam with weight decay decoupled from the gradient, as
    ``optax.adamw``): every parameter also shrinks by ``lr * weight_decay`` of itself."""
    stepped, state = adam(params, grads, state, lr=lr)
    return jax.tree.map(lambda new, old: new - lr * weight_decay * old, stepped, params), state
