"""Hit records: what the compiler hook saw at each compile, from its spool into the `hits` table.

The hook (delivery.hit_spool) runs inside users' jobs, so it only appends JSON lines to a spool
file of its own process: `<home>/spool/hits/<host>-<pid>-<start>.jsonl`, one object per compile,
a `Hit` (ingest.tables) with HITS's columns (`at` as ISO 8601, `dt` left out), read back with
`Hit.from_row`. Ingestion claims a file once its writer is gone (a dead pid on this host, or no
write for a day; on a URL home, at once: see `_finished`), lands its good lines as one part
named after the file and a digest of what it held (so a rerun adds nothing, and a file its
writer makes again under the same name after a day's pause lands too), quarantines bad lines
with the reason, then removes the file. A spool file that cannot be read is quarantined (and
left in place) and the others land.
`read_hits` shows landed and still-spooled records together, for `fdo hits`.

`holdout_arm` is the rule that sends a job's compiles of a key to the holdout arm (outcome
'holdout'): here, where the hook and the fleet simulator both reach it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.input_files import INPUT_ERRORS, reason
from ingest.quarantine import Quarantine, Quarantined, name_of
from ingest.tables import HITS, Hit
from storage.home import Home, process_alive
from storage.home_factory import open_home
from storage.warehouse import Warehouse, split_rows

SPOOL_DIR = Path("spool") / "hits"
STALE_SECONDS = 86400.0
MAX_LINE_BYTES = 1 << 16


def holdout_arm(job_id: str, key: str, share: float) -> bool:
    """Whether job `job_id` runs store key `key` with the compiler's defaults (the holdout arm)
    rather than the entry's config, when a `share` of jobs (0 to 1) is held out. Deterministic:
    every compile of a key in a job, and every run of a job under the same id, takes the same
    arm; over job ids a key's holdout arm holds `share` of them, independently per key."""
    digest = hashlib.blake2b(f"{job_id}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def spool_path(home: Path, started: float | None = None) -> Path:
    """The spool file of the calling process."""
    started = time.time() if started is None else started
    return Path(home) / SPOOL_DIR / f"{socket.gethostname()}-{os.getpid()}-{int(started * 1000)}.jsonl"


def to_line(record: dict[str, Any]) -> str:
    """One spool line for a record with HITS's columns (`Hit.to_row`: `at` a datetime, `dt`
    derived from it, so left out)."""
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
    """Land every finished spool file of `home` (local or a URL) in the `hits` table."""
    home = open_home(home)
    warehouse, quarantine = Warehouse(home), Quarantine(home)
    report = HitReport()
    for location in spool_files(home):
        try:
            if not _finished(home, location, now):
                report.waiting += 1
                continue
            data = home.read_bytes(location)
        except INPUT_ERRORS as exc:
            report.quarantined.append(quarantine.put_home_file(location, reason(location, exc)))
            continue
        rows, bad, reasons = parse_spool(name_of(location), data)
        digest = hashlib.sha256(data).hexdigest()[:16]
        part = f"spool-{name_of(location).removesuffix('.jsonl')}-{digest}"
        warehouse.append(HITS, pa.Table.from_pylist(rows, HITS.schema), part)
        if bad:
            report.quarantined.append(quarantine.put_rows(location, digest, pa.table({"line": bad}), reasons))
        report.files += 1
        report.rows += len(rows)
        home.delete([location])
    return report


def read_hits(home: Home) -> pa.Table:
    """Every hit record of `home` (local or a URL): landed ones and those still in the spool."""
    home = open_home(home)
    landed = Warehouse(home).read(HITS)
    spooled = []
    for location in spool_files(home):
        try:
            spooled += parse_spool(name_of(location), home.read_bytes(location))[0]
        except OSError:  # unreadable: ingest_hits quarantines it; the others still show
            continue
    if not spooled:
        return landed
    return pa.concat_tables([landed, pa.Table.from_pylist(spooled, landed.schema)])


def spool_files(home: Home) -> list[Any]:
    """The spool files of `home`, sorted."""
    return home.glob(f"{SPOOL_DIR.as_posix()}/*.jsonl")


def parse_spool(name: str, data: bytes) -> tuple[list[dict], list[str], list[str]]:
    """(good rows, bad lines, a reason per bad line) of `data`, the whole content of the spool
    file `name` (a file holds one short line per compile of one process). A torn last line, from
    a writer killed mid-write, is bad like any other."""
    good, bad, reasons = [], [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        try:
            good.append(_row(line))
        except ValueError as exc:
            bad.append(line[:MAX_LINE_BYTES])
            reasons.append(f"{name}:{number}: {exc}")
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
    row = Hit.from_row(data).to_row()  # ValueError: outcome, time, a missing column
    try:
        typed = pa.Table.from_pylist([row], HITS.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise ValueError(f"does not fit the hits schema: {exc}") from None
    _, bad, reasons = split_rows(typed, HITS.row_checks(typed))
    if bad.num_rows:
        raise ValueError(reasons[0])
    return row


def _finished(home: Home, location: Any, now: float | None) -> bool:
    """Whether the writer of a spool file is done with it.

    On a local home: when its pid is gone on this host, or (a writer of another host, sharing
    the home) it has not been written for STALE_SECONDS. On a URL home, as soon as it is
    listed: the hook appends to a local spool only, since object stores cannot append, so a
    spool file reaches a URL home by a copy made once its writer is done, and arrives whole
    (an object store shows an object only when its write completes); the pid in its name is
    of another host, or of a process that wrote elsewhere.
    """
    if not home.is_local:
        return True
    path = Path(location)
    host, _, rest = path.stem.rpartition("-")[0].rpartition("-")
    idle = (time.time() if now is None else now) - path.stat().st_mtime
    if idle > STALE_SECONDS:
        return True
    if host != socket.gethostname() or not rest.isdigit():
        return False
    return not process_alive(int(rest))
