"""Gravitational N-body simulation: a few leapfrog steps of an ensemble of independent systems."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from workloads.zoo import _nn

DESCRIPTION = (
    "N-body simulation: all-pairs displacements and softened distances, Plummer-softened "
    "gravity summed over every other body (reductions), kick-drift-kick leapfrog in a "
    "lax.fori_loop, then the ensemble's kinetic and potential energy"
)

TIME_STEP = 1e-3
# Plummer softening length: keeps close encounters (and arbitrary benchmark inputs) finite.
SOFTENING = 0.05


@dataclass(frozen=True)
class Config:
    """Ensemble shape and step count of one size."""

    batch: int  # independent systems, simulated side by side
    bodies: int
    steps: int


SIZES = {
    "s": Config(batch=2, bodies=128, steps=8),
    "m": Config(batch=4, bodies=512, steps=8),
}


def _pair_terms(pos: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Displacements ``x_j - x_i`` (batch, i, j, 3) and softened inverse distances (batch, i, j)."""
    d = pos[:, None, :, :] - pos[:, :, None, :]
    return d, jax.lax.rsqrt(jnp.sum(d * d, axis=-1) + SOFTENING**2)


def _accelerations(pos: jax.Array, mass: jax.Array) -> jax.Array:
    """Each body's acceleration, summed over all bodies (a body exerts none on itself: d = 0)."""
    d, inv_r = _pair_terms(pos)
    return jnp.sum(d * (mass[:, None, :] * inv_r**3)[..., None], axis=2)


def _energy(pos: jax.Array, vel: jax.Array, mass: jax.Array) -> jax.Array:
    """Total kinetic plus potential energy of each system, the usual drift diagnostic."""
    kinetic = 0.5 * jnp.sum(mass * jnp.sum(vel * vel, axis=-1), axis=-1)
    _, inv_r = _pair_terms(pos)
    pair = mass[:, :, None] * mass[:, None, :] * inv_r
    # Each pair is counted twice, and the diagonal holds a body's softened self-term.
    self_terms = jnp.sum(mass * mass, axis=-1) / SOFTENING
    potential = -0.5 * (jnp.sum(pair, axis=(1, 2)) - self_terms)
    return kinetic + potential


def build(size: "str | Config") -> tuple[Callable, tuple]:
    """Return ``(simulate, abstract_args)`` for the given size."""
    c = SIZES[size] if isinstance(size, str) else size

    def nbody_simulate(pos: jax.Array, vel: jax.Array, mass: jax.Array):
        def leapfrog(_, state):
            pos, vel, acc = state
            vel = vel + 0.5 * TIME_STEP * acc
            pos = pos + TIME_STEP * vel
            acc = _accelerations(pos, mass)
            return pos, vel + 0.5 * TIME_STEP * acc, acc

        pos, vel, _ = jax.lax.fori_loop(0, c.steps, leapfrog, (pos, vel, _accelerations(pos, mass)))
        return pos, vel, _energy(pos, vel, mass)

    return nbody_simulate, (_nn.f32(c.batch, c.bodies, 3), _nn.f32(c.batch, c.bodies, 3),
                            _nn.f32(c.batch, c.bodies))
