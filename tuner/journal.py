"""Append-only JSON-lines journals that survive `kill -9`.

Each record is one line, flushed and fsynced before the caller goes on, so what a killed process
had finished is on disk. A kill can cut the last line short: reading drops that line and rewrites
the file without it, so later appends never land after a torn line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from storage.home import atomic_write


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append `record` as one line and make it durable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as journal:
        journal.write(json.dumps(record) + "\n")
        journal.flush()
        os.fsync(journal.fileno())


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete records of the journal at `path` (none if it does not exist)."""
    if not path.exists():
        return []
    records, good = [], []
    lines = path.read_text().splitlines(keepends=True)
    for line in lines:
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good.append(line)
    if len(good) < len(lines):  # appends must not land after a torn line
        atomic_write(path, "".join(good))
    return records
