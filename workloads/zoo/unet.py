"""U-Net forward pass: conv blocks, strided-conv downsampling, transposed-conv upsampling, skips."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from workloads.zoo import _nn

DESCRIPTION = (
    "U-Net forward: per level two 3x3 conv+ReLU, stride-2 conv downsample, recursion, "
    "stride-2 lax.conv_transpose upsample, skip concat, two 3x3 convs, 1x1 conv head"
)

IN_CHANNELS = 3
OUT_CHANNELS = 2


Config = _nn.ImageConfig


SIZES = {
    "s": Config(image=32, channels=(8, 16), batch=2),
    "m": Config(image=64, channels=(16, 32, 64), batch=2),
}


def _block(x: jax.Array, p: list) -> jax.Array:
    for layer in p:
        x = jax.nn.relu(_nn.conv(x, layer, stride=1))
    return x


def _level(x: jax.Array, params: dict, level: int) -> jax.Array:
    skip = _block(x, params["enc"][level])
    if level == len(params["enc"]) - 1:
        return skip
    inner = _level(_nn.conv(skip, params["down"][level], stride=2), params, level + 1)
    up = lax.conv_transpose(
        inner, params["up"][level]["w"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    ) + params["up"][level]["b"]
    return _block(jnp.concatenate([up, skip], axis=-1), params["dec"][level])


def _param_specs(c: Config) -> dict:
    ch = c.channels
    ins = (IN_CHANNELS,) + ch[:-1]
    return {
        "enc": [[_nn.conv_specs(i, o), _nn.conv_specs(o, o)] for i, o in zip(ins, ch)],
        "down": [_nn.conv_specs(o, o) for o in ch[:-1]],
        "up": [_nn.conv_specs(deep, o, k=2) for o, deep in zip(ch[:-1], ch[1:])],
        "dec": [[_nn.conv_specs(2 * o, o), _nn.conv_specs(o, o)] for o in ch[:-1]],
        "out": _nn.conv_specs(ch[0], OUT_CHANNELS, k=1),
    }


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(forward, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def unet_forward(params: dict, images: jax.Array) -> jax.Array:
        return _nn.conv(_level(images, params, 0), params["out"], stride=1)

    images = _nn.f32(c.batch, c.image, c.image, IN_CHANNELS)
    return unet_forward, (_param_specs(c), images)
