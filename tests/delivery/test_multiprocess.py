"""One decision per multi-process job (delivery.multiprocess), in real two-process JAX jobs on loopback
(jax.distributed, gloo collectives, two host devices a process) run under `fdo run`: every
process compiles the same program whatever its own store does, the job's processes never split
between arms, and a job whose decision cannot be shared compiles the defaults everywhere."""

from __future__ import annotations

import datetime
import enum
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from delivery.imports import read_import
from delivery.lookup import Found
from delivery.multiprocess import Decision, JobChannel, channel
from delivery.sandbox import CHECKED_DIR, mark_name
from delivery.store_writer import Store, merge_entries
from ingest.hits import holdout_arm
from storage.store_schema import StoreEntry
from tests.support import JOBS
from tests.support.serving import free_port, store_of_another_job
from vocabulary.hits import HitOutcome
from vocabulary.store import Provenance

JOB = str(JOBS / "two_process_job.py")
NO_YNN = {"xla_cpu_experimental_ynn_fusion_type": []}  # observable: no ynn_fusion in the step
SMALL = {"xla_cpu_optimize_for_size": True}
LAUNCH_TIMEOUT = 300  # seconds: a hung job fails its test instead of hanging the suite
CONCURRENT_LAUNCHES = 4


@dataclass(frozen=True)
class Process:
    """One process of a launch: what it printed and the hits it recorded, in order."""

    output: dict
    hits: list[dict]
    stderr: str

    def hit(self, module_name: str) -> dict:
        return next(h for h in self.hits if h["module_name"] == module_name)


class Hooked(enum.Enum):
    """How a process of a launch runs: under `fdo run OPTIONS`, hooked by its environment alone
    (FDO_HOOK=1: JAX loads the hook as a plugin), or without the hook."""

    RUN = "fdo run"
    PLUGIN = "FDO_HOOK=1"
    OFF = "off"


class Launch:
    """A two-process job, started, each process hooked as `hooked` says, with its own extra
    environment. With `gate`, process 1 compiles nothing until that file exists."""

    def __init__(self, home: Path, *options: str, env: tuple[dict, dict] = ({}, {}),
                 hooked: tuple[Hooked, Hooked] = (Hooked.RUN, Hooked.RUN), gate: Path | None = None) -> None:
        self.home, port = home, str(free_port())
        self.processes = []
        for index in (0, 1):
            job = [sys.executable, JOB, str(index), port, *([str(gate)] if gate and index == 1 else [])]
            command = ([sys.executable, "-m", "pipelines.cli", "--home", str(home), "run", *options, "--", *job]
                       if hooked[index] is Hooked.RUN else job)
            self.processes.append(subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "FDO_HOME": str(home), "FDO_HOOK": "1" if hooked[index] is Hooked.PLUGIN else "",
                     **env[index]}))

    def wait_for_step(self, process: int) -> list[dict]:
        """The hits `process` has spooled once it has recorded its step's."""
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while not any(h["module_name"] == "jit_step" for h in self.hits(process)):
            assert time.monotonic() < deadline and self.processes[process].poll() is None, "no step compiled"
            time.sleep(0.05)
        return self.hits(process)

    def hits(self, process: int) -> list[dict]:
        """The hits `process` spooled, in order (`fdo run` execs: its pid is the job's)."""
        return [json.loads(line) for path in sorted((self.home / "spool" / "hits").glob(
                    f"*-{self.processes[process].pid}-*.jsonl")) for line in path.read_text().splitlines()]

    def finish(self) -> tuple[Process, Process]:
        """Both processes' output and hits; each must end well within LAUNCH_TIMEOUT."""
        try:
            results = [p.communicate(timeout=LAUNCH_TIMEOUT) for p in self.processes]
        finally:
            for p in self.processes:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for p, (_, stderr) in zip(self.processes, results):
            assert p.returncode == 0, stderr
        first, second = (Process(json.loads(stdout.strip().splitlines()[-1]), self.hits(index), stderr)
                         for index, (stdout, stderr) in enumerate(results))
        return first, second


def launch(home: Path, *options: str, **kwargs) -> tuple[Process, Process]:
    """Run a two-process job to its end (see Launch)."""
    return Launch(home, *options, **kwargs).finish()


def publish(home: Path, records: list[dict], config: dict, speedup: float = 1.25) -> int:
    """A new store version with `config` for the records' keys; its number."""
    path = home / f"import-{len(list(home.glob('import-*')))}.jsonl"
    path.write_text("".join(json.dumps({"fingerprint": r["fingerprint"], "env_key": r["env_key"],
                                        "kind": "graph", "config": config, "speedup": speedup}) + "\n"
                            for r in records))
    return Store(home).update(lambda live: merge_entries(live, read_import(path)), "test")


def assert_one_program(first: Process, second: Process) -> None:
    """Both processes took the same decision at every compile, and built the same step."""
    decided = ("outcome", "config_version", "config", "expected_speedup", "job_id", "reason")
    assert [h["module_name"] for h in first.hits] == [h["module_name"] for h in second.hits]
    for a, b in zip(first.hits, second.hits):
        assert {k: a[k] for k in decided} == {k: b[k] for k in decided}, (a, b)
    assert first.output["optimized"] == second.output["optimized"]
    assert first.output["ynn"] == second.output["ynn"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """A home whose store holds no entry for the job, and a default two-process run in it."""
    home = tmp_path_factory.mktemp("multiprocess") / "home"
    store_of_another_job(home, NO_YNN)
    first, second = launch(home, "--job-id", "baseline")
    return home, first, second


def tuned_home(baseline, tmp_path: Path, config: dict = NO_YNN) -> tuple[Path, dict, int]:
    """A copy of the baseline's home with `config` stored for the job's step; its step hit and
    the version."""
    home, first, _ = baseline
    tuned = tmp_path / "home"
    shutil.copytree(home, tuned)
    step = first.hit("jit_step")
    return tuned, step, publish(tuned, [step], config)


@pytest.mark.subprocess
def test_a_default_run_keys_its_step_for_two_processes_and_records_the_jobs_id(baseline):
    _, first, second = baseline
    assert_one_program(first, second)
    assert first.output["ynn"] is True and first.output["step"] == second.output["step"]
    assert {h["outcome"] for h in first.hits + second.hits} == {"miss"}
    assert {h["job_id"] for h in first.hits + second.hits} == {"baseline"}
    step = first.hit("jit_step")
    assert step["key"] == second.hit("jit_step")["key"]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_stored_config_is_applied_in_both_processes_after_one_sandbox_check(baseline, tmp_path):
    home, default, _ = baseline
    tuned, step, version = tuned_home(baseline, tmp_path)
    recompile = {"FDO_TEST_RECOMPILE": "1"}  # the step once more, JAX's caches dropped: a decision of its own
    first, second = launch(tuned, "--job-id", "tuned", env=(recompile, recompile))
    assert_one_program(first, second)
    for process in (first, second):
        steps = [h for h in process.hits if h["module_name"] == "jit_step"]
        assert len(steps) == 2
        for hit in steps:
            assert hit["outcome"] == "applied" and hit["config_version"] == version
            assert json.loads(hit["config"]) == NO_YNN and hit["job_id"] == "tuned"
        assert process.output["ynn"] is False  # the config reached both processes' compiles
        assert process.output["step"] == pytest.approx(default.output["step"], rel=1e-4)
    assert first.output["optimized"] != default.output["optimized"]
    assert first.output["recompiled"] == second.output["recompiled"]
    assert first.output["recompiled"]["ynn"] is False
    # Process 0 compiled the whole four-device program in its sandbox once, for both.
    assert (tuned / CHECKED_DIR / mark_name(step["key"], NO_YNN)).exists()


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_config_the_sandbox_refuses_is_refused_in_both_processes(baseline, tmp_path):
    # Allowlisted and well-formed, but this XLA knows no such fusion type: its compile fails.
    tuned, step, version = tuned_home(baseline, tmp_path, {"placement:NO_SUCH_TYPE": "ynn"})
    first, second = launch(tuned, "--job-id", "refused")
    assert_one_program(first, second)
    for process in (first, second):
        hit = process.hit("jit_step")
        assert hit["outcome"] == "refused" and hit["config_version"] == version
        assert "failed in a sandbox" in hit["reason"] and "devices" not in hit["reason"]
        assert process.output["ynn"] is True


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_version_published_between_the_processes_look_ups_reaches_neither(baseline, tmp_path):
    tuned, step, version = tuned_home(baseline, tmp_path)
    # Process 1 compiles nothing until process 0 has compiled its step; a version published
    # then is the live one when process 1 compiles, and a look-up of its own would take it.
    job = Launch(tuned, "--job-id", "between", gate=tmp_path / "gate")
    job.wait_for_step(0)
    assert publish(tuned, [step], SMALL, speedup=1.5) == version + 1
    (tmp_path / "gate").touch()
    first, second = job.finish()
    assert Store(tuned).current() == version + 1
    assert_one_program(first, second)
    for process in (first, second):
        hit = process.hit("jit_step")
        assert hit["config_version"] == version and json.loads(hit["config"]) == NO_YNN
        assert hit["outcome"] == "applied" and process.output["ynn"] is False


@pytest.mark.slow
@pytest.mark.subprocess
def test_one_process_with_an_unreachable_store_compiles_what_the_other_decides(baseline, tmp_path):
    tuned, step, version = tuned_home(baseline, tmp_path)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    # Process 1's store is dead: it never asks it, and applies process 0's decision.
    first, second = launch(tuned, "--job-id", "dead-1", env=({}, {"FDO_STORE_URL": dead}))
    assert_one_program(first, second)
    assert {p.hit("jit_step")["outcome"] for p in (first, second)} == {"applied"}
    assert {p.hit("jit_step")["config_version"] for p in (first, second)} == {version}

    # Process 0's store hangs (accepts, never answers): both compile the defaults, and say why.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        hung = f"http://127.0.0.1:{silent.getsockname()[1]}"
        first, second = launch(tuned, "--job-id", "silent-0",
                               env=({"FDO_STORE_URL": hung, "FDO_STORE_TIMEOUT": "0.2"}, {}))
    assert_one_program(first, second)
    for process in (first, second):
        hit = process.hit("jit_step")
        assert hit["outcome"] == "error" and hit["config_version"] is None
        assert hung in hit["reason"] and process.output["ynn"] is True


@pytest.mark.slow
@pytest.mark.subprocess
def test_without_a_hook_in_process_0_the_other_compiles_the_defaults_within_its_timeout(baseline, tmp_path):
    tuned, step, _ = tuned_home(baseline, tmp_path)
    first, second = launch(tuned, "--job-id", "half", hooked=(Hooked.OFF, Hooked.RUN),
                           env=({}, {"FDO_DECISION_TIMEOUT": "2"}))
    assert first.hits == [] and first.output["ynn"] is True
    assert first.output["optimized"] == second.output["optimized"]
    hit = second.hit("jit_step")
    assert hit["outcome"] == "error" and "no decision from process 0 within 2 s" in hit["reason"]
    assert hit["job_id"] == "half"  # its own: process 0 published none
    assert "process 0 published no job id" in second.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_at_holdout_share_half_the_processes_of_a_launch_never_split(baseline, tmp_path):
    """12 launches, half under `fdo run --job-id`, half with FDO_HOOK=1 and no id (the cheaper
    start), each compiling three keys with a stored config across both processes: in each, both
    processes take every key's arm that the job's one id gives."""
    tuned, step, version = tuned_home(baseline, tmp_path)
    env = {"FDO_TEST_STEPS": "2"}
    first, _ = launch(tuned, "--job-id", "keys", env=(env, env))
    stored = [h for h in first.hits if h["module_name"] in ("jit_step", "jit__lambda")]
    assert len(stored) == 3 and len({h["key"] for h in stored}) == 3
    publish(tuned, stored, NO_YNN)
    arms, finished = [], []
    for batch in range(0, 12, CONCURRENT_LAUNCHES):  # the processes wait on each other a while
        jobs = [Launch(tuned, "--holdout", "0.5", "--job-id", f"launch-{n}", env=(env, env)) if n % 2 else
                Launch(tuned, env=({**env, "FDO_HOLDOUT": "0.5"},) * 2, hooked=(Hooked.PLUGIN, Hooked.PLUGIN))
                for n in range(batch, batch + CONCURRENT_LAUNCHES)]
        finished += [job.finish() for job in jobs]
    for n, (first, second) in enumerate(finished):
        assert_one_program(first, second)
        job_id = first.hits[0]["job_id"]
        assert job_id == (f"launch-{n}" if n % 2 else f"{socket.gethostname()}-{first.output['pid']}")
        for hit in (h for h in first.hits if h["key"] in {s["key"] for s in stored}):
            held_out = holdout_arm(job_id, hit["key"], 0.5)
            assert hit["outcome"] == ("holdout" if held_out else "applied"), hit
            arms.append(held_out)
    assert len(arms) == 36 and 0 < sum(arms) < 36  # both arms were live


def test_a_decision_reads_back_as_it_was_written():
    entry = StoreEntry(key="k" * 32, fingerprint="f" * 32, env_key="e" * 32, kind="graph",
                       config=json.dumps(NO_YNN), speedup=1.25, provenance=Provenance.TUNER,
                       expires_at=datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC))
    decision = Decision(job_id="job", key="k" * 32, outcome=HitOutcome.MISS, found=Found(7, entry, 0.05, ("search",)),
                        config_text=entry.config, expected_speedup=1.25, apply=True)
    assert Decision.from_text(decision.to_text()) == decision
    none = Decision(job_id="job", key="", outcome=HitOutcome.ERROR, reason="store down")
    assert Decision.from_text(none.to_text()) == none
    assert Decision.from_text(none.to_text()).outcome is HitOutcome.ERROR
    for bad in ("", "[]", json.dumps({"format": 99}), decision.to_text().replace('"job_id"', '"job"')):
        with pytest.raises(ValueError):
            Decision.from_text(bad)


@dataclass(frozen=True)
class Device:
    id: int
    process_index: int


def test_each_compile_across_processes_gets_its_own_slot_and_its_lowest_process_leads():
    channel = JobChannel(client=None, process=1, processes=3)
    everyone = [Device(0, 0), Device(1, 0), Device(2048, 1), Device(4096, 2)]
    assert channel.slot("jit_local", [Device(2048, 1)]) is None  # its own devices: decided alone
    first, again = channel.slot("jit_step", everyone), channel.slot("jit_step", everyone)
    assert first.leader == 0 and not first.leads and first.key != again.key  # a recompile: a new decision
    other = channel.slot("jit_eval", everyone)
    assert other.key.endswith("/0")  # counted per module: processes compiling other modules meanwhile agree
    pair = channel.slot("jit_step", [Device(2048, 1), Device(4096, 2)])
    assert pair.leads and pair.key.endswith("/0") and pair.key != first.key


def test_a_job_of_one_process_has_no_channel_to_wait_on():
    import jax  # noqa: F401  (its distributed state, never initialized here)

    assert channel() is None
