"""Which rows of the hits and runs tables ran tuned, by the one rule `vocabulary.hits` states
(`HitOutcome.ran_tuned`, `run_ran_tuned`), as Arrow filters (`hit_ran_tuned`, `ran_tuned`) and
as SQL conditions (`ran_tuned_sql`, `sql_list`) for the dashboards' and the reference's SQL.
Beside the tables they read (`ingest.tables`: HITS, GRAPH_RUNS, OP_RUNS); the vocabulary holds
no SQL and no Arrow."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from vocabulary.hits import RAN_TUNED


def sql_list(values: Iterable[str]) -> str:
    """Values of a closed set (HitOutcome's `TRIED`, Kinds) as an SQL IN-list:
    `('applied', 'fallback')`. Their values are words, never a quote."""
    return "(" + ", ".join(f"'{value}'" for value in values) + ")"


def hit_ran_tuned(hits: pa.Table) -> pa.ChunkedArray:
    """Which of `hits` (rows of `hits`) ran tuned, by their outcome (`HitOutcome.ran_tuned`)."""
    return pc.is_in(hits.column("outcome"), value_set=pa.array(RAN_TUNED, pa.string()))


def ran_tuned(runs: pa.Table) -> pa.ChunkedArray:
    """Which of `runs` (rows of `graph_runs` or `op_runs`) ran tuned (`run_ran_tuned`): they
    name an entry, and not as its holdout arm (where the table has `holdout`: op runs have no
    holdout arm)."""
    tuned = pc.is_valid(runs.column("config_key"))
    if "holdout" in runs.column_names:
        tuned = pc.and_(tuned, pc.invert(pc.fill_null(runs.column("holdout"), False)))
    return tuned


def ran_tuned_sql(holdout: bool = True) -> str:
    """`ran_tuned` as an SQL condition over a runs table's columns; `holdout`: whether the
    table has the column (graph runs do, op runs not)."""
    return "(config_key is not null and not coalesce(holdout, false))" if holdout else "(config_key is not null)"
