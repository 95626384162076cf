"""What the compiler hook did at a compile (`HitOutcome`, the `outcome` of a hit record), and
the one rule of what "ran tuned" means, for a hit and for a profiled run.

A hit ran tuned when its compile applied the entry's config (APPLIED: `HitOutcome.ran_tuned`).
A profiled run carries the entry that served its program (`config_key`) on either arm, and
whether that was the entry's holdout arm (`holdout`: its hit's outcome was HOLDOUT, the
defaults): so a run ran tuned when it names an entry and is not of the holdout arm
(`run_ran_tuned`). The same rule over the tables, as Arrow filters and SQL conditions, lives
beside them: `ingest.ran_tuned`."""

from __future__ import annotations

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
# filters and SQL IN-lists (`ingest.ran_tuned`).
RAN_TUNED = tuple(outcome for outcome in HitOutcome if outcome.ran_tuned)
TRIED = tuple(outcome for outcome in HitOutcome if outcome.tried)
SERVED = tuple(outcome for outcome in HitOutcome if outcome.served)


def run_ran_tuned(config_key: str | None, holdout: bool | None = None) -> bool:
    """Whether a profiled run ran tuned: it names an entry (`config_key`), and not as its
    holdout arm (`holdout`; null, or a run of a table without the column: not held out)."""
    return config_key is not None and not holdout
