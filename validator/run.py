"""A validation run's durable state under `<home>/validator/runs/<run_id>/`: `run.json` (the
toolchain and compiler it runs under), `journal.jsonl` (one fsynced record per decision, then
one when published: tuner.journal) and `done.json`. A run that has no `done.json` is resumed by
the next run under the same toolchain and compiler.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from delivery.store import Store
from storage.home import Home, LockHeld, atomic_write
from storage.warehouse import Warehouse
from tuner.journal import append_record, read_records
from validator import decisions as rules
from validator.decisions import Decision
from validator.tables import VALIDATIONS
from validator.toolchains import Toolchain


class ValidatorBusy(LockHeld):
    """Another validation run holds this home."""


class Run:
    """One run's journal: its decisions so far, and whether (and as which version) it published."""

    def __init__(self, directory: Path, resumed: bool) -> None:
        self.directory = directory
        self.run_id = directory.name
        self.resumed = resumed
        self.decisions: list[Decision] = []
        self.published: dict[str, Any] | None = None
        for record in read_records(self.journal):
            if "decision" in record:
                self.decisions.append(Decision.from_json(record["decision"]))
            else:
                self.published = record

    @property
    def journal(self) -> Path:
        return self.directory / "journal.jsonl"

    @classmethod
    def open(cls, home: Path, chain: Toolchain) -> "Run":
        """The unfinished run of this toolchain and compiler, or a new one."""
        runs = home / "validator" / "runs"
        for directory in sorted(runs.glob("*"), reverse=True):
            meta = directory / "run.json"
            if (directory / "done.json").exists() or not meta.exists():
                continue
            started = json.loads(meta.read_text())
            if (started["toolchain"], started["compiler_version"]) == (chain.name, chain.compiler_version):
                return cls(directory, resumed=True)
        now = datetime.datetime.now(datetime.UTC)
        directory = runs / f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        directory.mkdir(parents=True)
        _write_atomic(directory / "run.json", {"toolchain": chain.name, "python": chain.python,
                                               "compiler_version": chain.compiler_version,
                                               "started_at": now.isoformat()})
        return cls(directory, resumed=False)

    def record(self, decision: Decision) -> None:
        """Journal one decision (durably) before going on."""
        append_record(self.journal, {"decision": decision.to_json()})
        self.decisions.append(decision)

    def publish(self, store: Store) -> None:
        """Apply the decisions to the live entries as one new version; journal the outcome."""
        statuses: list[str] = [rules.APPLIED] * len(self.decisions)

        def change(live: pa.Table) -> pa.Table:
            table, found = rules.apply(self.decisions, live)
            statuses[:] = found
            return table

        version = None
        if any(d.change != rules.NONE for d in self.decisions):
            counts = Counter(d.outcome for d in self.decisions)
            summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            version = store.update(change, f"validate {self.run_id}: {summary}")
            # Nothing left to change: this run published before a kill cut it short, or it
            # changes nothing. Its own version, if any, holds the decisions.
            version = version or next((m.version for m in store.versions()
                                       if m.reason.startswith(f"validate {self.run_id}:")), None)
        record = {"version": version if version is not None else store.current(),
                  "published": version is not None, "statuses": statuses}
        append_record(self.journal, record)
        self.published = record

    def land(self, warehouse: Warehouse) -> None:
        """The audit rows, once (the part is named after the run), then mark the run done."""
        rows = [rules.audit_row(d, self.run_id, self.published["version"], status)
                for d, status in zip(self.decisions, self.published["statuses"]) if d.audited]
        if rows:
            warehouse.append(VALIDATIONS, pa.Table.from_pylist(rows, VALIDATIONS.schema), f"run-{self.run_id}")
        _write_atomic(self.directory / "done.json", {"version": self.published["version"],
                                                     "decisions": len(rows)})


def exclusive(home: Path) -> contextlib.AbstractContextManager[None]:
    """Hold the home's validator lock; ValidatorBusy if another run has it."""
    return Home.of(home).lock(home / "validator" / ".lock", "validation run", wait=False, error=ValidatorBusy)


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data) + "\n")
