"""The confidence level each interval the dashboards show was taken at (a row's `ci_level`):
the loop's own (vocabulary.confidence), a store entry's by who wrote it, and the realized
speedups' (ranking.realized), which the dashboards compute themselves."""

from __future__ import annotations

from vocabulary.confidence import VALIDATED_LEVEL, VERIFIED_LEVEL

# A store entry's interval is its writer's: the tuner's verification, or the validator's
# re-measurement. An imported entry's interval is as its owner gave it, at no stated level.
ENTRY_LEVELS = {"tuner": VERIFIED_LEVEL, "validator": VALIDATED_LEVEL}
REALIZED_LEVEL = 0.99  # the confidence of the realized speedups' intervals over jobs
