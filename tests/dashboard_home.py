"""A small but complete FDO home for the dashboard tests: five days of a simulated fleet that
went through ranking, tuning, delivery, validation, the compiler hook and savings accounting.

Everything runs through the real stages (simulator -> ingest, Beam ranking and savings, the
store's deliver, import and update) except two that would cost minutes here: the tuner's
measurements and the validator's re-measurements land as rows in their declared tables, in the
shape those stages write them, and the hook's hits likewise.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from delivery.deliver import deliver
from delivery.imports import read_import
from delivery.store import Store, merge_entries
from hlo.environment import store_key
from ingest.tables import GRAPH_RUNS, HITS
from ranking.rank import RankSettings, rank
from ranking.savings import savings
from storage.store import ENTRIES
from storage.warehouse import Warehouse
from tuner.tables import TRIALS, TUNING_RESULTS
from validator.tables import VALIDATIONS
from workloads.simulator.run import simulate, store_lookup

WORKLOADS = ["mlp-s"]
# Beam's in-process runner in one process: the same pipelines, without starting workers.
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
JOBS = 300
SEED = 3
TASKS = 8  # the costliest graph keys of the day before tuning; the last shows no gain
CONFIGS = ({"xla_cpu_use_xnnpack": False}, {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"})


def build_home(home: Path, today: datetime.date | None = None) -> Path:
    """Fill `home` with days today-4 .. today of the whole loop; returns `home`."""
    today = today or datetime.date.today()
    day = [today - datetime.timedelta(days=4 - i) for i in range(5)]
    simulate(home, days=2, jobs=JOBS, seed=SEED, start=day[0], workloads=WORKLOADS)
    keys = _costliest_graph_keys(home, day[1], TASKS)
    _land_tuning(home, day[1], keys)
    deliver(home)
    op_entry = _import_op_entry(home)
    _validate_first(home, day[2], keys[0])
    # The fleet's jobs look configs up in the live store: its version changes after the first
    # simulated day of hits, so that the savings come from two config versions.
    simulate(home, days=1, jobs=JOBS, seed=SEED, start=day[2], workloads=WORKLOADS, tuned=store_lookup(home))
    _validate_second(home, day[3], keys[1], op_entry)
    simulate(home, days=2, jobs=JOBS, seed=SEED, start=day[3], workloads=WORKLOADS, tuned=store_lookup(home))
    _land_hook_hits(home, day[3:], keys[0])
    rank(home, RankSettings(date=today, window_days=5, top_k=5), BEAM_ARGS)
    savings(home, day[0], today, BEAM_ARGS)
    return home


def _costliest_graph_keys(home: Path, dt: datetime.date, n: int) -> list[tuple[str, str]]:
    runs = Warehouse(home).read(GRAPH_RUNS, ["fingerprint", "env_key", "chip_seconds", "opted_out"],
                                filter_dt=lambda d: d == dt.isoformat())
    runs = runs.filter(pc.invert(runs.column("opted_out")))
    costs = runs.group_by(["fingerprint", "env_key"]).aggregate([("chip_seconds", "sum")]).sort_by(
        [("chip_seconds_sum", "descending"), ("fingerprint", "ascending"), ("env_key", "ascending")])
    return list(zip(costs.column("fingerprint").to_pylist()[:n], costs.column("env_key").to_pylist()[:n]))


def _land_tuning(home: Path, dt: datetime.date, keys: list[tuple[str, str]]) -> None:
    """Eight trials and a verified result per key, as tuner.tune lands them."""
    trials, results = [], []
    for task, (fingerprint, env_key) in enumerate(keys):
        accepted = task < len(keys) - 1
        speedup = 1.22 - 0.02 * task if accepted else 1.004
        low, high = speedup - 0.05, speedup + 0.05
        config = CONFIGS[task % len(CONFIGS)]
        task_id = f"task{task:028x}"
        base = {"dt": dt, "task_id": task_id, "kind": "graph", "fingerprint": fingerprint,
                "env_key": env_key, "strategy": "evolution"}
        for index in range(8):
            outcome = ("failed", "identical", "duplicate")[index] if index < 3 and task == 1 else "measured"
            trial_speedup = 1 + (speedup - 1) * (index + 1) / 8 if outcome == "measured" else None
            trials.append({**base, "trial_id": f"{task_id}-{index}", "index": index,
                           "config": json.dumps(config), "program": None, "outcome": outcome,
                           "speedup": trial_speedup, "ci_low": trial_speedup and trial_speedup - 0.03,
                           "ci_high": trial_speedup and trial_speedup + 0.03,
                           "numerics_ok": outcome == "measured", "compile_seconds": 0.4,
                           "error": "compile failed" if outcome == "failed" else None})
        results.append({**base, "config": json.dumps(config), "speedup": speedup, "ci_low": low,
                        "ci_high": high, "numerics_ok": True, "compiler_version": "jaxlib 0.9.0",
                        "accepted": accepted,
                        "status": "accepted" if accepted else "no significant gain",
                        "evaluations": 8, "measured": 8 - 3 * (task == 1)})
    warehouse = Warehouse(home)
    warehouse.append(TRIALS, pa.Table.from_pylist(trials, TRIALS.schema), "dashboard-tasks")
    warehouse.append(TUNING_RESULTS, pa.Table.from_pylist(results, TUNING_RESULTS.schema), "dashboard-tasks")


def _import_op_entry(home: Path) -> dict:
    """An owner-validated op config, imported as `fdo store import` does."""
    path = home / "owner-configs.jsonl"
    path.write_text(json.dumps({"fingerprint": "a" * 32, "env_key": "b" * 32, "kind": "op",
                                "config": {"xla_cpu_use_xnnpack": False}, "speedup": 1.3}) + "\n")
    new = read_import(path)
    Store(home).update(lambda live: merge_entries(live, new), "import owner-configs.jsonl")
    return new.to_pylist()[0]


def _validate_first(home: Path, dt: datetime.date, key: tuple[str, str]) -> None:
    """A validator run that keeps the costliest graph key's entry with a fresh measurement."""
    refreshed_key = store_key(*key)
    measured = datetime.datetime.combine(dt, datetime.time(6), datetime.UTC)

    def refresh(live: pa.Table) -> pa.Table:
        rows = [dict(r, provenance="validator", measured_at=measured, speedup=1.1, ci_low=1.06, ci_high=1.14)
                if r["key"] == refreshed_key else r for r in live.to_pylist()]
        return pa.Table.from_pylist(rows, ENTRIES)

    version = Store(home).update(refresh, "validate: 1 kept")
    rows = [_validation(dt, "run-1", key, "graph", "kept", 1.1, 1.0, version, 0)]
    Warehouse(home).append(VALIDATIONS, pa.Table.from_pylist(rows, VALIDATIONS.schema), "dashboard-run-1")


def _validate_second(home: Path, dt: datetime.date, key: tuple[str, str], op_entry: dict) -> None:
    """A validator run that keeps the next graph key's entry as it is and invalidates the
    imported op entry."""
    version = Store(home).update(lambda live: live.filter(pc.not_equal(live.column("key"), op_entry["key"])),
                                 "validate: 1 invalidated")
    rows = [_validation(dt, "run-2", key, "graph", "kept", 1.2, 2.0, version, 40),
            _validation(dt, "run-2", (op_entry["fingerprint"], op_entry["env_key"]), "op",
                        "invalidated", 0.98, 1.5, version, 0)]
    Warehouse(home).append(VALIDATIONS, pa.Table.from_pylist(rows, VALIDATIONS.schema), "dashboard-run-2")


def _validation(dt: datetime.date, run_id: str, key: tuple[str, str], kind: str, outcome: str,
                speedup: float, age_days: float, version: int | None, fleet_hits: int) -> dict:
    fingerprint, env_key = key
    return {"dt": dt, "run_id": run_id,
            "validated_at": datetime.datetime.combine(dt, datetime.time(6), datetime.UTC),
            "key": store_key(fingerprint, env_key), "fingerprint": fingerprint, "env_key": env_key,
            "kind": kind, "outcome": outcome,
            "reason": "re-measured on the current compiler", "new_key": None,
            "toolchain": "jaxlib 0.9.0 cpu", "compiler_version": "jaxlib 0.9.0",
            "speedup": speedup, "ci_low": speedup - 0.04, "ci_high": speedup + 0.04,
            "numerics_ok": True, "fleet_hits": fleet_hits, "age_days": age_days,
            "store_version": version}


def _land_hook_hits(home: Path, days: list[datetime.date], key: tuple[str, str]) -> None:
    """What the compiler hook records: per day three applied configs, two misses, a fallback."""
    fingerprint, env_key = key
    version = Store(home).current()
    rows = []
    for dt in days:
        for n, outcome in enumerate(("applied", "applied", "applied", "miss", "miss", "fallback")):
            applied = outcome == "applied"
            rows.append({"dt": dt, "at": datetime.datetime.combine(dt, datetime.time(8, n), datetime.UTC),
                         "job_id": f"job-{n}", "key": store_key(fingerprint, env_key),
                         "fingerprint": fingerprint, "env_key": env_key, "module_name": "jit_mlp_train_step",
                         "outcome": outcome, "kind": "graph" if applied else None,
                         "config_version": version if applied else None,
                         "expected_speedup": 1.18 if applied else None,
                         "config": json.dumps(CONFIGS[0]) if applied else None,
                         "optimized_fingerprint": None,
                         "reason": "tuned compile failed" if outcome == "fallback" else None,
                         "hook_seconds": 0.002, "compile_seconds": 0.5})
    Warehouse(home).append(HITS, pa.Table.from_pylist(rows, HITS.schema), "dashboard-hook")
