"""The compiler hook in real JAX jobs run under `fdo run`: configs reach the compiler, outputs
stay right, every failure of the store or of a config ends in a default compile, and hits land
where `fdo hits` and profile ingestion read them."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from delivery.sandbox import CHECKED_DIR, mark_name
from delivery.store_writer import Store
from hlo.environment import store_key
from hlo.fingerprint import fingerprint_module
from hlo.module import load_file
from storage.store_schema import ENTRIES
from tests.support.job_runs import NO_YNN, assert_same_numbers, hits, import_configs, run_job
from tests.support.serving import fdo, running_server, store_of_another_job

SMALL = {"xla_cpu_optimize_for_size": True}  # a backend extra option; observable: less machine code


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """A home whose store holds no entry for the job, and the job's default run in it."""
    home = tmp_path_factory.mktemp("hook") / "home"
    store_of_another_job(home, NO_YNN)
    output, _ = run_job(home, "--job-id", "default")
    records = hits(home, "default")
    return home, output, records


@pytest.fixture
def copied(baseline, tmp_path):
    """The baseline's home copied for one test to change, the default run's output and hits."""
    home, output, records = baseline
    shutil.copytree(home, tmp_path / "home")
    return tmp_path / "home", output, records


def persistent_cache(directory: Path) -> dict[str, str]:
    """The environment that makes a job keep every executable in JAX's persistent cache at
    `directory`."""
    return {"JAX_COMPILATION_CACHE_DIR": str(directory), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


@pytest.mark.subprocess
def test_default_run_looks_up_every_compile(baseline):
    home, output, records = baseline
    assert output["ynn"] is True
    assert {r["outcome"] for r in records} == {"miss"}
    names = {r["module_name"] for r in records}
    assert {"jit_layer", "jit_loss"} <= names
    layer_keys = {r["key"] for r in records if r["module_name"] == "jit_layer"}
    assert len(layer_keys) >= 3  # plain, vmapped and sharded layer are three programs


@pytest.mark.slow
@pytest.mark.subprocess
def test_imported_config_reaches_the_compiler_for_jit_grad_vmap_and_sharded(copied):
    tuned, default_output, default_records = copied
    import_configs(tuned, default_records, NO_YNN)
    output, _ = run_job(tuned, "--job-id", "tuned")
    assert output["ynn"] is False  # the config changed what XLA generated
    assert_same_numbers(output, default_output)
    records = hits(tuned, "tuned")
    assert {r["outcome"] for r in records} == {"applied"}
    assert {r["key"] for r in records} == {r["key"] for r in default_records}
    version = Store(tuned).current()
    for record in records:
        assert record["config_version"] == version and record["expected_speedup"] == 1.25
        assert json.loads(record["config"]) == NO_YNN
        assert record["optimized_fingerprint"] and record["hook_seconds"] >= 0

    # Rollback to the version before the import: the job compiles with the defaults again.
    assert fdo(tuned, "store", "rollback", str(version - 1)).returncode == 0
    output, _ = run_job(tuned, "--job-id", "rolled-back")
    assert output["ynn"] is True
    assert {r["outcome"] for r in hits(tuned, "rolled-back")} == {"miss"}


@pytest.mark.slow
@pytest.mark.subprocess
def test_persistent_cache_never_hands_back_an_executable_with_other_flags(copied, tmp_path):
    tuned, default_output, default_records = copied
    cache = persistent_cache(tmp_path / "jax-cache")
    assert run_job(tuned, env=cache)[0]["ynn"] is True  # fills the cache with default executables
    import_configs(tuned, default_records, NO_YNN)
    assert run_job(tuned, env=cache)[0]["ynn"] is False
    assert run_job(tuned, env=cache)[0]["ynn"] is False  # now served from the cache, still tuned
    version = Store(tuned).current()
    assert fdo(tuned, "store", "rollback", str(version - 1)).returncode == 0
    assert run_job(tuned, env=cache)[0]["ynn"] is True


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_backend_extra_option_reaches_the_compiler_and_the_cache_keeps_it_apart(copied, tmp_path):
    tuned, default_output, default_records = copied
    jax_cache = tmp_path / "jax-cache"
    cache = persistent_cache(jax_cache)
    default = run_job(tuned, env=cache)[0]  # fills the cache with default executables
    assert default["code"] == default_output["code"] > 0
    filled = set(jax_cache.iterdir())
    import_configs(tuned, default_records, SMALL)
    small, _ = run_job(tuned, "--job-id", "small", env=cache)
    # Compiled afresh, not handed the default executable by the cache: the map entry is in the
    # cache key. Only the machine code differs from the default's.
    assert 0 < small["code"] < default["code"] and small["ynn"] is True
    assert_same_numbers(small, default_output)
    records = hits(tuned, "small")
    assert {r["outcome"] for r in records} == {"applied"}
    assert {json.dumps(json.loads(r["config"])) for r in records} == {json.dumps(SMALL)}
    both = set(jax_cache.iterdir())
    assert both > filled
    assert_same_numbers(run_job(tuned, env=cache)[0], default_output)  # tuned, from the cache
    version = Store(tuned).current()
    assert fdo(tuned, "store", "rollback", str(version - 1)).returncode == 0
    assert_same_numbers(run_job(tuned, env=cache)[0], default_output)  # default, from the cache
    assert set(jax_cache.iterdir()) == both  # both runs were served from the cache


@pytest.mark.subprocess
@pytest.mark.parametrize("config_of, reason", [
    # A real key of XLA's CPU backend extra options, not in the flag table.
    pytest.param(lambda dump: {"xla_force_enable_experimental_llvm_ir_gemm": True}, "not on the allowlist",
                 id="a-backend-extra-option"),
    # A dump path: the job's modules written wherever the store says.
    pytest.param(lambda dump: {"xla_dump_to": str(dump)}, "xla_dump_to", id="a-dump-path"),
])
def test_a_flag_off_the_allowlist_never_arrives_from_the_store(copied, tmp_path, config_of, reason):
    tuned, default_output, default_records = copied
    dump = tmp_path / "dumped"
    config = config_of(dump)
    [flag] = config
    layer = next(r for r in default_records if r["module_name"] == "jit_layer")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"fingerprint": layer["fingerprint"], "env_key": layer["env_key"],
                               "kind": "graph", "config": config, "speedup": 2.0}) + "\n")
    refused = fdo(tuned, "store", "import", str(bad))
    assert refused.returncode == 2 and flag in refused.stderr

    # A store written behind the import's back (a forged version with a valid checksum): the
    # hook checks the allowlist again and compiles with the defaults.
    forge_version(tuned, layer, config)
    output, _ = run_job(tuned, "--job-id", "forged")
    assert output["code"] == default_output["code"] and output["ynn"] is True and not dump.exists()
    refused_hits = [r for r in hits(tuned, "forged") if r["outcome"] == "refused"]
    assert [r["key"] for r in refused_hits] == [layer["key"]]
    assert reason in refused_hits[0]["reason"]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_config_that_fails_to_compile_is_refused_in_the_sandbox_or_falls_back(copied):
    tuned, default_output, default_records = copied
    # Allowlisted and well-formed, but this XLA knows no such fusion type: its compile fails.
    config = {"placement:NO_SUCH_TYPE": "ynn"}
    import_configs(tuned, default_records, config)
    output, stderr = run_job(tuned, "--job-id", "refused")
    assert_same_numbers(output, default_output)
    records = hits(tuned, "refused")
    assert {r["outcome"] for r in records} == {"refused"}  # never compiled in the job
    assert all("failed in a sandbox" in r["reason"] for r in records)
    # Had this machine passed it before (a mark left by another compiler, say), the job tries
    # it, and its own compile decides: the defaults.
    for record in default_records:
        mark = tuned / CHECKED_DIR / mark_name(record["key"], config)
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
    output, stderr = run_job(tuned, "--job-id", "fallback")
    assert_same_numbers(output, default_output)
    records = hits(tuned, "fallback")
    assert {r["outcome"] for r in records} == {"fallback"}
    assert all("tuned compile failed" in r["reason"] for r in records)
    assert "fallback" in stderr or "tuned compile failed" in stderr


@pytest.mark.subprocess
def test_corrupt_store_leaves_the_job_running_with_defaults(copied):
    tuned, default_output, default_records = copied
    import_configs(tuned, default_records, NO_YNN)
    entries = tuned / "store" / f"v{Store(tuned).current()}" / "entries.parquet"
    data = bytearray(entries.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entries.write_bytes(bytes(data))
    output, stderr = run_job(tuned, "--job-id", "corrupt")
    assert output["ynn"] is True
    assert_same_numbers(output, default_output)
    records = hits(tuned, "corrupt")
    assert {r["outcome"] for r in records} == {"error"}
    assert "checksum" in records[0]["reason"] and "checksum" in stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_remote_store_applies_configs_and_an_unreachable_or_silent_one_does_not_break_the_job(
        copied):
    tuned, default_output, default_records = copied
    import_configs(tuned, default_records, NO_YNN)
    with running_server(tuned) as url:
        # A generous timeout: this part is about applying, and a loaded machine answers slowly.
        output, _ = run_job(tuned, "--store-url", url, "--job-id", "remote",
                            env={"FDO_STORE_TIMEOUT": "20"})
    records = hits(tuned, "remote")
    assert {r["outcome"] for r in records} == {"applied"}, [(r["outcome"], r["reason"]) for r in records]
    assert output["ynn"] is False
    assert_same_numbers(output, default_output)
    assert {r["config_version"] for r in records} == {Store(tuned).current()}

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    output, _ = run_job(tuned, "--store-url", f"http://127.0.0.1:{port}", "--job-id", "unreachable")
    assert output["ynn"] is True
    assert {r["outcome"] for r in hits(tuned, "unreachable")} == {"error"}

    with socket.socket() as silent:  # accepts connections, never answers: a hung service
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        output, _ = run_job(tuned, "--store-url", url, "--job-id", "silent",
                            env={"FDO_STORE_TIMEOUT": "0.2"})
    assert output["ynn"] is True
    records = hits(tuned, "silent")
    assert {r["outcome"] for r in records} == {"error"}
    assert "timed out" in records[0]["reason"]
    # One timeout, then the hook backs off instead of asking (and waiting) at every compile.
    backed_off = [r for r in records if "not retried for" in r["reason"]]
    assert len(backed_off) == len(records) - 1 >= 1


@pytest.mark.slow
@pytest.mark.subprocess
def test_hits_land_once_and_a_profile_of_a_tuned_job_carries_its_hit(copied, tmp_path):
    tuned, default_output, default_records = copied
    import_configs(tuned, default_records, NO_YNN, speedup=1.5)
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "fdo-job.json").write_text(json.dumps({"job_id": "traced", "team": "search", "chips": 2}))
    run_job(tuned, "--job-id", "traced", env={"TRACE_DIR": str(trace)})
    spool = tuned / "spool" / "hits"
    with open(next(spool.glob("*.jsonl")), "a") as handle:
        handle.write('{"outcome": "applied", "at": "yesterday"}\n')  # a bad line: quarantined

    landed = fdo(tuned, "ingest", "hits", "--json")
    assert landed.returncode == 3, landed.stderr  # landed, with a line quarantined
    report = json.loads(landed.stdout)
    assert report["rows"] > 0 and len(report["quarantined"]) == 1
    assert "at must be an ISO 8601 time" in report["quarantined"][0]["reason"]
    before = hits(tuned, "traced")
    again = json.loads(fdo(tuned, "ingest", "hits", "--json").stdout)
    assert again["rows"] == 0 and hits(tuned, "traced") == before

    result = fdo(tuned, "ingest", "profiles", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    rows = duckdb.sql(
        f"select fingerprint, config_key, config_version, expected_speedup, chip_seconds "
        f"from read_parquet('{tuned}/warehouse/graph_runs/*/*.parquet') where job_id = 'traced'"
    ).fetchall()
    layer = next(r for r in before if r["module_name"] == "jit_layer" and r["outcome"] == "applied")
    tuned_rows = [r for r in rows if r[1] is not None]
    assert tuned_rows, rows
    assert {(r[0], r[1], r[2], r[3]) for r in tuned_rows} >= {
        (layer["fingerprint"], layer["key"], Store(tuned).current(), 1.5)}


def forge_version(home: Path, record: dict, config: dict) -> None:
    """Publish a version the way only someone with write access to the files could: checksum and
    all, but with a config the store's own checks would refuse."""
    from storage.store_reader import checksum

    store = Store(home)
    live = store.entries()
    row = {name: None for name in ENTRIES.names}
    row.update(key=store_key(record["fingerprint"], record["env_key"]), fingerprint=record["fingerprint"],
               env_key=record["env_key"], kind="graph", speedup=2.0, provenance="import",
               config=json.dumps(config), source="forged")
    entries = pa.concat_tables([live, pa.Table.from_pylist([row], ENTRIES)])
    version = (store.current() or 0) + 1
    directory = store.root / f"v{version}"
    directory.mkdir()
    sink = pa.BufferOutputStream()
    pq.write_table(entries, sink)
    data = sink.getvalue().to_pybytes()
    (directory / "entries.parquet").write_bytes(data)
    manifest = {"version": version, "parent": version - 1, "created": "2026-01-01T00:00:00+00:00",
                "checksum": checksum(data), "counts": {"graph": entries.num_rows},
                "compiler_versions": [], "reason": "forged"}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    (store.root / "CURRENT").write_text(f"{version}\n")


def test_embedded_snapshot_is_read_once_and_can_be_pinned(tmp_path):
    from delivery.imports import read_import
    from delivery.lookup import EmbeddedStore
    from delivery.store_writer import merge_entries

    entry = {"fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph", "config": NO_YNN,
             "speedup": 1.3}
    (tmp_path / "one.jsonl").write_text(json.dumps(entry) + "\n")
    store = Store(tmp_path)
    first = store.update(lambda live: merge_entries(live, read_import(tmp_path / "one.jsonl")), "one")
    key = store_key("1" * 32, "2" * 32)
    running = EmbeddedStore(tmp_path)
    assert running.lookup(key).version == first
    store.update(lambda live: live.slice(0, 0), "empty")
    assert running.lookup(key).entry.speedup == 1.3  # a job keeps the version it started with
    assert EmbeddedStore(tmp_path).lookup(key) is None
    assert EmbeddedStore(tmp_path, version=first).lookup(key).version == first


def test_a_fresh_home_has_no_store_and_a_broken_one_cannot_answer(tmp_path):
    from delivery.lookup import EmbeddedStore, NoStore, StoreUnavailable

    fresh = EmbeddedStore(tmp_path)
    for _ in range(2):  # the failure is remembered, and its kind with it
        with pytest.raises(NoStore, match="no store published under"):
            fresh.lookup("0" * 32)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "CURRENT").write_text("v-not-a-number\n")
    with pytest.raises(StoreUnavailable) as broken:
        EmbeddedStore(tmp_path).lookup("0" * 32)
    assert not isinstance(broken.value, NoStore)


def test_hit_lines_say_no_store_and_lines_from_before_it_still_read():
    from ingest.hits import parse_spool

    def line(outcome: str) -> str:
        return json.dumps({"at": "2026-11-01T00:00:00+00:00", "job_id": "j", "key": "a" * 32,
                           "fingerprint": "b" * 32, "env_key": "c" * 32, "module_name": "jit_step",
                           "outcome": outcome, "reason": "no store published under /h",
                           "hook_seconds": 0.001, "compile_seconds": 0.5}) + "\n"

    good, bad, reasons = parse_spool("h-1-1.jsonl", (line("no store") + line("error") + line("nostore")).encode())
    assert [row["outcome"] for row in good] == ["no store", "error"]  # 'error': a fresh home's before
    assert len(bad) == 1 and "outcome must be one of" in reasons[0]


@pytest.mark.xla
def test_a_job_in_a_fresh_home_records_no_store_and_in_a_broken_one_error(tmp_path):
    import jax
    import jax.numpy as jnp

    from delivery import hook

    fresh, broken = tmp_path / "fresh", tmp_path / "broken"
    (broken / "store").mkdir(parents=True)
    (broken / "store" / "CURRENT").write_text("v-not-a-number\n")
    try:
        for home in (fresh, broken):
            hook.install(home=home, job_id=home.name)
            jax.jit(lambda v: jnp.tanh(v @ v).sum() + len(home.name))(jnp.ones((16, 16)))
    finally:
        hook.uninstall()
    for home, outcome in ((fresh, "no store"), (broken, "error")):
        records = [json.loads(line) for path in (home / "spool" / "hits").glob("*.jsonl")
                   for line in path.read_text().splitlines()]
        assert records and {r["outcome"] for r in records} == {outcome}, home.name
        assert {r["config_version"] for r in records} == {None}


@pytest.mark.subprocess
def test_remote_lookups_are_cached_hits_and_misses_alike(tmp_path):
    from delivery.lookup import RemoteStore

    entry = {"fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph", "config": NO_YNN,
             "speedup": 1.3}
    (tmp_path / "one.jsonl").write_text(json.dumps(entry) + "\n")
    assert fdo(tmp_path, "store", "import", str(tmp_path / "one.jsonl")).returncode == 0
    hit, miss = store_key("1" * 32, "2" * 32), "f" * 32
    with running_server(tmp_path) as url:
        remote = RemoteStore(url, timeout=5.0)
        for _ in range(3):
            assert remote.lookup(hit).entry.speedup == 1.3
            assert remote.lookup(miss) is None
        with urllib.request.urlopen(f"{url}/metrics") as response:
            metrics = {(s.labels.get("outcome"), s.value) for family in text_string_to_metric_families(
                response.read().decode()) for s in family.samples
                if s.name == "fdo_service_lookups_total" and s.labels.get("route") == "key"}
    assert metrics == {("hit", 1), ("miss", 1)}  # three asks each, two served from the cache


@pytest.mark.subprocess
def test_the_hook_keys_a_module_by_the_fingerprint_of_its_xla_dump(tmp_path):
    """The hook and symbol ingestion must meet on one fingerprint: the hook's, taken from the
    StableHLO JAX hands the compiler, equals `fdo fingerprint` of XLA's own dump of the module."""
    dump = tmp_path / "dump"
    home = tmp_path / "home"
    run_job(home, "--job-id", "dumped", env={"XLA_FLAGS": f"--xla_dump_to={dump}"})
    records = hits(home, "dumped")
    checked = {}
    for record in records:
        files = sorted(dump.glob(f"module_*.{record['module_name']}.before_optimizations.txt"))
        if files:
            fingerprints = {fingerprint_module(load_file(f)).fingerprint for f in files}
            assert record["fingerprint"] in fingerprints, record["module_name"]
            checked[record["module_name"]] = files[0]
    assert len(checked) >= 4  # layer (plain, vmapped, sharded), loss, and the helpers around them
    # `fdo fingerprint` prints what the library computes (one run: each costs a process start).
    one = next(iter(checked.values()))
    assert fdo(home, "fingerprint", str(one)).stdout.strip() == fingerprint_module(load_file(one)).fingerprint
