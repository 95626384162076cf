"""Decoder-only transformer language model: one Adam train step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "decoder-only transformer LM train step: token+position embedding, pre-LN causal "
    "self-attention and GELU MLP blocks, cross-entropy loss, grad, hand-written Adam"
)


@dataclass(frozen=True)
class Config:
    """Model and batch shape of one size."""

    vocab: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: int
    seq: int
    batch: int


SIZES = {
    "s": Config(vocab=256, d_model=64, n_heads=4, n_layers=2, d_ff=256, seq=32, batch=4),
    "m": Config(vocab=1024, d_model=128, n_heads=4, n_layers=3, d_ff=512, seq=64, batch=4),
    # A GPU's size (zoo.gpu_workloads): 21M parameters, 8,192 tokens a step, about a TFLOP.
    "g": Config(vocab=8192, d_model=512, n_heads=8, n_layers=4, d_ff=2048, seq=256, batch=32),
}


def _param_specs(c: Config) -> dict:
    return _nn.decoder_specs(c.vocab, c.d_model, c.d_ff, c.n_layers, positions=c.seq)


def _causal_attention(x: jax.Array, p: dict, n_heads: int) -> jax.Array:
    b, s, d = x.shape
    q, k, v = jnp.split(x @ p["wqkv"], 3, axis=-1)
    q, k, v = (t.reshape(b, s, n_heads, d // n_heads) for t in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // n_heads)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    # A finite fill (not -inf) keeps the softmax gradient NaN-free.
    scores = jnp.where(causal, scores, -1e9)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, s, d) @ p["wo"]


def _loss(params: dict, tokens: jax.Array, n_heads: int) -> jax.Array:
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    x = params["embed"][inputs] + params["pos"]
    for p in params["layers"]:
        x = x + _causal_attention(_nn.layernorm(x, p["ln1"]), p, n_heads)
        h = jax.nn.gelu(_nn.dense(_nn.layernorm(x, p["ln2"]), p["ff1"]))
        x = x + _nn.dense(h, p["ff2"])
    logits = _nn.layernorm(x, params["ln_f"]) @ params["head"]
    return _nn.cross_entropy(logits, targets)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def transformer_train_step(params: dict, opt_state: dict, tokens: jax.Array):
        loss, grads = jax.value_and_grad(_loss)(params, tokens, c.n_heads)
        params, opt_state = _nn.adam(params, grads, opt_state)
        return params, opt_state, loss

    specs = _param_specs(c)
    # tokens carry one extra position: inputs are [:-1], next-token targets [1:].
    return transformer_train_step, (specs, _nn.adam_state_specs(specs), _nn.i32(c.batch, c.seq + 1))
