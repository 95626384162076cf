"""The validator across two real compilers: what it decides and what a decision costs.

Each repetition builds a fresh home whose store holds one entry per graph below, tuned (by
assumption) on this interpreter's jaxlib, then validates it twice: under a second jaxlib
installed in its own venv (cached; `--old`), where every entry is a re-key candidate, and
under this interpreter's jaxlib, where every entry is re-validated. It prints, per entry, the
median measured speedup under each compiler and the decisions taken, then the seconds per
measured entry.

    python benchmarks/bench_validate.py [--reps 3] [--old 0.10.0] [--max-seconds 2] [--workers 3] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import jax
import jax.numpy as jnp
import pyarrow as pa
from provenance import describe

from delivery.store_writer import Store
from hlo.environment import current_environment, store_key
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_lowered
from ingest.symbols import ingest_symbols
from storage.store_schema import ENTRIES
from validator.toolchains import Registry, build_venv, cached_venv_dir
from validator.validate import MEASURE_SETTINGS, ValidateSettings, validate
from workloads import zoo

NO_YNN_REDUCE = {"xla_cpu_experimental_ynn_fusion_type": ["INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION"]}
f32 = jax.ShapeDtypeStruct
CASES = [  # (graph, lowered program, config label, config)
    ("sum(16384x3, -1)", lambda: jax.jit(lambda x: x.sum(-1)).lower(f32((16384, 3), jnp.float32)),
     "YNN without REDUCE", NO_YNN_REDUCE),
    ("sum(8192x3, -1)", lambda: jax.jit(lambda x: x.sum(-1)).lower(f32((8192, 3), jnp.float32)),
     "YNN without REDUCE", NO_YNN_REDUCE),
    ("sum(8192x8, 0)", lambda: jax.jit(lambda x: x.sum(0)).lower(f32((8192, 8), jnp.float32)),
     "YNN without REDUCE", NO_YNN_REDUCE),
    ("sum(x*x, -1)", lambda: jax.jit(lambda x: (x * x).sum(-1)).lower(f32((256, 1024), jnp.float32)),
     "YNN without REDUCE", NO_YNN_REDUCE),
    ("cnn-s", lambda: zoo.get("cnn-s").lower(), "optimization level 0", {"xla_backend_optimization_level": 0}),
    ("rnn-s", lambda: zoo.get("rnn-s").lower(), "no YNN fusions", {"xla_cpu_experimental_ynn_fusion_type": []}),
]


def build_home(home: Path) -> dict[str, str]:
    """Ingest the cases and store one tuner entry each (3 days old); returns key -> case name."""
    env = current_environment()
    measured = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
    rows, names = [], {}
    for name, lower, _, config in CASES:
        module = from_lowered(lower())
        directory = home.parent / f"symbols-{len(names)}"
        directory.mkdir(parents=True)
        (directory / "module.hlo").write_text(module.to_text())
        fingerprint = graph_fingerprint(module)
        key = store_key(fingerprint, env.key())
        names[key] = name
        rows.append({"key": key, "fingerprint": fingerprint, "env_key": env.key(), "kind": "graph",
                     "speedup": 2.0, "expires_at": measured + datetime.timedelta(days=30),
                     "provenance": "tuner", "config": json.dumps(config), "ci_low": 1.8, "ci_high": 2.2,
                     "compiler_version": env.compiler_version, "measured_at": measured, "source": name})
    ingest_symbols([home.parent], home)
    Store(home).publish(pa.Table.from_pylist(rows, ENTRIES), None, "bench")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--old", default="0.10.0", help="the second jaxlib version")
    parser.add_argument("--max-seconds", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=ValidateSettings.workers,
                        help="fresh workers per entry (their median decides)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    old_python = build_venv(cached_venv_dir(args.old), args.old)
    settings = ValidateSettings(measure=dataclasses.replace(MEASURE_SETTINGS, max_seconds=args.max_seconds),
                                workers=args.workers)
    speedups: dict[tuple[str, str], list[float]] = defaultdict(list)
    outcomes: dict[tuple[str, str], Counter] = defaultdict(Counter)
    per_entry: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            names = build_home(home)
            Registry(home).add("old", old_python)
            for toolchain in ("old", None):
                started = time.perf_counter()
                report = validate(home, toolchain, settings)
                measured = [d for d in report.decisions if d.outcome != "unmeasured"]
                seconds = time.perf_counter() - started
                per_entry[report.compiler_version].append(seconds / max(len(measured), 1))
                for d in measured:
                    speedups[(names[d.key], report.compiler_version)].append(d.speedup.estimate if d.speedup else 1.0)
                    outcomes[(names[d.key], report.compiler_version)][d.outcome] += 1
    versions = sorted({v for _, v in speedups})
    rows = [{"graph": name, "config": label, **{
        v: {"median_speedup": statistics.median(speedups[(name, v)]), "decisions": dict(outcomes[(name, v)])}
        for v in versions}} for name, _, label, _ in CASES]
    seconds = {v: statistics.median(s) for v, s in per_entry.items()}
    if args.json:
        print(json.dumps({"entries": rows, "seconds_per_entry": seconds, "reps": args.reps,
                          "workers": args.workers}))
        return
    print(f"{args.reps} repetitions, {args.workers} workers per entry; "
          "median speedup of the stored config and the validator's decisions")
    print(f"{'graph':<18} {'config':<22} " + "  ".join(f"{v:<32}" for v in versions))
    for row in rows:
        cells = "  ".join(f"{row[v]['median_speedup']:>6.2f}x {_decisions(row[v]['decisions']):<24}"
                          for v in versions)
        print(f"{row['graph']:<18} {row['config']:<22} {cells}")
    print("seconds per measured entry (median of runs, worker start included): "
          + ", ".join(f"{v} {s:.1f} s" for v, s in seconds.items()))


def _decisions(counts: dict[str, int]) -> str:
    return ", ".join(f"{outcome} {n}" for outcome, n in counts.items())


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
