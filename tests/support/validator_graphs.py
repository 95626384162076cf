"""Tiny graphs ingested into a home as the fleet hands them over, and the tuner's store entries
for them, published: what the validator re-measures for real (the validator's tests, the
cluster's)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pyarrow as pa

from delivery.store_writer import Store
from hlo.environment import current_environment, store_key
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_lowered
from ingest.symbols import ingest_symbols
from storage.store_schema import ENTRIES

UTC = datetime.UTC
NO_YNN_REDUCE = {"xla_cpu_experimental_ynn_fusion_type": ["INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION"]}
# Slower than the defaults on any CPU, whichever library its reductions go to by default: they
# are compiled by XLA itself, without LLVM's optimizations (NO_YNN_REDUCE alone is slower on
# row_sq_sum only where YNNPACK's reductions beat XLA's, as on the CPUs it was measured on).
SLOWER = {**NO_YNN_REDUCE, "xla_backend_optimization_level": 0}

# Tiny graphs where routing reductions away from YNN matters, measured on jaxlib 0.10.2 and
# 0.10.0 on this machine (median speedup of NO_YNN_REDUCE):
GRAPHS = {
    "narrow_sum": (lambda x: x.sum(-1), (16384, 3)),  # 7x on 0.10.2, 4-5x on 0.10.0
    "narrow_sum_b": (lambda x: x.sum(-1), (8192, 3)),  # 5-7x on 0.10.2, same program on 0.10.0
    "column_sum": (lambda x: x.sum(0), (8192, 8)),  # 4-5x on 0.10.2
    "row_sq_sum": (lambda x: (x * x).sum(-1), (256, 1024)),  # 0.6x on 0.10.2: slower
}


def ingest_graph(home: Path, name: str, compiler_version: str | None = None) -> tuple[str, str]:
    """Ingest graph `name` as the fleet hands it over (a module file beside its environment);
    returns (fingerprint, env_key)."""
    fn, shape = GRAPHS[name]
    module = from_lowered(jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, jnp.float32)))
    env = current_environment()
    if compiler_version:
        env = dataclasses.replace(env, compiler_version=compiler_version)
    directory = home.parent / f"symbols-{name}-{env.compiler_version}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.hlo").write_text(module.to_text())
    (directory / "fdo-environment.json").write_text(json.dumps(env.to_json()))
    ingest_symbols([directory], home)
    return graph_fingerprint(module), env.key()


def entry(fingerprint: str, env_key: str, config: dict, days_old: float = 3, expires_in_days: float = 27,
          compiler_version: str | None = None, source: str = "task", relaxed: dict | None = None) -> dict:
    """A tuner's store entry measured `days_old` ago that expires `expires_in_days` from now."""
    now = datetime.datetime.now(UTC)
    measured = now - datetime.timedelta(days=days_old)
    return {"key": store_key(fingerprint, env_key), "fingerprint": fingerprint, "env_key": env_key,
            "kind": "graph", "speedup": 2.0, "expires_at": now + datetime.timedelta(days=expires_in_days),
            "provenance": "tuner", "config": json.dumps(config, sort_keys=True), "ci_low": 1.8,
            "ci_high": 2.2, "compiler_version": compiler_version or current_environment().compiler_version,
            "measured_at": measured, "source": source,
            "holdout_share": None, "relaxed_config": None if relaxed is None else json.dumps(relaxed, sort_keys=True),
            "relaxed_speedup": None if relaxed is None else 2.5, "autotune_results": None}


def publish(home: Path, rows: list[dict]) -> int:
    store = Store(home)
    return store.publish(pa.Table.from_pylist(rows, ENTRIES), store.current(), "test entries")
