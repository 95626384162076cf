"""LSTM language model over a sequence via ``lax.scan``: one SGD train step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from workloads.zoo import _nn

DESCRIPTION = (
    "LSTM LM train step: embedding, LSTM cell scanned over time with lax.scan, per-step "
    "logits, cross-entropy, grad (backward scan), global-norm gradient clipping, SGD"
)

LEARNING_RATE = 0.1
CLIP_NORM = 1.0


@dataclass(frozen=True)
class Config:
    """Vocabulary, widths and sequence shape of one size."""

    vocab: int
    embed: int
    hidden: int
    seq: int
    batch: int


SIZES = {
    "s": Config(vocab=64, embed=32, hidden=64, seq=16, batch=8),
    "m": Config(vocab=256, embed=64, hidden=128, seq=64, batch=16),
}


def _lstm_cell(p: dict, carry: tuple, x_t: jax.Array) -> tuple[tuple, jax.Array]:
    h, c = carry
    i, f, g, o = jnp.split(x_t @ p["wx"] + h @ p["wh"] + p["b"], 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h


def _loss(params: dict, tokens: jax.Array) -> jax.Array:
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    xs = jnp.swapaxes(params["embed"][inputs], 0, 1)  # scan runs over the leading (time) axis
    batch, hidden = inputs.shape[0], params["lstm"]["wh"].shape[0]
    zeros = jnp.zeros((batch, hidden), jnp.float32)
    _, hs = lax.scan(lambda carry, x_t: _lstm_cell(params["lstm"], carry, x_t), (zeros, zeros), xs)
    logits = _nn.dense(jnp.swapaxes(hs, 0, 1), params["head"])
    return _nn.cross_entropy(logits, targets)


def _clip_by_global_norm(grads: dict, max_norm: float) -> dict:
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-6))
    return jax.tree.map(lambda g: g * scale, grads)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def lstm_train_step(params: dict, tokens: jax.Array):
        loss, grads = jax.value_and_grad(_loss)(params, tokens)
        return _nn.sgd(params, _clip_by_global_norm(grads, CLIP_NORM), LEARNING_RATE), loss

    specs = {
        "embed": _nn.f32(c.vocab, c.embed),
        "lstm": {
            "wx": _nn.f32(c.embed, 4 * c.hidden),
            "wh": _nn.f32(c.hidden, 4 * c.hidden),
            "b": _nn.f32(4 * c.hidden),
        },
        "head": _nn.dense_specs(c.hidden, c.vocab),
    }
    # tokens carry one extra step: inputs are [:-1], next-token targets [1:].
    return lstm_train_step, (specs, _nn.i32(c.batch, c.seq + 1))
