"""How the vocabulary spells its values, one style for every closed set: lower-case words
separated by single spaces ("no store", "default fails", "per device"), as people read them in a
status line, a table's column, a dashboard. Every enum of the vocabulary is a `ClosedSet`.

Earlier versions wrote some values with underscores or a hyphen for their spaces
("default_fails", "per-device"): a ClosedSet reads such a spelling as its member, so every file
written before still reads, and what is written now is in the one style. An enum whose value was
renamed reads its former value too (`Applied`: "applied")."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ClosedSet(StrEnum):
    """A closed set of the loop: a StrEnum whose values are lower-case words separated by
    spaces, that reads a value spelled with underscores or hyphens for its spaces as its member
    (`HitOutcome("no_store")`, `MeasureMode("per-device")`)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            spaced = " ".join(value.replace("_", " ").replace("-", " ").split())
            for member in cls:
                if member.value == spaced:
                    return member
        return None
