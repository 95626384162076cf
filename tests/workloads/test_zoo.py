"""Tests for the workload zoo and its XLA dumper."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest

from workloads import zoo
from workloads.zoo.dump import dump_workloads

WORKLOADS = zoo.all_workloads()
SMALL = [wl for wl in WORKLOADS if wl.size == "s"]
MEDIUM = [wl for wl in WORKLOADS if wl.size == "m"]


def _concrete(spec: jax.ShapeDtypeStruct, rng: np.random.Generator) -> np.ndarray:
    """A random array for ``spec``; ints stay in [0, 4) so every id/index/position is valid."""
    if np.issubdtype(spec.dtype, np.integer):
        return rng.integers(0, 4, spec.shape).astype(spec.dtype)
    return (rng.standard_normal(spec.shape) * 0.1).astype(spec.dtype)


def test_registry_names_and_coverage() -> None:
    names = [wl.name for wl in WORKLOADS]
    assert len(names) == len(set(names))
    for wl in WORKLOADS:
        assert wl.name == f"{wl.family}-{wl.size}"
        assert wl.size in ("s", "m")
        assert wl.description
    sizes_per_family = Counter(wl.family for wl in WORKLOADS)
    assert len(sizes_per_family) >= 8
    assert all(n == 2 for n in sizes_per_family.values())
    assert names == [wl.name for wl in zoo.all_workloads()]  # deterministic order


def test_get() -> None:
    assert zoo.get("mlp-s").family == "mlp"
    with pytest.raises(KeyError, match="valid names: .*mlp-s"):
        zoo.get("no-such-workload")


@pytest.mark.parametrize("wl", SMALL, ids=lambda wl: wl.name)
@pytest.mark.xla
def test_small_workload_compiles_and_runs_finite(wl: zoo.Workload) -> None:
    _, args = wl.build()
    assert all(isinstance(a, jax.ShapeDtypeStruct) for a in jax.tree.leaves(args))
    compiled = wl.lower().compile()
    rng = np.random.default_rng(0)
    out = compiled(*jax.tree.map(lambda s: _concrete(s, rng), args))
    for leaf in jax.tree.leaves(out):
        assert np.all(np.isfinite(np.asarray(leaf, dtype=np.float32))), wl.name


@pytest.mark.parametrize("wl", MEDIUM, ids=lambda wl: wl.name)
def test_medium_workload_lowers(wl: zoo.Workload) -> None:
    assert "ENTRY" in wl.lower().as_text(dialect="hlo")


def _module_ids(d: Path) -> set[str]:
    return {m.group(1) for f in d.iterdir() if (m := re.match(r"module_(\d+)\.", f.name))}


@pytest.mark.xla
def test_dump_workloads(tmp_path: Path) -> None:
    names = ["mlp-s", "gnn-s"]
    dirs = dump_workloads(tmp_path, names)
    assert dirs == [tmp_path / n for n in names]
    first_ids = {}
    for name, d in zip(names, dirs):
        fn, _ = zoo.get(name).build()
        files = [f.name for f in d.iterdir()]
        assert any(f.endswith(".before_optimizations.txt") for f in files)
        assert any(f.endswith("after_optimizations.txt") for f in files)
        # Only the workload's own module: one module id, all files named after its jit.
        first_ids[name] = _module_ids(d)
        assert len(first_ids[name]) == 1
        assert all(f".jit_{fn.__name__}." in f for f in files), files
    # A rerun recompiles into place and leaves no temporary directories behind.
    dump_workloads(tmp_path, names[:1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert _module_ids(tmp_path / names[0]) != first_ids[names[0]]
