"""XLA:GPU per-fusion autotune results (issue 32): XLA's own protos read off the installed
compiler, the checks every results text passes, the directory one compile gets them in, the
store's column for them, and the hook on a platform that does not autotune."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import jaxlib
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import descriptor_pb2, text_format

from delivery.imports import read_import
from delivery.store_writer import Store, StoreError
from execution.autotune.jax_cache import CacheKeyed
from execution.autotune.per_fusion_directory import (
    CACHE_DIR_OPTION,
    KEPT_STALE_SECONDS,
    STALE_SECONDS,
    Delivery,
    Uptake,
    job_sets_cache_dir,
)
from execution.autotune.results import (
    MAX_HLO_CHARS,
    MAX_RESULT_BYTES,
    MAX_RESULTS,
    MAX_TEXT_BYTES,
    ResultsError,
    parse_results,
)
from execution.autotune.schema import declared_fields, declared_schema, extracted_schema, schema
from hlo.environment import store_key
from storage.store_schema import ENTRIES
from tests.support import JOBS, ROOT

H100 = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 3352 GB/s, L2 cache: 50 MB, DNN version: 9.8.0"
GEMM_HLO = ("{\n  tmp_0 = f16[64,128]{1,0} parameter(0)\n  tmp_1 = f16[128,256]{1,0} parameter(1)\n"
            "  ROOT tmp_2 = f16[64,256]{1,0} dot(tmp_0, tmp_1), lhs_contracting_dims={1}, "
            "rhs_contracting_dims={0}\n}")
# What xla_gpu_dump_autotune_results_to writes for a compile of two fusions (the layout of
# XLA's text dump; the values made up): a Triton tiling and a cuBLAS algorithm.
RESULTS = f"""version: 3
results {{
  device: "{H100}"
  hlo: {json.dumps(GEMM_HLO)}
  result {{
    run_time {{ nanos: 41984 }}
    triton {{ block_m: 64 block_n: 128 block_k: 32 split_k: 1 num_stages: 4 num_warps: 4 num_ctas: 1 }}
  }}
  version: 24
}}
results {{
  device: "{H100}"
  hlo: {json.dumps(GEMM_HLO.replace("f16", "f32"))}
  result {{
    scratch_bytes: 4194304
    run_time {{ nanos: 98304 }}
    gemm {{ algorithm: 7 }}
  }}
  version: 24
}}
"""


def test_xla_classes_are_read_off_the_installed_compiler_and_agree_with_the_declared_ones():
    extracted = extracted_schema()
    assert extracted is not None and Path(extracted.source).name.endswith(".so")
    assert schema().source == extracted.source
    pool = extracted.results.DESCRIPTOR.file.pool
    enum, int32 = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM, descriptor_pb2.FieldDescriptorProto.TYPE_INT32
    for name, declared in declared_fields().items():
        found = {f.number: (f.name, int32 if f.type == enum else f.type)
                 for f in pool.FindMessageTypeByName(name).fields}
        # Every declared field is XLA's, by name, number and wire type (an enum is its number).
        assert {n: found.get(n) for n in declared} == declared, name
        if jaxlib.__version__ == "0.10.2":  # the declared schema is this one's, field for field
            assert found == declared, name


def test_results_round_trip_through_xla_classes_and_the_declared_ones_byte_for_byte():
    results = parse_results(RESULTS)
    assert [(f.kind, f.version, f.device) for f in results.fusions] == [("triton", 24, H100), ("gemm", 24, H100)]
    assert results.fusions[0].run_time_seconds == pytest.approx(41.984e-6)
    assert parse_results(results.to_text()) == results
    declared = declared_schema()
    for fusion in results.fusions:
        as_declared = declared.result.FromString(fusion.result)
        assert as_declared.SerializeToString() == fusion.result
        # The cache file XLA reads is the result's text; both schemas read it to the same bytes.
        from_file = text_format.Parse(fusion.cache_file_text(), declared.result())
        assert from_file.SerializeToString() == fusion.result
    assert results.select(1).fusions == (results.fusions[1],)  # the costlier kernel


def test_a_result_for_another_gpu_or_xla_version_lands_where_xla_never_looks():
    fusion = parse_results(RESULTS).fusions[0]
    name = fusion.cache_file_name()
    digest = hashlib.sha256(f"<key model='{H100}', hlo='{GEMM_HLO}', version=24>".encode()).digest()
    # Web-safe base64 of the SHA-256, no padding (tsl::Base64Encode): 43 characters.
    assert name == base64.urlsafe_b64encode(digest).decode().rstrip("=") + ".textproto" and len(name) == 53
    other_gpu = parse_results(RESULTS).for_device(H100.replace("9.0", "8.0"), 24).fusions[0]
    other_xla = parse_results(RESULTS).for_device(H100, 25).fusions[0]
    assert len({name, other_gpu.cache_file_name(), other_xla.cache_file_name()}) == 3


def _entry_with(field: str) -> str:
    return RESULTS.replace("  version: 24\n}", f"  version: 24\n  {field}\n}}", 1)


@pytest.mark.parametrize("text, said", [
    (_entry_with('cache_dir: "/tmp/fdo-owned"'), 'no field named "cache_dir"'),  # a path-like field
    (RESULTS.replace("gemm {", 'dump_to: "/etc" gemm {'), 'no field named "dump_to"'),
    (RESULTS.replace("version: 3", 'version: 3\npath: "../../x"'), 'no field named "path"'),
    ("\x00\xff\x13garbage\x07", "unreadable"),
    (b"version: 3", "must be text"),
    (RESULTS + " " * MAX_TEXT_BYTES, "over 524288 bytes"),
    ("version: 3\n", "hold no result"),
    (RESULTS.replace("version: 3", "version: 0"), "carry no version"),
    (RESULTS.replace(f'device: "{H100}"', 'device: ""', 1), "result 0: its device"),
    (RESULTS.replace("  version: 24\n", "", 1), "result 0: no key version"),
    (RESULTS.replace("gemm { algorithm: 7 }", ""), "result 1: its result chose no config"),
    (RESULTS.replace(json.dumps(GEMM_HLO), json.dumps("x" * (MAX_HLO_CHARS + 1)), 1), "result 0: its HLO"),
    (RESULTS.replace("gemm { algorithm: 7 }", f'other {{ name: "{"n" * MAX_RESULT_BYTES}" }}'),
     "result 1: its result is 4"),
    ("version: 3\n" + "results { device: \"d\" hlo: \"h\" version: 1 result { gemm {} } }\n" * (MAX_RESULTS + 1),
     "257 results, more than 256"),
])
def test_hostile_results_are_refused_saying_what_is_wrong(text, said):
    with pytest.raises(ResultsError) as refused:
        parse_results(text)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def _compile_on_cpu(options) -> object:
    """A real XLA compile of a small jitted program with jaxlib CompileOptions `options`."""
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax

    lowered = jax.jit(lambda x: jnp.tanh(x @ x)).lower(jax.ShapeDtypeStruct((16, 16), jnp.float32))
    device = jax.devices()[0]
    return device.client.compile_and_load(mlir.module_to_bytecode(lowered.compiler_ir()),
                                          _jax.DeviceList((device,)), options)


def _plain_options():
    from jax._src import compiler

    return compiler.get_compile_options(num_replicas=1, num_partitions=1)


@pytest.mark.xla
def test_a_compile_gets_a_fresh_directory_of_the_callers_own_that_is_removed_after(tmp_path):
    parent = tmp_path / "owned"
    # Names that would escape a directory if a path were built from them: files are named by
    # the key's hash, so they cannot.
    hostile = parse_results(RESULTS).for_device("../../../../etc/cron.d/x", 24)
    with Delivery(hostile, parent) as delivery:
        directory = delivery.directory
        assert directory.parent == parent and sorted(p.name for p in directory.iterdir()) == sorted(
            f.cache_file_name() for f in hostile.fusions)
        options = delivery.options(_plain_options())
        assert (CACHE_DIR_OPTION, str(directory)) in options.env_option_overrides
        assert job_sets_cache_dir(options) and not job_sets_cache_dir(_plain_options())
        _compile_on_cpu(options)  # XLA:CPU takes the option and autotunes nothing
        assert delivery.uptake() == Uptake(delivered=2, taken=0, autotuned=0)
    assert not directory.exists() and list(parent.iterdir()) == []

    with pytest.raises(Exception, match="(?i)parse|invalid|error"), Delivery(hostile, parent) as delivery:
        directory = delivery.directory
        _jaxlib_compile_of_garbage(delivery.options(_plain_options()))
    assert not directory.exists()


def _jaxlib_compile_of_garbage(options) -> None:
    import jax
    from jax._src.lib import _jax

    device = jax.devices()[0]
    device.client.compile_and_load(b"not a module", _jax.DeviceList((device,)), options)


@pytest.mark.xla
def test_concurrent_compiles_each_get_their_own_directory(tmp_path):
    results = parse_results(RESULTS)
    seen: dict[int, Path] = {}
    errors: list[BaseException] = []
    both_inside = threading.Barrier(2, timeout=60)

    def compile_in_thread(index: int) -> None:
        try:
            with Delivery(results, tmp_path) as delivery:
                seen[index] = delivery.directory
                both_inside.wait()  # both directories exist at once
                _compile_on_cpu(delivery.options(_plain_options()))
                assert delivery.uptake().delivered == 2
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=compile_in_thread, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and seen[0] != seen[1]
    assert list(tmp_path.iterdir()) == []


def test_uptake_reads_what_xla_read_and_what_it_wrote(tmp_path):
    results = parse_results(RESULTS)
    with Delivery(results, tmp_path) as delivery:
        taken = delivery.directory / results.fusions[1].cache_file_name()
        taken.read_text()  # as XLA reads a result it found under its key
        # A fusion XLA autotuned itself: it writes the result under that fusion's key.
        (delivery.directory / "AbC-xla-own_key.textproto").write_text("scratch_bytes: 16\ngemm { algorithm: 3 }\n")
        assert delivery.uptake() == Uptake(delivered=2, taken=1, autotuned=1)
        assert [r.gemm.algorithm for r in delivery.written_by_xla()] == [3]
    assert "2 delivered, 1 taken, 1 fusions autotuned by XLA" in Uptake(2, 1, 1).describe()
    assert "unknown" in Uptake(2, None, 0).describe()


def test_directories_left_by_a_killed_process_are_swept_and_fresh_ones_kept(tmp_path):
    stale, running = tmp_path / "fusions-dead", tmp_path / "fusions-other-job"
    stale.mkdir()
    running.mkdir()
    long_ago = time.time() - STALE_SECONDS - 60
    os.utime(stale, (long_ago, long_ago))
    with Delivery(parse_results(RESULTS), tmp_path):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fusions-other-job"]


def _row(key_seed: int, results: str | None) -> dict:
    fingerprint, env_key = f"{key_seed:032x}", "e" * 32
    now = datetime.datetime.now(datetime.UTC)
    return {"key": store_key(fingerprint, env_key), "fingerprint": fingerprint, "env_key": env_key,
            "kind": "graph", "speedup": 1.2, "expires_at": now + datetime.timedelta(days=30),
            "provenance": "tuner", "config": "{}", "measured_at": now, "source": "test",
            "autotune_results": results}


def _rewrite_version(home: Path, version: int, change: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite a published version's entries file by hand (its checksum made to match), as a
    writer from before a column, or one that bypasses the store's checks, would leave it."""
    directory = home / "store" / f"v{version}"
    sink = pa.BufferOutputStream()
    pq.write_table(change(pq.read_table(directory / "entries.parquet")), sink)
    data = sink.getvalue().to_pybytes()
    (directory / "entries.parquet").write_bytes(data)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["checksum"] = hashlib.blake2b(data, digest_size=16).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_the_store_keeps_valid_results_refuses_hostile_ones_and_reads_old_versions_as_none(tmp_path):
    store = Store(tmp_path)
    version = store.publish(pa.Table.from_pylist([_row(1, RESULTS), _row(2, None)], ENTRIES), None, "test")
    assert store.entries(version).column("autotune_results").to_pylist() == [RESULTS, None]
    with pytest.raises(StoreError) as refused:
        store.publish(pa.Table.from_pylist([_row(3, _entry_with('path: "/tmp/x"'))], ENTRIES), version, "t")
    assert str(refused.value).startswith(f"entry {store_key(f'{3:032x}', 'e' * 32)}: autotune results unreadable")
    assert "\n" not in str(refused.value) and store.current() == version
    # A version written before the column reads with it null.
    _rewrite_version(tmp_path, version, lambda t: t.drop_columns(["autotune_results"]))
    assert store.entries(version).column("autotune_results").to_pylist() == [None, None]


def test_import_takes_valid_results_in_canonical_form_and_names_the_line_of_a_hostile_one(tmp_path):
    line = {"fingerprint": "a" * 32, "env_key": "b" * 32, "kind": "graph", "config": {}, "speedup": 1.1}
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({**line, "autotune_results": RESULTS}) + "\n")
    imported = read_import(good).column("autotune_results").to_pylist()
    assert imported == [parse_results(RESULTS).to_text()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(line) + "\n" + json.dumps({**line, "autotune_results": "\x00garbage"}) + "\n")
    with pytest.raises(StoreError, match=r"bad\.jsonl:2: autotune_results: refused: autotune results unreadable"):
        read_import(bad)


def _hits(home: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((home / "spool" / "hits").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.mark.xla
def test_on_cpu_the_hook_records_results_as_not_delivered_and_refuses_a_hostile_entry(tmp_path):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from delivery import hook

    def step(x):
        return jnp.tanh(x @ x).sum()

    x = jnp.ones((32, 32), jnp.float32)
    expected = float(jax.jit(step)(x))
    store = Store(tmp_path)
    store.publish(pa.Table.from_pylist([_row(9, None)], ENTRIES), None, "unrelated")
    try:
        hook.install(home=tmp_path, job_id="miss")
        jax.jit(lambda v: step(v))(x)
        (miss,) = [r for r in _hits(tmp_path) if r["job_id"] == "miss"]
        entry = {**_row(0, RESULTS), "fingerprint": miss["fingerprint"], "env_key": miss["env_key"],
                 "key": miss["key"]}
        version = store.publish(pa.Table.from_pylist([entry], ENTRIES), store.current(), "results")
        hook.install(home=tmp_path, job_id="cpu", holdout=0)
        assert float(jax.jit(lambda v: step(v))(x)) == expected
        # Forged past the store's checks: the hook checks again and refuses the entry.
        _rewrite_version(tmp_path, version, lambda t: t.set_column(
            t.schema.get_field_index("autotune_results"), "autotune_results",
            pa.array([_entry_with('dir: "/tmp/evil"')] * t.num_rows, pa.string())))
        hook.install(home=tmp_path, job_id="forged", holdout=0)
        np.testing.assert_allclose(float(jax.jit(lambda v: step(v))(x)), expected)
    finally:
        hook.uninstall()
    records = {r["job_id"]: r for r in _hits(tmp_path) if r["key"] == miss["key"]}
    assert records["cpu"]["outcome"] == "applied"
    assert records["cpu"]["reason"] == "autotune results not delivered: cpu compiles do not autotune"
    assert records["forged"]["outcome"] == "refused"
    assert records["forged"]["reason"].startswith("entry refused: autotune results unreadable")
    assert not (tmp_path / "cache" / "autotune").exists()


@pytest.mark.xla
def test_on_a_gpu_the_hook_points_that_compile_alone_at_a_directory_of_its_home(tmp_path):
    # The hook's GPU branch, on a real CPU compile: XLA:CPU takes the option and ignores it.
    from delivery.autotune_handoff import AUTOTUNE_DIR
    from delivery.compile_plan import Plan
    from delivery.hook import Hook, HookSettings

    hook = Hook(HookSettings(home=tmp_path))
    plan = Plan(platform="gpu", config={}, results=parse_results(RESULTS))
    given: list[str | None] = []

    def compile_noting(compile: Callable) -> Callable:
        def noted(options):
            given.append(dict(options.env_option_overrides).get(CACHE_DIR_OPTION))
            return compile(options)
        return noted

    hook.autotune.compile(plan, compile_noting(_compile_on_cpu), _plain_options())
    assert Path(given[0]).parent == tmp_path / AUTOTUNE_DIR and not Path(given[0]).exists()
    assert plan.reason == "autotune results: 2 delivered, 0 taken, 0 fusions autotuned by XLA"
    with pytest.raises(Exception, match="(?i)parse|invalid|error"):
        hook.autotune.compile(plan, compile_noting(_jaxlib_compile_of_garbage), _plain_options())
    assert given[1] != given[0] and list((tmp_path / AUTOTUNE_DIR).iterdir()) == []
    # A compile that names a directory of its own keeps it, and gets no results.
    own = _plain_options()
    own.env_option_overrides = [(CACHE_DIR_OPTION, str(tmp_path / "jobs-own"))]
    hook.autotune.compile(plan, compile_noting(_compile_on_cpu), own)
    assert given[2] == str(tmp_path / "jobs-own")
    assert plan.reason == "autotune results not delivered: the job names its own per-fusion cache directory"


def test_a_kept_directory_is_one_per_set_of_results_and_outlives_its_compiles(tmp_path):
    results = parse_results(RESULTS)
    with Delivery(results, tmp_path, kept=True) as first:
        directory = first.directory
        assert directory == tmp_path / f"results-{results.digest()}"
        (directory / "AbC-xla-own_key.textproto").write_text("scratch_bytes: 16\ngemm { algorithm: 3 }\n")
        assert first.uptake() == Uptake(delivered=2, taken=0, autotuned=1)
    assert sorted(p.name for p in directory.iterdir() if p.suffix == ".textproto") == sorted(
        [*(f.cache_file_name() for f in results.fusions), "AbC-xla-own_key.textproto"])
    # A delivered file that went missing or was changed is written again; XLA's own stays, and
    # counts for the compile that wrote it alone.
    delivered = directory / results.fusions[0].cache_file_name()
    delivered.write_text("garbage")
    (directory / results.fusions[1].cache_file_name()).unlink()
    with Delivery(results, tmp_path, kept=True) as again:
        assert again.directory == directory and again.uptake() == Uptake(2, 0, 0)
        assert delivered.read_text() == results.fusions[0].cache_file_text()
    # Other results, another directory; one no compile used for a week is swept.
    other = results.for_device("another GPU", 24)
    assert other.digest() != results.digest()
    long_ago = time.time() - KEPT_STALE_SECONDS - 60
    os.utime(directory, (long_ago, long_ago))
    with Delivery(other, tmp_path, kept=True):
        pass
    assert [p.name for p in tmp_path.iterdir()] == [f"results-{other.digest()}"]
    with pytest.raises(ValueError, match="no dump"):
        Delivery(results, tmp_path, dump=True, kept=True)


def test_cache_keyed_adds_the_results_to_jax_cache_key_in_its_thread_and_block_alone():
    from jax._src import cache_key

    results = parse_results(RESULTS)
    outside = cache_key.custom_hook()
    seen_elsewhere: list[str] = []
    with CacheKeyed(results) as keyed:
        inside = cache_key.custom_hook()
        other = threading.Thread(target=lambda: seen_elsewhere.append(cache_key.custom_hook()))
        other.start()
        other.join()
    assert inside == outside + f"fleet-fdo autotune results {results.digest()}"
    assert seen_elsewhere == [outside] and cache_key.custom_hook() == outside and not keyed.from_cache


def _cached_job(home: Path, cache: Path, job: str, holdout: float) -> dict:
    done = subprocess.run([sys.executable, str(JOBS / "autotune_cache_job.py"), str(home),
                           str(cache), job, str(holdout)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _step_entries(cache: Path) -> int:
    """The executables of the job's step in JAX's persistent cache."""
    return len([p for p in cache.iterdir() if p.name.startswith("jit_step-") and p.name.endswith("-cache")])


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_job_with_jax_persistent_cache_gets_results_and_its_cache_keeps_working(tmp_path):
    home, cache = tmp_path / "home", tmp_path / "jax-cache"
    home.mkdir()
    store = Store(home)
    store.publish(pa.Table.from_pylist([_row(9, None)], ENTRIES), None, "unrelated")
    default = _cached_job(home, cache, "default", 0)
    (miss,) = [r for r in _hits(home) if r["job_id"] == "default" and r["module_name"] == "jit_step"]
    jobs_own = str(cache / "xla_gpu_per_fusion_autotune_cache_dir")  # JAX's, for its persistent cache
    assert default["compiles"] == [{"directory": jobs_own, "cache_hits": 0, "files": []}]
    assert _step_entries(cache) == 1

    def publish(results: str) -> None:
        entry = {**_row(0, results), "fingerprint": miss["fingerprint"], "env_key": miss["env_key"],
                 "key": miss["key"]}
        store.publish(pa.Table.from_pylist([entry], ENTRIES), store.current(), "results")

    def step_record(job: str) -> dict:
        (record,) = [r for r in _hits(home) if r["job_id"] == job and r["module_name"] == "jit_step"]
        return record

    results = parse_results(RESULTS)
    kept = home / "cache" / "autotune" / f"results-{results.digest()}"
    names = sorted(f.cache_file_name() for f in results.fusions)
    publish(RESULTS)
    tuned = _cached_job(home, cache, "tuned", 0)
    # The results' own directory in place of the job's, holding them when XLA compiled; a
    # persistent-cache miss (keyed apart from the default's executable), and one entry more.
    assert tuned["compiles"] == [{"directory": str(kept), "cache_hits": 0, "files": names}]
    assert tuned["value"] == default["value"] and _step_entries(cache) == 2
    assert step_record("tuned")["outcome"] == "applied"
    assert step_record("tuned")["reason"] == ("autotune results: 2 delivered, 0 taken, 0 fusions autotuned by "
                                               "XLA (in place of the job's own per-fusion cache directory, for "
                                               "this compile)")
    # The next process compiles it with the same options and the same key: a hit.
    again = _cached_job(home, cache, "tuned-again", 0)
    assert again["compiles"] == [{"directory": str(kept), "cache_hits": 1, "files": names}]
    assert step_record("tuned-again")["reason"].startswith(
        "autotune results: 2 delivered, executable from JAX's persistent cache")
    # The holdout arm compiles with the job's own options: the default's executable, still there.
    held = _cached_job(home, cache, "held-out", 1)
    assert held["compiles"] == [{"directory": jobs_own, "cache_hits": 1, "files": []}]
    assert step_record("held-out")["outcome"] == "holdout"
    # Other results (an entry re-keyed, say): their own directory and key, never the first's.
    relabelled = results.for_device("another GPU", 24)
    publish(relabelled.to_text())
    other = _cached_job(home, cache, "relabelled", 0)
    assert other["compiles"][0]["directory"] == str(home / "cache" / "autotune" / f"results-{relabelled.digest()}")
    assert other["compiles"][0]["cache_hits"] == 0 and _step_entries(cache) == 3
    assert not Path(jobs_own).exists() or not any(Path(jobs_own).iterdir())  # nothing of ours in the job's
