"""Two-tower retrieval model: one train step over ragged id bags, hash embeddings and sparse
table updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "two-tower retrieval train step: user tower over a user-id lookup and ragged bags "
    "(flat int32 ids plus bag ids) of watched items and of query n-grams, mean-pooled with "
    "jax.ops.segment_sum; n-grams by hash embeddings (each n-gram's importance-weighted sum "
    "of its hashed buckets' rows in a shared pool); item tower over item id and a multi-hot "
    "category bag; the item table shared by both towers; in-batch softmax over normalized "
    "tower outputs; tables by row-wise Adagrad (scatter-adds into tables and accumulators), "
    "MLPs by Adam"
)

TABLE_LEARNING_RATE = 0.05
ADAGRAD_EPS = 1e-8
TEMPERATURE = 0.05


@dataclass(frozen=True)
class Config:
    """Vocabulary, bag and width shape of one size."""

    users: int
    items: int
    ngrams: int  # the query n-gram vocabulary, each n-gram with its own importance weights
    buckets: int  # rows of the pool the n-grams hash into
    hashes: int  # buckets per n-gram
    categories: int
    dim: int
    history_per_user: int  # items in a user's watch history, on average over the batch
    query_ngrams: int  # n-grams per query, on average over the batch
    categories_per_item: int
    tower: tuple[int, ...]  # hidden widths of each tower's MLP
    batch: int


SIZES = {
    "s": Config(users=8192, items=16384, ngrams=65536, buckets=4096, hashes=2, categories=256,
                dim=32, history_per_user=16, query_ngrams=24, categories_per_item=4,
                tower=(128,), batch=128),
    "m": Config(users=65536, items=131072, ngrams=1 << 19, buckets=32768, hashes=2,
                categories=1024, dim=64, history_per_user=32, query_ngrams=24,
                categories_per_item=8, tower=(256, 128), batch=512),
}


def _mean_bags(rows: jax.Array, bags: jax.Array, n_bags: int) -> jax.Array:
    """Mean of the rows of each bag; an empty bag pools to zero."""
    summed = jax.ops.segment_sum(rows, bags, num_segments=n_bags)
    counts = jax.ops.segment_sum(jnp.ones_like(bags, jnp.float32), bags, num_segments=n_bags)
    return summed / jnp.maximum(counts, 1.0)[:, None]


def _hash_embed(vectors: jax.Array, importance: jax.Array) -> jax.Array:
    """Hash embeddings (Svenstrup et al., 2017): each id's bucket rows (ids, hashes, dim)
    weighted by its importance weights (ids, hashes) and summed, so a huge vocabulary shares
    a small pool of rows."""
    return jnp.sum(vectors * importance[..., None], axis=-2)


def _tower(features: list[jax.Array], layers: list[dict]) -> jax.Array:
    """MLP over the concatenated features, L2-normalized so logits are cosine similarities."""
    out = _nn.mlp(jnp.concatenate(features, axis=-1), layers)
    return out * jax.lax.rsqrt(jnp.sum(out * out, axis=-1, keepdims=True) + 1e-6)


def _loss(mlps: dict, rows: dict, bags: dict) -> jax.Array:
    batch = rows["user"].shape[0]
    user = _tower([rows["user"],
                   _mean_bags(rows["history"], bags["history"], batch),
                   _mean_bags(_hash_embed(rows["ngram_vectors"], rows["ngram_importance"]),
                              bags["query"], batch)], mlps["user"])
    item = _tower([rows["item"], jnp.mean(rows["category"], axis=1)], mlps["item"])
    # In-batch softmax: each user's positive is its own item, the batch's other items negatives.
    logits = user @ item.T / TEMPERATURE
    return _nn.cross_entropy(logits, jnp.arange(batch))


def _rowwise_adagrad(table: jax.Array, acc: jax.Array, ids: jax.Array,
                     grads: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sparse row-wise Adagrad (one accumulator per row), as large embedding trainers use.

    Only the looked-up rows change; duplicate ids each add their own step, like a scatter-add.
    """
    acc = acc.at[ids].add(jnp.mean(grads * grads, axis=-1))
    # An accumulator is never negative in real training; the clamp keeps arbitrary (e.g.
    # randomly generated test) accumulators from turning the update into NaN.
    scale = TABLE_LEARNING_RATE * jax.lax.rsqrt(jnp.maximum(acc[ids], 0.0) + ADAGRAD_EPS)
    return table.at[ids].add(-scale[:, None] * grads), acc


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(train_step, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def two_tower_train_step(tables: dict, accumulators: dict, mlps: dict, opt_state: dict,
                             ids: dict, bags: dict):
        rows = {
            "user": tables["user"][ids["user"]],
            "history": tables["item"][ids["history"]],
            "ngram_vectors": tables["ngram_pool"][ids["ngram_buckets"]],
            "ngram_importance": tables["ngram_importance"][ids["ngram"]],
            "item": tables["item"][ids["item"]],
            "category": tables["category"][ids["category"]],
        }
        # Differentiate w.r.t. the gathered rows, not whole tables, so the update touches
        # only the looked-up rows.
        loss, (g_mlps, g_rows) = jax.value_and_grad(_loss, argnums=(0, 1))(mlps, rows, bags)
        # Both towers read the item table: one update over both towers' look-ups.
        updates = {
            "user": (ids["user"], g_rows["user"]),
            "item": (jnp.concatenate([ids["item"], ids["history"]]),
                     jnp.concatenate([g_rows["item"], g_rows["history"]])),
            "ngram_pool": (ids["ngram_buckets"].reshape(-1),
                           g_rows["ngram_vectors"].reshape(-1, c.dim)),
            "ngram_importance": (ids["ngram"], g_rows["ngram_importance"]),
            "category": (ids["category"].reshape(-1), g_rows["category"].reshape(-1, c.dim)),
        }
        new = {name: _rowwise_adagrad(tables[name], accumulators[name], *updates[name])
               for name in tables}
        mlps, opt_state = _nn.adam(mlps, g_mlps, opt_state)
        return ({n: t for n, (t, _) in new.items()}, {n: a for n, (_, a) in new.items()},
                mlps, opt_state, loss)

    shapes = {"user": (c.users, c.dim), "item": (c.items, c.dim), "category": (c.categories, c.dim),
              "ngram_pool": (c.buckets, c.dim), "ngram_importance": (c.ngrams, c.hashes)}
    tables = {name: _nn.f32(*shape) for name, shape in shapes.items()}
    accumulators = {name: _nn.f32(rows) for name, (rows, _) in shapes.items()}
    mlps = {
        "user": _nn.mlp_specs((3 * c.dim,) + c.tower + (c.dim,)),
        "item": _nn.mlp_specs((2 * c.dim,) + c.tower + (c.dim,)),
    }
    n_history, n_query = c.batch * c.history_per_user, c.batch * c.query_ngrams
    # The input pipeline hashes the n-grams, as feature hashing usually happens there.
    ids = {"user": _nn.i32(c.batch), "history": _nn.i32(n_history), "ngram": _nn.i32(n_query),
           "ngram_buckets": _nn.i32(n_query, c.hashes), "item": _nn.i32(c.batch),
           "category": _nn.i32(c.batch, c.categories_per_item)}
    bags = {"history": _nn.i32(n_history), "query": _nn.i32(n_query)}
    return two_tower_train_step, (tables, accumulators, mlps, _nn.adam_state_specs(mlps), ids, bags)
