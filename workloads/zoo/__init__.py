"""The workload zoo: real JAX programs of the kinds an ML fleet runs, each in two sizes.

Each family module (``transformer``, ``mlp``, ...) exposes ``DESCRIPTION``, a ``SIZES``
table and ``build(size) -> (fn, args)``, where ``args`` are ``jax.ShapeDtypeStruct``
pytrees. Parameters, optimizer state and integer inputs (ids, labels, positions) are
all arguments of ``fn``, so lowering needs no concrete data and the HLO carries no
large constants.

Three families have a third size, ``g``, where a GPU is busy (milliseconds a step on an H100,
where ``s`` and ``m`` take microseconds): a transformer train step, a CNN, and a KV-cache decode
step with library and fusion headroom. They are ``gpu_workloads()``, apart from the zoo's
listing (``all_workloads``), which the CPU's tuner, benchmarks and demo run through.

Entry points: ``all_workloads``, ``gpu_workloads``, ``get`` (a workload by name) and ``variant``
(one at a scaled batch). Beside the families: ``sharded`` (train steps partitioned over a mesh:
``sharded_workloads``, ``get_sharded``), ``dump`` (workloads compiled with XLA's own dumper,
a directory each: ``dump_workloads``) and ``_nn`` (the building blocks the families share).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import jax

from workloads.zoo import attention_kv, cnn, gnn, mlp, nbody, recommender, rnn, transformer, two_tower, unet, vit

# Registry order is the public, deterministic order of all_workloads().
_FAMILIES = {
    "transformer": transformer,
    "mlp": mlp,
    "cnn": cnn,
    "rnn": rnn,
    "gnn": gnn,
    "recommender": recommender,
    "attention_kv": attention_kv,
    "unet": unet,
    "nbody": nbody,
    "two_tower": two_tower,
    "vit": vit,
}
SIZES = ("s", "m")
GPU_SIZE = "g"


@dataclass(frozen=True)
class Workload:
    """One zoo program at one size; ``build`` is lazy so listing the zoo is cheap."""

    name: str
    family: str
    size: str
    description: str
    build: Callable[[], tuple[Callable, tuple]]

    def lower(self) -> jax.stages.Lowered:
        """Trace and lower the program for its abstract arguments."""
        fn, args = self.build()
        return jax.jit(fn).lower(*args)


def _make_registry(sizes: tuple[str, ...]) -> dict[str, Workload]:
    registry = {}
    for family, module in _FAMILIES.items():
        for size in sizes:
            if size not in module.SIZES:
                continue
            name = f"{family}-{size}"
            registry[name] = Workload(
                name=name,
                family=family,
                size=size,
                description=f"{module.DESCRIPTION}; {module.SIZES[size]}",
                build=functools.partial(module.build, size),
            )
    return registry


_REGISTRY = _make_registry(SIZES)
_GPU_REGISTRY = _make_registry((GPU_SIZE,))


def all_workloads() -> list[Workload]:
    """All workloads, families in registry order, "s" before "m"."""
    return list(_REGISTRY.values())


def gpu_workloads() -> list[Workload]:
    """The GPU-sized workloads (size "g"), families in registry order: a transformer train
    step, a CNN train step, a KV-cache decode step."""
    return list(_GPU_REGISTRY.values())


def variant(name: str, scale: int) -> Workload:
    """Workload `name` with its batch (for the GNN: nodes and edges) multiplied by `scale`.

    A fleet runs the same program at many shapes; each shape is its own graph fingerprint.
    """
    base = get(name)
    if scale == 1:
        return base
    module = _FAMILIES[base.family]
    config = module.SIZES[base.size]
    if hasattr(config, "batch"):
        config = dataclasses.replace(config, batch=config.batch * scale)
    else:
        config = dataclasses.replace(config, nodes=config.nodes * scale, edges=config.edges * scale)
    return Workload(name=f"{name}-x{scale}", family=base.family, size=base.size,
                    description=f"{base.description}; scaled x{scale}",
                    build=functools.partial(module.build, config))


def get(name: str) -> Workload:
    """The workload called ``name``; ``KeyError`` listing the valid names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; valid names: {', '.join(_REGISTRY)}") from None
