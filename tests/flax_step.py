"""A Flax train step of the kind fleets run: convolutions, self-attention, AdamW (optax), its
parameters and optimizer state arguments of the step. Needs flax and optax (the `dev` extra)."""

from __future__ import annotations

from typing import Any, Callable


def build(image: int = 16, batch: int = 8, width: int = 32) -> tuple[Callable, tuple]:
    """`(train_step, abstract_args)`: one AdamW step of a conv stem and a pre-LN attention block
    over its patches, classifying `image`-sized RGB images into 10 classes."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, t: Any) -> Any:
            t = t + nn.MultiHeadDotProductAttention(num_heads=4)(nn.LayerNorm()(t))
            return t + nn.Dense(width)(nn.gelu(nn.Dense(2 * width)(nn.LayerNorm()(t))))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Conv(width // 2, (3, 3))(x))
            x = nn.relu(nn.Conv(width, (3, 3), strides=(2, 2))(x))
            b, h, w, c = x.shape
            t = Block()(x.reshape(b, h * w, c))
            return nn.Dense(10)(nn.LayerNorm()(t.mean(axis=1)))

    model, optimizer = Net(), optax.adamw(1e-3, weight_decay=1e-4)
    images, labels = jnp.zeros((batch, image, image, 3)), jnp.zeros((batch,), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), images)

    def flax_train_step(params: Any, opt_state: Any, images: Any, labels: Any) -> Any:
        def loss(p: Any) -> Any:
            logits = model.apply(p, images)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                            (params, optimizer.init(params), images, labels))
    return flax_train_step, abstract
