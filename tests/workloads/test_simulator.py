"""The fleet simulator: a CATWILD-like fleet, deterministic by seed, through the real ingest path."""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hlo.environment import Environment, store_key
from ingest.hits import holdout_arm
from ingest.quarantine import file_digest
from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS
from ranking.realized import realized_speedups
from storage.home_factory import open_home
from storage.store_schema import DEFAULT_HOLDOUT_SHARE
from storage.warehouse import Warehouse
from workloads.simulator import drops, fleet
from workloads.simulator.catalog import build_catalog
from workloads.simulator.run import simulate, store_lookup

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


def _day(spec: fleet.FleetSpec, day: int = 11, n_graphs: int = 4):
    """A simulated day of `spec`'s fleet on synthetic graphs: (jobs, rows, fingerprints)."""
    jobs = fleet.make_jobs(spec, n_graphs=n_graphs)
    return jobs, fleet.simulate_day(jobs, spec, day, np.full(n_graphs, 0.01), HERE), [
        f"{i:032x}" for i in range(n_graphs)]


def _everywhere(fingerprints: list[str], speedup: float = 1.25, share: float = 0.05) -> fleet.TunedLookup:
    """A store with an entry for every (graph, environment), keyed as the store keys them."""
    return lambda fingerprint, env_key: fleet.Hit(store_key(fingerprint, env_key), 3, speedup, share)


def _runs(rows: fleet.DayRows, hits: fleet.Hits, jobs: fleet.Jobs, day: int, fingerprints: list[str]) -> pa.Table:
    """The day's drop rows as graph_runs rows (chip_seconds added, as ingestion does)."""
    drop = pa.concat_tables(drops.graph_run_batches(rows, hits, jobs, day, fingerprints))
    return drop.append_column("chip_seconds", pc.multiply(pc.cast(drop.column("chips"), pa.float64()),
                                                          drop.column("seconds")))


def test_tuned_graphs_run_at_their_true_effect_and_holdouts_at_the_defaults():
    spec = fleet.FleetSpec(jobs=5000, seed=1)
    jobs, rows, fingerprints = _day(spec)
    tuned_env = rows.environments[0].key()
    key = store_key(fingerprints[2], tuned_env)

    def lookup(fingerprint: str, env_key: str) -> fleet.Hit | None:
        return fleet.Hit(key, 3, 1.25, 0.2) if (fingerprint, env_key) == (fingerprints[2], tuned_env) else None

    sped, hits = fleet.apply_hits(rows, fingerprints, lookup, spec)
    chosen = (rows.graph == 2) & (rows.env == 0)
    tuned, held = hits.tuned(), hits.held_out()
    assert tuned.any() and held.any() and not (tuned & held).any()
    np.testing.assert_array_equal(tuned | held, chosen)
    true = fleet.true_speedup(spec, fleet.Hit(key, 3, 1.25))
    assert true != 1.25 and true == pytest.approx(1.25, rel=0.1)  # close to expected, not equal
    assert set(hits.true_speedup[chosen]) == {true}
    np.testing.assert_allclose(sped.seconds[tuned], rows.seconds[tuned] / true)
    np.testing.assert_array_equal(sped.seconds[~tuned], rows.seconds[~tuned])
    # Both arms carry the entry (key, version, expected speedup); the rows never carry the truth.
    assert set(hits.version[chosen]) == {3} and set(hits.version[~chosen]) == {None}
    assert set(hits.speedup[chosen]) == {1.25} and np.isnan(hits.speedup[~chosen]).all()
    assert set(hits.holdout[~chosen]) == {None}
    runs = _runs(sped, hits, jobs, 11, fingerprints)
    # A row per profiled process of each run, all in the run's arm.
    assert runs.column("holdout").to_pylist() == np.repeat(hits.holdout, rows.processes).tolist()
    assert "true_speedup" not in runs.column_names
    truth = fleet.day_truth(sped, hits, jobs)
    chip_seconds = jobs.chips[rows.job] * sped.seconds
    assert truth.effects == {key: true}
    assert truth.saved == pytest.approx(chip_seconds[tuned].sum() * (true - 1))
    assert truth.forgone == pytest.approx(chip_seconds[held].sum() * (true - 1))


def test_the_holdout_arm_takes_about_its_share_of_jobs_by_the_hooks_rule():
    spec = fleet.FleetSpec(jobs=20_000, seed=2)
    jobs, rows, fingerprints = _day(spec)
    _, hits = fleet.apply_hits(rows, fingerprints, _everywhere(fingerprints, share=0.1), spec)
    # Per key: a job running two graphs is in one arm of each.
    pairs = set(zip(rows.job.tolist(), hits.key.tolist()))
    held = set(zip(rows.job[hits.held_out()].tolist(), hits.key[hits.held_out()].tolist()))
    assert len(held) / len(pairs) == pytest.approx(0.1, abs=0.015)
    # The arm is the hook's: a job's arm for a key is holdout_arm of its id and the key.
    for row in np.flatnonzero(hits.key != None)[:200]:  # noqa: E711
        assert hits.holdout[row] == holdout_arm(fleet.job_id(int(rows.job[row])), hits.key[row], 0.1)


def test_an_injected_regression_shows_in_the_rows_as_realized_below_one():
    base = fleet.FleetSpec(jobs=20_000, seed=3)
    jobs, rows, fingerprints = _day(base)
    # The key most jobs hit, slowed to 0.9 though the store expects 1.25.
    _, plain = fleet.apply_hits(rows, fingerprints, _everywhere(fingerprints, share=0.1), base)
    keys, counts = np.unique(plain.key.astype(str), return_counts=True)
    worst = str(keys[np.argmax(counts)])
    spec = dataclasses.replace(base, regressions=((worst, 0.9),))
    sped, hits = fleet.apply_hits(rows, fingerprints, _everywhere(fingerprints, share=0.1), spec)
    # A job slowed past the end of its day does fewer executions, at the same pace.
    assert sped.seconds.max() <= fleet.DAY_SECONDS and (sped.seconds == fleet.DAY_SECONDS).any()
    full = hits.tuned() & (hits.key == worst) & (rows.seconds > 0.9 * fleet.DAY_SECONDS)
    assert full.any() and (sped.executions[full] < rows.executions[full]).all()
    np.testing.assert_allclose(sped.seconds[full] / sped.executions[full],
                               rows.seconds[full] / rows.executions[full] / 0.9, rtol=1e-3)
    realized = {r.key: r for r in realized_speedups(_runs(sped, hits, jobs, 11, fingerprints), resamples=500)}
    assert realized[worst].expected_speedup == 1.25
    assert realized[worst].speedup.estimate == pytest.approx(0.9, abs=0.05)
    assert realized[worst].regressed
    decided = [r for key, r in realized.items() if key != worst and r.decided]
    assert decided and not any(r.regressed for r in decided)


def test_same_seed_same_arms_effects_and_paces():
    spec = fleet.FleetSpec(jobs=5000, seed=4, regressions=(("0" * 32, 0.8),))

    def day(spec: fleet.FleetSpec) -> tuple[fleet.DayRows, fleet.Hits]:
        _, rows, fingerprints = _day(spec)
        return fleet.apply_hits(rows, fingerprints, _everywhere(fingerprints), spec)

    (a, hits_a), (b, hits_b) = day(spec), day(spec)
    np.testing.assert_array_equal(a.seconds, b.seconds)
    np.testing.assert_array_equal(a.executions, b.executions)
    np.testing.assert_array_equal(hits_a.holdout, hits_b.holdout)
    np.testing.assert_array_equal(hits_a.true_speedup, hits_b.true_speedup)
    other, hits_other = day(dataclasses.replace(spec, seed=5))
    assert not np.array_equal(np.unique(hits_a.true_speedup), np.unique(hits_other.true_speedup))
    assert fleet.true_speedup(spec, fleet.Hit("0" * 32, 1, 1.3)) == 0.8
    assert fleet.make_jobs(spec, 4).pace.std() == pytest.approx(spec.job_sigma, rel=0.1)


def test_the_same_days_after_another_epoch_are_the_same_fleet_on_their_own_dates():
    spec = fleet.FleetSpec(jobs=5000, seed=6)
    later = dataclasses.replace(spec, epoch=spec.epoch + datetime.timedelta(days=300))
    jobs, rows, fingerprints = _day(spec, day=40)
    _, moved, _ = _day(later, day=40)
    for name in ("job", "graph", "env", "seconds", "executions"):
        np.testing.assert_array_equal(getattr(moved, name), getattr(rows, name))
    # The releases are named by their own dates: the same releases, 300 days later.
    for before, after in zip(rows.environments, moved.environments):
        if before == HERE:
            assert after == HERE
            continue
        assert dataclasses.replace(after, compiler_version=before.compiler_version) == before
        release = lambda env: datetime.date.fromisoformat(env.compiler_version.rpartition("+")[2])  # noqa: E731
        assert release(after) - release(before) == datetime.timedelta(days=300)
    _, hits = fleet.apply_hits(moved, fingerprints, None, later)
    drop = pa.concat_tables(drops.graph_run_batches(moved, hits, jobs, 40, fingerprints, later.epoch))
    assert set(drop.column("dt").to_pylist()) == {later.epoch + datetime.timedelta(days=40)}


def test_the_store_lookup_gives_each_entry_its_holdout_share_as_the_hook_takes_it(tmp_path):
    from delivery.store_writer import Store
    from storage.store_schema import ENTRIES

    now = datetime.datetime.now(datetime.UTC)
    rows = [{"key": store_key(f"{i:032x}", "e" * 32), "fingerprint": f"{i:032x}", "env_key": "e" * 32,
             "kind": "graph", "speedup": 1.2, "expires_at": now + datetime.timedelta(days=30),
             "provenance": "tuner", "config": "{}", "ci_low": 1.1, "ci_high": 1.3, "compiler_version": "x",
             "measured_at": now, "source": "test", "holdout_share": share}
            for i, share in enumerate([None, 0.3])]
    store = Store(tmp_path)
    store.publish(pa.Table.from_pylist(rows, ENTRIES), None, "test")
    lookup = store_lookup(tmp_path)
    assert [lookup(f"{i:032x}", "e" * 32).holdout_share for i in range(2)] == [DEFAULT_HOLDOUT_SHARE, 0.3]
    store.set_holdout_share(0.1)  # the version's share, for entries that set none
    lookup = store_lookup(tmp_path)
    assert [lookup(f"{i:032x}", "e" * 32).holdout_share for i in range(2)] == [0.1, 0.3]
    assert lookup("f" * 32, "e" * 32) is None


@pytest.mark.xla
def test_the_demos_team_config_lands_in_the_store_as_an_import_does(tmp_path):
    from delivery.store_writer import Store
    from hlo.environment import current_environment
    from pipelines.demo import DemoSettings, import_owner_config

    owned = DemoSettings().imported
    version = import_owner_config(tmp_path, owned)
    [entry] = Store(tmp_path).entries(version).to_pylist()
    assert (entry["env_key"], entry["kind"], entry["speedup"]) == (
        current_environment().key(), "graph", owned.claimed_speedup)
    assert json.loads(entry["config"]) == owned.config
    assert entry["provenance"] == "import"


def test_multi_process_jobs_hand_over_a_row_per_process_that_counts_the_job_once():
    from ranking.realized import realized_savings
    from ranking.savings import hit_rows

    spec = fleet.FleetSpec(jobs=20_000, seed=6)
    jobs, rows, fingerprints = _day(spec)
    sped, hits = fleet.apply_hits(rows, fingerprints, _everywhere(fingerprints, share=0.2), spec)
    runs = _runs(sped, hits, jobs, 11, fingerprints)
    # Jobs span devices and processes: a partitioned environment per multi-chip size and kind,
    # whose processes hold the job's chips between them; a row per profiled process.
    partitioned = [e.partitioning for e in rows.environments if e.partitioning is not None]
    assert any(p.processes > 1 for p in partitioned) and any(p.processes == 1 for p in partitioned)
    for environment in rows.environments:
        if environment.partitioning is not None:
            p = environment.partitioning
            assert p.devices == environment.device_count == p.processes * p.local_devices
    assert set(rows.processes.tolist()) == {1, 2, 4, fleet.MAX_PROFILED_PROCESSES}
    assert runs.num_rows == rows.processes.sum() > 2 * len(rows.job)
    # A job's rows add up to its chips x seconds: its chip-time counts every device once.
    job_level = jobs.chips[rows.job] * sped.seconds
    assert pc.sum(runs.column("chip_seconds")).as_py() == pytest.approx(job_level.sum(), rel=1e-9)
    per_run = np.bincount(np.repeat(np.arange(len(rows.job)), rows.processes),
                          runs.column("chip_seconds").to_numpy())
    np.testing.assert_allclose(per_run, job_level, rtol=1e-9)
    # Savings, booked and realized, are not multiplied by a job's processes.
    tuned = hits.tuned()
    booked = pc.sum(hit_rows(runs, "graph", []).column("chip_seconds_saved")).as_py()
    assert booked == pytest.approx((job_level[tuned] * (hits.speedup[tuned].astype(float) - 1)).sum(), rel=1e-9)
    realized = realized_speedups(runs, resamples=200)
    assert realized_savings(runs, realized).total.tuned_chip_seconds == pytest.approx(job_level[tuned].sum(), rel=1e-9)
    # An arm's jobs are jobs, not processes, with their chip-time once; a partitioned job's
    # speedup is what a row per run (one process reporting all its chips) gives. ("here" jobs
    # are replicas: a job weighs as much as its replicas ran.)
    whole = _runs(dataclasses.replace(sped, processes=np.ones_like(sped.processes)), hits, jobs, 11, fingerprints)
    by_run = {r.key: r for r in realized_speedups(whole, resamples=200)}
    decided = [r for r in realized if r.decided]
    assert decided and len(decided) == sum(r.decided for r in by_run.values())
    partitioned = 0
    for entry in decided:
        chosen = (hits.key == entry.key) & tuned
        assert entry.tuned.jobs == by_run[entry.key].tuned.jobs == len(np.unique(rows.job[chosen]))
        assert entry.tuned.chip_seconds == pytest.approx(job_level[chosen].sum(), rel=1e-9)
        if rows.environments[rows.env[chosen][0]].partitioning is not None:
            assert entry.speedup.estimate == pytest.approx(by_run[entry.key].speedup.estimate, rel=1e-9)
            partitioned += 1
    assert partitioned > 10


def _jobs_digest(jobs: fleet.Jobs) -> str:
    """A hash of every array of `jobs`: field names, dtypes, shapes and bytes."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    for field in dataclasses.fields(jobs):
        array = np.ascontiguousarray(getattr(jobs, field.name))
        for part in (field.name, str(array.dtype), str(array.shape)):
            digest.update(part.encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize(("seed", "jobs", "graphs", "expected"), [
    (0, 2000, 8, "7e6e37d9e8ea8eed1e10b2cbf388f811"),
    (11, 50_000, 44, "b32dd3e7a5f034ed8bff622e76826f64"),
])
def test_the_default_fleet_draws_the_same_jobs_bit_for_bit(seed, jobs, graphs, expected):
    """The jobs of the default fleet, recorded before the reach fleet (`FleetMode.REACH`) came: a
    new mode or knob draws from streams of its own and changes none of them. (Recorded with
    numpy 2's PCG64 streams; a numpy that changed its generators would change them too.)"""
    spec = fleet.FleetSpec(jobs=jobs, seed=seed)
    assert spec.mode is fleet.FleetMode.DEFAULT
    assert _jobs_digest(fleet.make_jobs(spec, graphs)) == expected
    # The default fleet draws by graph whatever families it is given.
    family = np.arange(graphs) // 2
    assert _jobs_digest(fleet.make_jobs(spec, graphs, family)) == expected
