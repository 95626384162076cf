"""The tables the validator writes, declared once: one audit row per decision."""

from __future__ import annotations

import pyarrow as pa

from storage.warehouse import TableSchema, added_column

# Version 3 added the fleet's figures of the entry (ranking.realized, over the window before the
# run: validator.signals.FLEET_WINDOW) where it had any: the realized speedup (holdout over tuned
# seconds per execution), its interval over jobs, and each arm's jobs and runs. Null where the
# fleet had no runs of it, in rows landed before version 3, and where it was undecided (the
# figures then hold only the arms).
# Version 4: what XLA did with an entry's autotune results (validator.rules.ResultsFate);
# null for an entry without them, and in rows landed before version 4.
# Version 5: how the entry's graph was measured (vocabulary.measure.MeasureMode); null before
# version 5: whole.
# Version 6: the entry's relaxed-numerics config, and where the run measured it (its strict
# config kept or re-keyed), its outcome ('kept', 'rekeyed' or 'invalidated': dropped) and its
# speedup with the interval; null for an entry without one, where not measured, and before
# version 6.
VALIDATIONS = TableSchema(
    name="validations",
    version=6,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("validated_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.string(), nullable=False),  # the entry's key before the decision
        pa.field("fingerprint", pa.string(), nullable=False),
        pa.field("env_key", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),  # a vocabulary.decisions.DecisionOutcome
        pa.field("reason", pa.string(), nullable=False),
        pa.field("new_key", pa.string(), nullable=True),  # rekeyed: the key for the new environment
        pa.field("toolchain", pa.string(), nullable=False),  # the toolchain that measured it
        pa.field("compiler_version", pa.string(), nullable=False),
        pa.field("speedup", pa.float64(), nullable=True),
        pa.field("ci_low", pa.float64(), nullable=True),
        pa.field("ci_high", pa.float64(), nullable=True),
        pa.field("numerics_ok", pa.bool_(), nullable=True),
        pa.field("fleet_hits", pa.int64(), nullable=False),  # the priority it was scanned by
        pa.field("age_days", pa.float64(), nullable=False),  # staleness: since last measured
        pa.field("store_version", pa.int64(), nullable=True),  # the version that holds the decision
        pa.field("config", pa.string(), nullable=True),  # the config decided on, JSON
        # When the config was first measured (by the tuner, or at import): the entry's absolute
        # lifetime runs from here, carried through every keep and re-key (null: not recorded).
        pa.field("origin_at", pa.timestamp("us", tz="UTC"), nullable=True),
        *(added_column(column, 3) for column in (
            pa.field("fleet_speedup", pa.float64(), nullable=True),
            pa.field("fleet_ci_low", pa.float64(), nullable=True),
            pa.field("fleet_ci_high", pa.float64(), nullable=True),
            pa.field("fleet_tuned_jobs", pa.int64(), nullable=True),
            pa.field("fleet_tuned_runs", pa.int64(), nullable=True),
            pa.field("fleet_holdout_jobs", pa.int64(), nullable=True),
            pa.field("fleet_holdout_runs", pa.int64(), nullable=True))),
        added_column(pa.field("autotune_fate", pa.string(), nullable=True), 4),
        added_column(pa.field("measure_mode", pa.string(), nullable=True), 5),
        *(added_column(column, 6) for column in (
            pa.field("relaxed_config", pa.string(), nullable=True),
            pa.field("relaxed_outcome", pa.string(), nullable=True),
            pa.field("relaxed_speedup", pa.float64(), nullable=True),
            pa.field("relaxed_ci_low", pa.float64(), nullable=True),
            pa.field("relaxed_ci_high", pa.float64(), nullable=True))),
    ]),
)
