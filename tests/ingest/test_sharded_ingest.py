"""Sharded jobs through ingestion and ranking (issue 40): a train step partitioned over a 2 x 2
mesh of host devices, run as the README's quickstart runs a job (`fdo run --spool-hlo`, a
profiler trace in an inbox beside its `fdo-job.json`), lands its partitioning beside its
module, its profile joins the symbols the hook spooled, and its chip-time (every device's) ranks
its graphs as a single-device job's does; the same step partitioned two ways is two
environments; graphs files written before the partitioning column still read."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from hlo.environment import Environment, Partitioning
from ingest.profiles import process_chips
from ingest.symbols import ingest_symbols
from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS, partitioning_of
from storage.warehouse import TableSchema, Warehouse
from tests.support import JOBS
from tests.support.serving import fdo

PROGRAM = str(JOBS / "sharded_job.py")
STEPS = 30
# (job id, its chips as its job file says, devices, meshes the job jits its step for)
JOBS = (("sharded", 4, 4, "4x1,2x2"), ("single", 1, 1, ""))


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> dict:
    """Both jobs run under the hook with a trace each, then `ingest symbols`, `ingest hits`,
    `ingest profiles` and `rank`, each a fresh `fdo` process."""
    home = tmp_path_factory.mktemp("sharded") / "home"
    walls = {}
    for job, chips, devices, meshes in JOBS:
        inbox = home / "inbox" / job
        inbox.mkdir(parents=True)
        (inbox / "fdo-job.json").write_text(json.dumps({"job_id": job, "team": "me", "chips": chips}))
        ran = fdo(home, "run", "--spool-hlo", "--job-id", job, "--", sys.executable, PROGRAM,
                  "--devices", str(devices), "--steps", str(STEPS), "--trace", str(inbox),
                  *(("--meshes", meshes) if meshes else ()))
        assert ran.returncode == 0, ran.stderr[-3000:]
        walls[job] = json.loads(ran.stdout.strip().splitlines()[-1])["wall_seconds"]
    for command in (("ingest", "symbols", str(home / "spool" / "symbols")), ("ingest", "hits"),
                    ("ingest", "profiles", str(home / "inbox"))):
        done = fdo(home, *command)
        assert done.returncode == 0, done.stderr[-3000:]
    ranked = fdo(home, "rank", "--json")
    assert ranked.returncode == 0, ranked.stderr[-3000:]
    return {"home": home, "walls": walls, "rank": json.loads(ranked.stdout), "rank_stderr": ranked.stderr}


def _steps(home: Path) -> dict[str, list[dict]]:
    """The `graphs` rows of the train step, by the job that compiled them."""
    hits = json.loads(fdo(home, "hits", "--json").stdout)["records"]
    jobs = {(h["fingerprint"], h["env_key"]): h["job_id"] for h in hits if h["module_name"] == "jit_step"}
    found: dict[str, list[dict]] = {}
    for row in Warehouse(home).read(GRAPHS).to_pylist():
        if row["module_name"] == "jit_step":
            found.setdefault(jobs[row["fingerprint"], row["env_key"]], []).append(row)
    return found


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_same_step_partitioned_two_ways_is_two_environments_each_with_its_partitioning(loop):
    steps = _steps(loop["home"])
    sharded, [single] = steps["sharded"], steps["single"]
    assert len(sharded) == 2 and len({row["env_key"] for row in sharded}) == 2
    meshes = sorted(partitioning_of(row["partitioning"]).mesh for row in sharded)
    assert meshes == [(("data", 2), ("model", 2)), (("data", 4), ("model", 1))]
    for row in sharded:
        partitioning = partitioning_of(row["partitioning"])
        assert (partitioning.partitions, partitioning.spmd, partitioning.processes,
                partitioning.local_devices) == (4, True, 1, 4)
        # The environment the key hashes is the one rebuilt from the row, partitioning included.
        assert row["device_count"] == 4
    assert single["partitioning"] is None and single["env_key"] not in {row["env_key"] for row in sharded}


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_sharded_jobs_profile_joins_its_symbols_and_its_chip_time_counts_every_device(loop):
    home = loop["home"]
    steps = _steps(home)
    runs = {r["job_id"]: r for r in Warehouse(home).read(GRAPH_RUNS).to_pylist()
            if r["fingerprint"] in {row["fingerprint"] for rows in steps.values() for row in rows}}
    traced = next(row for row in steps["sharded"] if partitioning_of(row["partitioning"]).mesh[0] == ("data", 2))
    sharded, single = runs["sharded"], runs["single"]
    # Keyed by the graph and the environment the hook recorded for the job's compile.
    assert (sharded["fingerprint"], sharded["env_key"]) == (traced["fingerprint"], traced["env_key"])
    assert (single["fingerprint"], single["env_key"]) == (steps["single"][0]["fingerprint"],
                                                          steps["single"][0]["env_key"])
    # Executions are steps (each step runs once on each of the 4 devices); the chip-time of a
    # step is its time on each device, 4 devices: about 4 device-seconds per second of step.
    assert sharded["chips"] == 4 and single["chips"] == 1
    for row in (sharded, single):
        assert STEPS <= row["executions"] <= STEPS + 1
        per_step = loop["walls"][row["job_id"]] / STEPS
        assert 0.4 < row["chip_seconds"] / row["chips"] / row["executions"] / per_step < 1.2, (row, per_step)
    ops = [o for o in Warehouse(home).read(OP_RUNS).to_pylist() if o["job_id"] == "sharded"
           and o["graph_fingerprint"] == sharded["fingerprint"]]
    assert ops and {o["env_key"] for o in ops} == {sharded["env_key"]}
    assert 0 < sum(o["chip_seconds"] for o in ops) <= sharded["chip_seconds"]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_sharded_jobs_graphs_and_ops_rank_as_a_single_device_jobs_do(loop):
    ranked = loop["rank"]
    steps = _steps(loop["home"])
    coverage = {(c["kind"], c["category"]): c for c in ranked["coverage"]}
    for kind in ("graph", "op"):  # everything profiled has its symbols
        assert coverage[kind, "missing_symbols"]["keys"] == 0, ranked["coverage"]
    graphs = {(c["fingerprint"], c["env_key"]): c for c in ranked["candidates"] if c["kind"] == "graph"}
    for job in ("sharded", "single"):
        assert any((row["fingerprint"], row["env_key"]) in graphs for row in steps[job]), (job, graphs)
    ops = [c for c in ranked["candidates"] if c["kind"] == "op"]
    assert {c["env_key"] for c in ops} >= {row["env_key"] for row in steps["single"]}
    assert any(c["env_key"] in {row["env_key"] for row in steps["sharded"]} for c in ops)
    # Nothing of Beam's own logging before the answer.
    assert loop["rank_stderr"] == ""


def test_a_trace_row_counts_its_process_s_share_of_the_job_and_every_device_it_saw():
    assert process_chips(job_chips=1, processes=1, devices=1) == 1
    assert process_chips(job_chips=8, processes=1, devices=1) == 8  # a replica's trace speaks for the job
    assert process_chips(job_chips=4, processes=1, devices=4) == 4  # not 4 x 4: its time is per device
    assert process_chips(job_chips=1, processes=1, devices=4) == 4  # a job file short of its devices
    assert process_chips(job_chips=8, processes=2, devices=4) == 4  # each of 2 processes: its 4 devices
    assert process_chips(job_chips=1, processes=2, devices=2) == 2


@pytest.mark.xla
def test_graphs_written_before_the_partitioning_column_still_read_and_merge(tmp_path):
    home = tmp_path / "home"
    version_1 = TableSchema(GRAPHS.name, 1, pa.schema([f for f in GRAPHS.schema
                                                       if f.name not in ("partitioning", "family")]))
    seen = datetime.datetime(2026, 6, 1, 12, tzinfo=datetime.UTC)
    old = {"dt": seen.date(), "fingerprint": "1" * 32, "env_key": "e" * 32, "module_name": "old",
           "n_instructions": 3, "hlo_blob": "hlo/11/" + "1" * 32 + ".hlo.zst", "optimized_blob": None,
           "optimized_fingerprint": None, "platform": "cpu", "device_kind": "cpu:test", "device_count": 1,
           "compiler_version": "jaxlib-old", "first_seen": seen, "last_seen": seen}
    Warehouse(home).append(version_1, pa.Table.from_pylist([old], version_1.schema), "old")
    assert Warehouse(home).read(GRAPHS).column("partitioning").to_pylist() == [None]
    # A sharded module lands beside it; the merge rewrites the partition, the old row kept.
    symbols = tmp_path / "symbols"
    symbols.mkdir()
    (symbols / "step.hlo").write_text("HloModule step\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n"
                                      "  ROOT n = f32[4]{0} negate(p)\n}\n")
    hosts = Environment("cpu", "cpu:test", 4, "jaxlib-test", partitioning=Partitioning(
        partitions=4, spmd=True, shardy=True, mesh=(("data", 2), ("model", 2)), local_devices=4))
    (symbols / "fdo-environment.json").write_text(json.dumps(
        {**hosts.to_json(), "captured_at": seen.isoformat()}))
    assert ingest_symbols([symbols], home).graphs_changed == 1
    rows = {r["module_name"]: r for r in Warehouse(home).read(GRAPHS).to_pylist()}
    assert rows["old"]["partitioning"] is None and rows["old"]["env_key"] == "e" * 32
    assert partitioning_of(rows["step"]["partitioning"]) == hosts.partitioning
    assert rows["step"]["env_key"] == hosts.key() != Environment("cpu", "cpu:test", 4, "jaxlib-test").key()
