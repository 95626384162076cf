"""The tables the tuner writes, declared once: every trial, and one result per task."""

from __future__ import annotations

import pyarrow as pa

from storage.warehouse import TableSchema, added_column

# Version 3: how the task measured its graph (`measure_mode`, execution.sharded.MeasureMode).
TRIALS = TableSchema(
    name="trials",
    version=3,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),
        pa.field("trial_id", pa.string(), nullable=False),  # hash(task, index): idempotent
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("fingerprint", pa.string(), nullable=False),
        pa.field("env_key", pa.string(), nullable=False),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("index", pa.int64(), nullable=False),  # order within the search
        pa.field("config", pa.string(), nullable=False),  # JSON
        pa.field("program", pa.string(), nullable=True),  # optimized module + codegen flags
        pa.field("outcome", pa.string(), nullable=False),  # measured | duplicate | identical | failed
        pa.field("speedup", pa.float64(), nullable=True),
        pa.field("ci_low", pa.float64(), nullable=True),
        pa.field("ci_high", pa.float64(), nullable=True),
        pa.field("numerics_ok", pa.bool_(), nullable=True),
        pa.field("compile_seconds", pa.float64(), nullable=True),
        pa.field("error", pa.string(), nullable=True),
        # When the trial finished, and how many seconds into its task (the clock of
        # `tuner.search.TaskClock`: a resumed task's goes on from its last trial). Null in
        # trials landed before version 2.
        added_column(pa.field("finished_at", pa.timestamp("us", tz="UTC"), nullable=True), 2),
        added_column(pa.field("elapsed_seconds", pa.float64(), nullable=True), 2),
        # whole | per-device (execution.sharded.MeasureMode); null before version 3: whole.
        added_column(pa.field("measure_mode", pa.string(), nullable=True), 3),
    ]),
)

# Version 2: `evaluations` and `measured` count every phase in the budget's unit (a config timed
# or failed; see `tuner.search.PhaseSpend`); version 1 counted every config tried, free ones too.
# Version 3: the opt-in config that relaxes numerics (`tuner.result.RelaxedOption`).
# Version 4: a kernels task's autotune results (`tuner.kernels`).
# Version 5: `status` holds the verdict alone (`vocabulary.tuning.Verdict`), its details in `reason`;
# the outputs whose numerics failed in `numerics`. Earlier rows' status may carry the reason
# after a colon ("default fails: <reason>"; `Verdict.parse` reads both). And how the task
# measured its graph (`measure_mode`), why its search ended (`search_stop`), and a nightly
# task's share of its stage's budget and why.
# Version 6: where the config came from (`origin`, `transferred_from`: `tuner.transfer`).
TUNING_RESULTS = TableSchema(
    name="tuning_results",
    version=6,
    schema=pa.schema([
        pa.field("dt", pa.date32(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("fingerprint", pa.string(), nullable=False),
        pa.field("env_key", pa.string(), nullable=False),
        pa.field("config", pa.string(), nullable=False),  # JSON; {} when nothing beat the default
        pa.field("speedup", pa.float64(), nullable=True),
        pa.field("ci_low", pa.float64(), nullable=True),
        pa.field("ci_high", pa.float64(), nullable=True),
        pa.field("numerics_ok", pa.bool_(), nullable=True),
        pa.field("compiler_version", pa.string(), nullable=False),
        pa.field("accepted", pa.bool_(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # a vocabulary.tuning.Verdict
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("evaluations", pa.int64(), nullable=False),  # configs timed or failed, every phase
        pa.field("measured", pa.int64(), nullable=False),  # those timed to a result
        # Seconds into the task when the config verified was found (the `elapsed_seconds` of
        # the first trial that ran its program); null when nothing beat the default, or landed
        # before version 2.
        added_column(pa.field("seconds_to_best", pa.float64(), nullable=True), 2),
        # The opt-in config (JSON) whose flags relax numerics (execution.flags.relaxes_numerics),
        # its verified speedup and interval: where the best config found relaxed numerics and
        # verified faster than `config`, which relaxes nothing. Null otherwise, or landed
        # before version 3.
        added_column(pa.field("relaxed_config", pa.string(), nullable=True), 3),
        added_column(pa.field("relaxed_speedup", pa.float64(), nullable=True), 3),
        added_column(pa.field("relaxed_ci_low", pa.float64(), nullable=True), 3),
        added_column(pa.field("relaxed_ci_high", pa.float64(), nullable=True), 3),
        # A kernels task's autotune results (an xla.AutotuneResults in XLA's text format), which
        # deliver publishes as its entry's; null for the other kinds, or landed before version 4.
        added_column(pa.field("autotune_results", pa.string(), nullable=True), 4),
        # Why the task ended so, for people (`TuneResult.reason`); null in rows landed before
        # version 5, whose `status` carries it.
        added_column(pa.field("reason", pa.string(), nullable=True), 5),
        # Where the numerics differ: the outputs that failed, as JSON (index, max_error,
        # tolerance, detail: `execution.numerics.OutputCheck`); null otherwise, or before 5.
        added_column(pa.field("numerics", pa.string(), nullable=True), 5),
        # whole | per-device (execution.sharded.MeasureMode): whole is the program the job runs,
        # on the devices it spans; per-device its per-device program on one device. Null before
        # version 5: whole.
        added_column(pa.field("measure_mode", pa.string(), nullable=True), 5),
        # Why the search ended: budget | stalled | time | exhausted (tuner.trial.StopReason);
        # null where no search ran (a default that fails, a kernels task), or landed before
        # version 5.
        added_column(pa.field("search_stop", pa.string(), nullable=True), 5),
        # A nightly task's share of its stage's budget and why (tuner.allot.Allotment); null
        # for a task given its own budget, or landed before version 5.
        added_column(pa.field("budget_share", pa.float64(), nullable=True), 5),
        added_column(pa.field("budget_reason", pa.string(), nullable=True), 5),
        # search | transfer | shared (vocabulary.tuning.Origin), and the graph key
        # ("<fingerprint>/<env_key>") a transferred or shared config was verified for first;
        # null before version 6: search, from nowhere else.
        added_column(pa.field("origin", pa.string(), nullable=True), 6),
        added_column(pa.field("transferred_from", pa.string(), nullable=True), 6),
    ]),
)
