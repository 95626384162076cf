"""Profile drop rows for the ingestion tests: a good `graph_runs` row, rows as JSON lines, and
the JSON report of an `fdo ingest` run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

EXIT_QUARANTINED = 3


def drop_row(i: int, **changes) -> dict:
    """A good graph_runs drop row."""
    return {"dt": "2026-11-10", "job_id": f"job-{i}", "team": "ads", "fingerprint": f"{i % 7:032x}",
            "env_key": "e" * 32, "device_kind": "TPU v5p", "chips": 1 + i % 8, "executions": 10 * i,
            "seconds": 1.5 * i, **changes}


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    """Rows as JSON lines (a str is written as given: a torn or hand-made line)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def ingest_report(result: subprocess.CompletedProcess) -> dict:
    """The report of a run that landed its inputs (some maybe quarantined)."""
    assert result.returncode in (0, EXIT_QUARANTINED), result.stderr
    return json.loads(result.stdout)
