"""The tables the tuner writes, declared once: every trial (TRIALS, a row a `TrialRow`), and one
result per task (TUNING_RESULTS, a row a `ResultRow`).

Each record's fields are its table's columns, in order; `from_row` reads a row of any version
the table still reads (a column added since reads null, and a null read as the table's comment
says: an origin as a search, a measure mode as whole, a status carrying its reason after a
colon as its verdict and reason), `to_row` writes the current version's. Tables of rows become
records through `trials_of` and `results_of`; `tuner.persist.land_result` writes records.
Nothing reads these tables as dict rows (tests/project/test_architecture.py checks it).
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa

from storage.warehouse import TableSchema, added_column
from vocabulary.interval import Interval
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind, Origin, StopReason, TrialOutcome, Verdict

# Version 3: how the task measured its graph (`measure_mode`, vocabulary.measure.MeasureMode).
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
        # whole | per device (vocabulary.measure.MeasureMode); null before version 3: whole.
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
# Version 7: the task's seconds in all (`seconds`: `tuner.task_seconds`).
TUNING_RESULTS = TableSchema(
    name="tuning_results",
    version=7,
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
        # whole | per device (vocabulary.measure.MeasureMode): whole is the program the job runs,
        # on the devices it spans; per device, its per-device program on one device. Null before
        # version 5: whole.
        added_column(pa.field("measure_mode", pa.string(), nullable=True), 5),
        # Why the search ended: budget | stalled | time | exhausted (vocabulary.tuning.StopReason);
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
        # The task's seconds in all (`TuneResult.seconds`: its phases'); a shared result's are
        # its source task's. Null where the phases were not told, or landed before version 7.
        added_column(pa.field("seconds", pa.float64(), nullable=True), 7),
    ]),
)


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One row of TRIALS: a config a task's search tried, and how it fared against the default.
    `speedup`, `ci_low`, `ci_high` as the table holds them (`interval`: the three together);
    null for a trial not timed (failed), or one landed without its bounds."""

    dt: datetime.date  # the day its task landed
    trial_id: str  # hash(task, index): idempotent
    task_id: str
    kind: Kind
    fingerprint: str
    env_key: str
    strategy: str
    index: int  # order within the search
    config: str  # JSON of the flags
    program: str | None = None  # what it compiled to (a key: equal keys run the same code)
    outcome: TrialOutcome
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    numerics_ok: bool | None = None
    compile_seconds: float | None = None
    error: str | None = None
    finished_at: datetime.datetime | None = None  # None: landed before version 2
    elapsed_seconds: float | None = None  # seconds into its task (None: before version 2)
    measure_mode: MeasureMode = MeasureMode.WHOLE  # a null (before version 3) reads whole

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TrialRow:
        """The trial of a row of TRIALS (Arrow's Python values), of any version the table reads
        (a column it lacks reads as null; those beyond TRIALS' are ignored). ValueError: a
        column that may not be null is, or an outcome, kind or measure mode that is none."""
        values = _values(TRIALS, row)
        values.update(kind=Kind(values["kind"]), outcome=TrialOutcome(values["outcome"]),
                      measure_mode=MeasureMode(values["measure_mode"] or MeasureMode.WHOLE))
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """The row of TRIALS, columns in its order, enums as their text."""
        return _row(TRIALS, self)

    @property
    def interval(self) -> Interval | None:
        """The speedup over the default with its bounds; None where any of them is null."""
        return _interval(self.speedup, self.ci_low, self.ci_high)


@dataclass(frozen=True, kw_only=True)
class ResultRow:
    """One row of TUNING_RESULTS: how a tuning task ended (`tuner.result.TuneResult`, less its
    trials and phases). The speedups as the table holds them, each with its bounds
    (`interval`, `relaxed_interval`: the three together)."""

    dt: datetime.date  # the day the task landed
    task_id: str
    kind: Kind
    fingerprint: str
    env_key: str
    config: str  # JSON of the flags; {} when nothing beat the default
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    numerics_ok: bool | None = None
    compiler_version: str
    accepted: bool
    status: Verdict
    strategy: str
    evaluations: int  # configs timed or failed, every phase (version 1: every config tried)
    measured: int  # those timed to a result
    seconds_to_best: float | None = None
    relaxed_config: str | None = None  # JSON of the opt-in config that relaxes numerics
    relaxed_speedup: float | None = None
    relaxed_ci_low: float | None = None
    relaxed_ci_high: float | None = None
    autotune_results: str | None = None  # a kernels task's, in XLA's text format
    reason: str | None = None  # the status's details (before version 5: after its colon)
    numerics: str | None = None  # JSON of the outputs that failed
    measure_mode: MeasureMode = MeasureMode.WHOLE  # a null (before version 5) reads whole
    search_stop: StopReason | None = None  # None: no search ran, or landed before version 5
    budget_share: float | None = None
    budget_reason: str | None = None
    origin: Origin = Origin.SEARCH  # a null (before version 6) reads as a search
    transferred_from: str | None = None  # "<fingerprint>/<env_key>"
    seconds: float | None = None  # None: not told, or landed before version 7

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ResultRow:
        """The result of a row of TUNING_RESULTS (Arrow's Python values), of any version the
        table reads (a column it lacks reads as null; those beyond its columns are ignored); a
        status without its own reason column ("default fails: <reason>") reads as its verdict
        and reason (`Verdict.parse`). ValueError: a column that may not be null is, or a
        status, kind, measure mode, stop or origin that is none."""
        values = _values(TUNING_RESULTS, row)
        if values["reason"] is None:
            status, reason = Verdict.parse(values["status"])
            values.update(status=status, reason=reason or None)
        else:
            values["status"] = Verdict(values["status"])
        stop = values["search_stop"]
        values.update(kind=Kind(values["kind"]), search_stop=StopReason(stop) if stop is not None else None,
                      measure_mode=MeasureMode(values["measure_mode"] or MeasureMode.WHOLE),
                      origin=Origin(values["origin"] or Origin.SEARCH))
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """The row of TUNING_RESULTS, columns in its order, enums as their text."""
        return _row(TUNING_RESULTS, self)

    @property
    def interval(self) -> Interval | None:
        """The verified speedup over the default with its bounds; None where any is null."""
        return _interval(self.speedup, self.ci_low, self.ci_high)

    @property
    def relaxed_interval(self) -> Interval | None:
        """The opt-in config's verified speedup with its bounds; None where any is null."""
        return _interval(self.relaxed_speedup, self.relaxed_ci_low, self.relaxed_ci_high)


def trials_of(table: pa.Table) -> list[TrialRow]:
    """The trials of a table of TRIALS' columns (a read of it, filtered or not), in its order;
    ValueError naming the first row refused (see TrialRow.from_row)."""
    return [TrialRow.from_row(row) for row in table.to_pylist()]


def results_of(table: pa.Table) -> list[ResultRow]:
    """The results of a table of TUNING_RESULTS' columns (a read of it, filtered or not), in its
    order; ValueError naming the first row refused (see ResultRow.from_row)."""
    return [ResultRow.from_row(row) for row in table.to_pylist()]


def _values(table: TableSchema, row: Mapping[str, Any]) -> dict[str, Any]:
    """The value of each of `table`'s columns in `row` (null where it lacks one); ValueError
    naming the row and the columns that may not be null and are."""
    values = {name: row.get(name) for name in table.schema.names}
    missing = [f.name for f in table.schema if not f.nullable and values[f.name] is None]
    if missing:
        where = values.get("trial_id") or values.get("task_id")
        raise ValueError(f"{table.name} row {where}: no {', '.join(missing)}")
    return values


def _row(table: TableSchema, record: Any) -> dict[str, Any]:
    """`record`'s fields as a row of `table`: its columns in order, each enum its text."""
    return {name: value.value if isinstance(value := getattr(record, name), enum.Enum) else value
            for name in table.schema.names}


def _interval(estimate: float | None, low: float | None, high: float | None) -> Interval | None:
    if estimate is None or low is None or high is None:
        return None
    return Interval(estimate, low, high)
