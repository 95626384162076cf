"""The warehouse tables that ingestion fills, declared once (see DESIGN.md for the public columns).

Bump a table's version when its columns change; files of another version are refused on read.
"""

from __future__ import annotations

import pyarrow as pa

from ingest.warehouse import TableSchema


def _field(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


TIMESTAMP = pa.timestamp("us", tz="UTC")

GRAPHS = TableSchema(
    name="graphs",
    version=1,
    key=("fingerprint", "env_key"),
    schema=pa.schema([
        _field("dt", pa.date32()),  # the date first seen
        _field("fingerprint", pa.string()),
        _field("env_key", pa.string()),
        _field("module_name", pa.string()),
        _field("n_instructions", pa.int64()),
        _field("hlo_blob", pa.string()),
        _field("optimized_blob", pa.string(), nullable=True),
        _field("optimized_fingerprint", pa.string(), nullable=True),
        _field("platform", pa.string()),
        _field("device_kind", pa.string()),
        _field("device_count", pa.int32()),
        _field("compiler_version", pa.string()),
        _field("first_seen", TIMESTAMP),
        _field("last_seen", TIMESTAMP),
    ]),
)

OPS = TableSchema(
    name="ops",
    version=1,
    key=("fingerprint", "graph_fingerprint", "env_key"),
    schema=pa.schema([
        _field("dt", pa.date32()),  # the date its graph was first seen
        _field("fingerprint", pa.string()),
        _field("graph_fingerprint", pa.string()),
        _field("env_key", pa.string()),
        _field("kind", pa.string()),
        _field("n_instructions", pa.int64()),
        _field("name", pa.string()),  # the fusion's instruction name in the optimized graph
        _field("hlo_blob", pa.string()),  # the optimized graph that holds it
    ]),
)

GRAPH_RUNS = TableSchema(
    name="graph_runs",
    version=1,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _field("job_id", pa.string()),
        _field("team", pa.string()),
        _field("fingerprint", pa.string()),
        _field("env_key", pa.string()),
        _field("device_kind", pa.string()),
        _field("compiler_version", pa.string(), nullable=True),
        _field("chips", pa.int32()),
        _field("executions", pa.int64()),
        _field("chip_seconds", pa.float64()),
        _field("opted_out", pa.bool_()),
        _field("config_key", pa.string(), nullable=True),
        _field("config_version", pa.int64(), nullable=True),
        _field("expected_speedup", pa.float64(), nullable=True),
    ]),
)

OP_RUNS = TableSchema(
    name="op_runs",
    version=1,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _field("job_id", pa.string()),
        _field("team", pa.string()),
        _field("op_fingerprint", pa.string()),
        _field("graph_fingerprint", pa.string()),
        _field("env_key", pa.string()),
        _field("chip_seconds", pa.float64()),
        _field("opted_out", pa.bool_()),
        _field("config_key", pa.string(), nullable=True),
        _field("config_version", pa.int64(), nullable=True),
        _field("expected_speedup", pa.float64(), nullable=True),
    ]),
)

# What the compiler hook saw at each compile (delivery.hook writes it; `fdo hits` and profile
# ingestion read it; the validator reads the fallbacks). One row per compile the hook handled.
HITS = TableSchema(
    name="hits",
    version=1,
    schema=pa.schema([
        _field("dt", pa.date32()),
        _field("at", TIMESTAMP),
        _field("job_id", pa.string()),  # FDO_JOB_ID, else host-pid
        _field("key", pa.string()),  # the store key looked up
        _field("fingerprint", pa.string()),
        _field("env_key", pa.string()),
        _field("module_name", pa.string()),
        # 'applied' (tuned config compiled), 'miss' (no entry), 'fallback' (tuned compile failed,
        # default used), 'refused' (entry's config not allowlisted), 'error' (store unusable)
        _field("outcome", pa.string()),
        _field("kind", pa.string(), nullable=True),
        _field("config_version", pa.int64(), nullable=True),  # store version that served it
        _field("expected_speedup", pa.float64(), nullable=True),
        _field("config", pa.string(), nullable=True),  # JSON of the applied flags
        # The optimized module's fingerprint, so a profile of the tuned executable finds its hit.
        _field("optimized_fingerprint", pa.string(), nullable=True),
        _field("reason", pa.string(), nullable=True),  # why a fallback, refusal or error
        _field("hook_seconds", pa.float64()),  # time the hook added (fingerprint + look-up)
        _field("compile_seconds", pa.float64()),
    ]),
)
