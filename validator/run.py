"""A validation run's durable state under `<home>/validator/runs/<run_id>/`: `run.json` (the
toolchain and compiler it runs under), `journal.jsonl` (one durable record per decision, then
one when published: storage.journal) and `done.json`. A run that has no `done.json` is resumed by
the next run under the same toolchain and compiler. The home may be local or a URL.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import secrets
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from delivery.store_writer import Store
from storage.home import Home, LockHeld
from storage.home_factory import open_home
from storage.journal import append_record, read_records
from storage.warehouse import Warehouse
from validator import rules
from validator.rules import Decision
from validator.tables import VALIDATIONS
from validator.toolchains import Toolchain
from vocabulary.decisions import Applied, StoreChange

_RUNS = ("validator", "runs")  # where the runs live under the home


class ValidatorBusy(LockHeld):
    """Another validation run holds this home."""


@dataclass(frozen=True)
class Publication:
    """How a run published, as its journal's last record holds it: the store version that holds
    its decisions (None: there is no version at all), whether the run published that version
    itself, and how each decision applied, in the order they were journaled."""

    version: int | None
    published: bool
    statuses: tuple[Applied, ...]

    def to_json(self) -> dict[str, Any]:
        """The journal's record."""
        return {"version": self.version, "published": self.published, "statuses": list(self.statuses)}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Publication:
        """Back from the journal."""
        return cls(record["version"], record["published"], tuple(Applied(s) for s in record["statuses"]))


class Run:
    """One run's journal: its decisions so far, and whether (and as which version) it published."""

    def __init__(self, home: Home, run_id: str, resumed: bool) -> None:
        self.home, self.run_id, self.resumed = home, run_id, resumed
        self.journal = self.file("journal.jsonl")
        self.decisions: list[Decision] = []
        self.published: Publication | None = None
        for record in read_records(home, self.journal):
            if "decision" in record:
                self.decisions.append(Decision.from_json(record["decision"]))
            else:
                self.published = Publication.from_json(record)

    @property
    def writer(self) -> str:
        """Who the store versions this run publishes name as their writer (`Manifest.writer`)."""
        return f"validator/{self.run_id}"

    def file(self, name: str) -> Any:
        """The location of the run's file `name`."""
        return run_file(self.home, self.run_id, name)

    @classmethod
    def open(cls, home: Home, chain: Toolchain) -> "Run":
        """The unfinished run of this toolchain and compiler, or a new one."""
        home = open_home(home)
        # Two listings, whatever the number of past runs (on an object store, a request each).
        done = {_run_of(location) for location in home.glob("/".join((*_RUNS, "*", "done.json")))}
        for meta in reversed(home.glob("/".join((*_RUNS, "*", "run.json")))):
            run_id = _run_of(meta)
            if run_id in done:
                continue
            started = json.loads(home.read_bytes(meta))
            if (started["toolchain"], started["compiler_version"]) == (chain.name, chain.compiler_version):
                return cls(home, run_id, resumed=True)
        now = datetime.datetime.now(datetime.UTC)
        run_id = f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        _write_json(home, run_file(home, run_id, "run.json"),
                    {"toolchain": chain.name, "python": chain.python,
                     "compiler_version": chain.compiler_version, "started_at": now.isoformat()})
        return cls(home, run_id, resumed=False)

    def record(self, decision: Decision) -> None:
        """Journal one decision (durably) before going on."""
        append_record(self.home, self.journal, {"decision": decision.to_json()})
        self.decisions.append(decision)

    def publish(self, store: Store) -> None:
        """Apply the decisions to the live entries as one new version; journal the outcome."""
        statuses: list[Applied] = [Applied.IN_EFFECT] * len(self.decisions)

        def change(live: pa.Table) -> pa.Table:
            table, found = rules.apply(self.decisions, live)
            statuses[:] = found
            return table

        version = None
        if any(d.change != StoreChange.NONE for d in self.decisions):
            counts = Counter(d.outcome for d in self.decisions)
            summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            version = store.update(change, f"validate {self.run_id}: {summary}", writer=self.writer)
            # Nothing left to change: this run published before a kill cut it short, or it
            # changes nothing. Its own version, if any, holds the decisions.
            version = version or next((m.version for m in store.versions() if m.writer == self.writer), None)
        publication = Publication(version if version is not None else store.current(), version is not None,
                                  tuple(statuses))
        append_record(self.home, self.journal, publication.to_json())
        self.published = publication

    def land(self, warehouse: Warehouse) -> Publication:
        """The audit rows, once (the part is named after the run), then mark the run done; how
        it published. ValueError if it has not published yet (`publish`)."""
        published = self.published
        if published is None:
            raise ValueError(f"validation run {self.run_id} lands before it published")
        rows = [rules.audit_row(d, self.run_id, published.version, status)
                for d, status in zip(self.decisions, published.statuses) if d.audited]
        if rows:
            warehouse.append(VALIDATIONS, pa.Table.from_pylist(rows, VALIDATIONS.schema), f"run-{self.run_id}")
        _write_json(self.home, self.file("done.json"), {"version": published.version, "decisions": len(rows)})
        return published


def _run_of(location: Any) -> str:
    """The run id of a run's file, from its location (a Path or a URL)."""
    return str(location).split("/")[-2]


def run_file(home: Home, run_id: str, name: str) -> Any:
    """The location of file `name` of run `run_id` under `home`."""
    return home.location(*_RUNS, run_id, name)


def exclusive(home: Home) -> contextlib.AbstractContextManager[None]:
    """Hold the home's validator lock; ValidatorBusy if another run has it (on a URL home, in
    this process: see `storage.home`)."""
    return home.lock(home.location("validator", ".lock"), "validation run", wait=False, error=ValidatorBusy)


def _write_json(home: Home, location: Any, data: dict[str, Any]) -> None:
    home.atomic_write(location, json.dumps(data) + "\n")
