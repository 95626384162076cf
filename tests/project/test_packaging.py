"""The base install (`pip install fleet-fdo`, no extras) is all a training job needs for the hook,
and the pipeline extra is all the loop's stages need.

Built for real: one wheel of a copy of the sources, installed in fresh venvs. The base holds
none of the loop's heavy dependencies, its hooked JAX job applies a stored config from an
embedded store (written by this checkout's store code) and from the config service, every
command the README lists for it runs there, and its `fdo` names the extra a stage needs. Every
command of the pipeline extra runs once `[pipeline]` is added to the base install. The import
names `fdo` checks for each extra (pipelines.extras) match pyproject.toml.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from execution.measure import TIME_SCALE_VARIABLE
from pipelines.extras import EXTRAS
from storage.warehouse import Warehouse
from tests.support import ROOT
from tests.support.job_runs import JOB, NO_YNN, assert_same_numbers, import_configs
from tests.support.serving import running_server
from tuner.tables import TRIALS
from workloads import zoo

# Each test builds a venv or runs its `fdo`, whose commands compile and run XLA programs.
# The commands here measure several-fold effects or none (n-body off YNNPACK, optimization level
# 0): a fifth of each measurement's time budget decides them, and a verification spends its
# budget whole.
pytestmark = [pytest.mark.subprocess, pytest.mark.xla, pytest.mark.slow, pytest.mark.measure_scale(0.2)]

PROJECT = "fleet-fdo"
# What the issue found a job paying for: none of it may come with the base install.
HEAVY = ("apache-beam", "duckdb", "fastapi", "uvicorn", "apscheduler", "plotly", "sqlalchemy",
         "tqdm", "zstandard", "ray")
# The hook's, and pydantic for `fdo store import` (a hooked job never imports it).
BASE_DEPENDENCIES = ("jax", "jaxlib", "numpy", "protobuf", "pyarrow", "pydantic")
INSTALL_SECONDS = 900  # a cold pip cache downloads jaxlib, scipy and pyarrow
# A job for the base install's `fdo run`: one jitted function (its module is jit_energy), and
# whether pydantic was imported in the job.
ENERGY_JOB = """\
import json, sys
import jax, jax.numpy as jnp

@jax.jit
def energy(x):
    return jnp.sum(jnp.tanh(x) * x)

print(json.dumps({"energy": float(energy(jnp.arange(64.0))), "pydantic": "pydantic" in sys.modules}))
"""
FLEET_DAY = datetime.date(2026, 5, 1)  # the pipeline test's simulated fleet starts then


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built once from a copy of the sources (building in the checkout would
    leave build/ and egg-info in it): what `pip install fleet-fdo` installs."""
    source, wheels = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheels")
    for pattern in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                            str(wheels), str(source)], capture_output=True, text=True, timeout=INSTALL_SECONDS)
    assert built.returncode == 0, built.stderr[-4000:]
    (path,) = wheels.glob("*.whl")
    return path


def pip_install(venv: Path, *requirements: str) -> None:
    """`pip install REQUIREMENTS...` into the venv at `venv`, by this interpreter's pip
    (--python: the venv needs no pip of its own)."""
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                                "install", "--quiet", *requirements],
                               capture_output=True, text=True, timeout=INSTALL_SECONDS)
    assert installed.returncode == 0, installed.stderr[-4000:]


@pytest.fixture(scope="module")
def base(wheel, tmp_path_factory) -> Path:
    """A fresh venv with this project installed without extras; returns its bin directory."""
    venv = tmp_path_factory.mktemp("base-install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip_install(venv, str(wheel))
    return venv / "bin"


@pytest.fixture(scope="module")
def pipeline(wheel, base, tmp_path_factory) -> Path:
    """The base install with the pipeline extra added, as `pip install "fleet-fdo[pipeline]"`
    adds it to an install of `fleet-fdo`; returns its bin directory. The base venv is copied as
    hard links (its own tests keep it as it was: pip replaces files, never writes into them),
    and the project reinstalled in the copy, so that its `fdo` runs the copy's interpreter:
    half the time of a fresh venv with the extra."""
    venv = tmp_path_factory.mktemp("pipeline-install") / "venv"
    subprocess.run(["cp", "-al", str(base.parent), str(venv)], check=True)
    pip_install(venv, "--no-deps", "--force-reinstall", str(wheel))
    pip_install(venv, f"{wheel}[pipeline]")
    return venv / "bin"


def run_venv(venv: Path, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A command of a venv built here (its bin directory), with nothing of this checkout or its
    settings on its path."""
    # None of the suite's settings but the file's measurement scale.
    clean = {k: v for k, v in os.environ.items()
             if k != "PYTHONPATH" and (not k.startswith("FDO_") or k == TIME_SCALE_VARIABLE)}
    return subprocess.run([str(venv / command[0]), *command[1:]], capture_output=True, text=True,
                          timeout=600, env={**clean, **(env or {})}, cwd=venv)


def fdo_output(venv: Path, home: Path, *args: str) -> str:
    """The stdout of `fdo --home HOME ARGS...` in a venv built here, which must exit 0 and write
    no traceback."""
    result = run_venv(venv, "fdo", "--home", str(home), *args)
    assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr[-4000:])
    return result.stdout


def fdo_json(venv: Path, home: Path, *args: str) -> Any:
    """What `fdo --home HOME ARGS... --json` prints, parsed (`fdo_output`'s checks)."""
    return json.loads(fdo_output(venv, home, *args, "--json"))


def run_job(base: Path, home: Path, *options: str) -> dict:
    """tests/support/jobs/hook_job.py under the base install's `fdo run`; returns its JSON output."""
    result = run_venv(base, "fdo", "--home", str(home), "run", *options, "--",
                      str(base / "python"), JOB)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def hits(base: Path, home: Path, job: str) -> list[dict]:
    """The job's hit records, as the base install's `fdo hits` reads them."""
    return fdo_json(base, home, "hits", "--job", job)["records"]


@pytest.fixture(scope="module")
def untuned(base, tmp_path_factory):
    """The job run once with no store: its output, and the hits naming its layer's keys."""
    home = tmp_path_factory.mktemp("base-job") / "home"
    output = run_job(base, home, "--job-id", "untuned")
    records = hits(base, home, "untuned")
    assert records and {r["outcome"] for r in records} == {"no store"}  # looked up: no store yet
    layer = [r for r in records if r["module_name"] == "jit_layer"]
    assert len(layer) >= 3  # plain, vmapped and sharded
    return home, output, layer


def test_the_base_install_holds_the_hooks_dependencies_and_none_of_the_loops(base):
    listing = run_venv(base, "python", "-c", "import importlib.metadata as m, json; "
                       "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
    installed = {canonicalize_name(name) for name in json.loads(listing.stdout)}
    assert {PROJECT, *BASE_DEPENDENCIES} <= installed
    assert installed.isdisjoint(canonicalize_name(name) for name in HEAVY)
    # The platform priors the tuner ships are package data: in the wheel, and read there.
    shipped = run_venv(base, "python", "-c", "from tuner.platform_prior import shipped_priors; "
                       "print(len(shipped_priors()))")
    assert shipped.returncode == 0 and int(shipped.stdout) == len(list((ROOT / "tuner" / "priors").glob("*.json")))


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
        spooled = tuned / "spool" / "symbols" / record["fingerprint"][:2]
        assert list(spooled.glob(f"{record['fingerprint']}-{record['env_key'][:16]}/*.before_optimizations.txt"))


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


def test_every_command_of_the_base_install_runs_there(base, tmp_path):
    """The commands the README lists for the base install, in one home, each on what the ones
    before left: a job run under the hook, its module fingerprinted and measured, a config for
    it imported, changed and rolled back in the store, the job run again to apply it."""
    home, job = tmp_path / "home", tmp_path / "energy.py"
    job.write_text(ENERGY_JOB)

    def fdo(*args: str) -> str:
        return fdo_output(base, home, *args)

    def fdo_as_json(*args: str) -> Any:
        return fdo_json(base, home, *args)

    def run_energy(job_id: str, *options: str) -> dict:
        return json.loads(fdo("run", "--job-id", job_id, *options, "--", str(base / "python"),
                              str(job)).splitlines()[-1])

    def energy_hit(job_id: str) -> dict:
        (record,) = [r for r in hits(base, home, job_id) if r["module_name"] == "jit_energy"]
        return record

    # run, hits: the compile was looked up (no store yet) and its module spooled.
    first = run_energy("first", "--spool-hlo")
    assert first["pydantic"] is False
    looked_up = energy_hit("first")
    assert looked_up["outcome"] == "no store" and "no store published" in looked_up["reason"]
    fingerprint, env_key, key = looked_up["fingerprint"], looked_up["env_key"], looked_up["key"]
    spooled = home / "spool" / "symbols" / fingerprint[:2] / f"{fingerprint}-{env_key[:16]}"
    (module,) = spooled.glob("*.before_optimizations.txt")

    # fingerprint: the command keys the module as the hook did.
    printed = fdo_as_json("fingerprint", str(module))
    assert [printed[name] for name in ("fingerprint", "env_key", "key")] == [fingerprint, env_key, key]
    assert fdo("fingerprint", str(module)) == f"{fingerprint}\n"

    # evaluate: a speedup inside its interval (optimization level 0 changes the program).
    measured = fdo_as_json("evaluate", str(module), "--set", "xla_backend_optimization_level=0",
                           "--max-seconds", "1")
    assert measured["error"] is None and measured["numerics_ok"] and not measured["identical_program"]
    assert measured["pairs"] > 0 and measured["ci_low"] <= measured["speedup"] <= measured["ci_high"]

    # store: import a config for the module, list and show it, import a change, diff, roll back.
    assert fdo("store", "versions") == "store is empty: no versions\n"
    fast, level_one = {"xla_cpu_enable_fast_math": True}, {"xla_backend_optimization_level": 1}
    for number, config in enumerate((fast, level_one), start=1):
        entries = tmp_path / f"entries-{number}.jsonl"
        entries.write_text(json.dumps({"fingerprint": fingerprint, "env_key": env_key, "kind": "graph",
                                       "config": config, "speedup": 1.5}) + "\n")
        assert fdo_as_json("store", "import", str(entries)) == {"version": number, "imported": 1}
    listed = fdo_as_json("store", "versions")
    assert listed["current"] == 2 and [v["version"] for v in listed["versions"]] == [1, 2]
    (shown,) = fdo_as_json("store", "show", fingerprint)
    assert (shown["key"], shown["config"], shown["provenance"]) == (key, level_one, "import")
    assert fdo_as_json("store", "diff", "1", "2") == {"added": [], "removed": [], "changed": [key]}
    assert fdo_as_json("store", "rollback", "1") == {"version": 3}
    (exported,) = map(json.loads, fdo("store", "export").splitlines())
    assert (exported["key"], exported["config"], exported["speedup"]) == (key, fast, 1.5)

    # run, hits: the job again, now compiled with the rolled-back config.
    second = run_energy("second")
    assert second["pydantic"] is False  # the base install carries it for `store import` alone
    np.testing.assert_allclose(second["energy"], first["energy"], rtol=1e-4)
    applied = energy_hit("second")
    assert (applied["outcome"], applied["config_version"]) == ("applied", 3)
    assert json.loads(applied["config"]) == fast

    # analyze: the trials `fdo tune` (the pipeline extra) would leave, written with this
    # checkout's warehouse code; the flag that moved the speed more comes first.
    trials = [{"dt": datetime.date.today(), "trial_id": f"trial-{index}", "task_id": "task", "kind": "graph",
               "fingerprint": fingerprint, "env_key": env_key, "strategy": "fixed", "index": index,
               "config": json.dumps(config), "outcome": "measured", "speedup": speedup, "numerics_ok": True}
              for index, (config, speedup) in enumerate([(fast, 1.5), (fast, 1.4), (level_one, 0.95),
                                                         (level_one, 0.97)])]
    Warehouse(home).append(TRIALS, pa.Table.from_pylist(trials, TRIALS.schema), "written-here")
    analysis = fdo_as_json("analyze", "flags")
    assert analysis["trials"] == analysis["usable"] == 4
    assert [f["flag"] for f in analysis["flags"]] == [*fast, *level_one]

    # toolchain: this interpreter is the compiler the hook keyed the job's environment by.
    added = fdo_as_json("toolchain", "add", "same", str(base / "python"))
    assert added["env_key"] == env_key
    assert [c["name"] for c in fdo_as_json("toolchain", "list")] == ["default", "same"]
    assert fdo("toolchain", "remove", "same") == "removed toolchain same\n"

    # workloads list: the zoo, as this checkout has it.
    assert [w["name"] for w in fdo_as_json("workloads", "list")] == [w.name for w in zoo.all_workloads()]
    # A URL home is reached through Beam's file systems: without Beam, one line naming the extra.
    url = run_venv(base, "fdo", "--home", "gs://bucket/fdo", "store", "versions")
    assert url.returncode == 2 and "Traceback" not in url.stderr, url.stderr
    assert "URL home needs the pipeline extra" in url.stderr and "fleet-fdo[pipeline]" in url.stderr


@pytest.mark.parametrize("command, extra", [
    (("rank",), "pipeline"),
    (("ingest", "hits"), "pipeline"),
    (("workloads", "dump", "--out", "dumps"), "pipeline"),
    (("serve",), "service"),
])
def test_a_stage_of_the_base_install_names_the_extra_it_needs(base, tmp_path, command, extra):
    result = run_venv(base, "fdo", "--home", str(tmp_path / "home"), *command)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith(f"fdo {command[0]}: needs the {extra} extra")
    assert f"pip install 'fleet-fdo[{extra}]'" in result.stderr


def test_every_command_of_the_pipeline_extra_runs_in_its_install(pipeline, tmp_path):
    """The commands the README lists for the pipeline extra, in one home of a venv of
    `[pipeline]` alone: n-body's program dumped and tuned (moving its reductions off YNNPACK
    makes it several times faster here), delivered and validated, a simulated fleet that runs
    it ranked and its savings accounted, then a whole nightly turn; the service's commands name
    their extra. Budgets are small: one fleet day of 100 jobs, two tuning evaluations, one
    worker for each verification and validation, a 3-second tune stage in the nightly turn."""
    home, next_day = tmp_path / "home", FLEET_DAY + datetime.timedelta(days=1)

    def fdo(*args: str) -> str:
        return fdo_output(pipeline, home, *args)

    def fdo_as_json(*args: str) -> Any:
        return fdo_json(pipeline, home, *args)

    # workloads dump, ingest symbols: n-body's program as an XLA dump directory, into the warehouse.
    (dump,) = fdo_as_json("workloads", "dump", "nbody-s", "--out", str(tmp_path / "dumps"))
    (module,) = Path(dump).glob("*.before_optimizations.txt")
    fingerprint = fdo("fingerprint", str(module)).strip()
    symbols = fdo_as_json("ingest", "symbols", dump)
    assert (symbols["modules"], symbols["graphs_changed"], symbols["quarantined"]) == (1, 1, [])

    # ingest hits: a hooked job's records, from the hook's spool into the warehouse.
    fdo("run", "--job-id", "hooked", "--", str(pipeline / "python"), "-c",
        "import jax; jax.jit(lambda x: x + 1)(1.0)")
    landed = fdo_as_json("ingest", "hits")
    assert landed["files"] == 1 and landed["rows"] > 0 and not landed["quarantined"]
    assert len(fdo_as_json("hits", "--job", "hooked")["records"]) == landed["rows"]

    # ingest profiles: a team's drop of the graph's runs.
    drops = tmp_path / "drops"
    drops.mkdir()
    run = {"dt": FLEET_DAY.isoformat(), "job_id": "job-1", "team": "ads", "fingerprint": fingerprint,
           "env_key": "e" * 32, "device_kind": "TPU v5p", "chips": 8, "executions": 10, "seconds": 60.0}
    (drops / "a.graph_runs.jsonl").write_text(json.dumps(run) + "\n")
    profiles = fdo_as_json("ingest", "profiles", str(drops))
    assert (profiles["inputs"], profiles["graph_runs"], profiles["quarantined"]) == (1, 1, [])

    # simulate, rank: a small fleet running n-body for a day; its program is a top candidate.
    fleet = fdo_as_json("simulate", "--days", "1", "--jobs", "100", "--start", FLEET_DAY.isoformat(),
                        "--workloads", "nbody-s")
    assert fleet["graph_runs"] > 0 and not fleet["quarantined"]
    ranking = fdo_as_json("rank", "--date", FLEET_DAY.isoformat(), "--top", "3")
    assert fingerprint in {c["fingerprint"] for c in ranking["candidates"] if c["kind"] == "graph"}

    # tune, deliver: two evaluations find the win (fusion types to XLA's emitters are tried
    # first), one verifying worker confirms it; it becomes store version 1.
    tuned = fdo_as_json("tune", str(module), "--budget-evals", "2", "--verify-workers", "1")
    assert (tuned["fingerprint"], tuned["status"]) == (fingerprint, "accepted") and tuned["ci_low"] > 1
    assert fdo_as_json("deliver") == {"version": 1}

    # validate --once, --report: the entry re-measured at once (it was measured minutes ago) and kept.
    validated = fdo_as_json("validate", "--once", "--workers", "1", "--max-seconds", "1",
                            "--revalidate-after-hours", "0")
    assert (validated["kept"], validated["version"]) == (1, 2)
    report = fdo_as_json("validate", "--report")
    assert [(r["outcome"], r["decisions"]) for r in report["outcomes"]] == [("kept", 1)]

    # savings: the fleet's next day, whose jobs in this machine's environment apply the config.
    fdo_as_json("simulate", "--days", "1", "--jobs", "100", "--start", next_day.isoformat(),
                "--workloads", "nbody-s")
    saved = fdo_as_json("savings", "--from", FLEET_DAY.isoformat(), "--to", next_day.isoformat())["rows"]
    assert saved and all(r["config_version"] == 2 and r["chip_seconds_saved"] > 0 for r in saved)
    assert {(r["dt"], r["env_key"]) for r in saved} == {(next_day.isoformat(), tuned["env_key"])}

    # nightly: every stage of a turn for the next day, on the least budget that tunes one graph.
    nightly = fdo_as_json("nightly", "--date", next_day.isoformat(), "--top", "1", "--top-ops", "0",
                          "--tune-evals", "1", "--tune-minutes", "0.05", "--validate-minutes", "0.5",
                          "--verify-workers", "1")
    assert nightly["ok"] and {s["status"] for s in nightly["stages"]} == {"done"}
    counts = {s["stage"]: s["counts"] for s in nightly["stages"]}
    assert counts["rank"]["graph_candidates"] > 0 and counts["savings"]["rows"] > 0

    # The service's commands need their own extra: one line that names what is missing here.
    for command in (("scheduler",), ("validate",)):
        refused = run_venv(pipeline, "fdo", "--home", str(home), *command)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith(f"fdo {command[0]}: needs the service extra (missing: fastapi, ")


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
