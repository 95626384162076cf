"""Small convolutional image classifier: one SGD train step (conv forward and backward)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "CNN classifier train step: 3x3 convs (stride 1 then stride-2 downsampling) via "
    "lax.conv_general_dilated, global average pool, dense head, cross-entropy, grad, SGD"
)

LEARNING_RATE = 0.01
CLASSES = 10
IN_CHANNELS = 3


Config = _nn.ImageConfig


SIZES = {
    "s": Config(image=16, channels=(8, 16, 32), batch=8),
    "m": Config(image=32, channels=(16, 32, 64), batch=16),
    # A GPU's size (zoo.gpu_workloads): about 0.1 TFLOP a step, forward and backward.
    "g": Config(image=64, channels=(64, 128, 256), batch=128),
}


def _loss(params: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    x = images
    # The first conv keeps resolution; each later one halves it.
    for i, p in enumerate(params["convs"]):
        x = jax.nn.relu(_nn.conv(x, p, stride=1 if i == 0 else 2))
    logits = _nn.dense(jnp.mean(x, axis=(1, 2)), params["head"])
    return _nn.cross_entropy(logits, labels)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def cnn_train_step(params: dict, images: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(_loss)(params, images, labels)
        return _nn.sgd(params, grads, LEARNING_RATE), loss

    ins = (IN_CHANNELS,) + c.channels[:-1]
    specs = {
        "convs": [_nn.conv_specs(a, b) for a, b in zip(ins, c.channels)],
        "head": _nn.dense_specs(c.channels[-1], CLASSES),
    }
    images = _nn.f32(c.batch, c.image, c.image, IN_CHANNELS)
    return cnn_train_step, (specs, images, _nn.i32(c.batch))
