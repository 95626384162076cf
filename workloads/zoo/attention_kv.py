"""Transformer inference: one autoregressive decode step against a KV cache."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from workloads.zoo import _nn

DESCRIPTION = (
    "transformer decode step: embeds one token per sequence, writes this step's keys and "
    "values into a bfloat16 KV cache with lax.dynamic_update_slice at an int32 position, "
    "attends over the cache masked to positions <= pos, returns next-token logits and caches"
)

CACHE_DTYPE = jnp.bfloat16  # inference servers keep KV caches in 16-bit to halve their memory


@dataclass(frozen=True)
class Config:
    """Model, batch and cache shape of one size."""

    vocab: int
    n_heads: int
    head_dim: int
    n_layers: int
    d_ff: int
    max_len: int
    batch: int

    @property
    def d_model(self) -> int:
        """Model width."""
        return self.n_heads * self.head_dim


SIZES = {
    "s": Config(vocab=256, n_heads=4, head_dim=16, n_layers=2, d_ff=256, max_len=128, batch=4),
    "m": Config(vocab=1024, n_heads=8, head_dim=32, n_layers=4, d_ff=1024, max_len=256, batch=8),
    # A GPU's size (zoo.gpu_workloads): 268 MB of bf16 cache per tensor, read and updated in
    # place a step; skinny GEMMs (16 rows) and many small kernels: library and fusion headroom
    # (Triton against cuBLAS, dynamic-slice fusion, command buffers).
    "g": Config(vocab=8192, n_heads=16, head_dim=64, n_layers=8, d_ff=4096, max_len=1024, batch=16),
}


def _param_specs(c: Config) -> dict:
    return _nn.decoder_specs(c.vocab, c.d_model, c.d_ff, c.n_layers, positions=c.max_len)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(decode_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def attention_decode_step(params: dict, k_cache: jax.Array, v_cache: jax.Array,
                              tokens: jax.Array, pos: jax.Array):
        b = tokens.shape[0]
        x = params["embed"][tokens] + params["pos"][pos]
        visible = jnp.arange(c.max_len) <= pos
        zero = jnp.zeros((), jnp.int32)
        for layer, p in enumerate(params["layers"]):
            q, k, v = jnp.split(_nn.layernorm(x, p["ln1"]) @ p["wqkv"], 3, axis=-1)
            q, k, v = (t.reshape(b, c.n_heads, c.head_dim) for t in (q, k, v))
            # Cache layout (layer, batch, head, position, head_dim); write one position.
            start = (jnp.int32(layer), zero, zero, pos, zero)
            k_cache = lax.dynamic_update_slice(k_cache, k[None, :, :, None, :].astype(CACHE_DTYPE), start)
            v_cache = lax.dynamic_update_slice(v_cache, v[None, :, :, None, :].astype(CACHE_DTYPE), start)
            keys = k_cache[layer].astype(jnp.float32)
            values = v_cache[layer].astype(jnp.float32)
            scores = jnp.einsum("bhd,bhsd->bhs", q, keys) / math.sqrt(c.head_dim)
            weights = jax.nn.softmax(jnp.where(visible, scores, -1e9), axis=-1)
            attended = jnp.einsum("bhs,bhsd->bhd", weights, values).reshape(b, c.d_model)
            x = x + attended @ p["wo"]
            x = x + _nn.dense(jax.nn.gelu(_nn.dense(_nn.layernorm(x, p["ln2"]), p["ff1"])), p["ff2"])
        logits = _nn.layernorm(x, params["ln_f"]) @ params["head"]
        return logits, k_cache, v_cache

    cache = jax.ShapeDtypeStruct((c.n_layers, c.batch, c.n_heads, c.max_len, c.head_dim), CACHE_DTYPE)
    return attention_decode_step, (_param_specs(c), cache, cache, _nn.i32(c.batch), _nn.i32())
