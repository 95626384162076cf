"""Owner-validated configs into the store (CATWILD 5.2): what an import entry is, declared once
as a pydantic model (`ImportEntry`, which the service's OpenAPI schema shows too), read from a
JSON-lines file (`fdo store import`) or from the service's `POST /v1/import` body, and made into
store rows. An entry may carry XLA:GPU per-fusion autotune results (execution.autotune.results),
checked as XLA's own protos on the way in.

A module apart from delivery.store_writer: the compiler hook's embedded look-ups import the store
inside users' jobs, and pydantic is no part of those.
"""

from __future__ import annotations

import datetime
import json
import typing
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Sequence

import pyarrow as pa
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from delivery.store_writer import DEFAULT_TTL, Store, StoreError, merge_entries
from execution.autotune.results import MAX_RESULTS, ResultsError, parse_results
from execution.flags import FlagError, checked_config, to_json
from hlo.environment import store_key
from storage.home import Home
from storage.store_schema import MAX_HOLDOUT_SHARE, StoreEntry, check_holdout_share, entries_table
from vocabulary.store import Provenance
from vocabulary.tuning import Kind

MAX_IMPORT_BYTES = 16 << 20
Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class ImportEntry(BaseModel):
    """One config to import. Strict: no value is coerced from another type (a speedup of
    "1.5" or true is refused, not converted); fields beyond these are ignored."""

    model_config = ConfigDict(strict=True)

    fingerprint: Hex32 = Field(description="the graph's (or op's) fingerprint, 32 lowercase hex digits")
    env_key: Hex32 = Field(description="the environment key, 32 lowercase hex digits")
    kind: Literal[Kind.GRAPH, Kind.OP]  # a GPU graph's kernel configs come from its own task only
    config: dict[str, Any] = Field(description="flag: value, every flag on the allowlist and its value "
                                               "in the flag's domain", examples=[{"xla_cpu_use_xnnpack": False}])
    speedup: float = Field(gt=0, le=100, allow_inf_nan=False, description="the speedup a hit is expected to give")
    expires_at: AwareDatetime | None = Field(None, description=f"ISO 8601 with a time zone; default: "
                                                               f"{DEFAULT_TTL.days} days after the import")
    holdout_share: float | None = Field(None, ge=0, le=MAX_HOLDOUT_SHARE,
                                        description="the share of jobs the compiler hook sends to the "
                                                    "defaults for this entry; default: the version's")
    autotune_results: str | None = Field(None, description="XLA:GPU per-fusion autotune results for the "
                                                           "graph: an xla.AutotuneResults in XLA's text format "
                                                           "(what xla_gpu_dump_autotune_results_to writes), known "
                                                           f"fields only, at most {MAX_RESULTS} results")

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        """The kind as given, or the error pydantic gives a Literal of strings, which names the
        values as JSON spells them (of members it names their reprs)."""
        kinds = typing.get_args(cls.model_fields["kind"].annotation)
        if value not in kinds:
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": " or ".join(f"'{kind}'" for kind in kinds)})
        return value

    @field_validator("holdout_share", mode="before")
    @classmethod
    def _share(cls, value: Any) -> Any:
        """The share as given, or an error naming the value (pydantic's own messages do not)."""
        if value is None:
            return value
        try:
            return check_holdout_share(value, "holdout_share")
        except ValueError:
            raise PydanticCustomError("holdout_share", "{value} refused: must be a number from 0 to {most}",
                                      {"value": repr(value), "most": MAX_HOLDOUT_SHARE}) from None

    @field_validator("autotune_results")
    @classmethod
    def _results(cls, text: str | None) -> str | None:
        """The results in their canonical text form, or an error saying what is refused."""
        if text is None:
            return text
        try:
            return parse_results(text).to_text()
        except ResultsError as exc:
            raise PydanticCustomError("autotune_results", "refused: {reason}", {"reason": str(exc)}) from None

    @field_validator("config")
    @classmethod
    def _allowlisted(cls, config: dict[str, Any]) -> dict[str, Any]:
        """The config in its JSON form, or an error naming the flag that is refused."""
        try:
            return to_json(checked_config(config))
        except FlagError as exc:
            raise PydanticCustomError("config_refused", "refused: {reason}", {"reason": str(exc)}) from None


def read_import(path: Path, now: datetime.datetime | None = None) -> pa.Table:
    """Entries from a JSON-lines file of `ImportEntry`s. StoreError names the line and the
    problem; nothing is imported from a file with a bad line."""
    try:
        if path.stat().st_size > MAX_IMPORT_BYTES:
            raise StoreError(f"{path}: over the {MAX_IMPORT_BYTES}-byte import limit")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                entries.append(ImportEntry.model_validate_json(line))
            except ValidationError as exc:
                raise StoreError(f"{path}:{number}: {describe(exc.errors())}") from None
    if not entries:
        raise StoreError(f"{path}: no entries")
    return entry_rows(entries, path.name, now)


def import_file(home: Home, path: Path) -> tuple[int | None, int]:
    """Publish the entries of the JSON-lines file `path` (`read_import`) in the store of `home`:
    `fdo store import`. Returns the new version (None: nothing changed) and the entries read."""
    new = read_import(path)
    return publish_import(home, new, f"import {path.name}"), new.num_rows


def publish_import(home: Home, new: pa.Table, reason: str) -> int | None:
    """Publish imported entries (`entry_rows`) as a new store version of `home`, each replacing
    the live entry of its key; returns the version (None: nothing changed)."""
    return Store(home).update(lambda live: merge_entries(live, new), reason)


def entry_rows(entries: Sequence[ImportEntry], source: str, now: datetime.datetime | None = None) -> pa.Table:
    """Store rows (ENTRIES) of imported entries, measured `now` and from `source`."""
    now = now or datetime.datetime.now(datetime.UTC)
    return entries_table(_entry(entry, source, now) for entry in entries)


def describe(errors: Iterable[ErrorDetails | dict[str, Any]], within: tuple[str, ...] = ()) -> str:
    """Pydantic's validation errors as one line, `where: problem; ...`, each place inside
    `within` (FastAPI's errors name the body already: ("body", "keys", 3))."""
    return "; ".join(f"{'.'.join(map(str, (*within, *error['loc'])))}: {error['msg']}" for error in errors)


def _entry(entry: ImportEntry, source: str, now: datetime.datetime) -> StoreEntry:
    """An imported entry: no interval, compiler or relaxed config of its own."""
    return StoreEntry(key=store_key(entry.fingerprint, entry.env_key), fingerprint=entry.fingerprint,
                      env_key=entry.env_key, kind=entry.kind, speedup=entry.speedup,
                      expires_at=entry.expires_at or now + DEFAULT_TTL, provenance=Provenance.IMPORT,
                      config=json.dumps(entry.config, sort_keys=True), measured_at=now, source=source,
                      holdout_share=entry.holdout_share, autotune_results=entry.autotune_results)
