"""What keeps the compiler hook from hurting a job: a total deadline on every remote look-up,
flag values checked against their declared domains wherever a config enters, and the flags a
job set itself (XLA_FLAGS) part of its environment and never overridden by a stored config."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from delivery.lookup import Found, RemoteStore, StoreUnavailable, _parse_answer
from execution.compile import compile_options
from execution.flags import FLAGS, FlagError, FlagSpec, checked_config
from hlo.environment import current_environment, xla_flags_options
from tests.support import JOBS
from tests.support.job_runs import NO_YNN, hits, import_configs, run_job
from tests.support.serving import fdo
from vocabulary.store import Provenance


class DripServer:
    """A loopback server that answers every connection one byte per `interval`, for ever (until
    stopped): each read is quick, the whole answer never comes."""

    def __init__(self, interval: float = 0.05) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.interval, self.stopped = interval, threading.Event()
        self.serving = threading.Thread(target=self._serve, daemon=True)
        self.serving.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    def _drip(self, connection: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Slow: y\r\n" * 10_000
        with connection:
            for byte in answer:
                if self.stopped.is_set():
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(self.interval)

    def close(self) -> None:
        self.stopped.set()
        self.serving.join()  # its accept times out within 0.2 s: the listener is closed after it
        self.listener.close()


def test_a_store_that_drips_its_answer_costs_one_deadline_then_backs_off():
    server = DripServer()
    try:
        store = RemoteStore(server.url, timeout=0.3, backoff_seconds=60)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="timed out"):
            store.lookup("a" * 32)
        # The drip would take over an hour; the look-up gave up at its deadline (with slack for
        # a loaded machine), and the next one does not ask at all while backing off.
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="not retried"):
            store.lookup("b" * 32)
        assert time.monotonic() - started < 1
    finally:
        server.close()


def test_a_service_answer_whose_entry_is_no_store_entry_is_no_answer():
    """The service's entry is read as the store's record (storage.store_schema.StoreEntry): a field of
    the wrong type anywhere, a relaxed config without its speedup, a refused share or team list
    make the answer malformed (the hook compiles the defaults, the look-up unavailable). A config
    off the allowlist still reads: the hook refuses it as it applies it, and records why."""
    entry = {"key": "k" * 32, "fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph",
             "config": NO_YNN, "speedup": 1.3, "provenance": "tuner", "ci_low": 1.2, "ci_high": 1.4,
             "expires_at": "2099-01-01T00:00:00+00:00", "measured_at": "2026-01-01T00:00:00+00:00"}

    def answer(**fields: object) -> Found | None:
        return _parse_answer(json.dumps({"version": 2, "entry": {**entry, **fields}}).encode())

    assert answer().entry.config == json.dumps(NO_YNN) and answer().entry.provenance is Provenance.TUNER
    assert answer(config={"xla_dump_to": "/tmp"}).entry.config == '{"xla_dump_to": "/tmp"}'
    hostile = [{"key": 7}, {"config": json.dumps(NO_YNN)}, {"config": None}, {"speedup": "1.3"},
               {"speedup": True}, {"ci_low": "fast"}, {"provenance": "root"}, {"measured_at": "yesterday"},
               {"expires_at": 5}, {"relaxed_config": NO_YNN}, {"relaxed_config": NO_YNN, "relaxed_speedup": -1},
               {"autotune_results": 3}, {"holdout_share": 0.9}, {"relaxed_numerics_teams": "all"}]
    for fields in hostile:
        assert answer(**fields) is None, fields


@pytest.mark.parametrize("config, flag", [
    ({"xla_llvm_dot_tiling_factor": 0}, "xla_llvm_dot_tiling_factor"),  # aborts XLA: CHECK > 0
    ({"xla_llvm_dot_tiling_factor": -1}, "xla_llvm_dot_tiling_factor"),
    ({"xla_cpu_parallel_codegen_split_count": 100_000_000}, "xla_cpu_parallel_codegen_split_count"),
    ({"xla_cpu_prefer_vector_width": 7}, "xla_cpu_prefer_vector_width"),
    ({"xla_backend_optimization_level": 99}, "xla_backend_optimization_level"),
    ({"xla_cpu_experimental_ynn_fusion_type": ["REDUCE"] * 33}, "xla_cpu_experimental_ynn_fusion_type"),
    ({"placement:REDUCE": "tpu"}, "placement:REDUCE"),
])
def test_values_outside_a_flags_domain_are_refused_naming_the_flag(config, flag):
    with pytest.raises(FlagError, match=flag):
        checked_config(config)


YNN_TYPES = 'fusion type names such as "REDUCE" or "INDIVIDUAL_DOT"'


@pytest.mark.parametrize("flag, value, said", [
    ("xla_cpu_use_xnnpack", "false", '"false" is not a JSON boolean (true or false)'),
    ("xla_cpu_use_xnnpack", 1, "1 is not a JSON boolean (true or false)"),
    ("xla_cpu_prefer_vector_width", "256", '"256" is not a JSON integer in its domain (128, 256, 512)'),
    ("xla_cpu_prefer_vector_width", 256.0, "256.0 is not a JSON integer in its domain (128, 256, 512)"),
    ("xla_cpu_scheduler_type", ["DEFAULT"],
     '["DEFAULT"] is not a JSON string, one of DEFAULT, MEMORY_OPTIMIZED'),
    ("xla_cpu_experimental_ynn_fusion_type", "",
     f'"" is not a JSON list of at most 32 enum values ({YNN_TYPES}); write [] for none'),
    ("xla_cpu_experimental_ynn_fusion_type", ["REDUCE", "dot;rm"],
     f'["REDUCE", "dot;rm"] is not a JSON list of at most 32 enum values ({YNN_TYPES}); write [] for none'),
    ("placement:REDUCE", ["xla"], '["xla"] is not a JSON string naming a backend (xla, ynn, xnn, onednn)'),
])
def test_a_refused_value_is_named_with_the_json_type_its_flag_takes(flag, value, said):
    with pytest.raises(FlagError) as refused:
        checked_config({flag: value})
    assert str(refused.value) == f"{flag}: {said}"


def test_each_kind_takes_its_json_type_and_a_kind_without_a_domain_takes_none(monkeypatch):
    given = {"xla_cpu_use_xnnpack": False, "xla_cpu_prefer_vector_width": 256,
             "xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
             "xla_cpu_experimental_ynn_fusion_type": [], "xla_cpu_experimental_xnn_fusion_type": ["reduce"],
             "placement:DOT": "XLA"}
    assert checked_config(given) == {**given, "xla_cpu_scheduler_type": "MEMORY_OPTIMIZED",
                                "xla_cpu_experimental_ynn_fusion_type": (),
                                "xla_cpu_experimental_xnn_fusion_type": ("REDUCE",), "placement:DOT": "xla"}
    for kind, value, json_type in (("float", 1.5, "number"), ("string", "fast", "string")):
        monkeypatch.setitem(FLAGS, "xla_test_flag", FlagSpec("xla_test_flag", kind))
        with pytest.raises(FlagError) as refused:
            checked_config({"xla_test_flag": value})
        assert str(refused.value) == (f"xla_test_flag: {json.dumps(value)} is not settable: a {kind} flag "
                                      f"(a JSON {json_type}) has no declared domain")


@pytest.mark.subprocess
def test_store_import_refuses_an_out_of_domain_entry_naming_line_and_flag(tmp_path):
    good = {"fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph", "speedup": 1.2,
            "config": {"xla_cpu_prefer_vector_width": 512}}
    bad = {**good, "fingerprint": "3" * 32, "config": {"xla_llvm_dot_tiling_factor": 0}}
    path = tmp_path / "entries.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    result = fdo(tmp_path / "home", "store", "import", str(path))
    assert result.returncode == 2
    assert f"{path}:2" in result.stderr and "xla_llvm_dot_tiling_factor" in result.stderr
    assert "domain" in result.stderr


def test_xla_flags_are_job_options_of_the_environment(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_xnnpack=false --xla_dump_to=/tmp/d "
                                    "--xla_cpu_enable_fast_math")
    assert xla_flags_options() == {"xla_cpu_use_xnnpack": "false", "xla_cpu_enable_fast_math": "true"}
    flagged = current_environment()
    monkeypatch.delenv("XLA_FLAGS")
    plain = current_environment()
    assert flagged.key() != plain.key()  # where a dump goes is not part of it, the flags are
    assert flagged.job_options == {"xla_cpu_enable_fast_math": "true", "xla_cpu_use_xnnpack": "false"}


def test_a_config_never_overrides_a_flag_the_job_set_in_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_DEFAULT")
    options = compile_options({"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED",
                               "xla_cpu_enable_fast_math": True})
    assert dict(options.env_option_overrides) == {"xla_cpu_enable_fast_math": True}


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_hooked_job_with_its_own_xla_flags_gets_its_own_key_and_keeps_its_flags(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The job routes dots to YNNPACK itself (as the default does); a stored config taking every
    # type off YNNPACK must not undo that.
    own = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
    run_job(home, "--job-id", "plain")
    run_job(home, "--job-id", "own", env=own)
    plain, flagged = hits(home, "plain"), hits(home, "own")
    assert {r["env_key"] for r in plain}.isdisjoint({r["env_key"] for r in flagged})
    import_configs(home, plain + flagged, NO_YNN)
    assert run_job(home, "--job-id", "plain-tuned")[0]["ynn"] is False  # the config acts...
    output, _ = run_job(home, "--job-id", "own-tuned", env=own)
    assert output["ynn"] is True  # ...but not against the job's own flag


def _forge_version(home: Path, records: list[dict], config: dict) -> None:
    """A store version written by hand, as an attacker with write access to the store files
    (but not the store's credential or its import checks) would: every entry `config`."""
    import datetime
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from delivery.store_writer import Store
    from hlo.environment import store_key
    from storage.store_schema import ENTRIES

    store = Store(home)
    live = store.current()
    rows = [{"key": store_key(r["fingerprint"], r["env_key"]), "fingerprint": r["fingerprint"],
             "env_key": r["env_key"], "kind": "graph", "speedup": 2.0,
             "expires_at": datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC),
             "provenance": "tuner", "config": json.dumps(config), "ci_low": 1.9, "ci_high": 2.1,
             "compiler_version": None, "measured_at": datetime.datetime.now(datetime.UTC),
             "source": "forged"} for r in records]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, ENTRIES), sink)
    data = sink.getvalue().to_pybytes()
    version = (live or 0) + 1
    directory = home / "store" / f"v{version}"
    directory.mkdir(parents=True)
    (directory / "entries.parquet").write_bytes(data)
    (directory / "manifest.json").write_text(json.dumps({
        "version": version, "parent": live, "created": "2026-01-01T00:00:00+00:00",
        "checksum": hashlib.blake2b(data, digest_size=16).hexdigest(), "counts": {"graph": len(rows)},
        "compiler_versions": [], "reason": "forged"}))
    (home / "store" / "CURRENT").write_text(f"{version}\n")


@pytest.mark.subprocess
def test_a_forged_entry_that_would_abort_xla_leaves_the_job_on_defaults(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    default, _ = run_job(home, "--job-id", "default")
    records = hits(home, "default")
    # A tiling factor of 0 passes the name allowlist; compiled, it fails XLA's CHECK and aborts
    # the process (SIGABRT, exit 134) where no fallback can catch it.
    _forge_version(home, records, {"xla_llvm_dot_tiling_factor": 0})
    output, stderr = run_job(home, "--job-id", "forged")
    assert output == default  # the job ran, on the defaults, and computed the same
    forged = hits(home, "forged")
    assert {r["outcome"] for r in forged} == {"refused"}
    assert all("xla_llvm_dot_tiling_factor" in r["reason"] for r in forged)


FUZZ_JOB = str(JOBS / "fuzz_job.py")
# Enough programs to try every value of every declared param once (`_fuzz_configs` asserts so),
# then random combinations.
FUZZ_PROGRAMS = 32


def _fuzz_configs(space, rng, count: int) -> list[dict]:
    """`count` configs of one to three params at values of their declared domains: first every
    value of every param (each once, in random groups), then random ones."""
    moves = [(p.name, value) for p in space.params for value in p.values]
    rng.shuffle(moves)
    configs: list[dict] = []
    while moves:
        config: dict = {}
        size = rng.randint(1, 3)
        for name, value in list(moves):
            if len(config) < size and name not in config:
                config[name] = value
                moves.remove((name, value))
        configs.append(config)
    assert len(configs) <= count, "too few programs to try every value"
    while len(configs) < count:
        params = rng.sample(list(space.params), rng.randint(1, 3))
        configs.append({p.name: rng.choice(p.values) for p in params})
    return configs


@pytest.mark.slow
@pytest.mark.subprocess
def test_fuzz_random_configs_from_the_declared_domains_never_break_a_job(tmp_path):
    import random
    import sys

    from execution.compile import compiler_defaults
    from execution.flags import to_json
    from tuner.space import graph_space

    home = tmp_path / "home"
    home.mkdir()
    run = fdo(home, "run", "--job-id", "plain", "--", sys.executable, FUZZ_JOB, str(FUZZ_PROGRAMS))
    assert run.returncode == 0, run.stderr
    default = json.loads(run.stdout.strip().splitlines()[-1])["sums"]
    records = hits(home, "plain")
    assert len({r["key"] for r in records}) >= FUZZ_PROGRAMS  # one module per program at least
    rng = random.Random(20261124)
    space = graph_space("cpu", None, compiler_defaults())  # every declared flag, accepted or not
    configs = _fuzz_configs(space, rng, len(records))
    # Every one inside the declared domains: the import takes them all.
    import_configs(home, records, [to_json(config) for config in configs], speedup=1.5)

    run = fdo(home, "run", "--job-id", "fuzzed", "--", sys.executable, FUZZ_JOB,
              str(FUZZ_PROGRAMS), timeout=900)
    assert run.returncode == 0, run.stderr  # no abort, no hang
    fuzzed = json.loads(run.stdout.strip().splitlines()[-1])["sums"]
    # Fast math and library routing move results by ~1e-6 relative, nothing more.
    np.testing.assert_allclose(fuzzed, default, rtol=1e-3, atol=1e-4)
    outcomes = {r["outcome"] for r in hits(home, "fuzzed")}
    assert outcomes <= {"applied", "refused", "fallback"} and "applied" in outcomes
