"""Store entries, measurements and a home of live entries, fleet hits and past decisions, all
built by hand at a fixed NOW in a made-up environment (HERE): the validator's rules and plan
without a compile or a worker (the validator's rules' tests, the realized speedups' tests)."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa

from delivery.store_writer import Store
from execution.evaluate import EvaluationResult
from execution.numerics import OutputCheck
from hlo.environment import Environment, store_key
from ingest.tables import GRAPHS, HITS, partitioning_text
from storage.blobs import BlobStore
from storage.store_schema import StoreEntry, entries_table
from storage.warehouse import Warehouse
from validator import rules
from validator.plan import Planner, Queued
from validator.rules import Decision
from validator.tables import VALIDATIONS
from validator.toolchains import Toolchain
from vocabulary.decisions import Applied
from vocabulary.interval import Interval
from vocabulary.store import Provenance

UTC = datetime.UTC
NOW = datetime.datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = datetime.timedelta(days=1)
TTL, MAX_AGE = 30 * DAY, 180 * DAY
BAND = 0.01
EDGE = 1.0 + BAND  # the noise band's edge, exactly as the rules compute it
CONFIG = json.dumps({"xla_cpu_use_xnnpack": False}, sort_keys=True)
HERE = Environment("cpu", "test-cpu", 1, "jaxlib-new")
CHAIN = Toolchain("default", "python", "new", HERE.to_json(), NOW.isoformat())


def fp(n: int) -> str:
    return f"{n:032x}"


def entry(n: int, env: Environment = HERE, days_old: float = 3, expires_in: float = 27,
          kind: str = "graph", provenance: Provenance = Provenance.TUNER, config: str = CONFIG) -> StoreEntry:
    """A live store entry for fingerprint `n` measured `days_old` before NOW."""
    return StoreEntry(key=store_key(fp(n), env.key()), fingerprint=fp(n), env_key=env.key(), kind=kind,
                      speedup=1.5, expires_at=NOW + expires_in * DAY, provenance=provenance, config=config,
                      ci_low=1.3, ci_high=1.7, compiler_version=env.compiler_version,
                      measured_at=NOW - days_old * DAY, source=f"task-{n}")


def result(speedup: float = 1.5, ci_low: float = 1.3, ci_high: float = 1.7, numerics_ok: bool = True,
           identical: bool = False, numerics: list[OutputCheck] | None = None) -> EvaluationResult:
    """A completed measurement, as execution.evaluate returns one."""
    return EvaluationResult(speedup=Interval(speedup, ci_low, ci_high), significant=ci_low > EDGE,
                            numerics_ok=numerics_ok, identical_program=identical, compile_seconds=0.1,
                            default_compile_seconds=0.1, numerics=numerics or [])


def table(*rows: StoreEntry) -> pa.Table:
    return entries_table(rows)



class Home:
    """A home with live entries, the graphs they were seen in, fleet hits and past decisions."""

    def __init__(self, path) -> None:
        self.path = path
        self.rows: list[dict] = []

    def graph(self, n: int, env: Environment, blob: bool = True) -> None:
        """Symbols of fingerprint `n` in `env`, with its HLO blob (or the blob lost)."""
        name = BlobStore(self.path).put_text(fp(n), f"HloModule m{n}") if blob else BlobStore.name(fp(n))
        at = NOW - 30 * DAY
        Warehouse(self.path).append(GRAPHS, pa.Table.from_pylist([{
            "dt": at.date(), "fingerprint": fp(n), "env_key": env.key(), "module_name": f"m{n}",
            "n_instructions": 3, "hlo_blob": name, "optimized_blob": None, "optimized_fingerprint": None,
            "platform": env.platform, "device_kind": env.device_kind, "device_count": env.device_count,
            "compiler_version": env.compiler_version, "first_seen": at, "last_seen": at,
            "partitioning": partitioning_text(env.partitioning), "family": None}], GRAPHS.schema),
            f"graph-{n}-{env.key()[:6]}")

    def hits(self, row: StoreEntry, n: int, outcome: str = "applied", at: datetime.datetime = NOW - DAY,
             config: str | None = CONFIG) -> None:
        """`n` compiles in the fleet that looked `row` up, at `at`."""
        hits = [{"dt": at.date(), "at": at, "job_id": f"job-{i}", "key": row.key, "fingerprint": row.fingerprint,
                 "env_key": row.env_key, "module_name": "m", "outcome": outcome, "kind": "graph",
                 "config_version": 1, "expected_speedup": 1.5, "config": config, "optimized_fingerprint": None,
                 "reason": "INTERNAL: tuned compile failed" if outcome == "fallback" else None,
                 "hook_seconds": 0.001, "compile_seconds": 0.1} for i in range(n)]
        Warehouse(self.path).append(HITS, pa.Table.from_pylist(hits, HITS.schema),
                                    f"hits-{len(self.rows)}-{n}-{outcome}")

    def decided(self, decision: Decision, run_id: str) -> None:
        """A past run's audit row of `decision`."""
        Warehouse(self.path).append(VALIDATIONS, pa.Table.from_pylist(
            [rules.audit_row(decision, run_id, 1, Applied.IN_EFFECT)], VALIDATIONS.schema), run_id)

    def plan(self, *rows: StoreEntry, decided: frozenset[str] = frozenset(),
             chain: Toolchain = CHAIN) -> tuple[dict[str, Decision], list[Queued], int]:
        store = Store(self.path)
        store.publish(table(*rows), store.current(), "test entries")
        free, queue, skipped = Planner(self.path, chain, NOW, MAX_AGE, DAY).plan(set(decided))
        return {d.key: d for d in free}, queue, skipped
