"""The README's quickstart, run as written: its shell blocks, in order, in a fresh directory,
take a real JAX job through the loop and end with a hit and a savings row. The README cannot
drift from what works."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from execution.measure import TIME_SCALE_VARIABLE
from tests.support import ROOT

# The step's win is several-fold (its reductions off YNNPACK): a fifth of each measurement's time
# budget shows it as clearly as the whole, and the tuning's verification spends its budget whole.
pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.measure_scale(0.2)]

# What the quickstart reaches from the repository root: the venv, the example and `make venv`.
CHECKOUT = (".venv", "examples", "Makefile", "pyproject.toml")


def quickstart_script(readme: str) -> str:
    """The `sh` blocks of the README's Quickstart section, in order, as one script."""
    section = re.search(r"^## Quickstart.*?(?=^## )", readme, flags=re.M | re.S)
    assert section, "README.md has no '## Quickstart' section"
    blocks = re.findall(r"^```sh\n(.*?)^```$", section.group(0), flags=re.M | re.S)
    assert blocks, "the Quickstart section has no ```sh blocks"
    return "".join(blocks)


def fdo_json(home: Path, *args: str) -> dict | list:
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "fdo"), "--home", str(home), *args, "--json"],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_the_readme_quickstart_gets_a_hit_and_a_savings_row(tmp_path):
    stamp, pyproject = ROOT / ".venv" / ".installed", ROOT / "pyproject.toml"
    if not stamp.exists() or stamp.stat().st_mtime < pyproject.stat().st_mtime:
        pytest.fail("the venv is missing or older than pyproject.toml: run `make venv` first (the "
                    "quickstart's `make venv` would otherwise install from this test's directory)")
    for name in CHECKOUT:
        (tmp_path / name).symlink_to(ROOT / name)
    # As a user's shell has it, but for the file's measurement scale.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FDO_") or k == TIME_SCALE_VARIABLE}
    script = quickstart_script((ROOT / "README.md").read_text())
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    home = tmp_path / ".fdo-quickstart"  # where the quickstart puts its data
    assert re.search(r" jit_step .* applied +v1 +[\d.]+x", result.stdout), result.stdout
    # Runtime saved, then its compile unmeasured (no holdout compile to compare with), then the total.
    assert re.search(r"^  \d{4}-\d\d-\d\d +graph +me +v1 +(yes|no) +[\d,.]+ chip-(seconds|hours) +0 \+1 unmeasured +- +"
                     r"[\d,.]+ chip-(seconds|hours)$",
                     result.stdout, flags=re.M), result.stdout
    hits = fdo_json(home, "hits", "--job", "quickstart-2")["records"]
    applied = [h for h in hits if h["outcome"] == "applied"]
    assert [h["module_name"] for h in applied] == ["jit_step"] and applied[0]["expected_speedup"] > 1.01
    rows = fdo_json(home, "savings")["rows"]
    assert [(r["team"], r["config_version"]) for r in rows] == [("me", 1)]
    assert rows[0]["chip_seconds_saved"] > 0
