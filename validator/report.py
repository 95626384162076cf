"""What the validator did, as tables the dashboards read (pure functions of the home).

- `staleness`: how long ago each live entry was last measured (by the tuner, an import or a
  validation), in buckets.
- `outcomes_over_time`: decisions per day and outcome, from the `validations` audit trail.
- `validator_hit_share`: per day, the share of the fleet's hits served by entries the validator
  last wrote (kept or re-keyed), as CATWILD's figure 11. A hit is a compile where the hook
  applied a config (`hits`, source 'hook') or a profiled run that carries a config key
  (`graph_runs` and `op_runs`, source 'profiles'); the entry is looked up in the store version
  that served it, so later validations do not rewrite history.
"""

from __future__ import annotations

import datetime
import math

import pyarrow as pa
import pyarrow.compute as pc

from ingest.ran_tuned import hit_ran_tuned
from ingest.tables import GRAPH_RUNS, HITS, OP_RUNS
from storage.home import Home
from storage.store_reader import StoreReader
from storage.store_schema import StoreError
from storage.warehouse import Warehouse
from validator.rules import measured_at
from validator.tables import VALIDATIONS
from vocabulary.store import Provenance

# Bucket edges in days: [0, 1), [1, 7), [7, 30), [30, 90), [90, inf).
STALENESS_EDGES = (0.0, 1.0, 7.0, 30.0, 90.0, math.inf)

STALENESS = pa.schema([
    pa.field("bucket", pa.string()), pa.field("min_days", pa.float64()),
    pa.field("max_days", pa.float64()),  # null: no upper bound
    pa.field("entries", pa.int64()), pa.field("share", pa.float64()),
    pa.field("validator_entries", pa.int64()),  # of them, last written by the validator
])
OUTCOMES_OVER_TIME = pa.schema([
    pa.field("dt", pa.date32()), pa.field("outcome", pa.string()), pa.field("decisions", pa.int64()),
])
HIT_SHARE = pa.schema([
    pa.field("dt", pa.date32()), pa.field("source", pa.string()), pa.field("hits", pa.int64()),
    pa.field("validator_hits", pa.int64()), pa.field("share", pa.float64()),
])


def staleness(home: Home, now: datetime.datetime | None = None) -> pa.Table:
    """Live entries by days since last measured, one row per bucket (empty buckets included)."""
    now = now or datetime.datetime.now(datetime.UTC)
    ages = [((now - measured_at(e)).total_seconds() / 86400, e.provenance)
            for e in StoreReader(home).records()]
    rows = []
    for low, high in zip(STALENESS_EDGES, STALENESS_EDGES[1:]):
        inside = [provenance for age, provenance in ages if low <= max(age, 0.0) < high]
        label = f"{low:g}-{high:g} days" if high != math.inf else f">= {low:g} days"
        rows.append({"bucket": label, "min_days": low, "max_days": None if high == math.inf else high,
                     "entries": len(inside), "share": len(inside) / len(ages) if ages else 0.0,
                     "validator_entries": inside.count(Provenance.VALIDATOR)})
    return pa.Table.from_pylist(rows, STALENESS)


def outcomes_over_time(home: Home) -> pa.Table:
    """Decisions per day and outcome, oldest day first."""
    audit = Warehouse(home).read(VALIDATIONS, columns=["dt", "outcome"])
    if audit.num_rows == 0:
        return OUTCOMES_OVER_TIME.empty_table()
    grouped = audit.group_by(["dt", "outcome"]).aggregate([([], "count_all")])
    table = pa.table({"dt": grouped.column("dt"), "outcome": grouped.column("outcome"),
                      "decisions": grouped.column("count_all")}, OUTCOMES_OVER_TIME)
    return table.sort_by([("dt", "ascending"), ("outcome", "ascending")])


def validator_hit_share(home: Home) -> pa.Table:
    """Per day and source, hits and those served by entries the validator last wrote."""
    warehouse = Warehouse(home)
    hook = warehouse.read(HITS, columns=["dt", "key", "outcome", "config_version"])
    hook = hook.filter(hit_ran_tuned(hook))
    pieces = [_tagged(hook, "key", "hook")]
    for table in (GRAPH_RUNS, OP_RUNS):
        runs = warehouse.read(table, columns=["dt", "config_key", "config_version"])
        pieces.append(_tagged(runs.filter(pc.is_valid(runs.column("config_key"))), "config_key", "profiles"))
    hits = pa.concat_tables(pieces)
    if hits.num_rows == 0:
        return HIT_SHARE.empty_table()
    versions = [v for v in pc.unique(hits.column("config_version")).to_pylist() if v is not None]
    written = _validator_written(StoreReader(home), versions)
    served = hits.join(written, ["config_version", "key"], join_type="left outer")
    served = served.set_column(served.schema.get_field_index("by_validator"), "by_validator",
                               pc.cast(pc.fill_null(served.column("by_validator"), False), pa.int64()))
    grouped = served.group_by(["dt", "source"]).aggregate([([], "count_all"), ("by_validator", "sum")])
    hits_, by_validator = grouped.column("count_all"), grouped.column("by_validator_sum")
    table = pa.table({"dt": grouped.column("dt"), "source": grouped.column("source"), "hits": hits_,
                      "validator_hits": by_validator,
                      "share": pc.divide(pc.cast(by_validator, pa.float64()), pc.cast(hits_, pa.float64()))},
                     HIT_SHARE)
    return table.sort_by([("dt", "ascending"), ("source", "ascending")])


def _tagged(rows: pa.Table, key_column: str, source: str) -> pa.Table:
    return pa.table({"dt": rows.column("dt"), "key": rows.column(key_column),
                     "config_version": rows.column("config_version"),
                     "source": pa.repeat(pa.scalar(source), rows.num_rows)})


def _validator_written(store: StoreReader, versions: list[int]) -> pa.Table:
    """(config_version, key, by_validator) for the entries the validator wrote, per version."""
    pieces = []
    for version in versions:
        try:
            entries = store.entries(version).select(["key", "provenance"])
        except StoreError:  # a version this home does not hold (the hits came from elsewhere)
            continue
        mine = entries.filter(pc.equal(entries.column("provenance"), Provenance.VALIDATOR.value))
        pieces.append(pa.table({"config_version": pa.repeat(pa.scalar(version, pa.int64()), mine.num_rows),
                                "key": mine.column("key"),
                                "by_validator": pa.repeat(pa.scalar(True), mine.num_rows)}))
    schema = pa.schema([pa.field("config_version", pa.int64()), pa.field("key", pa.string()),
                        pa.field("by_validator", pa.bool_())])
    return pa.concat_tables([p.cast(schema) for p in pieces]) if pieces else schema.empty_table()
