"""Message-passing graph neural network for node classification: one SGD train step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "GNN node-classification train step: messages gathered from senders (x[senders]), "
    "mean-aggregated over receivers with jax.ops.segment_sum, residual ReLU updates, "
    "cross-entropy, grad (scatter-add backward), SGD"
)

LEARNING_RATE = 0.05


@dataclass(frozen=True)
class Config:
    """Graph and width shape of one size."""

    nodes: int
    edges: int
    features: int
    hidden: int
    classes: int
    layers: int


SIZES = {
    "s": Config(nodes=128, edges=512, features=16, hidden=32, classes=4, layers=2),
    "m": Config(nodes=2048, edges=16384, features=32, hidden=64, classes=8, layers=3),
}


def _message_passing(h: jax.Array, p: dict, senders: jax.Array, receivers: jax.Array) -> jax.Array:
    n = h.shape[0]
    messages = h[senders] @ p["w_msg"]
    summed = jax.ops.segment_sum(messages, receivers, num_segments=n)
    degree = jax.ops.segment_sum(jnp.ones_like(receivers, jnp.float32), receivers, num_segments=n)
    # Mean aggregation; isolated nodes (degree 0) get a zero message instead of NaN.
    mean = summed / jnp.maximum(degree, 1.0)[:, None]
    return h + jax.nn.relu(_nn.dense(h, p["self"]) + mean)


def _loss(params: dict, x: jax.Array, senders: jax.Array, receivers: jax.Array, labels: jax.Array) -> jax.Array:
    h = jax.nn.relu(_nn.dense(x, params["encode"]))
    for p in params["layers"]:
        h = _message_passing(h, p, senders, receivers)
    return _nn.cross_entropy(_nn.dense(h, params["decode"]), labels)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def gnn_train_step(params: dict, x: jax.Array, senders: jax.Array, receivers: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(_loss)(params, x, senders, receivers, labels)
        return _nn.sgd(params, grads, LEARNING_RATE), loss

    layer = {"w_msg": _nn.f32(c.hidden, c.hidden), "self": _nn.dense_specs(c.hidden, c.hidden)}
    specs = {
        "encode": _nn.dense_specs(c.features, c.hidden),
        "layers": [layer] * c.layers,
        "decode": _nn.dense_specs(c.hidden, c.classes),
    }
    args = (specs, _nn.f32(c.nodes, c.features), _nn.i32(c.edges), _nn.i32(c.edges), _nn.i32(c.nodes))
    return gnn_train_step, args
