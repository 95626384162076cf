"""The tables ranking writes, declared once: candidates, coverage and savings."""

from __future__ import annotations

import pyarrow as pa

from storage.warehouse import TableSchema, added_column

CANDIDATES = TableSchema(
    name="candidates",
    version=1,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),  # the ranking date
        pa.field("kind", pa.string(), nullable=False),  # 'graph' or 'op'
        pa.field("fingerprint", pa.string(), nullable=False),
        pa.field("env_key", pa.string(), nullable=False),
        # For an op, the graph that spends the most on it (the tuner cuts the op out of it).
        pa.field("graph_fingerprint", pa.string(), nullable=False),
        pa.field("chip_seconds", pa.float64(), nullable=False),
        pa.field("share", pa.float64(), nullable=False),  # of the kind's fleet chip-time
        pa.field("rank", pa.int64(), nullable=False),
    ]),
)

# Where fleet chip-time went, per kind: one row per category (see ranking.rank.CATEGORIES).
COVERAGE = TableSchema(
    name="coverage",
    version=1,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("category", pa.string(), nullable=False),
        pa.field("keys", pa.int64(), nullable=False),
        pa.field("chip_seconds", pa.float64(), nullable=False),
        pa.field("share", pa.float64(), nullable=False),
    ]),
)

# Version 2 added env_key, so that savings can be told apart by device and compiler; version 3
# the compile time saved (ranking.savings: compiles against the holdout arm's), whose columns
# are null in the rows of version 2 files (no compile time was accounted then).
SAVINGS = TableSchema(
    name="savings",
    version=3,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("team", pa.string(), nullable=False),
        pa.field("env_key", pa.string(), nullable=False),  # where the tuned runs ran
        pa.field("config_version", pa.int64(), nullable=True),
        pa.field("validator_updated", pa.bool_(), nullable=False),
        pa.field("hit_chip_seconds", pa.float64(), nullable=False),  # chip-time that ran tuned
        pa.field("chip_seconds_saved", pa.float64(), nullable=False),  # runtime: hit x (speedup - 1)
        # Compiles that tried the entry's config (applied or fallback) whose key has a holdout
        # arm to compare with, those whose key has too few holdout compiles (no claim), and
        # what the first saved: (holdout median - compile seconds) x the environment's devices.
        added_column(pa.field("compile_hits", pa.int64(), nullable=True), 3),
        added_column(pa.field("compile_unmeasured", pa.int64(), nullable=True), 3),
        added_column(pa.field("compile_chip_seconds_saved", pa.float64(), nullable=True), 3),
    ]),
)
