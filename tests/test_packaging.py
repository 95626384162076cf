"""The base install (`pip install fleet-fdo`, no extras) is all a training job needs for the hook.

Built for real in a fresh venv from a copy of the sources: it holds none of the loop's heavy
dependencies, its hooked JAX job applies a stored config from an embedded store (written by
this checkout's store code) and from the config service, and its `fdo` names the extra a stage
needs. The import names `fdo` checks for each extra (pipelines.extras) match pyproject.toml.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipelines.extras import EXTRAS
from tests.serving import running_server
from tests.test_hook import JOB, NO_YNN, assert_same_numbers, import_configs

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "fleet-fdo"
# What the issue found a job paying for: none of it may come with the base install.
HEAVY = ("apache-beam", "duckdb", "fastapi", "uvicorn", "apscheduler", "plotly", "sqlalchemy",
         "tqdm", "zstandard")
HOOK_DEPENDENCIES = ("jax", "jaxlib", "numpy", "protobuf", "pyarrow", "scipy")
INSTALL_SECONDS = 900  # a cold pip cache downloads jaxlib, scipy and pyarrow


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A fresh venv with this project installed without extras; returns its bin directory."""
    root = tmp_path_factory.mktemp("base-install")
    # Built from a copy: building in the checkout would leave build/ and egg-info in it.
    source = root / "source"
    for pattern in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # This interpreter's pip installs into the venv (--python), which so needs no pip of its own.
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                                "install", "--quiet", str(source)],
                               capture_output=True, text=True, timeout=INSTALL_SECONDS)
    assert installed.returncode == 0, installed.stderr[-4000:]
    return venv / "bin"


def run_base(base: Path, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command of the base venv, with nothing of this checkout or its settings on its path."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FDO_")}
    return subprocess.run([str(base / command[0]), *command[1:]], capture_output=True, text=True,
                          timeout=600, env={**clean, **(env or {})}, cwd=base)


def run_job(base: Path, home: Path, *options: str) -> dict:
    """tests/hook_job.py under the base install's `fdo run`; returns its JSON output."""
    result = run_base(base, "fdo", "--home", str(home), "run", *options, "--",
                      str(base / "python"), JOB)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def hits(base: Path, home: Path, job: str) -> list[dict]:
    """The job's hit records, as the base install's `fdo hits` reads them."""
    result = run_base(base, "fdo", "--home", str(home), "hits", "--job", job, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["records"]


@pytest.fixture(scope="module")
def untuned(base, tmp_path_factory):
    """The job run once with no store: its output, and the hits naming its layer's keys."""
    home = tmp_path_factory.mktemp("base-job") / "home"
    output = run_job(base, home, "--job-id", "untuned")
    records = hits(base, home, "untuned")
    assert records and {r["outcome"] for r in records} == {"error"}  # looked up: no store yet
    layer = [r for r in records if r["module_name"] == "jit_layer"]
    assert len(layer) >= 3  # plain, vmapped and sharded
    return home, output, layer


def test_the_base_install_holds_the_hooks_dependencies_and_none_of_the_loops(base):
    listing = run_base(base, "python", "-c", "import importlib.metadata as m, json; "
                       "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
    installed = {canonicalize_name(name) for name in json.loads(listing.stdout)}
    assert {PROJECT, *HOOK_DEPENDENCIES} <= installed
    assert installed.isdisjoint(canonicalize_name(name) for name in HEAVY)


def test_a_hooked_job_of_the_base_install_applies_a_config_from_the_embedded_store(untuned, base, tmp_path):
    home, default_output, layer = untuned
    tuned = tmp_path / "home"
    shutil.copytree(home, tuned)
    import_configs(tuned, layer, NO_YNN)  # this checkout's store code writes the store
    output = run_job(base, tuned, "--job-id", "tuned", "--spool-hlo")
    assert default_output["ynn"] is True and output["ynn"] is False  # the config reached XLA
    assert_same_numbers(output, default_output)
    records = [r for r in hits(base, tuned, "tuned") if r["module_name"] == "jit_layer"]
    assert {r["key"] for r in records} == {r["key"] for r in layer}
    assert {r["outcome"] for r in records} == {"applied"}
    assert all(r["config_version"] == 1 and r["optimized_fingerprint"] for r in records)
    for record in records:  # spooled for symbol ingestion, as a dump directory
        spooled = tuned / "spool" / "symbols" / record["fingerprint"][:2] / record["fingerprint"]
        assert list(spooled.glob("*.before_optimizations.txt"))


def test_a_hooked_job_of_the_base_install_applies_a_config_from_the_service(untuned, base, tmp_path):
    home, default_output, layer = untuned
    served = tmp_path / "served"
    shutil.copytree(home, served)
    import_configs(served, layer, NO_YNN)
    job_home = tmp_path / "job"  # the job's own home: it reads no store there
    with running_server(served) as url:
        output = run_job(base, job_home, "--job-id", "remote", "--store-url", url)
    assert output["ynn"] is False
    assert_same_numbers(output, default_output)
    records = [r for r in hits(base, job_home, "remote") if r["module_name"] == "jit_layer"]
    assert records and {r["outcome"] for r in records} == {"applied"}


@pytest.mark.parametrize("command, extra", [
    (("rank",), "pipeline"),
    (("ingest", "hits"), "pipeline"),
    (("workloads", "dump", "--out", "dumps"), "pipeline"),
    (("serve",), "service"),
])
def test_a_stage_of_the_base_install_names_the_extra_it_needs(base, tmp_path, command, extra):
    result = run_base(base, "fdo", "--home", str(tmp_path / "home"), *command)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"fdo {command[0]}: needs the {extra} extra")
    assert f"pip install 'fleet-fdo[{extra}]'" in result.stderr


def test_the_modules_fdo_checks_for_each_extra_are_the_extras_of_pyproject():
    extras = pyproject()["project"]["optional-dependencies"]

    def distributions(extra: str) -> set[str]:
        """The distributions of an extra, the project's own extras it names expanded."""
        names: set[str] = set()
        for requirement in map(Requirement, extras[extra]):
            if canonicalize_name(requirement.name) == PROJECT:
                names |= set().union(*map(distributions, requirement.extras))
            else:
                names.add(canonicalize_name(requirement.name))
        return names

    providers = importlib.metadata.packages_distributions()
    assert set(EXTRAS) == set(extras) - {"all", "dev"}
    for extra, modules in EXTRAS.items():
        assert {canonicalize_name(d) for m in modules for d in providers[m]} == distributions(extra), extra
    assert distributions("all") == set().union(*map(distributions, EXTRAS))
