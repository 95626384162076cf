"""Hit records: what the compiler hook saw at each compile, from its spool into the `hits` table.

The hook (delivery.hook) runs inside users' jobs, so it only appends JSON lines to a spool file
of its own process: `<home>/spool/hits/<host>-<pid>-<start>.jsonl`, one object per compile with
the columns of HITS (`at` as ISO 8601). Ingestion claims a file once its writer is gone (a dead
pid on this host, or no write for a day), lands its good lines as one part named after the file
(so a rerun adds nothing), quarantines bad lines with the reason, then removes the file. A
spool file that cannot be read is quarantined (and left in place) and the others land.
`read_hits` shows landed and still-spooled records together, for `fdo hits`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.inputs import INPUT_ERRORS, reason
from ingest.quarantine import Quarantine, Quarantined
from ingest.tables import HITS
from storage.home import Home, process_alive
from storage.warehouse import Warehouse, split_rows

SPOOL_DIR = Path("spool") / "hits"
OUTCOMES = ("applied", "miss", "fallback", "refused", "error")
STALE_SECONDS = 86400.0
MAX_LINE_BYTES = 1 << 16


def spool_path(home: Path, started: float | None = None) -> Path:
    """The spool file of the calling process."""
    started = time.time() if started is None else started
    return Path(home) / SPOOL_DIR / f"{socket.gethostname()}-{os.getpid()}-{int(started * 1000)}.jsonl"


def to_line(record: dict[str, Any]) -> str:
    """One spool line for a record with HITS's columns (`at` a datetime, `dt` derived from it)."""
    data = {k: v for k, v in record.items() if k != "dt"}
    data["at"] = record["at"].isoformat()
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


@dataclass
class HitReport:
    """What one hit ingestion did."""

    files: int = 0
    rows: int = 0
    waiting: int = 0  # files whose writer is still running
    quarantined: list[Quarantined] = field(default_factory=list)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"files": self.files, "rows": self.rows, "waiting": self.waiting,
                "quarantined": [q.__dict__ for q in self.quarantined]}


def ingest_hits(home: Home, now: float | None = None) -> HitReport:
    """Land every finished spool file of `home` (a local one) in the `hits` table."""
    home = Home.of(home).local("fdo ingest hits")
    warehouse, quarantine = Warehouse(home), Quarantine(home)
    report = HitReport()
    for path in sorted((home / SPOOL_DIR).glob("*.jsonl")):
        try:
            if not _finished(path, now):
                report.waiting += 1
                continue
            rows, bad, reasons = parse_spool(path)
        except INPUT_ERRORS as exc:
            report.quarantined.append(quarantine.put_file(path, reason(path, exc)))
            continue
        warehouse.append(HITS, pa.Table.from_pylist(rows, HITS.schema), f"spool-{path.stem}")
        if bad:
            report.quarantined.append(quarantine.put_rows(
                path, path.stem, pa.table({"line": bad}), reasons))
        report.files += 1
        report.rows += len(rows)
        path.unlink()
    return report


def read_hits(home: Home) -> pa.Table:
    """Every hit record of `home` (a local one): landed ones and those still in the spool."""
    home = Home.of(home).local("reading hits")
    landed = Warehouse(home).read(HITS)
    spooled = []
    for path in sorted((home / SPOOL_DIR).glob("*.jsonl")):
        try:
            spooled += parse_spool(path)[0]
        except OSError:  # unreadable: ingest_hits quarantines it; the others still show
            continue
    if not spooled:
        return landed
    return pa.concat_tables([landed, pa.Table.from_pylist(spooled, landed.schema)])


def parse_spool(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """(good rows, bad lines, a reason per bad line) of one spool file. A torn last line, from
    a writer killed mid-write, is bad like any other."""
    good, bad, reasons = [], [], []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if not line.strip():
                continue
            try:
                good.append(_row(line))
            except ValueError as exc:
                bad.append(line[:MAX_LINE_BYTES])
                reasons.append(f"{path.name}:{number}: {exc}")
    return good, bad, reasons


def _row(line: str) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"line over {MAX_LINE_BYTES} bytes")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("outcome") not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}")
    try:
        at = datetime.datetime.fromisoformat(data["at"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("at must be an ISO 8601 time") from None
    if at.tzinfo is None:
        raise ValueError("at needs a time zone")
    row = {name: data.get(name) for name in HITS.schema.names}
    row.update(at=at, dt=at.astimezone(datetime.UTC).date())
    missing = [f.name for f in HITS.schema if not f.nullable and row[f.name] is None]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        typed = pa.Table.from_pylist([row], HITS.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise ValueError(f"does not fit the hits schema: {exc}") from None
    _, bad, reasons = split_rows(typed, HITS.row_checks(typed))
    if bad.num_rows:
        raise ValueError(reasons[0])
    return row


def _finished(path: Path, now: float | None) -> bool:
    host, _, rest = path.stem.rpartition("-")[0].rpartition("-")
    idle = (time.time() if now is None else now) - path.stat().st_mtime
    if idle > STALE_SECONDS:
        return True
    if host != socket.gethostname() or not rest.isdigit():
        return False
    return not process_alive(int(rest))
