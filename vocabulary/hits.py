"""What the compiler hook did at a compile (`HitOutcome`, the `outcome` of a hit record), and
the one rule of what "ran tuned" means, for a hit and for a profiled run.

A hit ran tuned when its compile applied the entry's config (APPLIED; `hit_ran_tuned` over a
table of hits). A profiled run carries the entry that served its program (`config_key`) on
either arm, and whether that was the entry's holdout arm (`holdout`: its hit's outcome was
HOLDOUT, the defaults): so a run ran tuned when it names an entry and is not of the holdout arm
(`ran_tuned`, and `ran_tuned_sql` for the dashboards' and the reference's SQL)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from vocabulary.closed_set import ClosedSet


class HitOutcome(ClosedSet):
    """What the hook did at a compile, as its hit record says (`ingest.tables.HITS`)."""

    APPLIED = "applied"  # the entry's config compiled: the program ran tuned
    HOLDOUT = "holdout"  # an entry, but this job is in its holdout arm: the defaults compiled
    MISS = "miss"  # no entry for the key
    FALLBACK = "fallback"  # the tuned compile failed; the defaults compiled after it
    REFUSED = "refused"  # the entry or its config was refused here (allowlist, sandbox)
    NO_STORE = "no store"  # the home has published no store yet (before it: ERROR); defaults
    ERROR = "error"  # the hook could not look up or key the module; the defaults compiled

    @property
    def ran_tuned(self) -> bool:
        """Whether the compiled program is the entry's config's."""
        return self is HitOutcome.APPLIED

    @property
    def tried(self) -> bool:
        """Whether the compile tried the entry's config: applied, or failed and fell back (the
        failed compile is a cost of the entry)."""
        return self in (HitOutcome.APPLIED, HitOutcome.FALLBACK)

    @property
    def served(self) -> bool:
        """Whether an entry served the compile, on either arm: its runs name the entry."""
        return self in (HitOutcome.APPLIED, HitOutcome.HOLDOUT)


# The outcomes of which each property holds, in declaration order: the value sets of Arrow
# filters and SQL IN-lists.
RAN_TUNED = tuple(outcome for outcome in HitOutcome if outcome.ran_tuned)
TRIED = tuple(outcome for outcome in HitOutcome if outcome.tried)
SERVED = tuple(outcome for outcome in HitOutcome if outcome.served)


def sql_list(outcomes: tuple[HitOutcome, ...]) -> str:
    """`outcomes` as an SQL IN-list: `('applied', 'fallback')`."""
    return "(" + ", ".join(f"'{outcome}'" for outcome in outcomes) + ")"


def hit_ran_tuned(hits: pa.Table) -> pa.ChunkedArray:
    """Which of `hits` (rows of `hits`) ran tuned, by their outcome."""
    return pc.is_in(hits.column("outcome"), value_set=pa.array(RAN_TUNED, pa.string()))


def ran_tuned(runs: pa.Table) -> pa.ChunkedArray:
    """Which of `runs` (rows of `graph_runs` or `op_runs`) ran tuned: they name an entry, and
    not as its holdout arm (where the table has `holdout`: op runs have no holdout arm)."""
    tuned = pc.is_valid(runs.column("config_key"))
    if "holdout" in runs.column_names:
        tuned = pc.and_(tuned, pc.invert(pc.fill_null(runs.column("holdout"), False)))
    return tuned


def ran_tuned_sql(holdout: bool = True) -> str:
    """`ran_tuned` as an SQL condition over a runs table's columns; `holdout`: whether the
    table has the column (graph runs do, op runs not)."""
    return "(config_key is not null and not coalesce(holdout, false))" if holdout else "(config_key is not null)"
