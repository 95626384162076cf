"""Sharded programs measured as the job runs them: the partitioning in the environment, whole
mode on N host devices, the per-device program, and how a graph's mode is chosen."""

from __future__ import annotations

import dataclasses
import json

import pytest

from execution.evaluate import evaluate, per_device_program
from execution.measure import MeasureSettings
from execution.per_device import COLLECTIVES, PerDeviceError, local_stand_ins
from execution.sharded import Placement, choose_placement, global_output_shapes, whole_capacity
from execution.worker import Worker
from hlo.environment import Environment, Partitioning, environment_from_json, parse_mesh, partitioning_from_json
from hlo.module import from_lowered, from_text
from pipelines.cli import main
from storage.home_factory import open_home
from tests.support import worker_tasks
from tuner.kinds import make_target
from tuner.persist import finished_result
from tuner.target import graph_subject
from tuner.task import tune_module
from tuner.tune import TuneSettings
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind, Verdict
from workloads.zoo.sharded import get_sharded, sharded_workloads

QUICK = MeasureSettings(max_seconds=4, max_pairs=120)
HERE = Environment("cpu", "cpu:x86_64:avx2", 4, "jaxlib-test")
FOUR = Partitioning(replicas=1, partitions=4, spmd=True, shardy=True,
                    mesh=(("data", 2), ("model", 2)), processes=1, local_devices=4)


def test_an_unpartitioned_environment_keys_as_before_partitionings_were_recorded():
    # The key of an environment without a partitioning hashes exactly the fields it always had.
    import hashlib

    old = json.dumps({"platform": "cpu", "device_kind": "cpu:x86_64:avx2", "device_count": 4,
                      "compiler_version": "jaxlib-test", "job_options": {}},
                     sort_keys=True, separators=(",", ":"))
    assert HERE.key() == hashlib.blake2b(old.encode(), digest_size=16).hexdigest()
    one = Partitioning(processes=1, local_devices=4)  # one device of one process: none recorded
    assert HERE.with_partitioning(one).key() == HERE.key()
    assert "partitioning" not in HERE.with_partitioning(one).to_json()


def test_the_same_program_sharded_two_ways_keys_two_environments():
    eight = Partitioning(1, 8, True, True, (("data", 4), ("model", 2)), 1, 8)
    two_processes = Partitioning(1, 4, True, True, (("data", 2), ("model", 2)), 2, 2)
    keys = {HERE.with_partitioning(p).key() for p in (None, FOUR, eight, two_processes)}
    assert len(keys) == 4
    for p in (FOUR, eight, two_processes):  # and each reads back as written
        env = HERE.with_partitioning(p)
        assert environment_from_json(json.loads(json.dumps(env.to_json()))) == env


@pytest.mark.parametrize("bad", [{"partitions": 0}, {"partitions": "4"}, {"mesh": [["x"]]},
                                 {"spmd": 1}, {"processes": 1 << 20}, {"devices": 4}])
def test_a_malformed_partitioning_is_refused_naming_the_field(bad):
    data = {**HERE.with_partitioning(FOUR).to_json()}
    data["partitioning"] = {**data["partitioning"], **bad}
    with pytest.raises(ValueError, match="partitioning"):
        environment_from_json(data)


def test_a_mesh_reads_as_shardy_spells_it():
    assert parse_mesh('#sdy.mesh<["data"=2, "model"=4]>') == (("data", 2), ("model", 4))
    assert parse_mesh("{mesh = #sdy.mesh<[]>}") == ()
    assert partitioning_from_json(FOUR.to_json()) == FOUR


def test_a_graph_is_measured_whole_where_the_devices_suffice_else_per_device():
    assert choose_placement(FOUR, capacity=8) == Placement(MeasureMode.WHOLE, FOUR)
    assert choose_placement(FOUR, capacity=2).mode is MeasureMode.PER_DEVICE
    assert choose_placement(FOUR, capacity=8, asked=MeasureMode.PER_DEVICE).mode is MeasureMode.PER_DEVICE
    with pytest.raises(ValueError, match="needs 4 devices"):
        choose_placement(FOUR, capacity=2, asked=MeasureMode.WHOLE)
    # A graph of one device is its own per-device program: measured whole, whatever is asked.
    assert choose_placement(None, 1, MeasureMode.PER_DEVICE) == Placement()
    assert Placement(MeasureMode.PER_DEVICE, FOUR).compiled_for is None
    assert Placement(MeasureMode.WHOLE, FOUR).devices == 4


def test_the_host_device_capacity_is_a_setting(monkeypatch):
    monkeypatch.setenv("FDO_MAX_HOST_DEVICES", "16")
    assert whole_capacity("cpu") == 16
    monkeypatch.setenv("FDO_MAX_HOST_DEVICES", "many")
    with pytest.raises(ValueError, match="FDO_MAX_HOST_DEVICES"):
        whole_capacity("cpu")


@pytest.mark.subprocess
def test_a_worker_given_n_devices_has_them():
    with Worker(devices=4) as worker:
        assert worker.call(worker_tasks.device_count) == 4
    with Worker() as worker:
        assert worker.call(worker_tasks.device_count) == 1


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_sharded_step_is_measured_whole_on_its_devices_with_every_output_checked():
    workload = get_sharded("mlp-dp4")
    module = from_lowered(workload.lower())
    result = evaluate(module, {}, settings=QUICK, partitioning=workload.partitioning())
    assert result.error is None and result.numerics_ok, result.error
    # Every output of the step (3 layers' weights and biases, their velocities, the loss),
    # gathered whole.
    assert len(result.numerics) == len(global_output_shapes(module)) == 13
    assert all(check.ok for check in result.numerics)
    assert not result.significant  # an A/A


@pytest.mark.subprocess
def test_whole_mode_compiles_the_program_the_job_runs_not_the_unsharded_one():
    workload = get_sharded("mlp-dp4")
    module = from_lowered(workload.lower())
    with Worker(devices=4) as worker:
        sharded, plain = worker.call(worker_tasks.optimized_texts, module_proto=module.proto,
                                     partitioning=workload.partitioning())
    # The job's devices each take a quarter of the batch of 512; on one device, all of it.
    assert "f32[128,784]" in sharded and "all-reduce" in sharded
    assert "f32[512,784]" in plain and "all-reduce" not in plain


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_per_device_program_has_per_device_shapes_and_no_collective():
    workload = get_sharded("mlp-dp4")
    module = from_lowered(workload.lower())
    local = per_device_program(module, workload.partitioning())
    text = local.to_text()
    assert not any(f" {op}(" in text for op in COLLECTIVES)
    assert "sharding=" not in text
    # The batch of 512 split over 4 devices: each runs 128 rows.
    assert "f32[128,784]" in text and "f32[512,784]" not in text
    result = evaluate(local, {}, settings=QUICK)
    assert result.error is None and result.numerics_ok


@pytest.mark.xla
@pytest.mark.subprocess
def test_a_graph_without_a_per_device_program_ends_its_task_as_default_fails(tmp_path):
    # mlp-dp4's shardings name 4 devices; partitioned for 3, XLA refuses it. The task must end
    # with the reason, not raise out of the tune stage.
    workload = get_sharded("mlp-dp4")
    module = from_lowered(workload.lower())
    three = dataclasses.replace(workload.partitioning(), partitions=3, mesh=(("data", 3),))
    placement = Placement(MeasureMode.PER_DEVICE, three)
    assert "no per-device program" in make_target(Kind.GRAPH, graph_subject(module, placement)).unmeasurable
    result = tune_module(module, tmp_path, TuneSettings(budget_evals=2), placement=placement)
    assert result.status is Verdict.DEFAULT_FAILS and "no per-device program" in result.reason
    assert not result.accepted and result.evaluations == 0 and result.measure_mode is MeasureMode.PER_DEVICE
    assert finished_result(open_home(tmp_path), result.task_id) == result  # landed: a rerun does not try again


def test_local_stand_ins_keep_each_collectives_shape():
    module = from_text("""
HloModule partitioned, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  r = f32[8,16] all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  g = f32[32,16] all-gather(r), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  s = f32[8,16] reduce-scatter(g), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  c = f32[8,16] collective-permute(s), channel_id=4, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT t = (f32[8,16], f32[32,16]) tuple(c, g)
}
""", "partitioned")
    local = local_stand_ins(module)
    text = local.to_text()
    assert not any(f" {op}(" in text for op in COLLECTIVES)
    assert "f32[32,16]{1,0} concatenate(" in text and "f32[8,16]{1,0} slice(" in text
    assert "sharding=" not in text
    from execution.compile import compile_module

    compile_module(local.proto, {})  # compiles for one device


def test_a_collective_without_a_stand_in_is_refused():
    module = from_text("""
HloModule partitioned

ENTRY main {
  p = f32[8,16] parameter(0)
  ROOT g = f32[16,32] all-gather(p), channel_id=2, replica_groups={{0,1}}, dimensions={0,1}
}
""", "odd")
    with pytest.raises(PerDeviceError, match="more than one axis"):
        local_stand_ins(module)


def test_the_zoo_has_sharded_train_steps_on_4_and_8_devices():
    devices = {w.name: w.devices for w in sharded_workloads()}
    assert devices == {"mlp-dp4": 4, "nbody-dp4": 4, "transformer-tp4": 4, "transformer-tp8": 8}
    for workload in sharded_workloads():
        p = workload.partitioning()
        assert p.partitions == workload.devices and p.spmd and p.processes == 1
        text = from_lowered(workload.lower()).to_text()
        assert "sharding={devices=" in text  # its arguments carry their shardings


@pytest.mark.slow
@pytest.mark.subprocess
def test_fdo_evaluate_measures_a_spooled_sharded_module_as_its_job_compiles_it(tmp_path, capsys):
    workload = get_sharded("mlp-dp4")
    module_file = tmp_path / "module_0001.jit_step.before_optimizations.txt"
    module_file.write_text(from_lowered(workload.lower()).to_text())
    environment = HERE.with_partitioning(workload.partitioning())
    (tmp_path / "fdo-environment.json").write_text(json.dumps(environment.to_json()))
    assert main(["evaluate", str(module_file), "--max-seconds", "2", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["measure_mode"] == "whole" and whole["measured_as"] == "whole on 4 devices"
    assert whole["numerics_ok"]
    assert main(["evaluate", str(module_file), "--max-seconds", "2", "--json",
                 "--measure-mode", "per-device"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert local["measured_as"] == "per device of 4" and local["numerics_ok"]
