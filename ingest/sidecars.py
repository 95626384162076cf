"""Files a fleet leaves beside its dumps and traces: where they ran and who ran them.

- `fdo-environment.json`: an Environment (see hlo.environment) and, optionally,
  `captured_at` (ISO 8601): when the module was compiled, if not the files' modification time.
- `fdo-job.json` (beside traces): `job_id`, `team`, `chips`, optional `opted_out` (no part in
  the holdout arm) and `relaxed_numerics` (take relaxed-numerics configs; both false when
  absent). `fdo run --job-file` reads it too, to set the hook's settings for the job.
The nearest such file at or above an input, within the path the user named, applies to it.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path

from hlo.environment import Environment, environment_from_json
from ingest.drops import MAX_CHIPS

JOB_FILE = "fdo-job.json"
MAX_SIDECAR_BYTES = 1 << 16



@dataclass(frozen=True)
class Capture:
    """What an environment file says."""

    environment: Environment
    captured_at: datetime.datetime | None


@dataclass(frozen=True)
class Job:
    """What a job file says."""

    job_id: str
    team: str
    chips: int
    opted_out: bool
    relaxed_numerics: bool = False


def nearest_file(path: Path, roots: list[Path], name: str) -> Path | None:
    """The file called `name` in `path`'s directory or the nearest one above, up to its root."""
    for directory in path.parents:
        if (directory / name).is_file():
            return directory / name
        if directory in roots:
            break
    return None


def read_environment_file(path: Path) -> Capture:
    """Parse an environment file; ValueError naming the file and the problem."""
    data = _read_json(path)
    try:
        captured = data.get("captured_at")
        when = datetime.datetime.fromisoformat(captured) if captured is not None else None
        if when is not None and when.tzinfo is None:
            raise ValueError("captured_at needs a time zone")
        return Capture(environment_from_json(data), when)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: bad environment file: {exc}") from None


def read_job_file(path: Path) -> Job:
    """Parse a job file; ValueError naming the file and the problem."""
    data = _read_json(path)
    job_id, team, chips = data.get("job_id"), data.get("team", "unknown"), data.get("chips", 1)
    opted_out, relaxed_numerics = data.get("opted_out", False), data.get("relaxed_numerics", False)
    if not (isinstance(job_id, str) and job_id and isinstance(team, str)
            and isinstance(chips, int) and not isinstance(chips, bool)
            and 1 <= chips <= MAX_CHIPS and isinstance(opted_out, bool)
            and isinstance(relaxed_numerics, bool)):
        raise ValueError(f"{path}: bad job file: needs job_id (non-empty string), team (string), "
                         f"chips (1..{MAX_CHIPS}), opted_out (bool), relaxed_numerics (bool)")
    return Job(job_id=job_id, team=team, chips=chips, opted_out=opted_out, relaxed_numerics=relaxed_numerics)


def _read_json(path: Path) -> dict:
    if path.stat().st_size > MAX_SIDECAR_BYTES:
        raise ValueError(f"{path}: over {MAX_SIDECAR_BYTES} bytes")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    return data
