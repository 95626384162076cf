"""The storage interface on a local directory and on a URL home (an offline Beam scheme): one
atomic write, one lock, one read path, and the warehouse, blobs and store reads over both."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import pickle
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.tables import GRAPH_RUNS
from storage.blobs import BlobStore
from storage.home import Home, LockHeld
from storage.home_factory import open_home
from storage.journal import append_record, read_records
from storage.local import LocalHome
from storage.store_reader import StoreReader
from storage.store_schema import STORE_ENTRY_COLUMNS
from storage.url import UrlHome
from storage.warehouse import SchemaError, Warehouse, partition_days
from tests.support.url_home import UrlFileSystem, url_of


@pytest.fixture(params=["local", "url"])
def home(request, tmp_path) -> Home:
    """The same directory as a local home and as a URL home."""
    return open_home(tmp_path if request.param == "local" else url_of(tmp_path))


def _files(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())


def test_of_picks_the_implementation_by_root_and_keeps_a_home():
    assert isinstance(open_home("/tmp/x"), LocalHome) and isinstance(open_home("fdotest:///tmp/x"), UrlHome)
    home = open_home("/tmp/x")
    assert open_home(home) is home and open_home("/tmp/x") == home and str(home) == "/tmp/x"


def test_atomic_write_replaces_whole_and_leaves_no_temporary(home, tmp_path):
    target = home.location("a", "b.txt")
    home.atomic_write(target, "one")
    home.atomic_write(target, b"two")
    home.atomic_write(target, lambda handle: handle.write(b"three"))
    assert home.read_bytes(target) == b"three" and home.exists(target)
    assert _files(tmp_path) == ["a/b.txt"]


def test_a_signature_changes_when_the_file_is_replaced_and_a_home_pickles(home, tmp_path):
    target = home.location("s")
    assert home.signature(target) is None
    home.atomic_write(target, "one")
    first = home.signature(target)
    home.atomic_write(target, "three")  # another size: a replacement within the clock's tick shows
    assert first is not None and home.signature(target) not in (None, first)
    again = pickle.loads(pickle.dumps(home))
    assert again == home and again.read_bytes(target) == b"three"


def test_a_write_that_raises_keeps_the_old_file(home, tmp_path):
    target = home.location("f")
    home.atomic_write(target, "old")
    with pytest.raises(RuntimeError), home.writing(target) as handle:
        handle.write(b"half")
        raise RuntimeError("killed")
    assert home.read_bytes(target) == b"old" and _files(tmp_path) == ["f"]


def test_glob_open_delete_and_temporaries_of_dead_writers(home, tmp_path):
    for name in ("x/1.bin", "x/2.bin"):
        home.atomic_write(home.location(*name.split("/")), name)
    (tmp_path / "x" / ".3.bin.tmp-999999999").write_bytes(b"dead writer")
    (tmp_path / "x" / f".4.bin.tmp-{os.getpid()}").write_bytes(b"live writer")
    assert [str(p).rsplit("/", 1)[1] for p in home.glob("x/*.bin")] == ["1.bin", "2.bin"]
    with home.open(home.location("x", "1.bin")) as source:
        assert (open(source, "rb").read() if isinstance(source, str) else source.read()) == b"x/1.bin"
    assert home.remove_temporaries("x/*.tmp-*") == 1
    home.delete([home.location("x", "1.bin"), home.location("x", "nothing")])
    assert _files(tmp_path) == ["x/.4.bin.tmp-%d" % os.getpid(), "x/2.bin"]


def test_a_journal_keeps_whole_records_only(home, tmp_path):
    journal = home.location("tasks", "t", "trials.jsonl")
    assert read_records(home, journal) == []
    for index in range(3):
        append_record(home, journal, {"index": index})
    assert read_records(home, journal) == [{"index": 0}, {"index": 1}, {"index": 2}]
    assert _files(tmp_path) == ["tasks/t/trials.jsonl"]  # rewritten whole on a URL home: no temporary left
    # A line a kill cut short (appended on a local home; never so on an object store) is dropped,
    # so the next record does not land after it.
    with open(tmp_path / "tasks" / "t" / "trials.jsonl", "a") as torn:
        torn.write('{"index": 3')
    assert read_records(home, journal) == [{"index": 0}, {"index": 1}, {"index": 2}]
    append_record(home, journal, {"index": 3})
    assert [r["index"] for r in read_records(home, journal)] == [0, 1, 2, 3]


def test_the_lock_serializes_and_refuses_when_asked_not_to_wait(home):
    name = home.location("locks", "one.lock")
    inside, order = threading.Event(), []

    def other() -> None:
        with home.lock(name):
            order.append("other")

    with home.lock(name, "test"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(0.2)
        assert thread.is_alive()  # waiting on the lock
        with pytest.raises(LockHeld, match="another test holds"):
            with home.lock(name, "test", wait=False):
                inside.set()
        order.append("first")
    thread.join()
    assert order == ["first", "other"] and not inside.is_set()


def _hold(path: str, held, release) -> None:
    with open_home(path).lock(os.path.join(path, "p.lock")):
        held.set()
        release.wait(10)


@pytest.mark.subprocess
def test_a_local_lock_holds_across_processes_and_names_the_holder(tmp_path):
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    child = context.Process(target=_hold, args=(str(tmp_path), held, release))
    child.start()
    try:
        assert held.wait(30)
        with pytest.raises(LockHeld, match=f"pid {child.pid}"):
            with open_home(tmp_path).lock(tmp_path / "p.lock", "holder", wait=False):
                pass
    finally:
        release.set()
        child.join()
    with open_home(tmp_path).lock(tmp_path / "p.lock", wait=False):
        pass


def test_the_warehouse_blobs_and_store_reads_work_on_every_home(home, tmp_path):
    UrlFileSystem.used.clear()
    day = datetime.date(2026, 5, 1)
    row = {"dt": day, "job_id": "j", "team": "t", "fingerprint": "f" * 32, "env_key": "e",
           "device_kind": "cpu", "chips": 1, "executions": 2, "chip_seconds": 3.0, "opted_out": False}
    rows = pa.Table.from_pylist([row], GRAPH_RUNS.schema)
    warehouse = Warehouse(home)
    assert warehouse.append(GRAPH_RUNS, rows, "input-1") and not warehouse.append(GRAPH_RUNS, rows, "input-1")
    with warehouse.part_writer(GRAPH_RUNS, "input-2") as write:
        write(rows)
    assert warehouse.read(GRAPH_RUNS).num_rows == 2 and warehouse.has_part(GRAPH_RUNS, "2026-05-01", "input-2")
    assert Warehouse(tmp_path).read(GRAPH_RUNS).equals(warehouse.read(GRAPH_RUNS))  # one layout
    with pytest.raises(SchemaError):
        warehouse.append(GRAPH_RUNS, rows.drop_columns(["team"]), "bad")
    blobs = BlobStore(home)
    name = blobs.put_text("ab" * 16, "HloModule m")
    assert blobs.exists(name) and BlobStore(tmp_path).get_text(name) == "HloModule m"
    assert StoreReader(home).current() is None and StoreReader(home).live_entries().num_rows == 0
    entry = {"key": "k", "fingerprint": "f", "env_key": "e", "kind": "graph", "speedup": 1.5,
             "expires_at": datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC), "provenance": "tuner"}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([entry], STORE_ENTRY_COLUMNS), sink)
    home.atomic_write(home.location("store", "v3", "entries.parquet"), sink.getvalue().to_pybytes())
    home.atomic_write(home.location("store", "CURRENT"), "3\n")
    assert StoreReader(home).current() == 3 and StoreReader(home).live_entries().column("key").to_pylist() == ["k"]
    assert bool(UrlFileSystem.used) == (not home.is_local)


def test_a_home_beam_cannot_reach_is_refused_naming_it():
    with pytest.raises(ValueError, match="home nosuch://bucket/fdo: "):
        open_home("nosuch://bucket/fdo").reach()


def test_every_command_refuses_a_home_beam_cannot_reach_in_one_line_naming_it(capsys):
    from pipelines.cli import main

    said = {("validate", "--report"): "home nosuch://bucket/fdo: ",
            ("ingest", "symbols", "/nonexistent"): "home nosuch://bucket/fdo: ",
            ("nightly",): "home nosuch://bucket/fdo: ",
            ("simulate",): "needs a local home, not nosuch://bucket/fdo"}  # takes no URL home
    for command, words in said.items():
        assert main(["--home", "nosuch://bucket/fdo", *command]) == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fdo {command[0]}: "), (command, err)
        assert words in err[0], (command, err)


def test_stages_that_need_a_local_home_refuse_a_url_home_naming_it(tmp_path):
    from workloads.simulator.run import simulate

    home = open_home(url_of(tmp_path))
    stages = {"fdo simulate": lambda: simulate(home, 1, 1)}
    for name, run in stages.items():
        with pytest.raises(ValueError, match=f"{name} needs a local home, not fdotest://"):
            run()
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_cli_hands_a_url_home_to_the_stages_that_take_one(tmp_path, capsys):
    from pipelines.cli import main

    home = url_of(tmp_path)
    assert main(["--home", home, "toolchain", "list", "--json"]) == 0
    assert main(["--home", home, "validate", "--report", "--json"]) == 0
    assert main(["--home", home, "analyze", "flags"]) == 1  # no trials yet, but no refusal
    assert main(["--home", home, "toolchain", "remove", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no tuning trials" in err and "nope: not registered" in err and "local home" not in err


def test_partition_days_spans_both_ends_across_a_month_and_is_empty_backwards():
    first = datetime.date(2026, 11, 29)
    assert partition_days(first, datetime.date(2026, 12, 2)) == ["2026-11-29", "2026-11-30", "2026-12-01",
                                                                "2026-12-02"]
    assert partition_days(first, first) == ["2026-11-29"]
    assert partition_days(first, first - datetime.timedelta(days=1)) == []
