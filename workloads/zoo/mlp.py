"""MLP classifier: one SGD-with-momentum train step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax

from workloads.zoo import _nn

DESCRIPTION = "MLP classifier train step: ReLU MLP, cross-entropy, grad, SGD with momentum"

LEARNING_RATE = 0.01
MOMENTUM = 0.9


@dataclass(frozen=True)
class Config:
    """Layer widths (input first, classes last) and batch size of one size."""

    widths: tuple[int, ...]
    batch: int


SIZES = {
    "s": Config(widths=(784, 256, 128, 10), batch=64),
    "m": Config(widths=(784, 1024, 512, 10), batch=128),
}


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def mlp_train_step(params: list, velocity: list, x: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(lambda p: _nn.cross_entropy(_nn.mlp(x, p), labels))(params)
        velocity = jax.tree.map(lambda v, g: MOMENTUM * v + g, velocity, grads)
        return _nn.sgd(params, velocity, LEARNING_RATE), velocity, loss

    specs = _nn.mlp_specs(c.widths)
    return mlp_train_step, (specs, specs, _nn.f32(c.batch, c.widths[0]), _nn.i32(c.batch))
