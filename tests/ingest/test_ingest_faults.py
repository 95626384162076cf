"""Ingestion and the `fdo` command line as an unlucky operator meets them, each fault caused for
real: unreadable files and directories, 240-character and undecodable names, truncated traces
and modules among good ones, a `1e400` and a 10,000-character job id among good rows; and every bad input of the command
line told in one line with exit status 2."""

from __future__ import annotations

import datetime
import json
import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest import tables
from ingest.hits import SPOOL_DIR, to_line
from ingest.tables import GRAPH_RUNS, GRAPHS, HITS, OP_RUNS
from ranking.tables import COVERAGE
from storage.warehouse import SchemaError, TableSchema, Warehouse
from tests.support.drop_rows import EXIT_QUARANTINED, drop_row, ingest_report, write_jsonl
from tests.support.serving import fdo

EXIT_BAD_INPUT = 2
LONG_NAME = 240  # characters; file systems allow 255 bytes


def _named(suffix: str, length: int = LONG_NAME, stem: str = "") -> str:
    """A file name of exactly `length` characters ending in `suffix`."""
    return stem + "n" * (length - len(stem) - len(suffix)) + suffix


def _step(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x.T).sum(axis=0)


def _argument() -> jax.Array:
    return jnp.ones((128, 128))


@pytest.fixture(scope="module")
def module_files(tmp_path_factory) -> dict[str, Path]:
    """A real XLA dump of one small module: as text and as proto, and optimized."""
    out = tmp_path_factory.mktemp("dump")
    jax.jit(_step).lower(_argument()).compile(
        compiler_options={"xla_dump_to": str(out), "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": True})
    return {"text": next(out.glob("*jit__step.before_optimizations.txt")),
            "proto": next(out.glob("*jit__step.before_optimizations.hlo.pb")),
            "optimized": next(out.glob("*jit__step.cpu_after_optimizations.txt"))}


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """A real JAX profiler trace of a few calls of `_step`."""
    x = _argument()
    step = jax.jit(_step)
    step(x).block_until_ready()
    directory = tmp_path_factory.mktemp("trace")
    with jax.profiler.trace(str(directory)):
        for _ in range(5):
            step(x).block_until_ready()
    [found] = directory.rglob("*.xplane.pb")
    return found


def _op_row(i: int, **changes) -> dict:
    """A good op_runs drop row."""
    return {"dt": "2026-11-10", "job_id": f"job-{i}", "team": "ads", "op_fingerprint": f"{i % 5:032x}",
            "graph_fingerprint": f"{i % 7:032x}", "env_key": "e" * 32, "chip_seconds": 2.5 * i, **changes}


def _by_source(report: dict) -> dict[str, dict]:
    return {Path(q["source"]).name: q for q in report["quarantined"]}


@dataclass(frozen=True)
class Unprivileged:
    """A directory and `fdo` run as a user that file permissions apply to (root reads a chmod
    000 file all the same): nobody, when the tests run as root. `own(path)` hands a tree the
    tests made over to that user."""

    root: Path
    run: Callable[..., subprocess.CompletedProcess]
    own: Callable[[Path], None]


@pytest.fixture
def unprivileged() -> Iterator[Unprivileged]:
    root = Path(tempfile.mkdtemp(prefix="fdo-faults-"))  # not under pytest's root-only temp dir
    try:
        if os.geteuid() != 0:
            yield Unprivileged(root, fdo, lambda path: None)
            return
        try:
            user = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root and there is no 'nobody' user to drop privileges to")
        # setpriv, not subprocess's user=: it drops root's rights as it starts the interpreter,
        # which may live where nobody may not look (here, under /root).
        if shutil.which("setpriv") is None:
            pytest.skip("running as root and setpriv (util-linux) is missing to drop privileges")
        os.chmod(root, 0o755)
        os.chown(root, user.pw_uid, user.pw_gid)

        def run(home: Path, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                                   "--clear-groups", sys.executable, "-m", "pipelines.cli",
                                   "--home", str(home), *args],
                                  capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "HOME": str(root)})

        def own(path: Path) -> None:
            for item in [path, *path.rglob("*")]:
                os.chown(item, user.pw_uid, user.pw_gid)

        yield Unprivileged(root, run, own)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Inputs that cannot be read


@pytest.mark.xla
@pytest.mark.subprocess
def test_unreadable_files_and_directories_are_quarantined_and_the_others_land(unprivileged, module_files):
    inbox = unprivileged.root / "inbox"
    inbox.mkdir()
    write_jsonl(inbox / "a.graph_runs.jsonl", [drop_row(i) for i in range(1, 6)])
    write_jsonl(inbox / "b.graph_runs.jsonl", [drop_row(i) for i in range(6, 9)]).chmod(0o000)
    locked = inbox / "locked"
    locked.mkdir()
    write_jsonl(locked / "c.graph_runs.jsonl", [drop_row(9)])
    locked.chmod(0o000)
    write_jsonl(inbox / "d.op_runs.jsonl", [_op_row(i) for i in range(1, 4)])
    shutil.copy(module_files["text"], inbox / "module_0001.good.before_optimizations.txt")
    shutil.copy(module_files["text"], inbox / "module_0002.locked.before_optimizations.txt")
    (inbox / "module_0002.locked.before_optimizations.txt").chmod(0o000)
    home = unprivileged.root / "home"

    profiles = unprivileged.run(home, "ingest", "profiles", str(inbox), "--json")
    assert profiles.returncode == EXIT_QUARANTINED, profiles.stderr
    report = ingest_report(profiles)
    assert (report["graph_runs"], report["op_runs"]) == (5, 3)
    quarantined = _by_source(report)
    assert set(quarantined) == {"b.graph_runs.jsonl", "locked"}
    assert "Permission denied" in quarantined["b.graph_runs.jsonl"]["reason"]
    assert "cannot list" in quarantined["locked"]["reason"]
    # Kept by its reason alone (it cannot be copied), beside the others in quarantine.
    assert quarantined["b.graph_runs.jsonl"]["copy"] == ""
    notes = [json.loads(p.read_text()) for p in (home / "quarantine").rglob("*.reason.json")]
    assert any(n["source"].endswith("b.graph_runs.jsonl") for n in notes)

    symbols = unprivileged.run(home, "ingest", "symbols", str(inbox), "--json")
    assert symbols.returncode == EXIT_QUARANTINED, symbols.stderr
    report = ingest_report(symbols)
    assert report["modules"] == 1 and report["graphs_changed"] == 1
    assert set(_by_source(report)) == {"module_0002.locked.before_optimizations.txt", "locked"}
    assert Warehouse(home).read(GRAPHS).num_rows == 1  # the good module landed


# --------------------------------------------------------------------------------------------
# Names


@pytest.mark.xla
@pytest.mark.subprocess
def test_240_character_and_undecodable_names_are_ingested_or_quarantined(tmp_path, module_files):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = write_jsonl(inbox / _named(".graph_runs.jsonl"), [drop_row(i) for i in range(1, 4)] + [drop_row(4, chips=0)])
    corrupt = inbox / _named(".op_runs.parquet", stem="corrupt-")
    corrupt.write_bytes(b"PAR1" + os.urandom(200))
    # A newline and bytes that decode in no encoding: names a file system allows.
    odd = os.path.join(os.fsencode(inbox), b"odd\n\xff\xfe.graph_runs.jsonl")
    with open(odd, "w") as out:
        out.write(json.dumps(drop_row(5)) + "\n" + "{torn\n")
    good_module = inbox / _named(".before_optimizations.txt", stem="module_0001.")
    shutil.copy(module_files["text"], good_module)
    truncated = inbox / _named(".before_optimizations.txt", stem="module_0002.")
    text = module_files["text"].read_text()
    truncated.write_text(text[: len(text) // 2])
    home = tmp_path / "home"

    report = ingest_report(fdo(home, "ingest", "profiles", str(inbox), "--json"))
    assert report["graph_runs"] == 4  # three of the long-named drop, one of the odd one
    quarantined = _by_source(report)
    assert set(quarantined) == {good.name, corrupt.name, os.fsdecode(b"odd\n\xff\xfe.graph_runs.jsonl")}
    assert quarantined[good.name]["reason"].startswith("1 bad rows: chips outside")
    assert "not a readable op_runs drop" in quarantined[corrupt.name]["reason"]
    for entry in report["quarantined"]:
        copy = Path(entry["copy"])
        assert copy.is_file() and len(os.fsencode(copy.name + ".reason.json")) <= 255
        assert json.loads(Path(f"{copy}.reason.json").read_text())["source"] == entry["source"]

    report = ingest_report(fdo(home, "ingest", "symbols", str(inbox), "--json"))
    assert report["modules"] == 1
    assert [Path(q["source"]).name for q in report["quarantined"]] == [truncated.name]
    assert "parsable" in report["quarantined"][0]["reason"]
    [graph] = Warehouse(home).read(GRAPHS).to_pylist()
    assert graph["module_name"] == "jit__step"


# --------------------------------------------------------------------------------------------
# Truncated and corrupt files among good ones


@pytest.mark.xla
@pytest.mark.subprocess
def test_truncated_traces_and_modules_among_good_ones(tmp_path, trace, module_files):
    inbox = tmp_path / "inbox"
    for job in ("good", "truncated", "garbage"):
        (inbox / job).mkdir(parents=True)
        (inbox / job / "fdo-job.json").write_text(json.dumps({"job_id": job, "team": "t", "chips": 2}))
    shutil.copy(trace, inbox / "good" / "host.xplane.pb")
    data = trace.read_bytes()
    (inbox / "truncated" / "host.xplane.pb").write_bytes(data[: len(data) // 2])
    (inbox / "garbage" / "host.xplane.pb").write_bytes(random.Random(0).randbytes(len(data) // 4))
    shutil.copy(module_files["text"], inbox / "module_0001.good.before_optimizations.txt")
    shutil.copy(module_files["optimized"], inbox / "module_0001.good.cpu_after_optimizations.txt")
    proto = module_files["proto"].read_bytes()
    (inbox / "module_0002.cut.before_optimizations.hlo.pb").write_bytes(proto[: len(proto) // 2])
    (inbox / "module_0003.noise.before_optimizations.hlo.pb").write_bytes(random.Random(1).randbytes(4096))
    home = tmp_path / "home"

    report = ingest_report(fdo(home, "ingest", "symbols", str(inbox), "--json"))
    assert report["modules"] == 1
    assert {Path(q["source"]).name for q in report["quarantined"]} == {
        "module_0002.cut.before_optimizations.hlo.pb", "module_0003.noise.before_optimizations.hlo.pb"}

    result = fdo(home, "ingest", "profiles", str(inbox), "--json")
    assert result.returncode == EXIT_QUARANTINED, result.stderr
    report = ingest_report(result)
    assert {Path(q["source"]).parent.name for q in report["quarantined"]} == {"truncated", "garbage"}
    runs = Warehouse(home).read(GRAPH_RUNS)
    assert set(runs.column("job_id").to_pylist()) == {"good"} and report["graph_runs"] == runs.num_rows > 0
    # The good trace's module is keyed by the graph the good dump landed.
    assert Warehouse(home).read(GRAPHS).column("fingerprint")[0].as_py() in runs.column("fingerprint").to_pylist()


# --------------------------------------------------------------------------------------------
# Bad values: only their rows are quarantined


@pytest.mark.subprocess
def test_a_1e400_and_a_10000_character_job_id_quarantine_their_rows_only(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = [drop_row(i) for i in range(1, 21)]
    bad = {
        "seconds": json.dumps(drop_row(21)).replace('"seconds": 31.5', '"seconds": 1e400'),
        "chips": json.dumps(drop_row(22)).replace('"chips": 7', '"chips": 1e400'),
        "job_id": drop_row(23, job_id="j" * 10_000),
        "type": drop_row(24, executions="many"),
        "torn": json.dumps(drop_row(25))[:40],
        "date": drop_row(26, dt="2026-02-30"),
    }
    rows = good[:10] + list(bad.values()) + good[10:]
    write_jsonl(inbox / "day.graph_runs.jsonl", rows)
    ops = [_op_row(i) for i in range(1, 11)]
    ops[3]["chip_seconds"] = -1.0
    ops[6]["chip_seconds"] = float("inf")
    ops[8]["team"] = "t" * 10_000
    pq.write_table(pa.Table.from_pylist(ops), inbox / "day.op_runs.parquet")
    home = tmp_path / "home"

    result = fdo(home, "ingest", "profiles", str(inbox), "--json")
    assert result.returncode == EXIT_QUARANTINED, result.stderr
    report = ingest_report(result)
    assert (report["graph_runs"], report["op_runs"]) == (20, 7)
    landed = Warehouse(home).read(GRAPH_RUNS)
    assert sorted(landed.column("job_id").to_pylist()) == sorted(r["job_id"] for r in good)
    assert sum(landed.column("chip_seconds").to_pylist()) == pytest.approx(
        sum(r["chips"] * r["seconds"] for r in good), rel=1e-12)
    assert pc.max(pc.utf8_length(Warehouse(home).read(OP_RUNS).column("team"))).as_py() <= 128

    kept = {p.name.split("-", 1)[1]: pq.read_table(p) for p in (home / "quarantine").rglob("*.parquet")}
    graph_bad = kept["day.graph_runs.jsonl.bad-rows.parquet"]
    reasons = graph_bad.column("reason").to_pylist()
    assert graph_bad.num_rows == len(bad)
    for expected in ("seconds not a number", "line 12: chips: inf is not int64", "job_id over 256 characters",
                     "line 14: executions: 'many' is not int64", "line 15: not JSON",
                     "dt: '2026-02-30' is not a date"):
        assert sum(expected in r for r in reasons) == 1, (expected, reasons)
    assert graph_bad.column("line").to_pylist()[4] == bad["torn"]  # the line as given
    op_reasons = kept["day.op_runs.parquet.bad-rows.parquet"].column("reason").to_pylist()
    assert op_reasons == ["chip_seconds not a number in 0 .. 90596966400",
                          "chip_seconds not a finite number; chip_seconds not a number in 0 .. 90596966400",
                          "team over 128 characters"]


@pytest.mark.xla
@pytest.mark.subprocess
def test_a_module_name_or_a_traced_job_id_over_its_bound_quarantines_it(tmp_path, trace, module_files):
    dump = tmp_path / "dump"
    dump.mkdir()
    shutil.copy(module_files["text"], dump / "module_0001.good.before_optimizations.txt")
    text = module_files["text"].read_text()
    (dump / "module_0002.long.before_optimizations.txt").write_text(
        text.replace("HloModule jit__step", "HloModule " + "m" * 1100, 1))
    home = tmp_path / "home"
    report = ingest_report(fdo(home, "ingest", "symbols", str(dump), "--json"))
    assert report["modules"] == 1
    [entry] = report["quarantined"]
    assert entry["source"].endswith("module_0002.long.before_optimizations.txt")
    assert "graphs: module_name over 1024 characters" in entry["reason"]

    traced = tmp_path / "traced"
    traced.mkdir()
    shutil.copy(trace, traced / "host.xplane.pb")
    (traced / "fdo-job.json").write_text(json.dumps({"job_id": "j" * 10_000, "team": "t", "chips": 1}))
    result = fdo(home, "ingest", "profiles", str(traced), "--json")
    assert result.returncode == EXIT_QUARANTINED, result.stderr
    report = ingest_report(result)
    assert report["graph_runs"] == report["op_runs"] == 0
    assert {Path(q["copy"]).name.split("-", 1)[1] for q in report["quarantined"]} == {
        "host.xplane.pb.bad-graph_runs-rows.parquet", "host.xplane.pb.bad-op_runs-rows.parquet"}
    assert all("job_id over 256 characters" in q["reason"] for q in report["quarantined"])


@pytest.mark.subprocess
def test_hit_records_with_bad_values_and_unreadable_spool_files(unprivileged):
    home = unprivileged.root / "home"
    spool = home / SPOOL_DIR
    spool.mkdir(parents=True)
    at = time.time() - 3 * 86400  # long finished: its writer is gone

    def record(job_id: str, hook_seconds: float = 0.001) -> str:
        return to_line({"at": _utc(at), "job_id": job_id, "key": "k" * 32, "fingerprint": "f" * 32,
                        "env_key": "e" * 32, "module_name": "jit_step", "outcome": "miss",
                        "hook_seconds": hook_seconds, "compile_seconds": 0.5})

    spooled = spool / "host-1-1.jsonl"
    spooled.write_text(record("a") + record("b" * 10_000) + record("c", float("inf")) + record("d"))
    locked = spool / "host-2-1.jsonl"
    locked.write_text(record("e"))
    for path in (spooled, locked):
        os.utime(path, (at, at))
    unprivileged.own(home)
    locked.chmod(0o000)
    result = unprivileged.run(home, "ingest", "hits", "--json")
    assert result.returncode == EXIT_QUARANTINED, result.stderr
    report = ingest_report(result)
    assert report["rows"] == 2 and report["files"] == 1
    reasons = " | ".join(q["reason"] for q in report["quarantined"])
    assert "2 bad rows" in reasons and "job_id over 256 characters" in reasons
    assert "hook_seconds not a finite number" in reasons and "Permission denied" in reasons
    assert sorted(Warehouse(home).read(HITS).column("job_id").to_pylist()) == ["a", "d"]


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


# --------------------------------------------------------------------------------------------
# String bounds are declared with the tables


def test_every_string_column_of_the_ingested_tables_has_a_bound_that_writes_enforce(tmp_path):
    declared = [t for t in vars(tables).values() if isinstance(t, TableSchema)]
    assert {t.name for t in declared} == {"graphs", "ops", "graph_runs", "op_runs", "hits"}
    for table in declared:
        strings = {f.name for f in table.schema if pa.types.is_string(f.type)}
        assert strings == {name for name, _ in table.max_chars}, table.name
        assert all(not f.metadata for f in table.schema)  # the bound is no part of the files
    row = drop_row(1)
    row.update(dt=pa.scalar(_utc(0).date()), chip_seconds=1.0, chips=1, opted_out=False,
               compiler_version=None, config_key=None, config_version=None, expected_speedup=None,
               job_id="j" * 257)
    del row["seconds"]
    with pytest.raises(SchemaError, match="'job_id' value of 257 characters"):
        Warehouse(tmp_path).append(GRAPH_RUNS, pa.Table.from_pylist([row], GRAPH_RUNS.schema), "part")


# --------------------------------------------------------------------------------------------
# The command line: each bad input is exit 2 and one line naming it


def _one_line(result: subprocess.CompletedProcess, *named: str) -> str:
    assert result.returncode == EXIT_BAD_INPUT, (result.returncode, result.stderr)
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message, message
    for name in named:
        assert name in message, (name, message)
    return message


@pytest.mark.xla
@pytest.mark.subprocess
def test_bad_inputs_of_the_command_line_are_exit_2_and_one_line(tmp_path, module_files):
    home = tmp_path / "home"
    directory = tmp_path / "a-directory"
    directory.mkdir()
    _one_line(fdo(home, "fingerprint", str(directory)), str(directory), "Is a directory")
    _one_line(fdo(home, "fingerprint", str(tmp_path / "missing.txt")), "missing.txt", "No such file")
    _one_line(fdo(home, "evaluate", str(directory)), str(directory))
    not_a_directory = tmp_path / "home-file"
    not_a_directory.write_text("")
    _one_line(fdo(not_a_directory, "ingest", "profiles", str(directory)), str(not_a_directory), "not a directory")
    _one_line(fdo(not_a_directory / "below", "hits"), str(not_a_directory / "below"))
    for command in (["ingest", "profiles", str(directory)], ["rank"], ["savings"], ["deliver"], ["nightly"]):
        _one_line(fdo(home, *command, "--home", str(tmp_path / "other")), "--home", command[0])
    _one_line(fdo(home, "rank", f"--home={tmp_path / 'other'}"), "--home")
    # The home itself is fine for a command that never uses it.
    assert fdo(not_a_directory, "fingerprint", str(module_files["text"])).returncode == 0


@pytest.mark.subprocess
def test_an_unwritable_home_is_exit_2_and_one_line(unprivileged):
    if os.geteuid() == 0:  # nobody may not write a directory root owns
        home = Path(tempfile.mkdtemp(dir=unprivileged.root))
        os.chmod(home, 0o755)
    else:
        home = unprivileged.root / "home"
        home.mkdir(mode=0o555)
    inbox = unprivileged.root / "inbox"
    inbox.mkdir(mode=0o755)
    write_jsonl(inbox / "a.graph_runs.jsonl", [drop_row(1)]).chmod(0o644)
    _one_line(unprivileged.run(home, "ingest", "profiles", str(inbox)), str(home), "not writable")
    _one_line(unprivileged.run(home / "below", "ingest", "profiles", str(inbox)), str(home / "below"))


@pytest.mark.subprocess
def test_home_after_a_beam_subcommand_is_refused_and_beam_options_still_pass(tmp_path):
    fleet, other = tmp_path / "fleet", tmp_path / "other"
    beam = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    refused = subprocess.run([sys.executable, "-m", "pipelines.cli", "rank", "--home", str(other), *beam],
                             capture_output=True, text=True, env={**os.environ, "FDO_HOME": str(fleet)})
    _one_line(refused, "--home", "rank")
    assert not fleet.exists() and not other.exists()  # neither home was ranked
    ranked = fdo(fleet, "rank", *beam, "--json")
    assert ranked.returncode == 0, ranked.stderr
    assert Warehouse(fleet).files(COVERAGE)  # Beam's options reached Beam: it ranked
