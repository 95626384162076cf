"""Compile time saved (ranking.savings): the compiles that tried an entry's config against the
median of its holdout arm's compiles, in chip-seconds of the environment's devices, through the
real Beam pipeline over a home whose hits, runs and graphs were ingested by ingestion's own code;
then `fdo savings` and the dashboard's savings rows, and savings partitions written before the
compile columns."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from hlo.environment import Environment, Partitioning
from ingest.hits import STALE_SECONDS, ingest_hits, spool_path, to_line
from ingest.profiles import ingest_profiles
from ingest.symbols import ingest_symbols
from pipelines.cli import main
from pipelines.dashboard import charts, queries
from pipelines.dashboard.filters import Filters, Window
from pipelines.dashboard.scope import Scope
from ranking.reference import reference_savings
from ranking.savings import MIN_HOLDOUT_COMPILES, UNKNOWN_TEAM, BookedSavings, holdout_medians, savings, tried_medians
from ranking.tables import SAVINGS
from storage.warehouse import TableSchema, Warehouse

DAY = datetime.date(2026, 6, 2)
BEFORE = DAY - datetime.timedelta(days=1)  # outside the accounted window: its compiles count nothing
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
H100, STACK = "NVIDIA H100 80GB HBM3 (compute capability 9.0)", "jaxlib-0.10.2+jax-cuda12-pjrt-0.10.2"
GPUS, ONE_GPU = Environment("gpu", H100, 4, STACK), Environment("gpu", H100, 1, STACK)
FASTER, SLOWER, UNHELD, THIN = "a1" * 16, "b2" * 16, "c3" * 16, "d4" * 16
# (key, environment, outcome, job, compile seconds, day) of every compile the hook recorded.
COMPILES = [
    # Its autotune results spare XLA most of its autotuning: holdout median 13 s on 4 GPUs.
    *[(FASTER, GPUS, "holdout", f"held-{n}", s, DAY) for n, s in enumerate([10.0, 12.0, 14.0, 30.0])],
    (FASTER, GPUS, "holdout", "held-old", 1.0, BEFORE),
    (FASTER, GPUS, "applied", "train-1", 3.0, DAY), (FASTER, GPUS, "applied", "train-2", 5.0, DAY),
    (FASTER, GPUS, "fallback", "train-3", 20.0, DAY),  # the failed tuned compile, then the defaults'
    # Its config compiles slower than the defaults: a cost. No graph of its environment was
    # ingested: counted as one device.
    *[(SLOWER, ONE_GPU, "holdout", f"held-{n}", s, DAY) for n, s in enumerate([2.0, 2.0, 3.0])],
    (SLOWER, ONE_GPU, "applied", "train-1", 5.0, DAY),
    # No holdout compiles in the window, and too few: nothing claimed, counted unmeasured.
    (UNHELD, GPUS, "applied", "train-4", 1.0, DAY), (UNHELD, GPUS, "applied", "train-5", 1.0, DAY),
    *[(THIN, GPUS, "holdout", f"held-{n}", 50.0, DAY) for n in range(MIN_HOLDOUT_COMPILES - 1)],
    (THIN, GPUS, "applied", "train-1", 1.0, DAY),
    (THIN, GPUS, "miss", "train-1", 90.0, DAY),  # no entry: no part in any arm
]


def _record(key: str, env: Environment, outcome: str, job: str, seconds: float, day: datetime.date,
            n: int) -> dict:
    """A hit record as the hook spools it."""
    at = datetime.datetime.combine(day, datetime.time(9, 0, n), datetime.UTC)
    return {"at": at, "job_id": job, "key": key, "fingerprint": key, "env_key": env.key(),
            "module_name": "jit_train_step", "outcome": outcome, "kind": None if outcome == "miss" else "graph",
            "config_version": None if outcome == "miss" else 1,
            "expected_speedup": 1.5 if outcome in ("applied", "holdout") else None,
            "config": '{"xla_gpu_autotune_level": "0"}' if outcome in ("applied", "fallback") else None,
            "optimized_fingerprint": None, "reason": None, "hook_seconds": 0.001, "compile_seconds": seconds}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The hook's records of COMPILES, a profiled tuned run of train-1 (team ads) and train-4
    (team search), and the 4-GPU environment's graph, each landed by ingestion; savings of DAY."""
    root = tmp_path_factory.mktemp("compile-savings")
    home = root / "home"
    land_compiles(home, COMPILES)

    drops = root / "drops"
    drops.mkdir()
    run = {"dt": DAY.isoformat(), "fingerprint": FASTER, "env_key": GPUS.key(), "device_kind": GPUS.device_kind,
           "chips": 4, "executions": 10, "seconds": 25.0, "config_key": FASTER, "config_version": 1,
           "expected_speedup": 1.5, "holdout": False}
    (drops / "a.graph_runs.jsonl").write_text("".join(json.dumps({**run, **job}) + "\n" for job in (
        {"job_id": "train-1", "team": "ads"}, {"job_id": "train-4", "team": "search"})))
    assert ingest_profiles([drops], home).graph_runs == 2

    land_graph(root / "symbols", GPUS, home)
    savings(home, DAY, DAY, BEAM_ARGS)
    return home


def land_compiles(home: Path, compiles: list[tuple]) -> None:
    """The hook's records of `compiles` (as COMPILES), spooled on DAY and ingested."""
    path = spool_path(home, started=datetime.datetime.combine(DAY, datetime.time(9), datetime.UTC).timestamp())
    path.parent.mkdir(parents=True)
    path.write_text("".join(to_line(_record(*compile, n)) for n, compile in enumerate(compiles)))
    assert ingest_hits(home, now=time.time() + STALE_SECONDS + 1).rows == len(compiles)


def land_graph(symbols: Path, environment: Environment, home: Path) -> None:
    """A small graph of `environment`, dumped under `symbols` and ingested."""
    symbols.mkdir()
    (symbols / "step.hlo").write_text("HloModule step\n\nENTRY main {\n  p = f32[4]{0} parameter(0)\n"
                                      "  ROOT n = f32[4]{0} negate(p)\n}\n")
    (symbols / "fdo-environment.json").write_text(json.dumps(environment.to_json()))
    assert ingest_symbols([symbols], home).graphs_changed == 1


def _rows(home: Path) -> dict[tuple[str, str], dict]:
    """The savings rows of DAY by (team, environment key)."""
    rows = Warehouse(home).read(SAVINGS).to_pylist()
    assert len({(r["team"], r["env_key"]) for r in rows}) == len(rows)
    return {(r["team"], r["env_key"]): r for r in rows}


def test_compiles_save_the_holdout_median_less_the_tried_median_times_the_devices(home):
    rows = _rows(home)
    ads = rows["ads", GPUS.key()]
    # Runtime: train-1's tuned run, 100 chip-seconds at 1.5x. Compile: the 13 s holdout median
    # (14 and 12; the day before is outside the window) less the 5 s median of the key's tried
    # compiles (3, 5 and the fallback's 20: one slow compile moves neither median), on 4 GPUs.
    assert (ads["hit_chip_seconds"], ads["chip_seconds_saved"]) == (100.0, 50.0)
    assert (ads["compile_hits"], ads["compile_unmeasured"]) == (1, 1)  # and THIN's compile: no claim
    assert ads["compile_chip_seconds_saved"] == pytest.approx((13.0 - 5.0) * 4)
    # Jobs with no profiled run in the window: their team is unknown. Two compiles, the
    # fallback's among them, each at the tried median.
    unknown = rows[UNKNOWN_TEAM, GPUS.key()]
    assert (unknown["hit_chip_seconds"], unknown["chip_seconds_saved"]) == (0.0, 0.0)
    assert (unknown["compile_hits"], unknown["compile_unmeasured"]) == (2, 1)
    assert unknown["compile_chip_seconds_saved"] == pytest.approx(2 * (13.0 - 5.0) * 4)


def test_a_slower_compile_is_booked_as_a_cost_on_one_device_where_its_environment_is_unknown(home):
    slower = _rows(home)["ads", ONE_GPU.key()]
    assert (slower["compile_hits"], slower["compile_unmeasured"]) == (1, 0)
    assert slower["compile_chip_seconds_saved"] == pytest.approx(2.0 - 5.0)  # never clipped to 0


def test_a_key_without_enough_holdout_compiles_claims_nothing_and_is_counted_unmeasured(home):
    search = _rows(home)["search", GPUS.key()]  # UNHELD's train-4: no holdout compile at all
    assert (search["compile_hits"], search["compile_unmeasured"], search["compile_chip_seconds_saved"]) == (0, 1, 0.0)
    booked = BookedSavings.of(Warehouse(home).read(SAVINGS))
    assert (booked.compile_hits, booked.compile_unmeasured) == (4, 3)  # UNHELD's 2, THIN's 1
    assert (booked.runtime, booked.compile) == (100.0, pytest.approx(32.0 + 64.0 - 3.0))


def test_the_beam_pipeline_agrees_with_the_duckdb_reference(home):
    ours = Warehouse(home).read(SAVINGS).sort_by([("team", "ascending"), ("env_key", "ascending")])
    theirs = reference_savings(home, DAY, DAY, []).sort_by([("team", "ascending"), ("env_key", "ascending")])
    assert ours.num_rows == theirs.num_rows == 4
    for mine, reference in zip(ours.to_pylist(), theirs.to_pylist()):
        assert mine == {name: pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
                        for name, value in reference.items()}


def test_the_holdout_median_counts_each_compile_and_averages_the_middle_two():
    held = pa.table({"key": ["k", "k", "k", "j"], "env_key": ["e"] * 4, "compile_seconds": [1.0, 2.0, 9.0, 4.0],
                     "compiles": pa.array([2, 1, 1, 1], pa.int64())})
    found = {r["key"]: r for r in holdout_medians(held).to_pylist()}
    assert (found["k"]["holdout_compiles"], found["k"]["holdout_median"]) == (4, 1.5)  # 1, 1, 2, 9
    assert (found["j"]["holdout_compiles"], found["j"]["holdout_median"]) == (1, 4.0)


def test_the_tried_median_is_per_config_version_and_one_slow_compile_does_not_move_it():
    tried = pa.table({"key": ["k"] * 4, "env_key": ["e"] * 4, "config_version": pa.array([1, 1, 1, 2], pa.int64()),
                      "compile_seconds": [3.0, 4.0, 600.0, 9.0], "compiles": pa.array([2, 1, 1, 1], pa.int64())})
    found = {r["config_version"]: r for r in tried_medians(tried).to_pylist()}
    assert (found[1]["tried_compiles"], found[1]["tried_median"]) == (4, 3.5)  # 3, 3, 4, 600: not the mean
    assert (found[2]["tried_compiles"], found[2]["tried_median"]) == (1, 9.0)


def test_fdo_savings_prints_runtime_and_compile_time_apart_and_their_total(home, capsys):
    assert main(["--home", str(home), "savings", "--from", DAY.isoformat(), "--to", DAY.isoformat(),
                 "--json", *BEAM_ARGS]) == 0
    booked = json.loads(capsys.readouterr().out)["booked"]
    assert booked == {"runtime_chip_seconds": 100.0, "compile_chip_seconds": pytest.approx(93.0),
                      "total_chip_seconds": pytest.approx(193.0), "compile_hits": 4, "compile_unmeasured": 3,
                      "min_holdout_compiles": MIN_HOLDOUT_COMPILES}
    assert main(["--home", str(home), "savings", "--from", DAY.isoformat(), "--to", DAY.isoformat(),
                 *BEAM_ARGS]) == 0
    text = capsys.readouterr().out
    assert "193.0 chip-seconds saved in 4 rows: runtime 100.0 chip-seconds, compile time 93.0 chip-seconds" in text
    assert "3 compiles unmeasured: under 3 holdout compiles of their key" in text


def test_the_dashboards_savings_rows_show_runtime_and_compile_time_apart_and_their_total(home):
    scope = Scope.resolve(home, Filters(window=Window(DAY, DAY)))
    rows = queries.savings(home, scope)
    assert sum(r["chip_hours_saved"] for r in rows) == pytest.approx(100.0 / 3600)
    assert sum(r["compile_chip_hours_saved"] for r in rows) == pytest.approx(93.0 / 3600)
    assert all(r["total_chip_hours_saved"] == pytest.approx(r["chip_hours_saved"] + r["compile_chip_hours_saved"])
               for r in rows)
    assert (sum(r["compile_hits"] for r in rows), sum(r["compile_unmeasured"] for r in rows)) == (4, 3)
    summary = queries.summary({name: queries.QUERIES[name](home, scope) for name in queries.SUMMARY_INPUTS})
    assert summary["total_chip_hours_saved"] == pytest.approx(193.0 / 3600)
    over_time = {trace.name: trace.y for trace in charts.savings_by_kind(rows, scope.filters.window).data}
    assert over_time == {"graph configs, run time": (pytest.approx(100.0 / 3600),),
                         "compile time": (pytest.approx(93.0 / 3600),)}
    [per_team] = charts.savings_by_team(rows, scope.filters.window).data  # one bar a team: both together
    assert dict(zip(per_team.y, per_team.x)) == pytest.approx(
        {"ads": (50.0 + 32.0 - 3.0) / 3600, "search": 50.0 / 3600, UNKNOWN_TEAM: 64.0 / 3600})


def test_savings_written_before_the_compile_columns_still_read_as_no_compile_time(tmp_path):
    columns = [f for f in SAVINGS.schema if not f.name.startswith("compile_")]
    version_2 = TableSchema(SAVINGS.name, 2, pa.schema(columns))  # as the table was declared before them
    row = {"dt": DAY, "kind": "graph", "team": "ads", "env_key": "e" * 32, "config_version": 1,
           "validator_updated": False, "hit_chip_seconds": 100.0, "chip_seconds_saved": 50.0}
    Warehouse(tmp_path).append(version_2, pa.Table.from_pylist([row], version_2.schema), "savings")
    read = Warehouse(tmp_path).read(SAVINGS)
    assert read.column("compile_chip_seconds_saved").null_count == read.num_rows == 1
    booked = BookedSavings.of(read)
    assert (booked.runtime, booked.compile, booked.compile_hits, booked.total) == (50.0, 0.0, 0, 50.0)
    [row] = queries.savings(tmp_path, Scope.resolve(tmp_path, Filters(window=Window(DAY, DAY))))
    assert (row["chip_hours_saved"], row["compile_chip_hours_saved"], row["total_chip_hours_saved"]) == (
        pytest.approx(50.0 / 3600), 0.0, pytest.approx(50.0 / 3600))
    assert row["compile_hits"] == row["compile_unmeasured"] == 0


def test_each_process_of_a_multi_process_job_books_its_compiles_on_its_own_devices(tmp_path):
    # Two hosts of 4 GPUs: each process of a job compiles, records its own hit, and waits with
    # its own 4 devices, so a job's compile time counts its 8 devices once, not 8 per process.
    hosts = Environment("gpu", H100, 8, STACK, partitioning=Partitioning(
        partitions=8, spmd=True, mesh=(("data", 2), ("model", 4)), processes=2, local_devices=4))
    key = "e5" * 16
    compiles = [*[(key, hosts, "holdout", f"held-{n // 2}", s, DAY) for n, s in enumerate([20.0, 21.0, 19.0, 20.0])],
                *[(key, hosts, "applied", "train", s, DAY) for s in (5.0, 7.0)]]
    home = tmp_path / "home"
    land_compiles(home, compiles)
    land_graph(tmp_path / "symbols", hosts, home)
    savings(home, DAY, DAY, BEAM_ARGS)
    [row] = Warehouse(home).read(SAVINGS).to_pylist()
    assert (row["env_key"], row["compile_hits"], row["compile_unmeasured"]) == (hosts.key(), 2, 0)
    assert row["compile_chip_seconds_saved"] == pytest.approx(((20.0 - 5.0) + (20.0 - 7.0)) * 4)
    [reference] = reference_savings(home, DAY, DAY, []).to_pylist()
    assert reference["compile_chip_seconds_saved"] == pytest.approx(row["compile_chip_seconds_saved"], rel=1e-12)
