"""The hook's test job (jobs/hook_job.py) run under `fdo run`: its output and hits, configs
imported for its modules, its numbers compared (the hook's tests, its safety's, the packaging's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tests.support import JOBS
from tests.support.serving import fdo

JOB = str(JOBS / "hook_job.py")
NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": []}  # observable: no ynn_fusion in the module
RESULTS = ("jit", "grad", "vmap", "sharded")


def run_job(home: Path, *options: str, env: dict | None = None) -> tuple[dict, str]:
    """Run the job under `fdo run`; returns its JSON output and its stderr."""
    result = fdo(home, "run", *options, "--", sys.executable, JOB, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def hits(home: Path, job: str) -> list[dict]:
    result = fdo(home, "hits", "--job", job, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["records"]


def import_configs(home: Path, records: list[dict], config: dict | list[dict], speedup: float = 1.25) -> None:
    """`fdo store import` of an entry for each hit record's key: `config` for all of them, or
    one of a list each."""
    configs = config if isinstance(config, list) else [config] * len(records)
    path = home / f"import-{len(list(home.glob('import-*')))}.jsonl"
    path.write_text("".join(json.dumps({"fingerprint": r["fingerprint"], "env_key": r["env_key"],
                                        "kind": "graph", "config": c, "speedup": speedup}) + "\n"
                            for r, c in zip(records, configs, strict=True)))
    result = fdo(home, "store", "import", str(path), "--json")
    assert result.returncode == 0, result.stderr


def assert_same_numbers(a: dict, b: dict) -> None:
    for name in RESULTS:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, err_msg=name)
