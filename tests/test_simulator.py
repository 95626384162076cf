"""The fleet simulator: a CATWILD-like fleet, deterministic by seed, through the real ingest path."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hlo.environment import Environment
from ingest.quarantine import file_digest
from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS
from storage.homes import open_home
from storage.warehouse import Warehouse
from workloads.simulator import fleet
from workloads.simulator.catalog import build_catalog
from workloads.simulator.run import simulate

WORKLOADS = ["mlp-s", "gnn-s"]
START = datetime.date(2026, 3, 1)
HERE = Environment("cpu", "cpu:test", 1, "jaxlib-test")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> tuple[Path, object]:
    home = tmp_path_factory.mktemp("fleet")
    report = simulate(home, days=6, jobs=4000, seed=7, start=START, workloads=WORKLOADS)
    return home, report


@pytest.mark.slow
@pytest.mark.xla
def test_fleet_looks_like_catwilds(simulated):
    _, report = simulated
    assert report.graphs == 4  # two programs at two shapes
    assert report.top_graph_shares["top1"] > 0.4  # a few graphs dominate
    assert 0.12 < report.opted_out_share < 0.28
    big = report.size_class_shares["XL"] + report.size_class_shares["XXL"]
    assert big > 10 * report.size_class_shares["XS"]  # chip-time sits in the big jobs...
    assert report.long_tail["row_share"] > 0.15  # ...while many runs are tiny
    assert report.long_tail["chip_time_share"] < 0.01
    versions = [day["compiler_versions"] for day in report.days]
    assert len({v for day in versions for v in day}) >= 3
    # A release is adopted gradually: some day runs two versions, neither at 100%.
    assert any(len(day) >= 2 and max(day.values()) < 0.95 for day in versions)


@pytest.mark.slow
@pytest.mark.xla
def test_everything_the_fleet_handed_over_landed(simulated):
    home, report = simulated
    warehouse = Warehouse(home)
    runs = warehouse.read(GRAPH_RUNS)
    assert runs.num_rows == report.graph_runs == sum(day["rows"] for day in report.days)
    assert warehouse.read(OP_RUNS).num_rows == report.op_runs > 0
    assert not report.quarantined
    catalog = build_catalog(home / "simulator" / "catalog", WORKLOADS)
    graphs = warehouse.read(GRAPHS)
    assert set(graphs.column("fingerprint").to_pylist()) == {g.fingerprint for g in catalog}
    # Every run's graph has symbols in the environment it ran in.
    run_keys = set(zip(runs.column("fingerprint").to_pylist(), runs.column("env_key").to_pylist()))
    symbol_keys = set(zip(graphs.column("fingerprint").to_pylist(), graphs.column("env_key").to_pylist()))
    assert run_keys <= symbol_keys
    total = sum(runs.column("chip_seconds").to_pylist())
    assert total / 3600 == pytest.approx(sum(day["chip_hours"] for day in report.days), rel=1e-9)


def _with_catalog_of(home: Path, other: Path) -> Path:
    """A new home `other` with `home`'s compiled catalog: its programs are not compiled again."""
    shutil.copytree(home / "simulator", other / "simulator")
    return other


@pytest.mark.slow
@pytest.mark.xla
def test_same_seed_same_fleet_and_rerun_adds_nothing(simulated, tmp_path):
    home, _ = simulated
    other = _with_catalog_of(home, tmp_path / "other")
    simulate(other, days=2, jobs=4000, seed=7, start=START, workloads=WORKLOADS)
    for drop in sorted((other / "fleet" / "profiles").rglob("*.parquet")):
        original = home / drop.relative_to(other)
        assert file_digest(drop) == file_digest(original)
    again = simulate(home, days=6, jobs=4000, seed=7, start=START, workloads=WORKLOADS)
    assert (again.graph_runs, again.op_runs, again.symbol_modules) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.xla
def test_a_fleet_given_an_inbox_hands_over_there_and_the_nightly_ingest_lands_it(simulated, tmp_path):
    from pipelines.nightly import NightlySettings, _ingest

    home, _ = simulated
    other = _with_catalog_of(home, tmp_path / "other")
    inbox = other / "inbox" / "fleet"
    report = simulate(other, days=2, jobs=4000, seed=7, start=START, workloads=WORKLOADS, inbox=inbox)
    assert report.inbox == str(inbox) and report.graph_runs > 0 and report.symbol_modules > 0
    assert not (other / "warehouse").exists()  # handed over, nothing ingested yet
    # What the nightly ingest stage lands from the home's inbox is what the fleet handed over,
    # the same rows as a direct ingestion of those days.
    counts = _ingest(open_home(other), NightlySettings(date=START), progress=False)
    assert (counts["graph_runs"], counts["op_runs"], counts["quarantined"]) == (report.graph_runs, report.op_runs, 0)
    assert counts["modules"] == report.symbol_modules
    landed, direct = Warehouse(other).read(GRAPH_RUNS), Warehouse(home).read(GRAPH_RUNS)
    first_two = [str(START), str(START + datetime.timedelta(days=1))]
    direct = direct.filter(pc.is_in(pc.cast(direct.column("dt"), pa.string()), pa.array(first_two)))
    assert sorted(landed.column("chip_seconds").to_pylist()) == sorted(direct.column("chip_seconds").to_pylist())
    assert _ingest(open_home(other), NightlySettings(date=START), progress=False)["graph_runs"] == 0


def test_opt_out_share_and_heavy_tail_at_scale():
    spec = fleet.FleetSpec(jobs=200_000, seed=3)
    jobs = fleet.make_jobs(spec, n_graphs=32)
    rows = fleet.simulate_day(jobs, spec, 103, np.full(32, 0.01), HERE)
    chip_seconds = jobs.chips[rows.job] * rows.seconds
    assert chip_seconds[jobs.opted_out[rows.job]].sum() / chip_seconds.sum() == pytest.approx(0.2, abs=0.04)
    by_graph = np.sort(np.bincount(rows.graph, chip_seconds, 32))[::-1]
    assert by_graph[:5].sum() / by_graph.sum() > 0.5


def test_tuned_graphs_run_faster_and_record_the_hit():
    spec = fleet.FleetSpec(jobs=5000, seed=1)
    jobs = fleet.make_jobs(spec, n_graphs=4)
    rows = fleet.simulate_day(jobs, spec, 11, np.full(4, 0.01), HERE)
    fingerprints = [f"{i:032x}" for i in range(4)]
    tuned_env = rows.environments[0].key()

    def lookup(fingerprint: str, env_key: str) -> fleet.Hit | None:
        return fleet.Hit("k" * 32, 3, 1.25) if (fingerprint, env_key) == (fingerprints[2], tuned_env) else None

    sped, hits = fleet.apply_hits(rows, fingerprints, lookup)
    chosen = (rows.graph == 2) & (rows.env == 0)
    assert chosen.any()
    np.testing.assert_allclose(sped.seconds[chosen], rows.seconds[chosen] / 1.25)
    np.testing.assert_array_equal(sped.seconds[~chosen], rows.seconds[~chosen])
    assert set(hits.version[chosen]) == {3} and set(hits.version[~chosen]) == {None}
    assert np.isnan(hits.speedup[~chosen]).all()


@pytest.mark.xla
def test_the_demos_team_config_lands_in_the_store_as_an_import_does(tmp_path):
    from delivery.store import Store
    from hlo.environment import current_environment
    from pipelines.demo import DemoSettings, import_owner_config

    owned = DemoSettings().imported
    version = import_owner_config(tmp_path, owned)
    [entry] = Store(tmp_path).entries(version).to_pylist()
    assert (entry["env_key"], entry["kind"], entry["speedup"]) == (
        current_environment().key(), "graph", owned.claimed_speedup)
    assert json.loads(entry["config"]) == owned.config
    assert entry["provenance"] == "import"
