"""The cluster options on the command line: bad ones told in one line before any work, and the
`ray start` a node runs (offering this machine's environment as its one measuring slot)."""

from __future__ import annotations

import json

import pytest

from hlo.environment import Environment, machine_kind
from pipelines.cli import main
from tasks.node import start_command
from tasks.resources import kind_of, node_resources, offered, offering, resource_name, task_resources


@pytest.mark.parametrize("argv, named", [
    (["tune", "module.hlo", "--cluster", " "], "--cluster: empty cluster address"),
    (["validate", "--once", "--cluster", ""], "--cluster: empty cluster address"),
    (["tune", "module.hlo", "--cluster", "headnode"], "--cluster headnode: not a Ray address"),
    # Ray itself would retry an address that does not answer for minutes.
    (["nightly", "--cluster", "127.0.0.1:1"], "--cluster 127.0.0.1:1: no Ray cluster answers there"),
    (["validate", "--report", "--cluster", "auto"], "--cluster: measures the entries of one pass"),
    (["cluster", "node"], "give --head, or --address"),
    (["cluster", "node", "--head", "--port", "70000"], "--port 70000: not a port"),
])
def test_bad_cluster_options_are_told_in_one_line(tmp_path, capsys, monkeypatch, argv, named):
    monkeypatch.delenv("FDO_CLUSTER", raising=False)
    assert main(["--home", str(tmp_path / "home"), *argv]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and named in error, error


def test_an_empty_cluster_variable_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FDO_CLUSTER", "  ")
    assert main(["--home", str(tmp_path / "home"), "tune", "module.hlo"]) == 2
    assert "$FDO_CLUSTER: empty cluster address" in capsys.readouterr().err


def test_a_node_offers_one_slot_of_its_environment_and_no_dashboard():
    env = Environment("cpu", "x86_64 avx2", 1, "jaxlib-0.10.2", {"xla_cpu_enable_fast_math": "false"})
    plain = Environment("cpu", "x86_64 avx2", 1, "jaxlib-0.10.2")
    offer = node_resources(env, devices=8)
    kind = kind_of(env)
    assert offer == {resource_name(env.key()): 1, f"fdo-kind-{kind}": 1, f"fdo-devices-{kind}": 8}
    assert resource_name(plain.key()) not in offer and kind_of(plain) == kind  # one kind of machine
    command = start_command(False, 6379, "10.0.0.5:6379", offer)
    assert command[1:3] == ["start", "--address=10.0.0.5:6379"]
    resources = next(a for a in command if a.startswith("--resources="))
    assert json.loads(resources.split("=", 1)[1]) == offer
    assert "--include-dashboard=false" in command
    head = start_command(True, 6380, None, offer)
    assert head[2:4] == ["--head", "--port=6380"]
    # Only live nodes route: a dead node's slot is offered by no one.
    nodes = [{"NodeID": "a", "Alive": True, "Resources": {**offer, "CPU": 1.0}},
             {"NodeID": "b", "Alive": False, "Resources": node_resources(plain)}]
    offers = offered(nodes)
    assert offers[resource_name(env.key())] == ["a"] and resource_name(plain.key()) not in offers
    # A graph of one device routes to its environment; a sharded one to any node of its machine
    # kind with as many devices as measuring it whole takes.
    assert offering(task_resources(env.key(), None, 1), offers) == {"a"}
    assert offering(task_resources(plain.key(), None, 1), offers) == set()
    assert offering(task_resources("sharded", kind, 8), offers) == {"a"}
    assert offering(task_resources("sharded", kind, 16), offers) == set()
    assert offering(task_resources("sharded", machine_kind("gpu", "H100", "x"), 1), offers) == set()
