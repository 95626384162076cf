"""`fdo deliver`: fold accepted tuning results into the next store version.

Per store key, the best verified result wins: accepted (numerics ok, and the fresh interval's
lower bound above the noise band), highest lower bound first. It replaces the live entry of the
same key; every other entry carries over. A result is delivered once (its task id, the entry's
`source`, in no version yet), so the validator's decisions stick. Nothing new, no new version.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from delivery.store import DEFAULT_TTL, ENTRIES, Store, merge_entries
from ingest.environment import store_key
from ingest.warehouse import Warehouse
from tuner.tables import TUNING_RESULTS

NOISE_BAND = 0.01


def accepted_entries(home: Path, ttl: datetime.timedelta = DEFAULT_TTL) -> pa.Table:
    """The best accepted tuning result per store key, as store entries."""
    best: dict[str, dict] = {}
    for row in Warehouse(home).read(TUNING_RESULTS).to_pylist():
        if not (row["accepted"] and row["numerics_ok"] and (row["ci_low"] or 0) > 1 + NOISE_BAND):
            continue
        key = store_key(row["fingerprint"], row["env_key"])
        if key not in best or row["ci_low"] > best[key]["ci_low"]:
            measured = datetime.datetime.combine(row["dt"], datetime.time(), datetime.UTC)
            best[key] = {"key": key, "fingerprint": row["fingerprint"], "env_key": row["env_key"],
                         "kind": row["kind"], "speedup": row["speedup"], "expires_at": measured + ttl,
                         "provenance": "tuner", "config": row["config"], "ci_low": row["ci_low"],
                         "ci_high": row["ci_high"], "compiler_version": row["compiler_version"],
                         "measured_at": measured, "source": row["task_id"]}
    return pa.Table.from_pylist(list(best.values()), ENTRIES)


def deliver(home: Path) -> int | None:
    """Publish the accepted results never published before; returns the new version (None: no
    change). A result is delivered once: an entry the validator has since re-validated,
    invalidated or let expire, or that a rollback removed, is not brought back by its old result."""
    store = Store(home)
    new = accepted_entries(home)
    published = pa.array(sorted(store.sources()), pa.string())
    new = new.filter(pc.invert(pc.is_in(new.column("source"), value_set=published)))
    if new.num_rows == 0:
        return None
    return store.update(lambda live: merge_entries(live, new), "deliver")
