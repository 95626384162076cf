"""The holdout arm (issue 33): per key with a live entry, a deterministic share of jobs compiles
with the defaults and records a 'holdout' hit; the store carries each entry's share (else its
version's), old versions without it still read and serve, bad shares never enter, and profiles
of both arms join their hits, the holdout arm's left out of booked savings."""

from __future__ import annotations

import datetime
import json
import math
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delivery.hook import HookSettings
from delivery.imports import read_import
from delivery.lookup import EmbeddedStore, Found, RemoteStore, _parse_answer
from delivery.store_writer import Store, StoreError, merge_entries
from hlo.environment import store_key
from ingest.hits import holdout_arm
from ingest.profiles import ingest_profiles
from ingest.tables import GRAPH_RUNS
from ranking.reference import reference_savings
from ranking.savings import hit_rows, savings
from storage.beam_io import Source, _read_unit
from storage.store_schema import DEFAULT_HOLDOUT_SHARE, STORE_ENTRY_COLUMNS, StoreEntry
from storage.warehouse import Warehouse
from tests.support.job_runs import JOB, NO_YNN, hits, import_configs
from tests.support.serving import fdo, running_server

SMALL = {"xla_cpu_optimize_for_size": True}
ENTRY = {"fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph", "config": NO_YNN, "speedup": 1.3}
KEY = store_key("1" * 32, "2" * 32)


def test_the_arm_is_a_deterministic_function_of_job_and_key_taking_its_share():
    assert holdout_arm("job-7", KEY, 0.3) == holdout_arm("job-7", KEY, 0.3)
    jobs = [f"job-{i}" for i in range(20_000)]
    for share in (0.0, 0.05, 0.5, 1.0):
        held = sum(holdout_arm(job, KEY, share) for job in jobs) / len(jobs)
        assert held == pytest.approx(share, abs=4 * math.sqrt(0.25 / len(jobs)))
    # A larger share only adds jobs; another key holds out other jobs.
    assert all(holdout_arm(j, KEY, 0.2) for j in jobs if holdout_arm(j, KEY, 0.05))
    assert ({j for j in jobs if holdout_arm(j, KEY, 0.05)}
            != {j for j in jobs if holdout_arm(j, "f" * 32, 0.05)})


def test_the_share_is_forced_else_none_for_an_opt_out_else_the_entry_s(monkeypatch, tmp_path):
    found = Found(3, StoreEntry.from_json({**ENTRY, "key": KEY}), holdout_share=0.2)
    assert HookSettings(tmp_path).holdout_share(found) == 0.2
    assert HookSettings(tmp_path, opt_out=True).holdout_share(found) == 0.0
    assert HookSettings(tmp_path, opt_out=True, holdout=1.0).holdout_share(found) == 1.0
    monkeypatch.setenv("FDO_OPT_OUT", "1")
    monkeypatch.setenv("FDO_RELAXED_NUMERICS", "1")
    monkeypatch.setenv("FDO_HOLDOUT", "0.5")
    settings = HookSettings.from_environment()
    assert (settings.holdout, settings.opt_out, settings.relaxed_numerics) == (0.5, True, True)
    for bad in ("1.5", "-0.1", "nan", "half"):
        monkeypatch.setenv("FDO_HOLDOUT", bad)
        with pytest.raises(ValueError, match=f"FDO_HOLDOUT='{bad}'"):
            HookSettings.from_environment()


def test_op_entries_have_no_holdout_arm_their_runs_are_booked_and_never_realized(tmp_path):
    # What the pages say (docs/hook.md, docs/realized.md): the hook holds out whatever entry it
    # serves for a compiled module's key, an op's kernel form included; an op's runs inside
    # graphs (op_runs) have no arm: booked, never realized.
    from delivery.compile_plan import Plan
    from delivery.hook import Hook
    from ingest.tables import OP_RUNS
    from ranking.realized import read_runs, realized_speedups

    op = StoreEntry.from_json({**ENTRY, "kind": "op", "key": KEY})
    plan = Hook(HookSettings(tmp_path, holdout=1.0)).decider.decide(Plan(key=KEY, found=Found(3, op)))
    assert (plan.outcome, plan.config) == ("holdout", None)
    assert "holdout" not in OP_RUNS.schema.names and "holdout" in GRAPH_RUNS.schema.names
    day = datetime.date(2026, 6, 2)
    runs = pa.Table.from_pylist([{
        "dt": day, "job_id": f"job-{n}", "team": "ads", "op_fingerprint": "1" * 32, "graph_fingerprint": "3" * 32,
        "env_key": "2" * 32, "chip_seconds": 10.0, "opted_out": False, "config_key": KEY, "config_version": 3,
        "expected_speedup": 1.3} for n in range(40)], OP_RUNS.schema)
    Warehouse(tmp_path).append(OP_RUNS, runs, "ops")
    assert pa.compute.sum(hit_rows(runs, "op", []).column("chip_seconds_saved")).as_py() == pytest.approx(40 * 3.0)
    assert read_runs(tmp_path, day, day).num_rows == 0 and realized_speedups(read_runs(tmp_path, day, day)) == []


def test_bad_shares_are_refused_at_import_and_publish(tmp_path):
    for bad in ("0.7", "-0.01", "true", '"0.1"', "NaN"):
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(ENTRY)[:-1] + f', "holdout_share": {bad}}}\n')
        with pytest.raises(StoreError, match=r"bad.jsonl:1: holdout_share: .* refused") as refused:
            read_import(path)
        assert bad.strip('"').lower() in str(refused.value).lower()
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({**ENTRY, "holdout_share": 0.5}) + "\n")
    entries = read_import(good)
    assert entries.column("holdout_share").to_pylist() == [0.5]

    store = Store(tmp_path)
    for bad in (0.51, -1.0, float("nan")):
        rows = entries.set_column(entries.schema.get_field_index("holdout_share"), "holdout_share",
                                  pa.array([bad], pa.float64()))
        with pytest.raises(StoreError, match=f"entry {KEY}: holdout share {bad}"):
            store.publish(rows, None, "bad")
    relaxed = entries.set_column(entries.schema.get_field_index("relaxed_config"), "relaxed_config",
                                 pa.array(['{"xla_dump_to": "/tmp"}']))
    with pytest.raises(StoreError, match=f"entry {KEY} \\(relaxed config\\): config refused"):
        store.publish(relaxed, None, "bad relaxed config")
    with pytest.raises(StoreError, match="holdout share 0.6"):
        store.publish(entries, None, "bad version share", holdout_share=0.6)
    assert store.current() is None  # nothing of the above entered
    version = store.publish(entries, None, "good")
    with pytest.raises(StoreError, match="holdout share True"):
        store.set_holdout_share(True)
    result = fdo(tmp_path, "store", "holdout-share", "0.9")
    assert result.returncode == 2 and "holdout share 0.9" in result.stderr
    assert store.current() == version


def _old_version(home: Path) -> None:
    """A version as stores wrote them before holdout shares and relaxed configs existed."""
    store = Store(home)
    old_columns = list(STORE_ENTRY_COLUMNS) + [
        pa.field(n, t) for n, t in (("config", pa.string()), ("ci_low", pa.float64()),
                                    ("ci_high", pa.float64()), ("compiler_version", pa.string()),
                                    ("measured_at", pa.timestamp("us", tz="UTC")),
                                    ("source", pa.string()))]
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
    row = {**{f.name: None for f in old_columns}, "key": KEY, "fingerprint": ENTRY["fingerprint"],
           "env_key": ENTRY["env_key"], "kind": "graph", "speedup": 1.3, "expires_at": expires,
           "provenance": "import", "config": json.dumps(NO_YNN), "source": "old"}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([row], pa.schema(old_columns)), sink)
    data = sink.getvalue().to_pybytes()
    directory = home / "store" / "v1"
    directory.mkdir(parents=True)
    (directory / "entries.parquet").write_bytes(data)
    from storage.store_reader import checksum

    (directory / "manifest.json").write_text(json.dumps({
        "version": 1, "parent": None, "created": "2026-01-01T00:00:00+00:00",
        "checksum": checksum(data), "counts": {"graph": 1}, "compiler_versions": [],
        "reason": "old"}))
    (home / "store" / "CURRENT").write_text("1\n")
    assert store.problems() == {}


@pytest.mark.subprocess
def test_an_old_version_reads_and_serves_with_the_default_share_and_a_new_share_reaches_both_sources(tmp_path):
    _old_version(tmp_path)
    store = Store(tmp_path)
    assert store.manifest(1).holdout_share == DEFAULT_HOLDOUT_SHARE
    assert store.manifest(1).relaxed_numerics_teams == []
    assert store.entries(1).column("holdout_share").to_pylist() == [None]
    found = EmbeddedStore(tmp_path).lookup(KEY)
    assert (found.holdout_share, found.relaxed_numerics_teams) == (DEFAULT_HOLDOUT_SHARE, ())
    with running_server(tmp_path) as url:
        found = RemoteStore(url, timeout=5.0).lookup(KEY)
    assert (found.version, found.holdout_share, found.relaxed_numerics_teams, found.entry.config) == (
        1, DEFAULT_HOLDOUT_SHARE, (), json.dumps(NO_YNN))
    assert not hasattr(found.entry, "relaxed_numerics_teams")  # a policy of the version, no column
    # A service from before the policies answers without them; a malformed policy is no answer.
    answer = {"key": KEY, "fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph",
              "config": NO_YNN, "speedup": 1.3}
    old = _parse_answer(json.dumps({"version": 1, "entry": answer}).encode())
    assert (old.holdout_share, old.relaxed_numerics_teams) == (DEFAULT_HOLDOUT_SHARE, ())
    for bad in ("search", [""], [3]):
        assert _parse_answer(json.dumps({"version": 1, "entry": {
            **answer, "relaxed_numerics_teams": bad}}).encode()) is None

    # The old entry carries over into new versions; the version's policies reach it, an entry's
    # own share wins over the version's.
    (tmp_path / "own.jsonl").write_text(json.dumps({**ENTRY, "fingerprint": "3" * 32,
                                                    "holdout_share": 0.1}) + "\n")
    store.update(lambda live: merge_entries(live, read_import(tmp_path / "own.jsonl")), "own share")
    result = fdo(tmp_path, "store", "holdout-share", "0.2", "--json")
    assert result.returncode == 0, result.stderr
    version = json.loads(result.stdout)["version"]
    assert store.manifest(version).holdout_share == 0.2
    assert fdo(tmp_path, "store", "relaxed-teams", "search,ads").returncode == 0
    own = store_key("3" * 32, "2" * 32)
    embedded = EmbeddedStore(tmp_path)
    with running_server(tmp_path) as url:
        remote = RemoteStore(url, timeout=5.0)
        for source in (embedded, remote):
            assert (source.lookup(KEY).holdout_share, source.lookup(own).holdout_share) == (0.2, 0.1)
            assert source.lookup(KEY).relaxed_numerics_teams == ("ads", "search")
    # An import keeps the version's policies.
    store.update(lambda live: merge_entries(live, read_import(tmp_path / "own.jsonl")).slice(0, 1), "drop one")
    manifest = store.manifest(store.current())
    assert (manifest.holdout_share, manifest.relaxed_numerics_teams) == (0.2, ["ads", "search"])


def run_job(home: Path, *options: str, env: dict | None = None) -> dict:
    result = fdo(home, "run", *options, "--", sys.executable, JOB, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def traced(root: Path, job: str) -> Path:
    trace = root / f"trace-{job}"
    trace.mkdir()
    (trace / "fdo-job.json").write_text(json.dumps({"job_id": job, "team": "search", "chips": 2}))
    return trace


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_real_job_in_each_arm_records_its_hits_and_its_profile_joins_them(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run_job(home, "--job-id", "default")
    records = hits(home, "default")
    import_configs(home, records, SMALL)
    store = Store(home)

    def relax(live: pa.Table) -> pa.Table:  # as the tuner would: a relaxed config beside the strict one
        n = live.num_rows
        live = live.set_column(live.schema.get_field_index("relaxed_config"), "relaxed_config",
                               pa.array([json.dumps(NO_YNN)] * n, pa.string()))
        return live.set_column(live.schema.get_field_index("relaxed_speedup"), "relaxed_speedup",
                               pa.array([1.5] * n, pa.float64()))

    version = store.update(relax, "relaxed configs")
    held_trace, tuned_trace = traced(tmp_path, "held"), traced(tmp_path, "tuned")
    held = run_job(home, "--job-id", "held", "--holdout", "1", "--relaxed-numerics",
                   env={"TRACE_DIR": str(held_trace)})
    tuned = run_job(home, "--job-id", "tuned", "--holdout", "0", "--relaxed-numerics",
                    env={"TRACE_DIR": str(tuned_trace)})
    assert held["ynn"] is True and tuned["ynn"] is False  # the defaults, then the relaxed config

    held_hits, tuned_hits = hits(home, "held"), hits(home, "tuned")
    assert {r["outcome"] for r in held_hits} == {"holdout"}
    assert {r["outcome"] for r in tuned_hits} == {"applied"}
    assert {r["key"] for r in held_hits} == {r["key"] for r in tuned_hits} == {r["key"] for r in records}
    for record in held_hits + tuned_hits:
        assert record["config_version"] == version and record["optimized_fingerprint"]
    # The holdout names the entry's speedup; the tuned job ran the relaxed config, and its speedup.
    assert {r["expected_speedup"] for r in held_hits} == {1.25}
    assert {r["expected_speedup"] for r in tuned_hits} == {1.5}
    assert {r["config"] for r in held_hits} == {None}
    assert all(json.loads(r["config"]) == NO_YNN for r in tuned_hits)

    assert fdo(home, "ingest", "hits").returncode == 0
    assert fdo(home, "ingest", "profiles", str(held_trace), str(tuned_trace)).returncode == 0
    rows = duckdb.sql(
        f"select job_id, config_key, config_version, expected_speedup, holdout "
        f"from read_parquet('{home}/warehouse/graph_runs/*/*.parquet') where config_key is not null"
    ).fetchall()
    layer = {r["key"] for r in held_hits if r["module_name"] == "jit_layer"}
    assert {(job, key in layer, v, s, h) for job, key, v, s, h in rows} == {
        ("held", True, version, 1.25, True), ("tuned", True, version, 1.5, False)}

    # A job that opts in by its fdo-job.json takes the relaxed configs as well.
    job_file = tmp_path / "fdo-job.json"
    job_file.write_text(json.dumps({"job_id": "filed", "team": "search", "chips": 1,
                                    "relaxed_numerics": True}))
    assert run_job(home, "--job-file", str(job_file), "--holdout", "0")["ynn"] is False
    filed = hits(home, "filed")
    assert {r["outcome"] for r in filed} == {"applied"} and {r["expected_speedup"] for r in filed} == {1.5}


def test_a_graph_runs_drop_carries_holdout_and_booked_savings_leave_it_out(tmp_path):
    base = {"dt": "2026-11-10", "job_id": "j", "team": "t", "fingerprint": "f" * 32,
            "env_key": "e" * 32, "device_kind": "cpu", "chips": 1, "executions": 1, "seconds": 10.0}
    hit = {"config_key": "c" * 32, "config_version": 2, "expected_speedup": 1.5}
    drops = tmp_path / "drops"
    drops.mkdir()
    lines = [base, {**base, **hit, "holdout": False}, {**base, **hit, "holdout": True},
             {**base, **hit}, {**base, "holdout": True}]  # the last: a holdout of no entry
    (drops / "a.graph_runs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = ingest_profiles([drops], tmp_path / "home")
    assert report.graph_runs == 4 and "holdout without a config_key" in report.quarantined[0].reason
    runs = Warehouse(tmp_path / "home").read(GRAPH_RUNS)
    assert sorted(runs.column("holdout").to_pylist(), key=str) == [False, None, None, True]
    saved = hit_rows(runs, "graph", [])
    assert saved.num_rows == 2  # the tuned runs, holdout false or null
    assert saved.column("chip_seconds_saved").to_pylist() == [5.0, 5.0]
    day = datetime.date(2026, 11, 10)
    booked = savings(tmp_path / "home", day, day)
    assert booked.column("hit_chip_seconds").to_pylist() == [20.0]
    assert booked.column("chip_seconds_saved").to_pylist() == [10.0]
    reference = reference_savings(tmp_path / "home", day, day, [])
    assert reference.column("chip_seconds_saved").to_pylist() == [10.0]

    # A graph_runs file from before the column (schema version 1) reads with holdout null.
    old = tmp_path / "old" / "dt=2026-11-10" / "part.parquet"
    old.parent.mkdir(parents=True)
    pq.write_table(runs.drop_columns(["dt", "holdout"]), old)
    _, table = _read_unit((0, str(old), 0), [Source(GRAPH_RUNS, [str(old)], ["config_key", "holdout"])])
    assert table.column("holdout").null_count == table.num_rows == runs.num_rows
