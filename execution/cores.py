"""Which cores a search compiles on and which it measures on (CATWILD's compile and execute pools).

A search compiles candidates in a pool of worker processes and measures them in one execute
worker. On a CPU target both would compete for the same cores, and a compile running beside a
measurement slows it by a varying amount: noise, or worse, bias. So the cores this process may
use are split in two disjoint sets, each worker pinned to its set (`os.sched_setaffinity`, which
XLA's CPU client reads when it sizes its thread pool). With a single core there is nothing to
split: compiles and measurements then take turns, never overlapping.

XLA's CPU compiler partitions work for the thread count of its client, which is the number of
cores the process could use when its backend started (mlp-s compiles to other machine code on
two cores than on one). A compile worker therefore starts its backend on the execute cores, then
moves to its own: it compiles for the parallelism the measurement runs with
(`start_backend_on`).

That parallelism is the one the search tunes for, and a job runs with all of its machine's
cores: a config's gain can depend on it (docs/bench_search_quality.md: a 1.17x move measured
with two threads is no gain with one). The split costs the measurement a quarter of the cores,
so it is made only on a machine of at least `MIN_CORES_TO_SPLIT`; on a smaller one, compiles
and measurements take turns on every core.

On a GPU the split is never made: the device, not the cores, is what a compile would share.
XLA:GPU's compile autotunes GEMMs and fusions by timing candidate kernels on the GPU, so a compile
beside a measurement would slow the measured program and time the autotuner's candidates on a
busy GPU (picking other kernels than the job's compile on a quiet one would). Compiles and
measurements take turns on the one GPU their workers own (execution.worker).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Below this many cores, a quarter of them for compiles changes the measured program too much.
MIN_CORES_TO_SPLIT = 8


@dataclass(frozen=True)
class CorePlan:
    """The cores of the execute worker and of the compile pool, and the pool's size."""

    execute: frozenset[int]
    compile: frozenset[int]
    compile_workers: int

    @property
    def overlapping(self) -> bool:
        """Whether compiles and measurements share cores (then they must take turns)."""
        return bool(self.execute & self.compile)


def available_cores() -> frozenset[int]:
    """The cores this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def plan_cores(compile_workers: int | None = None, cores: frozenset[int] | None = None,
               platform: str | None = None) -> CorePlan:
    """Split `cores` (default: the available ones): a quarter, at least one, for compiles,
    the rest for measurements; under `MIN_CORES_TO_SPLIT` cores, or on a `platform` other than
    the CPU (default: JAX's default backend's), all of them for both, taking turns.
    `compile_workers` defaults to one per compile core."""
    ordered = sorted(cores if cores is not None else available_cores())
    if not ordered:
        raise ValueError("no cores to run on")
    if len(ordered) < MIN_CORES_TO_SPLIT or (platform or _default_platform()) != "cpu":
        return CorePlan(frozenset(ordered), frozenset(ordered), compile_workers or 1)
    n_compile = max(1, len(ordered) // 4)
    compile_cores = frozenset(ordered[-n_compile:])
    return CorePlan(frozenset(ordered[:-n_compile]), compile_cores,
                    compile_workers or len(compile_cores))


def _default_platform() -> str:
    """The platform of JAX's default backend in this process ("cpu", "gpu", ...)."""
    import jax

    return jax.default_backend()


def start_backend_on(cores: frozenset[int]) -> None:
    """Start this process's JAX backend as if it ran on `cores` (see the module docstring)."""
    pin(cores)
    import jax

    jax.devices()


def pin(cores: frozenset[int] | None) -> None:
    """Run this process on `cores` from now on (None: leave it as it is)."""
    if cores:
        os.sched_setaffinity(0, cores)


def parse_cores(text: str) -> frozenset[int]:
    """Cores written as Linux lists them ("0-3,8"); ValueError naming the problem otherwise,
    or if one is not available to this process."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"cores {text!r}: {part!r} is not a core number or range") from None
        if first < 0 or last < first:
            raise ValueError(f"cores {text!r}: {part!r} is not a range of core numbers")
        cores.update(range(first, last + 1))
    if not cores:
        raise ValueError(f"cores {text!r}: no core named")
    missing = cores - available_cores()
    if missing:
        raise ValueError(f"cores {text!r}: {sorted(missing)} not available to this process "
                         f"(available: {sorted(available_cores())})")
    return frozenset(cores)
