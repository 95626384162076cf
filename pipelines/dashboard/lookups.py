"""What the queries join their keys to: a readable name per graph and op (from the symbols), and
the live store's entries (their speedups with intervals, and who wrote them)."""

from __future__ import annotations

import pyarrow as pa

from ingest.tables import GRAPHS, OPS
from pipelines.dashboard.sql import arrow
from storage.home import Home
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse
from vocabulary.tuning import Kind


def names(home: Home) -> pa.Table:
    """A readable name per graph (its module) and op (its kind and fusion name)."""
    return arrow(f"""
        select '{Kind.GRAPH}' as kind, fingerprint, min(module_name) as name from graphs group by fingerprint
        union all
        select '{Kind.OP}', fingerprint, min(kind || ' ' || name) from ops group by fingerprint
    """, graphs=Warehouse(home).read(GRAPHS, ["fingerprint", "module_name"]),
        ops=Warehouse(home).read(OPS, ["fingerprint", "kind", "name"]))


def graph_names(home: Home) -> dict[str, str]:
    """Each graph's name (its module), by fingerprint."""
    return {row["fingerprint"]: row["name"] for row in names(home).to_pylist() if row["kind"] == Kind.GRAPH}


def entries(home: Home) -> pa.Table:
    """The live store's entries: their keys, speedups with intervals, and who wrote them."""
    return StoreReader(home).entries().select(["key", "kind", "fingerprint", "env_key", "speedup", "ci_low", "ci_high",
                                         "provenance"])
