"""Tuning and validation as tasks on a real Ray cluster on loopback (`ray.cluster_utils.Cluster`,
one head and three raylets, shared by the module): tasks go only to nodes of their environment
(a node whose processes run under other XLA_FLAGS is another environment), a task no node can
measure is told at once, the validator's measurements run on the nodes, a node removed
mid-task has its task resumed from its journal on another node and landed once, a task whose
worker is killed on every try fails with the reason, a check still waiting for a node when the
time left cannot hold it is not started, and `fdo nightly --cluster` runs the whole loop."""

from __future__ import annotations

import datetime
import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from execution.measure import MeasureSettings  # noqa: E402
from hlo.environment import current_environment, xla_flags_options  # noqa: E402
from hlo.module import from_lowered  # noqa: E402
from pipelines.nightly import STAGES  # noqa: E402
from storage.home_factory import open_home  # noqa: E402
from storage.warehouse import Warehouse  # noqa: E402
from tasks.ray_runner import RayRunner  # noqa: E402
from tasks.records import TuneTask  # noqa: E402
from tasks.resources import node_resources  # noqa: E402
from tasks.runner import run_all  # noqa: E402
from tests.support.processes import wait_for  # noqa: E402
from tuner.tables import TUNING_RESULTS  # noqa: E402
from tuner.target import graph_subject  # noqa: E402
from tuner.tune import TuneSettings  # noqa: E402
from vocabulary.tasks import TaskStatus  # noqa: E402
from vocabulary.tuning import Kind  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

# A job option that changes the environment key and nothing a test measures (false is XLA's
# default): the third node's processes run under it.
OTHER_FLAGS = "--xla_cpu_enable_fast_math=false"
SHORT = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=40, max_seconds=1.0)
QUICK = TuneSettings(budget_evals=2, search=SHORT, compare=SHORT, verify=SHORT, verify_workers=1)


@pytest.fixture(scope="module")
def cluster():
    """A head offering no measuring slot, two nodes of this machine's environment and one of
    another (its raylet's processes run under OTHER_FLAGS), with this process as the driver."""
    here = current_environment()
    other = replace(here, job_options={**here.job_options, **xla_flags_options(OTHER_FLAGS)})
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {"a1": made.add_node(num_cpus=1, resources=node_resources(here)),
             "a2": made.add_node(num_cpus=1, resources=node_resources(here)),
             "b": made.add_node(num_cpus=1, resources=node_resources(other),
                                env_vars={"XLA_FLAGS": OTHER_FLAGS})}
    ray.init(address=made.address, log_to_driver=False, logging_level="ERROR")
    yield made, nodes, here.key(), other.key()
    ray.shutdown()
    made.shutdown()


def module(name: str, fn, size: int = 256):
    x = jnp.ones((size,), jnp.float32)
    return from_lowered(jax.jit(fn).lower(x, x), source=name)


def task(label: str, fn, env_key: str, settings: TuneSettings = QUICK) -> TuneTask:
    return TuneTask.of(Kind.GRAPH, label, graph_subject(module(label, fn)), env_key, settings)


def attempt_records(home: Path) -> list[dict]:
    records = sorted((home / "cluster" / "attempts").glob("*/*/*.json"))
    return [json.loads(path.read_text()) for path in records]


def in_background(runner: RayRunner, tasks: list[TuneTask], home: Path) -> tuple[threading.Thread, list]:
    outcomes: list = []
    thread = threading.Thread(target=lambda: outcomes.extend(run_all(runner, tasks, open_home(home))))
    thread.start()
    return thread, outcomes


def test_tasks_run_only_on_nodes_of_their_environment(cluster, tmp_path):
    made, nodes, here, other = cluster
    home = tmp_path / "home"
    tasks = [task("add", lambda a, b: a + b, here), task("mul", lambda a, b: a * b, other)]
    outcomes = run_all(RayRunner(made.address), tasks, open_home(home))
    assert [o.status for o in outcomes] == [TaskStatus.DONE] * 2, outcomes
    assert outcomes[0].node in {nodes["a1"].node_id, nodes["a2"].node_id}
    assert outcomes[1].node == nodes["b"].node_id
    assert [o.result.env_key for o in outcomes] == [here, other]
    # Each ran in a process of its own environment: the other node's workers took its XLA_FLAGS.
    assert {r["node"]: r["env_key"] for r in attempt_records(home)} == {
        outcomes[0].node: here, outcomes[1].node: other}
    landed = Warehouse(home).read(TUNING_RESULTS).column("task_id").to_pylist()
    assert sorted(landed) == sorted(o.result.task_id for o in outcomes)


def test_a_transfer_check_is_a_task_like_a_search_routed_to_a_node_of_its_environment(cluster, tmp_path):
    from tuner.transfer import TRANSFER_CHECK, Kinship, Transfer
    from vocabulary.tuning import Origin

    made, nodes, here, _ = cluster
    home = tmp_path / "home"
    transfer = Transfer({"placement:REDUCE": "xla"}, "a" * 32 + "/" + "b" * 32, Kinship.FAMILY, 1.2)
    check = replace(QUICK, transfers=(transfer,), transfer_check=True, budget_evals=1)
    [outcome] = run_all(RayRunner(made.address), [task("exp", lambda a, b: jnp.exp(a) * b, here, check)],
                        open_home(home))
    assert outcome.status == TaskStatus.DONE and outcome.node in {nodes["a1"].node_id, nodes["a2"].node_id}
    assert (outcome.result.strategy, outcome.result.origin) == (TRANSFER_CHECK, Origin.TRANSFER)
    assert [t.config for t in outcome.result.trials] == [transfer.config]  # its transfer alone


def test_the_validator_measures_each_entry_on_a_node_of_its_environment(cluster, tmp_path, capsys):
    from pipelines.cli import main
    from tests.support.validator_graphs import NO_YNN_REDUCE, SLOWER, entry, ingest_graph, publish

    made, nodes, here, _ = cluster
    home = tmp_path / "home"
    fast, slow = ingest_graph(home, "narrow_sum"), ingest_graph(home, "row_sq_sum")
    # The slow entry is slower on any CPU (optimization level 0), whichever library wins here.
    publish(home, [entry(*fast, NO_YNN_REDUCE, source="t-fast"),
                   entry(*slow, SLOWER, source="t-slow")])
    code = main(["--home", str(home), "validate", "--once", "--workers", "1", "--max-seconds", "1",
                 "--json", "--cluster", made.address])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and (report["kept"], report["invalidated"], report["deferred"]) == (1, 1, 0), report
    records = attempt_records(home)
    assert len(records) == 2 and {r["env_key"] for r in records} == {here}
    assert nodes["b"].node_id not in {r["node"] for r in records}


def test_a_task_no_node_can_measure_is_reported_at_once(cluster, tmp_path):
    made, _, here, _ = cluster
    nowhere = "0" * 32
    tasks = [task("add", lambda a, b: a + b, nowhere), task("sub", lambda a, b: a - b, here)]
    outcomes = run_all(RayRunner(made.address), tasks, open_home(tmp_path / "home"))
    assert outcomes[0].status == TaskStatus.UNROUTABLE and outcomes[0].tries == 0
    assert nowhere in outcomes[0].reason and outcomes[0].result is None
    assert outcomes[1].status == TaskStatus.DONE  # the rest ran


def test_fdo_tune_on_a_cluster_prints_each_result_with_the_node_that_ran_it(cluster, tmp_path, capsys):
    from pipelines.cli import main

    made, nodes, _, _ = cluster
    path = tmp_path / "add.hlo"
    path.write_text(module("add", lambda a, b: a + b).to_text())
    code = main(["--home", str(tmp_path / "home"), "tune", str(path), "--budget-evals", "2",
                 "--verify-workers", "1", "--json", "--cluster", made.address])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["status"] and printed["task_id"]  # the result, as a local run prints it
    assert printed["node"] in {nodes["a1"].node_id, nodes["a2"].node_id} and printed["tries"] == 1


def test_a_task_whose_worker_is_killed_on_every_try_fails_with_the_reason(cluster, tmp_path):
    made, _, here, _ = cluster
    home = tmp_path / "home"
    thread, outcomes = in_background(RayRunner(made.address, retries=1),
                                     [task("div", lambda a, b: a / b, here)], home)
    killed: set[int] = set()
    while thread.is_alive():
        for record in attempt_records(home):
            if record["pid"] not in killed:
                os.kill(record["pid"], signal.SIGKILL)
                killed.add(record["pid"])
        time.sleep(0.05)
    [outcome] = outcomes
    assert outcome.status == TaskStatus.FAILED and outcome.tries == 2 == len(killed)
    assert "died on each of 2 tries" in outcome.reason
    assert Warehouse(home).read(TUNING_RESULTS).num_rows == 0


def test_a_node_removed_mid_task_has_its_task_resumed_on_another_and_landed_once(cluster, tmp_path):
    made, nodes, here, _ = cluster
    home = tmp_path / "home"
    longer = replace(QUICK, budget_evals=6)
    thread, outcomes = in_background(RayRunner(made.address),
                                     [task("max", jnp.maximum, here, longer)], home)
    journals = lambda: list((home / "tuner" / "tasks").glob("*/trials.jsonl"))  # noqa: E731
    wait_for(lambda: any(j.read_text().count("\n") >= 1 for j in journals()), 120,
             "the task's first journaled trial")
    [first] = attempt_records(home)
    before = journals()[0].read_text().splitlines()
    made.remove_node(next(n for n in nodes.values() if n.node_id == first["node"]))
    thread.join(180)
    [outcome] = outcomes
    assert outcome.status == TaskStatus.DONE, outcome
    assert outcome.tries == 2 and outcome.node != first["node"]
    # Resumed, not restarted: the journal the lost node left is the start of the whole one.
    after = journals()[0].read_text().splitlines()
    assert after[:len(before)] == before and len(after) > len(before)
    assert [json.loads(line)["index"] for line in after] == list(range(len(after)))
    landed = Warehouse(home).read(TUNING_RESULTS).column("task_id").to_pylist()
    assert landed == [outcome.result.task_id]


@pytest.mark.xla
def test_nightly_with_a_cluster_runs_all_six_stages(cluster, tmp_path, capsys):
    from pipelines.cli import main
    from workloads.simulator.run import simulate

    made, _, _, _ = cluster
    date = datetime.date(2026, 5, 2)
    home = tmp_path / "home"
    simulate(home, days=1, jobs=300, seed=3, start=date, workloads=["mlp-s"])
    code = main(["--home", str(home), "nightly", "--date", date.isoformat(), "--json",
                 "--top", "1", "--top-ops", "0", "--tune-evals", "2", "--tune-minutes", "3",
                 "--validate-minutes", "1", "--verify-workers", "1",
                 "--cluster", made.address, "--direct_running_mode=in_memory"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    assert [s["stage"] for s in report["stages"]] == list(STAGES)
    tune = next(s for s in report["stages"] if s["stage"] == "tune")["counts"]
    assert tune["tuned"] == 1 and tune["unroutable"] == tune["failed"] == 0
    assert attempt_records(home)  # the task ran on a node


def test_a_check_waiting_for_a_node_that_the_time_left_cannot_hold_is_cancelled_and_one_that_fits_runs(
        cluster, tmp_path):
    from tasks.runner import Deadline
    from tuner.transfer import Kinship, Transfer

    made, nodes, _, other = cluster
    home = tmp_path / "home"
    transfer = Transfer({"placement:REDUCE": "xla"}, "a" * 32 + "/" + "b" * 32, Kinship.FAMILY, 1.2)
    check = replace(QUICK, transfers=(transfer,), transfer_check=True, budget_evals=1)
    # The environment's one node is busy with a search while both checks wait for it; 300 s are
    # left, and one check is expected to take 900.
    tasks = [task("busy", jnp.maximum, other, replace(QUICK, budget_evals=6)),
             task("long", lambda a, b: jnp.exp(a) * b, other, replace(check, expected_seconds=900.0)),
             task("short", lambda a, b: jnp.exp(a) + b, other, replace(check, expected_seconds=5.0))]
    busy, long, short = run_all(RayRunner(made.address), tasks, open_home(home), Deadline(time.time() + 300))
    assert busy.status == TaskStatus.DONE and busy.node == nodes["b"].node_id
    assert long.status == TaskStatus.NOT_STARTED and long.reason.startswith("expected to take 900 s"), long
    assert short.status == TaskStatus.DONE and short.node == nodes["b"].node_id, short
    # The check passed by never ran anywhere: no try of it, no result of it.
    assert len(attempt_records(home)) == 2
    assert sorted(Warehouse(home).read(TUNING_RESULTS).column("task_id").to_pylist()) == sorted(
        o.result.task_id for o in (busy, short))


def test_a_task_whose_last_node_dies_mid_task_is_reported_not_left_pending(cluster, tmp_path):
    made, nodes, _, other = cluster
    home = tmp_path / "home"
    thread, outcomes = in_background(RayRunner(made.address),
                                     [task("min", jnp.minimum, other, replace(QUICK, budget_evals=6))],
                                     home)
    wait_for(lambda: attempt_records(home), 120, "the task's first try")
    made.remove_node(nodes["b"])  # the one node of that environment
    thread.join(120)
    [outcome] = outcomes
    assert outcome.status == TaskStatus.UNROUTABLE and outcome.tries == 1, outcome
    assert "the last live node offering its environment died" in outcome.reason
