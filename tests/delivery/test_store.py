"""The versioned config store: its entry record, import, allowlist, deliver, rollback, and
concurrent publishers; every version written before reads into the record and serves the same
bytes."""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delivery.deliver import deliver
from delivery.imports import read_import
from delivery.lookup import EmbeddedStore, _parse_answer
from delivery.service.snapshot import render
from delivery.store_writer import ConcurrentPublish, Store, StoreError, merge_entries
from hlo.environment import store_key
from storage.home_factory import open_home
from storage.store_reader import StoreReader, checksum
from storage.store_schema import ENTRIES, StoreEntry, entries_of, entries_table
from storage.warehouse import Warehouse
from tests.support.url_home import UrlFileSystem, url_of
from tuner.tables import TUNING_RESULTS
from vocabulary.store import Provenance


def fdo(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300)


def _entry(i: int, config: dict, speedup: float = 1.2) -> dict:
    return {"fingerprint": f"{i:032x}", "env_key": "e" * 32, "kind": "graph", "config": config,
            "speedup": speedup}


def _write(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


@pytest.mark.subprocess
def test_import_show_diff_rollback(tmp_path):
    home = tmp_path / "home"
    first = _write(tmp_path / "a.jsonl", [_entry(1, {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"})])
    second = _write(tmp_path / "b.jsonl", [_entry(1, {"xla_cpu_enable_fast_math": True}, 1.3),
                                          _entry(2, {"xla_cpu_experimental_ynn_fusion_type": ["REDUCE"]})])
    assert fdo(home, "store", "import", str(first)).returncode == 0
    assert fdo(home, "store", "import", str(second)).returncode == 0
    store = Store(home)
    assert store.current() == 2 and store.entries().num_rows == 2
    diff = json.loads(fdo(home, "store", "diff", "1", "2", "--json").stdout)
    added, changed = store_key(f"{2:032x}", "e" * 32), store_key(f"{1:032x}", "e" * 32)
    assert diff == {"added": [added], "removed": [], "changed": [changed]}
    # As text: a line per changed key under a header, and a line saying what two versions share.
    text = fdo(home, "store", "diff", "1", "2").stdout.splitlines()
    assert text[0] == "v1 -> v2: 1 added, 0 removed, 1 changed"
    assert [line.split() for line in text[2:]] == [["added", added], ["changed", changed]]
    assert fdo(home, "store", "diff", "2", "v2").stdout.splitlines()[1] == "  v2 and v2 hold the same entries"
    shown = json.loads(fdo(home, "store", "show", f"{1:032x}", "--json").stdout)
    assert shown[0]["config"] == {"xla_cpu_enable_fast_math": True}
    # As text, the config reads as the --set arguments that give it, not as JSON.
    text = fdo(home, "store", "show", f"{2:032x}").stdout.splitlines()
    assert text[0].split() == ["key", "kind", "speedup", "by", "expires", "config"]
    assert text[1].split()[:4] == [added, "graph", "1.200x", "import"]
    assert text[1].endswith(" xla_cpu_experimental_ynn_fusion_type=REDUCE")
    missing = fdo(home, "store", "show", f"{9:032x}")
    assert missing.returncode == 1 and missing.stdout == "" and f"{9:032x}" in missing.stderr
    rolled = json.loads(fdo(home, "store", "rollback", "1", "--json").stdout)["version"]
    assert rolled == 3 and store.current() == 3
    assert store.entries(3).equals(store.entries(1))  # the old entries are live again
    assert [m.parent for m in store.versions()] == [None, 1, 2]
    # Ranking reads the same snapshot through its contract.
    assert StoreReader(home).live_entries().column("key").to_pylist() == store.entries().column("key").to_pylist()
    # What export writes (configs as objects), import takes.
    exported = tmp_path / "exported.jsonl"
    exported.write_text(fdo(home, "store", "export").stdout)
    assert fdo(tmp_path / "other", "store", "import", str(exported)).returncode == 0
    copied = Store(tmp_path / "other").entries().select(["key", "config", "speedup", "expires_at"])
    assert copied.equals(store.entries().select(["key", "config", "speedup", "expires_at"]))


@pytest.mark.subprocess
def test_non_allowlisted_flags_never_enter(tmp_path):
    home = tmp_path / "home"
    for config in ({"xla_dump_to": "/tmp/x"}, {"xla_cpu_not_a_flag": True},
                   {"xla_gpu_per_fusion_autotune_cache_dir": "/tmp"}, {"xla_cpu_scheduler_type": "BOGUS"}):
        result = fdo(home, "store", "import", str(_write(tmp_path / "bad.jsonl", [_entry(1, config)])))
        assert result.returncode == 2 and ":1: config: refused: " in result.stderr
    assert Store(home).current() is None
    with pytest.raises(StoreError, match="line|:1"):
        read_import(_write(tmp_path / "short.jsonl", [{"fingerprint": "abc"}]))


@pytest.mark.subprocess
def test_a_corrupt_version_is_detected(tmp_path):
    home = tmp_path / "home"
    fdo(home, "store", "import", str(_write(tmp_path / "a.jsonl", [_entry(1, {"xla_cpu_use_xnnpack": False})])))
    path = home / "store" / "v1" / "entries.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="checksum"):
        Store(home).entries()


@pytest.mark.subprocess
def test_stale_publish_is_refused_and_concurrent_writers_lose_nothing(tmp_path):
    home = tmp_path / "home"
    store = Store(home)
    store.publish(read_import(_write(tmp_path / "0.jsonl", [_entry(0, {"xla_cpu_use_xnnpack": True})])),
                  None, "first")
    with pytest.raises(ConcurrentPublish):
        store.publish(store.entries(), None, "built on nothing, but version 1 exists")
    files = [_write(tmp_path / f"{i}.jsonl", [_entry(i, {"xla_cpu_use_xnnpack": bool(i % 2)})])
             for i in range(1, 7)]
    writers = [subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--home", str(home), "store",
                                 "import", str(f)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for f in files]
    assert all(w.wait(timeout=300) == 0 for w in writers)
    keys = set(store.entries().column("key").to_pylist())
    assert keys == {store_key(f"{i:032x}", "e" * 32) for i in range(7)}


@pytest.mark.subprocess
def test_deliver_publishes_the_best_accepted_result_once(tmp_path):
    home = tmp_path / "home"
    today = datetime.date.today()
    base = {"dt": today, "kind": "graph", "env_key": "e" * 32, "numerics_ok": True,
            "compiler_version": "jaxlib-test", "strategy": "evolution", "evaluations": 40, "measured": 12}
    rows = [
        {**base, "task_id": "t1", "fingerprint": "1" * 32, "config": '{"xla_cpu_use_xnnpack": false}',
         "speedup": 1.2, "ci_low": 1.10, "ci_high": 1.3, "accepted": True, "status": "accepted"},
        {**base, "task_id": "t2", "fingerprint": "1" * 32, "config": '{"xla_cpu_use_xnnpack": true}',
         "speedup": 1.3, "ci_low": 1.20, "ci_high": 1.4, "accepted": True, "status": "accepted"},
        {**base, "task_id": "t3", "fingerprint": "2" * 32, "config": "{}", "speedup": 1.0,
         "ci_low": 0.98, "ci_high": 1.02, "accepted": False, "status": "no significant gain"},
    ]
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist(rows, TUNING_RESULTS.schema), "test")
    assert deliver(home) == 1
    [entry] = Store(home).entries().to_pylist()
    assert (entry["fingerprint"], entry["source"], entry["provenance"]) == ("1" * 32, "t2", "tuner")
    assert json.loads(entry["config"]) == {"xla_cpu_use_xnnpack": True}
    assert deliver(home) is None  # nothing new: no new version
    assert merge_entries(Store(home).entries(), Store(home).entries()).num_rows == 1

    # A better result in another partition (another file, read by another worker) wins.
    yesterday = today - datetime.timedelta(days=1)
    better = {**rows[1], "dt": yesterday, "task_id": "t4", "ci_low": 1.25}
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([better], TUNING_RESULTS.schema), "more")
    assert deliver(home, ["--direct_running_mode=in_memory"]) == 2
    [entry] = Store(home).entries().to_pylist()
    assert entry["source"] == "t4" and entry["measured_at"].date() == yesterday
    assert entry["expires_at"] - entry["measured_at"] == datetime.timedelta(days=30)


def test_the_store_and_deliver_work_on_a_url_home(tmp_path):
    home = open_home(url_of(tmp_path / "home"))
    in_process = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]  # the scheme is ours
    base = {"dt": datetime.date.today(), "kind": "graph", "env_key": "e" * 32, "numerics_ok": True,
            "compiler_version": "jaxlib-test", "strategy": "evolution", "evaluations": 40, "measured": 12,
            "fingerprint": "1" * 32, "accepted": True, "status": "accepted"}
    rows = [{**base, "task_id": "t1", "config": '{"xla_cpu_use_xnnpack": false}', "speedup": 1.2,
             "ci_low": 1.10, "ci_high": 1.3},
            {**base, "task_id": "t2", "config": '{"xla_cpu_use_xnnpack": true}', "speedup": 1.3,
             "ci_low": 1.20, "ci_high": 1.4}]
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist(rows, TUNING_RESULTS.schema), "test")
    UrlFileSystem.used.clear()
    assert deliver(home, in_process) == 1 and deliver(home, in_process) is None
    store = Store(home)
    assert store.entries().column("source").to_pylist() == ["t2"]
    assert _import(store, _write(tmp_path / "1.jsonl", [_entry(1, {"xla_cpu_use_xnnpack": False})])) == 2
    assert store.rollback(1) == 3 and store.current() == 3 and store.sources() == {"t2", "1.jsonl"}
    assert [m.version for m in store.versions()] == [1, 2, 3] and store.problems() == {}
    assert Store(tmp_path / "home").entries().equals(store.entries())  # the same layout
    assert StoreReader(home).live_entries().column("key").to_pylist() == store.entries().column("key").to_pylist()
    assert any("/store/v3/manifest.json" in path for path in UrlFileSystem.used)
    assert not [p for p in (tmp_path / "home").rglob("*") if ".tmp-" in p.name]


def _import(store: Store, path: Path) -> int | None:
    new = read_import(path)
    return store.update(lambda live: merge_entries(live, new), f"import {path.name}")


@pytest.mark.subprocess
def test_a_stray_or_half_written_version_is_skipped_and_reported(tmp_path):
    home = tmp_path / "home"
    store = Store(home)
    assert _import(store, _write(tmp_path / "1.jsonl", [_entry(1, {"xla_cpu_use_xnnpack": False})])) == 1
    (store.root / "v2").mkdir()  # a writer that crashed before its manifest
    (store.root / "v2" / "entries.parquet").write_bytes(b"half")
    assert _import(store, _write(tmp_path / "2.jsonl", [_entry(2, {})])) == 3  # v2 skipped, not overwritten
    (store.root / "v3" / "entries.parquet").write_bytes(b"PAR1 flipped bits PAR1")  # the live one, now
    result = fdo(home, "store", "import", str(_write(tmp_path / "4.jsonl", [_entry(4, {})])))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "roll back" in result.stderr
    assert fdo(home, "store", "rollback", "2").returncode == 2  # no version to roll back to
    listed = json.loads(fdo(home, "store", "versions", "--json").stdout)
    assert [v["version"] for v in listed["versions"]] == [1, 3] and listed["current"] == 3
    assert set(listed["damaged"]) == {"v2", "v3", "CURRENT"}
    assert "no manifest" in listed["damaged"]["v2"] and "checksum" in listed["damaged"]["v3"]
    shown = fdo(home, "store", "versions").stdout.splitlines()
    assert shown[0].split() == ["version", "parent", "created", "entries", "reason"]
    assert shown[1].startswith("  v1 ") and "1 graph" in shown[1]
    assert shown[2].startswith("! v3") and any(line.startswith("! v2") for line in shown)
    assert json.loads(fdo(home, "store", "rollback", "1", "--json").stdout) == {"version": 4}
    assert _import(store, tmp_path / "4.jsonl") == 5
    assert set(store.problems()) == {"v2", "v3"}


@pytest.mark.subprocess
def test_a_corrupt_current_stops_imports_until_a_rollback(tmp_path):
    home = tmp_path / "home"
    store = Store(home)
    _import(store, _write(tmp_path / "1.jsonl", [_entry(1, {"xla_cpu_use_xnnpack": False})]))
    (store.root / "CURRENT").write_bytes(b"\x00\xff garbage")
    result = fdo(home, "store", "import", str(_write(tmp_path / "2.jsonl", [_entry(2, {})])))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "CURRENT" in result.stderr
    assert fdo(home, "store", "show", f"{1:032x}").returncode == 2
    assert "CURRENT" in json.loads(fdo(home, "store", "versions", "--json").stdout)["damaged"]
    assert store.rollback(1) == 2 and store.current() == 2 and store.problems() == {}


def test_a_version_number_is_never_reused(tmp_path):
    home = tmp_path / "home"
    store = Store(home)
    for i in (1, 2):
        _import(store, _write(tmp_path / f"{i}.jsonl", [_entry(i, {})]))
    shutil.rmtree(store.root / "v2")  # the live version, deleted
    with pytest.raises(StoreError, match="v2|version 2"):
        _import(store, _write(tmp_path / "3.jsonl", [_entry(3, {})]))
    assert store.rollback(1) == 3
    shutil.rmtree(store.root / "v3")  # the newest, deleted, and CURRENT set back by hand
    (store.root / "CURRENT").write_text("1\n")
    assert _import(store, tmp_path / "3.jsonl") == 4
    assert [m.version for m in store.versions()] == [1, 4] and store.entries(4).num_rows == 2


def test_rollbacks_racing_other_writers_all_land(tmp_path):
    """Threads that roll back and import at once, each through its own lock file handle: every
    one lands, on a linear history of distinct versions."""
    home = tmp_path / "home"
    store = Store(home)
    _import(store, _write(tmp_path / "0.jsonl", [_entry(0, {})]))
    files = [_write(tmp_path / f"{i}.jsonl", [_entry(i, {"xla_cpu_use_xnnpack": bool(i % 2)})])
             for i in range(1, 9)]
    start = threading.Barrier(16)
    published: list[int | None] = []
    failures: list[Exception] = []

    def writer(work) -> None:
        start.wait()
        try:
            published.append(work())
        except Exception as exc:  # collected, asserted below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(lambda: Store(home).rollback(1),)) for _ in range(8)]
    threads += [threading.Thread(target=writer, args=(lambda f=f: _import(Store(home), f),)) for f in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert failures == []
    assert sorted(published) == list(range(2, 18))
    assert [m.parent for m in store.versions()] == [None, *range(1, 17)]


@pytest.mark.subprocess
def test_bad_inputs_of_store_and_serve_are_one_line_and_exit_2(tmp_path):
    home = tmp_path / "home"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a file, where a home would go\n")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    entries = _write(tmp_path / "ok.jsonl", [_entry(1, {})])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = [
            ((home, "store", "import", str(tmp_path / "missing.jsonl")), "missing.jsonl"),
            ((home, "serve", "--token-file", str(tmp_path / "missing")), "missing"),
            ((not_a_dir / "home", "store", "import", str(entries)), str(not_a_dir)),
            ((not_a_dir / "home", "serve", "--token-file", str(token)), str(not_a_dir)),
            ((home, "serve", "--port", port), port),
        ]
        for (where, *args), named in cases:
            result = fdo(where, *args)
            assert (result.returncode, result.stderr.count("\n")) == (2, 1), (args, result.stderr)
            assert named in result.stderr and "Traceback" not in result.stderr


# --- the entry record ----------------------------------------------------------------------------

UTC = datetime.UTC
MEASURED = datetime.datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
EXPIRES = datetime.datetime(2099, 1, 2, 3, 4, 5, tzinfo=UTC)
# Each version's columns as stores wrote them: the first ones, then what each step added.
FIRST_COLUMNS = [("key", pa.string()), ("fingerprint", pa.string()), ("env_key", pa.string()),
                 ("kind", pa.string()), ("speedup", pa.float64()), ("expires_at", pa.timestamp("us", tz="UTC")),
                 ("provenance", pa.string()), ("config", pa.string()), ("ci_low", pa.float64()),
                 ("ci_high", pa.float64()), ("compiler_version", pa.string()),
                 ("measured_at", pa.timestamp("us", tz="UTC")), ("source", pa.string())]
ADDED = [[], [("holdout_share", pa.float64())],
         [("holdout_share", pa.float64()), ("relaxed_config", pa.string()), ("relaxed_speedup", pa.float64())],
         [("holdout_share", pa.float64()), ("relaxed_config", pa.string()), ("relaxed_speedup", pa.float64()),
          ("autotune_results", pa.string())]]
OLD_ROWS = [
    {"key": "a" * 32, "fingerprint": "1" * 32, "env_key": "e" * 32, "kind": "graph", "speedup": 1.25,
     "expires_at": EXPIRES, "provenance": "tuner", "config": '{"xla_cpu_use_xnnpack": false}', "ci_low": 1.2,
     "ci_high": 1.3, "compiler_version": "jaxlib-0.4.35", "measured_at": MEASURED, "source": "task-1"},
    {"key": "b" * 32, "fingerprint": "2" * 32, "env_key": "e" * 32, "kind": "op", "speedup": 1.1,
     "expires_at": EXPIRES, "provenance": "import", "config": '{"xla_cpu_enable_fast_math": true}',
     "ci_low": None, "ci_high": None, "compiler_version": None, "measured_at": None, "source": "owners.jsonl",
     "holdout_share": 0.1},
    {"key": "c" * 32, "fingerprint": "3" * 32, "env_key": "e" * 32, "kind": "graph", "speedup": 1.5,
     "expires_at": EXPIRES, "provenance": "validator", "config": '{"xla_cpu_use_xnnpack": false}', "ci_low": 1.4,
     "ci_high": 1.6, "compiler_version": "jaxlib-0.5.0", "measured_at": MEASURED, "source": "task-3",
     "holdout_share": None, "relaxed_config": '{"xla_cpu_enable_fast_math": true}', "relaxed_speedup": 1.75},
    {"key": "d" * 32, "fingerprint": "4" * 32, "env_key": "e" * 32, "kind": "graph", "speedup": 2.0,
     "expires_at": EXPIRES, "provenance": "tuner", "config": "{}", "ci_low": 1.9, "ci_high": 2.1,
     "compiler_version": "jaxlib-0.7.0", "measured_at": MEASURED, "source": "task-4", "holdout_share": 0.0,
     "relaxed_config": None, "relaxed_speedup": None, "autotune_results": "version: 3\n"},  # its text as kept
]

# What the service answered for each of them before the record (the bytes, captured then), with
# the fields entries gained since, null for these (an older hook ignores them: `from_json`).
SERVED = [
    ('{"key":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",'
     '"fingerprint":"11111111111111111111111111111111",'
     '"env_key":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee","kind":"graph","speedup":1.25,'
     '"expires_at":"2099-01-02T03:04:05+00:00","provenance":"tuner",'
     '"config":{"xla_cpu_use_xnnpack":false},"ci_low":1.2,"ci_high":1.3,'
     '"compiler_version":"jaxlib-0.4.35","measured_at":"2026-03-04T05:06:07.890123+00:00",'
     '"source":"task-1","holdout_share":0.05,"relaxed_config":null,"relaxed_speedup":null,'
     '"autotune_results":null,"origin":null,"transferred_from":null,"relaxed_numerics_teams":[]}').encode(),
    ('{"key":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",'
     '"fingerprint":"22222222222222222222222222222222",'
     '"env_key":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee","kind":"op","speedup":1.1,'
     '"expires_at":"2099-01-02T03:04:05+00:00","provenance":"import",'
     '"config":{"xla_cpu_enable_fast_math":true},"ci_low":null,"ci_high":null,'
     '"compiler_version":null,"measured_at":null,"source":"owners.jsonl","holdout_share":0.1,'
     '"relaxed_config":null,"relaxed_speedup":null,"autotune_results":null,'
     '"origin":null,"transferred_from":null,"relaxed_numerics_teams":[]}').encode(),
    ('{"key":"cccccccccccccccccccccccccccccccc",'
     '"fingerprint":"33333333333333333333333333333333",'
     '"env_key":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee","kind":"graph","speedup":1.5,'
     '"expires_at":"2099-01-02T03:04:05+00:00","provenance":"validator",'
     '"config":{"xla_cpu_use_xnnpack":false},"ci_low":1.4,"ci_high":1.6,'
     '"compiler_version":"jaxlib-0.5.0","measured_at":"2026-03-04T05:06:07.890123+00:00",'
     '"source":"task-3","holdout_share":0.05,"relaxed_config":{"xla_cpu_enable_fast_math":true},'
     '"relaxed_speedup":1.75,"autotune_results":null,"origin":null,"transferred_from":null,"relaxed_numerics_teams":[]}').encode(),
    ('{"key":"dddddddddddddddddddddddddddddddd",'
     '"fingerprint":"44444444444444444444444444444444",'
     '"env_key":"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee","kind":"graph","speedup":2.0,'
     '"expires_at":"2099-01-02T03:04:05+00:00","provenance":"tuner","config":{},"ci_low":1.9,'
     '"ci_high":2.1,"compiler_version":"jaxlib-0.7.0",'
     '"measured_at":"2026-03-04T05:06:07.890123+00:00","source":"task-4","holdout_share":0.0,'
     '"relaxed_config":null,"relaxed_speedup":null,"autotune_results":"version: 3\\n",'
     '"origin":null,"transferred_from":null,"relaxed_numerics_teams":[]}').encode(),
]


def _write_old_versions(home: Path) -> None:
    """Versions 1 to 4 of a store under `home`, each file as the store wrote it when its columns
    were the last ones (no holdout share, then no relaxed config, then no autotune results,
    then today's); each manifest as the first versions wrote theirs. CURRENT names version 4."""
    for version, (added, row) in enumerate(zip(ADDED, OLD_ROWS), start=1):
        schema = pa.schema(FIRST_COLUMNS + added)
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist([row], schema), sink)
        data = sink.getvalue().to_pybytes()
        directory = home / "store" / f"v{version}"
        directory.mkdir(parents=True)
        (directory / "entries.parquet").write_bytes(data)
        (directory / "manifest.json").write_text(json.dumps({
            "version": version, "parent": version - 1 or None, "created": "2026-03-04T05:06:07+00:00",
            "checksum": checksum(data), "counts": {row["kind"]: 1}, "compiler_versions": [],
            "reason": "written before"}))
    (home / "store" / "CURRENT").write_text("4\n")


def test_an_entry_is_a_checked_record_whose_row_json_and_table_forms_round_trip():
    entry = StoreEntry(key="k" * 32, fingerprint="1" * 32, env_key="e" * 32, kind="graph", speedup=1.5,
                       expires_at=EXPIRES, provenance=Provenance.TUNER, config='{"xla_cpu_use_xnnpack": false}',
                       ci_low=1.4, ci_high=1.6, compiler_version="jaxlib-0.7.0", measured_at=MEASURED,
                       source="task-9", holdout_share=0.1, relaxed_config='{"xla_cpu_enable_fast_math": true}',
                       relaxed_speedup=1.75, autotune_results="version: 3\n")
    assert [field.name for field in dataclasses.fields(StoreEntry)] == ENTRIES.names == list(entry.to_row())
    assert StoreEntry.from_row(entry.to_row()) == entry
    shown = json.loads(json.dumps(entry.to_json()))
    assert shown["config"] == {"xla_cpu_use_xnnpack": False} and shown["expires_at"] == "2099-01-02T03:04:05+00:00"
    assert StoreEntry.from_json(shown) == entry
    imported = StoreEntry(key="i" * 32, fingerprint="2" * 32, env_key="e" * 32, kind="op", speedup=2, config="{}")
    assert entries_of(entries_table([entry, imported])) == [entry, imported]
    # An int where a float goes reads as the float, a provenance as its enum; a JSON time without
    # a zone is UTC; a column a row lacks (an older version's) is null, one it has beyond is ignored.
    assert imported.speedup == 2.0 and isinstance(imported.speedup, float)
    assert StoreEntry.from_row({**entry.to_row(), "provenance": "validator"}).provenance is Provenance.VALIDATOR
    assert StoreEntry.from_json({**shown, "expires_at": "2099-01-02T03:04:05"}).expires_at == EXPIRES
    bare = {name: value for name, value in entry.to_row().items() if name != "autotune_results"}
    assert StoreEntry.from_row({**bare, "later_column": 1}) == dataclasses.replace(entry, autotune_results=None)
    assert entry.expired(EXPIRES) and not entry.expired(EXPIRES - datetime.timedelta(microseconds=1))
    assert not imported.expired(EXPIRES)  # an entry without an expiry
    with pytest.raises(ValueError, match="^entry: no key$"):
        StoreEntry.from_row({**entry.to_row(), "key": None})
    refused = [({"config": None}, "no config"),
               ({"speedup": True}, "speedup True refused: must be a number"),
               ({"ci_low": "1.4"}, "ci_low '1.4' refused: must be a number"),
               ({"provenance": "root"}, "provenance 'root' refused: must be one of tuner, validator, import"),
               ({"measured_at": MEASURED.replace(tzinfo=None)}, "measured_at .* refused: must be a time with"),
               ({"source": 7}, "source 7 refused: must be text"),
               ({"holdout_share": 0.6}, "holdout share 0.6 refused"),
               ({"relaxed_speedup": None}, "relaxed speedup None refused")]
    for change, said in refused:
        with pytest.raises(ValueError, match=f"entry {'k' * 32}: {said}"):
            StoreEntry.from_row({**entry.to_row(), **change})
    for change, said in [({"config": '{"xla_cpu_use_xnnpack": false}'}, "config .* must be a JSON object"),
                         ({"measured_at": "yesterday"}, "measured_at 'yesterday' refused: must be an ISO 8601")]:
        with pytest.raises(ValueError, match=said):
            StoreEntry.from_json({**shown, **change})
    assert not any(hasattr(entry, name) for name in ("__getitem__", "get"))  # no dict to read it as


def test_every_version_written_before_reads_into_the_record_and_serves_the_same_bytes(tmp_path):
    """Store versions as each earlier layout wrote them (no holdout share, no relaxed config, no
    autotune results, today's) read into records; the service answers with the very bytes it
    answered before the record, and a hook reads the same entry from either source."""
    _write_old_versions(tmp_path)
    store = Store(tmp_path)
    assert store.problems() == {}
    for version, row, served in zip((1, 2, 3, 4), OLD_ROWS, SERVED):
        [entry] = entries_of(store.entries(version))
        assert entry == StoreEntry(**row) and entry.to_row() == {**dict.fromkeys(ENTRIES.names), **row}
        assert entry.provenance is Provenance(row["provenance"])
        (tmp_path / "store" / "CURRENT").write_text(f"{version}\n")
        assert render(store.home) == (version, datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
                                        {entry.key: served})
        found = EmbeddedStore(tmp_path).lookup(entry.key)
        share = 0.05 if entry.holdout_share is None else entry.holdout_share
        assert (found.version, found.entry, found.holdout_share) == (version, entry, share)
        remote = _parse_answer(json.dumps({"version": version, "entry": json.loads(served)}).encode())
        assert (remote.version, remote.entry, remote.holdout_share) == (
            version, dataclasses.replace(entry, holdout_share=share), share)


def test_the_reader_sees_versions_whole_leaves_the_expired_out_of_the_live_and_names_each_fault(tmp_path):
    """StoreReader's guarantees (its docstring): a version once read reads the same after
    later publishes; the live reads leave out expired entries, a version read whole keeps them;
    a corrupt CURRENT is a StoreError from every read of the live version, while a given
    version still reads; a missing version is a StoreError naming it."""
    now = datetime.datetime.now(datetime.UTC)
    rows = [{"key": store_key(f"{i:032x}", "e" * 32), "fingerprint": f"{i:032x}", "env_key": "e" * 32,
             "kind": "graph", "speedup": 1.2, "expires_at": now + datetime.timedelta(days=days),
             "provenance": "tuner", "config": "{}", "source": f"t{i}"} for i, days in enumerate([30, -1])]
    store, reader = Store(tmp_path), StoreReader(tmp_path)
    assert reader.current() is None and reader.records() == [] and reader.versions() == []
    first = store.publish(pa.Table.from_pylist(rows, ENTRIES), None, "test")
    before = reader.records(first)
    assert [e.key for e in reader.live_records()] == reader.live_entries().column("key").to_pylist() == [rows[0]["key"]]
    assert [e.key for e in before] == sorted(r["key"] for r in rows)  # the expired one too
    store.publish(pa.Table.from_pylist(rows[:1], ENTRIES), first, "test")
    assert reader.current() == first + 1 and reader.records(first) == before
    assert reader.sources() == {"t0", "t1"} and [m.version for m in reader.versions()] == [first, first + 1]
    (tmp_path / "store" / "CURRENT").write_text("garbage\n")
    for read in (reader.current, reader.live_entries, reader.live_records, reader.entries, reader.records):
        with pytest.raises(StoreError, match="not a version number"):
            read()
    assert reader.records(first) == before
    with pytest.raises(StoreError, match="store version 9 does not exist"):
        reader.records(9)
