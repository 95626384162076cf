"""Hybrid vision transformer: a conv stem, self-attention over its patches, one AdamW step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "hybrid ViT classifier train step: a 3x3 conv and a stride-2 patchifying conv, pre-LN "
    "self-attention and GELU MLP blocks over the patches, mean pool, dense head, cross-entropy, "
    "grad, hand-written AdamW"
)

CLASSES = 10
IN_CHANNELS = 3


@dataclass(frozen=True)
class Config:
    """Image side, the stem's width, the patches' width, blocks, heads and batch."""

    image: int
    stem: int
    d_model: int
    n_layers: int
    n_heads: int
    batch: int


SIZES = {
    "s": Config(image=16, stem=16, d_model=32, n_layers=1, n_heads=4, batch=8),
    "m": Config(image=32, stem=32, d_model=64, n_layers=2, n_heads=4, batch=8),
}


def _param_specs(c: Config) -> dict:
    block = {
        "ln1": _nn.layernorm_specs(c.d_model),
        "wqkv": _nn.f32(c.d_model, 3 * c.d_model),
        "wo": _nn.f32(c.d_model, c.d_model),
        "ln2": _nn.layernorm_specs(c.d_model),
        "ff1": _nn.dense_specs(c.d_model, 2 * c.d_model),
        "ff2": _nn.dense_specs(2 * c.d_model, c.d_model),
    }
    return {
        "stem": _nn.conv_specs(IN_CHANNELS, c.stem),
        "patch": _nn.conv_specs(c.stem, c.d_model),
        "blocks": [block] * c.n_layers,
        "ln_f": _nn.layernorm_specs(c.d_model),
        "head": _nn.dense_specs(c.d_model, CLASSES),
    }


def _attention(x: jax.Array, p: dict, n_heads: int) -> jax.Array:
    b, s, d = x.shape
    q, k, v = jnp.split(x @ p["wqkv"], 3, axis=-1)
    q, k, v = (t.reshape(b, s, n_heads, d // n_heads) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // n_heads)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, s, d) @ p["wo"]


def _loss(params: dict, images: jax.Array, labels: jax.Array, n_heads: int) -> jax.Array:
    x = jax.nn.relu(_nn.conv(images, params["stem"], stride=1))
    x = _nn.conv(x, params["patch"], stride=2)
    b, h, w, d = x.shape
    x = x.reshape(b, h * w, d)
    for p in params["blocks"]:
        x = x + _attention(_nn.layernorm(x, p["ln1"]), p, n_heads)
        x = x + _nn.dense(jax.nn.gelu(_nn.dense(_nn.layernorm(x, p["ln2"]), p["ff1"])), p["ff2"])
    logits = _nn.dense(_nn.layernorm(jnp.mean(x, axis=1), params["ln_f"]), params["head"])
    return _nn.cross_entropy(logits, labels)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def vit_train_step(params: dict, opt_state: dict, images: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(_loss)(params, images, labels, c.n_heads)
        params, opt_state = _nn.adamw(params, grads, opt_state)
        return params, opt_state, loss

    specs = _param_specs(c)
    images = _nn.f32(c.batch, c.image, c.image, IN_CHANNELS)
    return vit_train_step, (specs, _nn.adam_state_specs(specs), images, _nn.i32(c.batch))
