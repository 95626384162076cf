"""The warehouse tables that ingestion fills, declared once (see DESIGN.md for the public columns).

Bump a table's version when its columns change; files of another version are refused on read.
Every string column declares its longest value here (`_string`): a longer one never lands, its
row is quarantined instead (a 10,000-character job_id is a broken producer, not a job).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from hlo.environment import Partitioning, partitioning_from_json
from storage.store_schema import TEAM_CHARS
from storage.warehouse import TableSchema, added_column
from storage.warehouse import bounded_string as _string
from vocabulary.hits import HitOutcome
from vocabulary.tuning import Kind


def _field(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


TIMESTAMP = pa.timestamp("us", tz="UTC")

# Longest values, in characters. Fingerprints, environment and store keys are 32 hex digits.
HEX_KEY = 32
BLOB_NAME = 128  # hlo/<2 hex>/<fingerprint>.hlo.zst
JOB_ID = 256
TEAM = TEAM_CHARS  # the store's bound: a version's relaxed-numerics teams are held to it too
DEVICE_KIND = 256  # a CPU kind lists its ISA features (hlo.environment.cpu_device_kind)
PLATFORM = 64
COMPILER_VERSION = 256
MODULE_NAME = 1024  # XLA module names carry the jitted function's (possibly long) name
INSTRUCTION_NAME = 1024
OP_KIND = 128
OUTCOME = 16
CONFIG_JSON = 1 << 16
REASON = 1 << 14  # an error's first line, as a rule: far less
PARTITIONING_JSON = 1 << 12  # a mesh of a few named axes, as a rule: far less

# Version 2 added `partitioning`: how the job compiled the module across devices and processes
# (`partitioning_text`), null for one device of one process and in files of version 1.
# Version 3 added `family`: the graph's family fingerprint (`hlo.family`: the same program at
# other shapes), null in files of earlier versions (`ingest.families` computes those).
GRAPHS = TableSchema(
    name="graphs",
    version=3,
    key=("fingerprint", "env_key"),
    schema=pa.schema([
        _field("dt", pa.date32()),  # the date first seen
        _string("fingerprint", HEX_KEY),
        _string("env_key", HEX_KEY),
        _string("module_name", MODULE_NAME),
        _field("n_instructions", pa.int64()),
        _string("hlo_blob", BLOB_NAME),
        _string("optimized_blob", BLOB_NAME, nullable=True),
        _string("optimized_fingerprint", HEX_KEY, nullable=True),
        _string("platform", PLATFORM),
        _string("device_kind", DEVICE_KIND),
        _field("device_count", pa.int32()),
        _string("compiler_version", COMPILER_VERSION),
        _field("first_seen", TIMESTAMP),
        _field("last_seen", TIMESTAMP),
        added_column(_string("partitioning", PARTITIONING_JSON, nullable=True), 2),
        added_column(_string("family", HEX_KEY, nullable=True), 3),
    ]),
)

OPS = TableSchema(
    name="ops",
    version=1,
    key=("fingerprint", "graph_fingerprint", "env_key"),
    schema=pa.schema([
        _field("dt", pa.date32()),  # the date its graph was first seen
        _string("fingerprint", HEX_KEY),
        _string("graph_fingerprint", HEX_KEY),
        _string("env_key", HEX_KEY),
        _string("kind", OP_KIND),
        _field("n_instructions", pa.int64()),
        _string("name", INSTRUCTION_NAME),  # the fusion's instruction name in the optimized graph
        _string("hlo_blob", BLOB_NAME),  # the optimized graph that holds it
    ]),
)

# Version 2 added `holdout`: true for a run of the holdout arm (compiled with the defaults
# although the store had an entry for it; config_key, config_version and expected_speedup name
# that entry), false or null for a tuned run (config_key set) or an untuned one (null).
GRAPH_RUNS = TableSchema(
    name="graph_runs",
    version=2,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _string("job_id", JOB_ID),
        _string("team", TEAM),
        _string("fingerprint", HEX_KEY),
        _string("env_key", HEX_KEY),
        _string("device_kind", DEVICE_KIND),
        _string("compiler_version", COMPILER_VERSION, nullable=True),
        _field("chips", pa.int32()),
        _field("executions", pa.int64()),
        _field("chip_seconds", pa.float64()),
        _field("opted_out", pa.bool_()),
        _string("config_key", HEX_KEY, nullable=True),
        _field("config_version", pa.int64(), nullable=True),
        _field("expected_speedup", pa.float64(), nullable=True),
        added_column(_field("holdout", pa.bool_(), nullable=True), 2),
    ]),
)

OP_RUNS = TableSchema(
    name="op_runs",
    version=1,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _string("job_id", JOB_ID),
        _string("team", TEAM),
        _string("op_fingerprint", HEX_KEY),
        _string("graph_fingerprint", HEX_KEY),
        _string("env_key", HEX_KEY),
        _field("chip_seconds", pa.float64()),
        _field("opted_out", pa.bool_()),
        _string("config_key", HEX_KEY, nullable=True),
        _field("config_version", pa.int64(), nullable=True),
        _field("expected_speedup", pa.float64(), nullable=True),
    ]),
)

# What the compiler hook saw at each compile (delivery.hit_spool writes it, a row a `Hit`; `fdo hits`
# and profile ingestion read it; the validator reads the fallbacks). One row per compile the hook
# handled.
HITS = TableSchema(
    name="hits",
    version=1,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _field("at", TIMESTAMP),
        _string("job_id", JOB_ID),  # FDO_JOB_ID, else host-pid
        _string("key", HEX_KEY),  # the store key looked up
        _string("fingerprint", HEX_KEY),
        _string("env_key", HEX_KEY),
        _string("module_name", MODULE_NAME),
        # a vocabulary.hits.HitOutcome: 'applied' (tuned config compiled), 'holdout' (an entry,
        # but this job is in its holdout arm: default compile), 'miss' (no entry), 'fallback'
        # (tuned compile failed, default used), 'refused' (entry's config not allowlisted),
        # 'no store' (the home has published none yet; rows from before it say 'error' there),
        # 'error' (store unusable)
        _string("outcome", OUTCOME),
        _string("kind", OP_KIND, nullable=True),  # the served entry's (a vocabulary.tuning.Kind)
        _field("config_version", pa.int64(), nullable=True),  # store version that served it
        _field("expected_speedup", pa.float64(), nullable=True),
        _string("config", CONFIG_JSON, nullable=True),  # JSON of the applied flags
        # The optimized module's fingerprint, so a profile of the tuned executable finds its hit.
        _string("optimized_fingerprint", HEX_KEY, nullable=True),
        _string("reason", REASON, nullable=True),  # why a fallback, refusal or error
        _field("hook_seconds", pa.float64()),  # time the hook added (fingerprint + look-up)
        _field("compile_seconds", pa.float64()),
    ]),
)


@dataclass(frozen=True, kw_only=True)
class Hit:
    """One row of HITS: what the compiler hook did at one compile (the hook spools it,
    ingest.hits lands it). The fields are HITS' columns in their order, less `dt`, which is
    `at`'s date in UTC."""

    at: datetime.datetime  # aware
    job_id: str
    key: str  # "" where the hook could not key the module
    fingerprint: str
    env_key: str
    module_name: str
    outcome: HitOutcome
    kind: Kind | None = None  # the served entry's
    config_version: int | None = None
    expected_speedup: float | None = None
    config: str | None = None
    optimized_fingerprint: str | None = None
    reason: str | None = None
    hook_seconds: float
    compile_seconds: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Hit:
        """The hit of a row of HITS (Arrow's Python values, or a spool line's JSON object, whose
        `at` is ISO 8601 text); a column the row lacks reads as null, `dt` and columns beyond
        HITS' are ignored. ValueError, the first that holds of: an outcome that is not a
        HitOutcome's, a kind that is not a Kind's, an `at` that is not an aware time, a column
        that may not be null is.
        The values' types are HITS' schema's to check (`HITS.row_checks` over a table)."""
        if row.get("outcome") not in set(HitOutcome):
            raise ValueError(f"outcome must be one of {', '.join(HitOutcome)}")
        if row.get("kind") is not None and row["kind"] not in set(Kind):
            raise ValueError(f"kind must be one of {', '.join(Kind)}")
        at = row.get("at")
        if not isinstance(at, datetime.datetime):
            try:
                at = datetime.datetime.fromisoformat(at)  # type: ignore[arg-type]  # None: TypeError
            except (TypeError, ValueError):
                raise ValueError("at must be an ISO 8601 time") from None
        if at.tzinfo is None:
            raise ValueError("at needs a time zone")
        missing = [f.name for f in HITS.schema
                   if not f.nullable and f.name not in ("dt", "at") and row.get(f.name) is None]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        values: dict[str, Any] = {f.name: row.get(f.name) for f in dataclasses.fields(cls)}
        values.update(at=at, outcome=HitOutcome(row["outcome"]),
                      kind=Kind(row["kind"]) if row.get("kind") is not None else None)
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """The row of HITS, columns in HITS' order; the outcome and the kind their text."""
        row: dict[str, Any] = {"dt": self.at.astimezone(datetime.UTC).date()}
        row.update((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        row["outcome"] = self.outcome.value
        row["kind"] = self.kind.value if self.kind is not None else None
        return row


def partitioning_text(partitioning: Partitioning | None) -> str | None:
    """The `graphs.partitioning` value of `partitioning`: its JSON (`Partitioning.to_json`), keys
    sorted; None for none."""
    if partitioning is None:
        return None
    return json.dumps(partitioning.to_json(), sort_keys=True, separators=(",", ":"))


def partitioning_of(text: str | None) -> Partitioning | None:
    """The Partitioning a `graphs.partitioning` value holds (None for null); ValueError naming
    the column if it is not one."""
    if text is None:
        return None
    try:
        return partitioning_from_json(json.loads(text))
    except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"graphs.partitioning: not a partitioning: {exc}") from None
