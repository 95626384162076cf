"""Who wrote a store entry last (`Provenance`, the `provenance` of the store's entries,
`storage.store_schema.ENTRIES`)."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class Provenance(ClosedSet):
    """Who wrote a store entry last: deliver, from a tuning result (TUNER); the validator,
    re-measured or re-keyed (VALIDATOR); an owner's import, a file or the service (IMPORT)."""

    TUNER = "tuner"
    VALIDATOR = "validator"
    IMPORT = "import"
