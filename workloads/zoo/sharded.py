"""Sharded zoo workloads: train steps partitioned over a mesh of devices, as a fleet's costliest
jobs run them.

Each is a zoo family's train step with its arguments sharded over a named mesh (SPMD
partitioning, Shardy as JAX uses it by default): a data-parallel MLP (the batch split across
four devices, the parameters replicated), an n-body ensemble split by system across four (no
collective: each device steps its own systems), and a transformer data- and tensor-parallel on
4 and on 8 devices (the batch across `data`, the attention and feed-forward weights across `model`,
Megatron's split: QKV and the first feed-forward layer by their outputs, the attention output
and the second layer by their inputs; the optimizer state as its parameters). They lower against
an abstract mesh, so listing and lowering them needs no device; compiling and running them whole
takes as many devices as the mesh has (`execution.sharded`; on a CPU, host devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import jax

from hlo.environment import Partitioning
from workloads.zoo import mlp, nbody, transformer

DATA, MODEL = "data", "model"
# Which axis of a transformer weight `model` splits (Megatron): by output or by input.
_BY_OUTPUT = frozenset({"wqkv", "ff1"})
_BY_INPUT = frozenset({"wo", "ff2"})


@dataclass(frozen=True)
class ShardedSpec:
    """One sharded workload: the family's step at a config, on a mesh (axis, size), with a rule
    giving each argument leaf its PartitionSpec from its key path and shape."""

    name: str
    family: str
    description: str
    mesh: tuple[tuple[str, int], ...]
    step: Callable[[], tuple[Callable, tuple]]
    rule: Callable[[tuple[str, ...], tuple[int, ...]], tuple[str | None, ...]]

    @property
    def devices(self) -> int:
        """The devices the mesh has."""
        return math.prod(size for _, size in self.mesh)

    def partitioning(self) -> Partitioning:
        """How a job compiles the step: one replica, a partition per device, SPMD with JAX's
        partitioner, one process."""
        return Partitioning(replicas=1, partitions=self.devices, spmd=True,
                            shardy=bool(jax.config.values["jax_use_shardy_partitioner"]), mesh=self.mesh,
                            processes=1, local_devices=self.devices)

    def build(self) -> tuple[Callable, tuple]:
        """(step, abstract arguments), each argument sharded over the abstract mesh."""
        from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

        fn, args = self.step()
        mesh = AbstractMesh(tuple(size for _, size in self.mesh), tuple(n for n, _ in self.mesh))

        def sharded(path: tuple[Any, ...], leaf: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
            spec = self.rule(_names(path), tuple(leaf.shape))
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                        sharding=NamedSharding(mesh, PartitionSpec(*spec)))

        return fn, jax.tree_util.tree_map_with_path(sharded, args)

    def lower(self) -> jax.stages.Lowered:
        """Trace and lower the step for its sharded abstract arguments, for this process's
        platform."""
        fn, args = self.build()
        return jax.jit(fn).trace(*args).lower(lowering_platforms=(jax.default_backend(),))


def _names(path: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(str(getattr(key, "key", getattr(key, "idx", key))) for key in path)


def _data_parallel(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[str | None, ...]:
    """The batch (an argument after the parameters and optimizer state) split across `data`;
    every parameter replicated."""
    return (DATA,) + (None,) * (len(shape) - 1) if path and path[0] in ("2", "3") else ()


def _by_system(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[str | None, ...]:
    """Every argument (positions, velocities, masses) split by system across `data`."""
    return (DATA,) + (None,) * (len(shape) - 1)


def _transformer_parallel(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[str | None, ...]:
    """Tokens split across `data`; attention and feed-forward weights across `model`
    (`_BY_OUTPUT`, `_BY_INPUT`), in the parameters and in Adam's moments alike."""
    if path and path[0] == "2":  # the tokens
        return (DATA, None)
    owner = next((name for name in reversed(path) if name in _BY_OUTPUT | _BY_INPUT), None)
    if owner is None or not shape:
        return ()
    if owner in _BY_OUTPUT:
        return (None,) * (len(shape) - 1) + (MODEL,)
    return (MODEL,) + (None,) * (len(shape) - 1) if len(shape) == 2 else ()


_MLP = mlp.Config(widths=(784, 1024, 512, 10), batch=512)
_NBODY = nbody.Config(batch=8, bodies=192, steps=4)
_TRANSFORMER = transformer.Config(vocab=1024, d_model=128, n_heads=4, n_layers=2, d_ff=512,
                                  seq=64, batch=8)

_SPECS = (
    ShardedSpec("mlp-dp4", "mlp", f"{mlp.DESCRIPTION}; widths {_MLP.widths}, batch "
                f"{_MLP.batch} data-parallel on 4 devices", ((DATA, 4),),
                lambda: mlp.build(_MLP), _data_parallel),
    ShardedSpec("nbody-dp4", "nbody", f"{nbody.DESCRIPTION}; {_NBODY.batch} systems of "
                f"{_NBODY.bodies} bodies split across 4 devices", ((DATA, 4),),
                lambda: nbody.build(_NBODY), _by_system),
    ShardedSpec("transformer-tp4", "transformer", f"{transformer.DESCRIPTION}; d_model 128, "
                "batch 8, data- and tensor-parallel on a 2x2 mesh", ((DATA, 2), (MODEL, 2)),
                lambda: transformer.build(_TRANSFORMER), _transformer_parallel),
    ShardedSpec("transformer-tp8", "transformer", f"{transformer.DESCRIPTION}; d_model 128, "
                "batch 8, data- and tensor-parallel on a 4x2 mesh", ((DATA, 4), (MODEL, 2)),
                lambda: transformer.build(_TRANSFORMER), _transformer_parallel),
)
SHARDED = {spec.name: spec for spec in _SPECS}


def sharded_workloads() -> list[ShardedSpec]:
    """The sharded workloads, in their declared order."""
    return list(_SPECS)


def get_sharded(name: str) -> ShardedSpec:
    """The sharded workload called `name`; KeyError listing the valid names otherwise."""
    try:
        return SHARDED[name]
    except KeyError:
        raise KeyError(f"unknown sharded workload {name!r}; valid names: {', '.join(SHARDED)}") from None
