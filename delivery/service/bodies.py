"""The config service's request and answer bodies as pydantic models: FastAPI checks the request
bodies against them, and /openapi.json (so the docs pages) shows every one.

Strict models: a value of the wrong type is refused, never converted (a version of true or
"3", a key that is a number). A served entry is the JSON form of the store's entry record
(storage.store_schema.StoreEntry.to_json), its columns' types the store's own declaration (ENTRIES),
its configs JSON objects, its holdout_share the effective one (the entry's, else its
version's), and beside them its version's relaxed_numerics_teams.
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, create_model

from delivery.imports import Hex32, ImportEntry
from storage.store_schema import ENTRIES, StoreEntry

MAX_BATCH_KEYS = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class BatchRequest(_Strict):
    """Store keys to look up at once."""

    keys: list[Hex32] = Field(max_length=MAX_BATCH_KEYS)


class InvalidateRequest(_Strict):
    """Store keys whose entries to remove."""

    keys: list[Hex32] = Field(min_length=1, max_length=MAX_BATCH_KEYS)


class RollbackRequest(_Strict):
    """The version whose entries to make live again."""

    version: int = Field(ge=1)


class ImportRequest(_Strict):
    """Owner-validated configs to import (the lines of `fdo store import`, as a list)."""

    entries: list[ImportEntry] = Field(min_length=1)


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema with the models it holds written in place: for a request body
    that FastAPI documents but does not parse (an operation's schema cannot refer to
    definitions of its own)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(definitions[node["$ref"].rsplit("/", 1)[1]])
            return {key: resolve(value) for key, value in node.items()}
        return [resolve(item) for item in node] if isinstance(node, list) else node

    return resolve(schema)


def _python_type(field: pa.Field) -> Any:
    if field.name in StoreEntry.CONFIG_FIELDS:
        return dict[str, Any] | None
    if pa.types.is_timestamp(field.type):
        return datetime.datetime | None
    return {pa.string(): str, pa.float64(): float}[field.type] | None


# Any: create_model's keywords are the fields and its own options (`__base__`, ...) alike.
_ENTRY_FIELDS: dict[str, Any] = {field.name: (_python_type(field), ...) for field in ENTRIES}
StoredEntry = create_model("StoredEntry", __doc__="A store entry: the columns of its version's "
                           "entries.parquet, and its version's teams whose jobs take its relaxed config.",
                           **_ENTRY_FIELDS, relaxed_numerics_teams=(list[str], ...))


class Lookup(BaseModel):
    """The live entry for a key, and the version that holds it."""

    version: int
    entry: StoredEntry  # type: ignore[valid-type]  # made by create_model


class BatchLookup(BaseModel):
    """The entry for each key asked for (null where there is none), from one version."""

    version: int | None
    entries: dict[str, StoredEntry | None]  # type: ignore[valid-type]


class Published(BaseModel):
    """The store version a write published (null: nothing changed)."""

    version: int | None


class Imported(Published):
    """The store version an import published, and how many entries it took."""

    imported: int


class Health(BaseModel):
    """What the service serves, and whether the store on disk is usable."""

    status: Literal["ok", "degraded", "unavailable"]
    version: int | None
    entries: int
    store: str = Field(description='"ok", or "degraded: " and the reason')


class ErrorDetail(BaseModel):
    """What went wrong: a short code and a sentence."""

    code: str
    message: str


class ErrorAnswer(BaseModel):
    """Every error the service answers with."""

    error: ErrorDetail
