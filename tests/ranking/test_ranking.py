"""Ranking and savings: real Beam pipelines on simulator data, checked against DuckDB SQL and
against the raw profiles."""

from __future__ import annotations

import datetime
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to

from hlo.environment import store_key
from ingest.tables import GRAPH_RUNS
from ranking.rank import CATEGORIES, RankSettings, rank
from ranking.reference import reference_rank, reference_savings
from ranking.savings import savings
from ranking.tables import CANDIDATES, SAVINGS
from storage.beam_runner import InProcessRunner, pipeline_options
from storage.store_reader import StoreReader
from storage.store_schema import STORE_ENTRY_COLUMNS
from storage.warehouse import Warehouse
from tests.support.url_home import UrlFileSystem
from workloads.simulator.run import simulate, store_lookup

START = datetime.date(2026, 4, 1)
DAYS = 4
LAST = START + datetime.timedelta(days=DAYS - 1)


def _publish_store(home: Path, entries: list[dict]) -> None:
    """A store snapshot in the contract ranking reads (delivery publishes the same)."""
    version = home / "store" / "v1"
    version.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(entries, STORE_ENTRY_COLUMNS), version / "entries.parquet")
    (home / "store" / "CURRENT").write_text("1\n")


@pytest.fixture(scope="module")
def fleet_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("ranked")
    simulate(home, days=1, jobs=3000, seed=5, start=START, workloads=["mlp-s", "rnn-s"])
    # Tune the two most expensive graph keys of day one: one by the tuner, one re-validated.
    runs = Warehouse(home).read(GRAPH_RUNS)
    costs = runs.group_by(["fingerprint", "env_key"]).aggregate([("chip_seconds", "sum")]).sort_by(
        [("chip_seconds_sum", "descending")])
    far = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
    entries = [{"key": store_key(fp, env), "fingerprint": fp, "env_key": env, "kind": "graph",
                "speedup": 1.2, "expires_at": far, "provenance": provenance}
               for fp, env, provenance in zip(costs.column("fingerprint").to_pylist()[:2],
                                              costs.column("env_key").to_pylist()[:2],
                                              ["tuner", "validator"])]
    _publish_store(home, entries)
    simulate(home, days=DAYS - 1, jobs=3000, seed=5, start=START + datetime.timedelta(days=1),
             workloads=["mlp-s", "rnn-s"], tuned=store_lookup(home))
    # A fleet graph nobody handed symbols for.
    drop = home / "orphan.graph_runs.jsonl"
    drop.write_text(json.dumps({"dt": LAST.isoformat(), "job_id": "orphan", "team": "maps",
                                "fingerprint": "f" * 32, "env_key": "e" * 32, "device_kind": "TPU v5p",
                                "chips": 512, "executions": 100, "seconds": 80000.0}) + "\n")
    subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), "ingest", "profiles",
                    str(drop)], check=True, capture_output=True)
    return home


@pytest.fixture(scope="module")
def ranked(fleet_home):
    settings = RankSettings(date=LAST, window_days=DAYS, top_k=5, min_share=0.002)
    return settings, *rank(fleet_home, settings)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_beam_ranking_equals_the_duckdb_reference(fleet_home, ranked):
    settings, candidates, coverage = ranked
    ref_candidates, ref_coverage = reference_rank(fleet_home, settings, StoreReader(fleet_home).live_entries())
    assert candidates.num_rows == ref_candidates.num_rows == 10  # top 5 of each kind
    for ours, theirs in zip(candidates.to_pylist(), ref_candidates.sort_by(
            [("kind", "descending"), ("rank", "ascending")]).to_pylist()):
        assert {k: ours[k] for k in ("kind", "fingerprint", "env_key", "graph_fingerprint", "rank")} == \
               {k: theirs[k] for k in ("kind", "fingerprint", "env_key", "graph_fingerprint", "rank")}
        assert ours["chip_seconds"] == pytest.approx(theirs["chip_seconds"], rel=1e-9)
        assert ours["share"] == pytest.approx(theirs["share"], rel=1e-9)
    reference = {(r["kind"], r["category"]): r for r in ref_coverage.to_pylist()}
    for row in coverage.to_pylist():
        theirs = reference.get((row["kind"], row["category"]), {"keys": 0, "share": 0.0})
        assert row["keys"] == theirs["keys"], row
        assert row["share"] == pytest.approx(theirs["share"], rel=1e-9, abs=1e-15)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_candidates_agree_with_the_raw_profiles(fleet_home, ranked):
    settings, candidates, coverage = ranked
    runs = Warehouse(fleet_home).read(GRAPH_RUNS)
    active = runs.filter(pc.invert(runs.column("opted_out")))
    graphs = candidates.filter(pc.equal(candidates.column("kind"), "graph")).to_pylist()
    costs = [c["chip_seconds"] for c in graphs]
    assert costs == sorted(costs, reverse=True)
    for candidate in graphs:
        mine = active.filter(pc.and_(pc.equal(active.column("fingerprint"), candidate["fingerprint"]),
                                     pc.equal(active.column("env_key"), candidate["env_key"])))
        assert candidate["chip_seconds"] == pytest.approx(pc.sum(mine.column("chip_seconds")).as_py(), rel=1e-12)
    tuned = {(e["fingerprint"], e["env_key"]) for e in StoreReader(fleet_home).live_entries().to_pylist()}
    assert not tuned & {(c["fingerprint"], c["env_key"]) for c in graphs}
    assert "f" * 32 not in {c["fingerprint"] for c in graphs}
    by = {(r["kind"], r["category"]): r for r in coverage.to_pylist()}
    assert by[("graph", "tuned")]["keys"] == 2
    assert by[("graph", "missing_symbols")]["keys"] == 1
    assert 0.1 < by[("graph", "opted_out")]["share"] < 0.3
    for kind in ("graph", "op"):
        assert sum(by[(kind, c)]["share"] for c in CATEGORIES) == pytest.approx(1.0, rel=1e-9)
        assert by[(kind, "candidate")]["keys"] == 5


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_beam_savings_equal_the_reference_and_the_definition(fleet_home):
    rows = savings(fleet_home, START, LAST)
    live = StoreReader(fleet_home).live_entries()
    validator_keys = [e["key"] for e in live.to_pylist() if e["provenance"] == "validator"]
    reference = reference_savings(fleet_home, START, LAST, validator_keys)
    assert rows.num_rows == reference.num_rows > 0
    for ours, theirs in zip(rows.to_pylist(), reference.to_pylist()):
        assert {k: ours[k] for k in ("dt", "kind", "team", "env_key", "config_version", "validator_updated")} == \
               {k: theirs[k] for k in ("dt", "kind", "team", "env_key", "config_version", "validator_updated")}
        assert ours["chip_seconds_saved"] == pytest.approx(theirs["chip_seconds_saved"], rel=1e-9)
        # Every hit here is a 1.2x config: saved = used x (1.2 - 1).
        assert ours["chip_seconds_saved"] == pytest.approx(0.2 * ours["hit_chip_seconds"], rel=1e-9)
    assert {r["validator_updated"] for r in rows.to_pylist()} == {True, False}
    assert START.isoformat() not in {r["dt"].isoformat() for r in rows.to_pylist()}  # no store yet
    assert savings(fleet_home, START, LAST).equals(rows)  # a rerun replaces, never duplicates


def _unrun_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A pipeline built and never run, its temp dir removed (Beam removes it only in `run`)."""
    pipeline = beam.Pipeline(options=options)
    shutil.rmtree(pipeline.local_tempdir)
    return pipeline


def test_standard_beam_options_reach_the_pipeline():
    options = pipeline_options(["--runner=FlinkRunner", "--flink_master=localhost:8081", "--parallelism=4"])
    pipeline = _unrun_pipeline(options)
    assert pipeline.options.view_as(StandardOptions).runner == "FlinkRunner"
    everything = pipeline.options.get_all_options()
    assert everything["flink_master"] == "localhost:8081" and everything["parallelism"] == 4
    assert everything["direct_running_mode"] != "multi_processing"  # defaults yield to --runner
    default = pipeline_options([]).get_all_options()
    assert (default["runner"], default["direct_running_mode"]) == (
        "storage.beam_runner.InProcessRunner", "multi_processing")
    assert isinstance(_unrun_pipeline(pipeline_options([])).runner, InProcessRunner)


@pytest.mark.subprocess
def test_the_default_runner_tries_no_download(tmp_path, monkeypatch, caplog):
    # DirectRunner tries Prism first: a download from GitHub, and a beam-temp dir left in the
    # temp dir when it fails (this machine reaches no GitHub). Ours goes to the FnApiRunner.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    caplog.set_level(logging.INFO, logger="apache_beam")
    with beam.Pipeline(options=pipeline_options(["--direct_num_workers=1"])) as pipeline:
        doubled = pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: 2 * x)
        assert_that(doubled, equal_to([2, 4, 6]))
    assert not list(tmp_path.glob("beam-temp*"))
    assert "prism" not in caplog.text.lower()


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_cli_passes_beam_flags_and_refuses_them_elsewhere(fleet_home):
    from pipelines.cli import build_parser

    args, extra = build_parser().parse_known_args(["rank", "--top", "3", "--runner=SparkRunner"])
    assert args.top == 3 and extra == ["--runner=SparkRunner"]
    refused = subprocess.run([sys.executable, "-m", "pipelines.cli", "fingerprint", "x", "--runner=Foo"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "unrecognized arguments: --runner=Foo" in refused.stderr


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_tunable_candidates_are_this_machines_with_their_hlo(fleet_home, ranked):
    from execution.sharded import MAX_PARTITION_DEVICES, spans
    from hlo.environment import current_environment, partitioning_from_json
    from hlo.fingerprint import graph_fingerprint
    from ingest.tables import GRAPHS
    from tuner.candidates import tunable_candidates

    _, candidates, _ = ranked
    tasks = tunable_candidates(fleet_home, top=10)
    assert tasks
    assert [c.label for c in tunable_candidates(fleet_home, top=1)] == [tasks[0].label]
    assert tunable_candidates(fleet_home, top=0) == []  # none asked: none, not all
    here = current_environment()
    graphs = {(g["fingerprint"], g["env_key"]): g for g in Warehouse(fleet_home).read(GRAPHS).to_pylist()}
    ranked_keys = {(c["fingerprint"], c["env_key"]) for c in candidates.to_pylist() if c["kind"] == "graph"}
    for candidate in tasks:
        key = (graph_fingerprint(candidate.subject.module), candidate.env_key)
        assert key[0] == candidate.subject.fingerprint
        assert key in ranked_keys
        assert graphs[key]["device_kind"] == here.device_kind
    # A cluster's: the candidates of the environments its nodes offer, whatever this machine is
    # (here: a GPU's and a TPU's), best-ranked first.
    foreign = {graphs[key]["env_key"] for key in ranked_keys if graphs[key]["platform"] != here.platform}
    assert foreign
    offered = frozenset(sorted(foreign)[:2])
    on_nodes = tunable_candidates(fleet_home, top=100, environments=offered)
    assert on_nodes and {c.env_key for c in on_nodes} <= offered
    # Less a graph spanning more devices than a per-device program can be partitioned for.
    def partitionable(key: tuple[str, str]) -> bool:
        text = graphs[key]["partitioning"]
        return text is None or spans(partitioning_from_json(json.loads(text))) <= MAX_PARTITION_DEVICES

    best = [(c["fingerprint"], c["env_key"]) for c in candidates.to_pylist()
            if c["kind"] == "graph" and c["env_key"] in offered and (c["fingerprint"], c["env_key"]) in graphs
            and partitionable((c["fingerprint"], c["env_key"]))]
    assert [(c.subject.fingerprint, c.env_key) for c in on_nodes] == best


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_a_home_given_as_a_url_is_read_and_written_through_beam_file_systems(fleet_home, ranked):
    settings, candidates, coverage = ranked
    url = f"fdotest://{fleet_home}"
    # The scheme is registered in this process only: the in-process runner's workers see it.
    in_process = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    for old in (fleet_home / "warehouse").glob("*/*/*.parquet"):
        if old.parts[-3] in ("candidates", "coverage", "savings"):
            old.unlink()
    UrlFileSystem.used.clear()
    for ours, theirs in zip(rank(url, settings, in_process), (candidates, coverage)):
        assert ours.schema == theirs.schema and ours.num_rows == theirs.num_rows
        for row, want in zip(ours.to_pylist(), theirs.to_pylist()):  # sums in another order
            assert row == {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in want.items()}
    assert Warehouse(fleet_home).read(CANDIDATES).num_rows == candidates.num_rows  # the same layout
    rows = savings(url, START, LAST, in_process)
    assert rows.num_rows > 0 and rows.equals(Warehouse(fleet_home).read(SAVINGS).sort_by(
        [(name, "ascending") for name in ("dt", "kind", "team", "config_version", "validator_updated")]))
    used = "\n".join(UrlFileSystem.used)
    for piece in ("/graph_runs/dt=", "/op_runs/dt=", "/ops/dt=", "/store/CURRENT", "/candidates/dt=",
                  "/coverage/dt=", "/savings/dt="):
        assert f"fdotest://{fleet_home}/warehouse{piece}" in used or f"fdotest://{fleet_home}{piece}" in used, piece


def test_a_home_beam_cannot_reach_is_refused_naming_it():
    for run in (lambda home: rank(home, RankSettings(date=LAST)), lambda home: savings(home, START, LAST)):
        with pytest.raises(ValueError, match="home nosuch://bucket/fdo: .*filesystem"):
            run("nosuch://bucket/fdo")
