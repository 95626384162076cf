"""What the validator decides on a store entry (`DecisionOutcome`), how the decision changes the
store (`StoreChange`), and how applying it went (`Applied`): the `outcome` of a `validations`
row, and the journal's."""

from __future__ import annotations

from typing import Any

from vocabulary.closed_set import ClosedSet


class DecisionOutcome(ClosedSet):
    """A validator decision on an entry (`validator.rules`). KEPT: re-measured on its own
    compiler and still faster; REKEYED: shown faster on another compiler, a new entry under its
    key; INVALIDATED: shown not faster, failing, or failing in the fleet; EXPIRED: past its
    expiry or its absolute lifetime; UNMEASURED: not measurable here (no symbols, an op-level
    config, another machine, ...), left as it is until it expires."""

    KEPT = "kept"
    REKEYED = "rekeyed"
    INVALIDATED = "invalidated"
    EXPIRED = "expired"
    UNMEASURED = "unmeasured"

    @property
    def renewed(self) -> bool:
        """Whether the config lives on in the store, measured now, with a fresh expiry."""
        return self in (DecisionOutcome.KEPT, DecisionOutcome.REKEYED)


class StoreChange(ClosedSet):
    """How a decision changes the store: REFRESH its entry (a new measurement and expiry),
    REMOVE it, ADD one under a new key (re-keyed to another compiler), or NONE."""

    REFRESH = "refresh"
    REMOVE = "remove"
    ADD = "add"
    NONE = "none"


class Applied(ClosedSet):
    """How applying a decision to the live entries went: IN_EFFECT, the store now holds what it
    decided (applied now, or a no-op: applied before), or STALE, the entry changed meanwhile and
    was left alone. Earlier versions wrote IN_EFFECT "applied" (the validator's run journals);
    it reads. The value was renamed so that "applied" means one thing in the loop, a hit's
    outcome (`vocabulary.hits.HitOutcome.APPLIED`: the entry's config compiled), which the
    warehouse's hits hold and its SQL filters on."""

    IN_EFFECT = "in effect"
    STALE = "stale"

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return cls.IN_EFFECT if value == "applied" else super()._missing_(value)
