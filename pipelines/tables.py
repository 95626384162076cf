"""The table the nightly loop writes, declared once: its run ledger."""

from __future__ import annotations

import pyarrow as pa

from storage.warehouse import TableSchema

RUNS = TableSchema(
    name="runs",
    version=1,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),  # the date the run is for
        pa.field("stage", pa.string(), nullable=False),
        pa.field("attempt", pa.int64(), nullable=False),  # 1 for the first try of this stage
        pa.field("status", pa.string(), nullable=False),  # 'done' or 'failed'
        pa.field("started_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("seconds", pa.float64(), nullable=False),
        pa.field("counts", pa.string(), nullable=False),  # JSON: what the stage did
        pa.field("error", pa.string(), nullable=True),
    ]),
)
