"""Embedding-heavy recommender (DLRM-like): one train step with sparse table updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from workloads.zoo import _nn

DESCRIPTION = (
    "DLRM-like recommender train step: bag-of-ids gathers from several embedding tables "
    "(int32 ids, sum pooling), bottom MLP on dense features, pairwise dot-product "
    "interaction, top MLP, logistic loss; MLPs by SGD, tables by sparse scatter-add of row grads"
)

LEARNING_RATE = 0.05


@dataclass(frozen=True)
class Config:
    """Table, feature and batch shape of one size."""

    tables: int
    rows: int
    dim: int
    ids_per_bag: int
    dense_features: int
    bottom: tuple[int, ...]
    top: tuple[int, ...]
    batch: int


SIZES = {
    "s": Config(tables=4, rows=4096, dim=16, ids_per_bag=4, dense_features=13,
                bottom=(64,), top=(64,), batch=64),
    "m": Config(tables=8, rows=32768, dim=32, ids_per_bag=8, dense_features=13,
                bottom=(256, 128), top=(256, 128), batch=256),
}


def _interact(vectors: list[jax.Array]) -> jax.Array:
    """Dot products of every distinct pair of feature vectors, flattened per example."""
    stacked = jnp.stack(vectors, axis=1)  # (batch, features, dim)
    dots = jnp.einsum("bfd,bgd->bfg", stacked, stacked)
    rows, cols = np.triu_indices(len(vectors), k=1)
    return dots[:, rows, cols]


def _loss(mlps: dict, rows: list[jax.Array], dense: jax.Array, labels: jax.Array) -> jax.Array:
    bottom = jax.nn.relu(_nn.mlp(dense, mlps["bottom"]))
    pooled = [jnp.sum(r, axis=1) for r in rows]
    features = jnp.concatenate([bottom, _interact([bottom] + pooled)], axis=-1)
    logits = _nn.mlp(features, mlps["top"])[:, 0]
    # Numerically stable binary cross-entropy with logits.
    losses = jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    return jnp.mean(losses)


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def recommender_train_step(tables: list, mlps: dict, dense: jax.Array, ids: list, labels: jax.Array):
        rows = [t[i] for t, i in zip(tables, ids)]
        # Differentiate w.r.t. the gathered rows, not whole tables, so the table update
        # touches only the looked-up rows (a scatter-add), as sparse embedding trainers do.
        loss, (g_mlps, g_rows) = jax.value_and_grad(_loss, argnums=(0, 1))(mlps, rows, dense, labels)
        tables = [
            t.at[i.reshape(-1)].add(-LEARNING_RATE * g.reshape(-1, c.dim))
            for t, i, g in zip(tables, ids, g_rows)
        ]
        return tables, _nn.sgd(mlps, g_mlps, LEARNING_RATE), loss

    n_interactions = (c.tables + 1) * c.tables // 2
    mlps = {
        "bottom": _nn.mlp_specs((c.dense_features,) + c.bottom + (c.dim,)),
        "top": _nn.mlp_specs((c.dim + n_interactions,) + c.top + (1,)),
    }
    tables = [_nn.f32(c.rows, c.dim)] * c.tables
    ids = [_nn.i32(c.batch, c.ids_per_bag)] * c.tables
    return recommender_train_step, (tables, mlps, _nn.f32(c.batch, c.dense_features), ids, _nn.f32(c.batch))
