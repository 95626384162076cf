"""Append-only JSON-lines journals under a home that survive `kill -9`.

Each record is one line, durable before the caller goes on, so what a killed process had
finished is kept. On a local home the line is appended, flushed and fsynced: a kill can cut the
last line short, and reading drops that line and rewrites the file without it, so later appends
never land after a torn line. An object store has no append: on a URL home the journal is
rewritten whole with each record (`Home.atomic_write`), so a kill leaves the previous whole
journal. Journals are small (a record per trial or decision), so the rewrite costs little.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from storage.home import Home


def append_record(home: Home, location: Any, record: dict[str, Any]) -> None:
    """Append `record` to the journal at `location` (under `home`) as one line, durably."""
    line = json.dumps(record) + "\n"
    if not home.is_local:
        before = home.read_bytes(location) if home.exists(location) else b""
        home.atomic_write(location, before + line.encode())
        return
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as journal:
        journal.write(line)
        journal.flush()
        os.fsync(journal.fileno())


def read_records(home: Home, location: Any) -> list[dict[str, Any]]:
    """The complete records of the journal at `location` (none if it does not exist)."""
    if not home.exists(location):
        return []
    records, good = [], []
    lines = home.read_bytes(location).decode().splitlines(keepends=True)
    for line in lines:
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good.append(line)
    if len(good) < len(lines):  # appends must not land after a torn line
        home.atomic_write(location, "".join(good))
    return records
