"""Routing by environment: the Ray resources of an environment, and which nodes offer them.

A measurement needs its machine to itself and must run where the compiler emits what the
fleet's jobs get (DESIGN.md: a machine only measures entries of its own environment). So a node
offers one unit of a resource named by its environment's key (`hlo.environment`: platform,
device kind and count, compiler version and the job options of its `XLA_FLAGS`), and a task of
a graph for one device asks for one unit of its environment's: only machines of its environment
take it.

A sharded graph's environment is no node's: its job spanned N devices, maybe processes. It is
measured on a machine of its kind (`machine_kind`: platform, device kind, compiler version),
whole on N of its devices or per device on one (`execution.sharded`). So a node also offers its
kind's measuring slot, one unit, and its kind's devices, as many as it can measure a program
whole on (`execution.sharded.whole_capacity`); every task takes the kind's slot (at most one
measurement per machine, whichever task), and a whole-mode task N of its devices.
"""

from __future__ import annotations

from typing import Any, Iterable

from hlo.environment import Environment, machine_kind

PREFIX = "fdo-env-"
KIND_PREFIX = "fdo-kind-"  # a machine kind's measuring slot
DEVICES_PREFIX = "fdo-devices-"  # a machine kind's devices, for programs measured whole
SLOTS = 1  # measurements one machine runs at a time


def resource_name(env_key: str) -> str:
    """The Ray custom resource of the environment whose key is `env_key`."""
    return f"{PREFIX}{env_key}"


def environment_key(resource: str) -> str:
    """The environment key whose resource is `resource` (`resource_name`'s inverse), or the
    machine kind whose slot it is."""
    return resource.removeprefix(PREFIX).removeprefix(KIND_PREFIX)


def kind_of(environment: Environment) -> str:
    """The machine kind of `environment` (`hlo.environment.machine_kind`)."""
    return machine_kind(environment.platform, environment.device_kind, environment.compiler_version)


def node_resources(environment: Environment, devices: int = 1) -> dict[str, float]:
    """What a node of `environment` offers: its environment's resource, its kind's measuring
    slot, and as many of its kind's devices as it measures a program whole on."""
    kind = kind_of(environment)
    return {resource_name(environment.key()): SLOTS, f"{KIND_PREFIX}{kind}": SLOTS,
            f"{DEVICES_PREFIX}{kind}": devices}


def task_resources(env_key: str, kind: str | None, devices: int) -> dict[str, float]:
    """What a task asks for: its machine kind's slot, and either its environment's resource (a
    graph of one device: `kind` None is this) or `devices` of the kind's devices."""
    if kind is None:
        return {resource_name(env_key): SLOTS}
    return {f"{KIND_PREFIX}{kind}": SLOTS, f"{DEVICES_PREFIX}{kind}": devices}


def offered(nodes: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Resource name -> the ids of the live nodes offering it, from `ray.nodes()` records (a
    machine kind's devices under `devices_name(kind, n)` for each n it offers up to its count)."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        for name, amount in node.get("Resources", {}).items():
            if name.startswith(DEVICES_PREFIX):
                for n in range(1, int(amount) + 1):
                    found.setdefault(devices_name(name.removeprefix(DEVICES_PREFIX), n), []).append(node["NodeID"])
            elif name.startswith((PREFIX, KIND_PREFIX)):
                found.setdefault(name, []).append(node["NodeID"])
    return found


def devices_name(kind: str, devices: int) -> str:
    """How `offered` names a node of machine kind `kind` with at least `devices` devices."""
    return f"{DEVICES_PREFIX}{kind}x{devices}"


def offering(resources: dict[str, float], offers: dict[str, list[str]]) -> set[str]:
    """The live nodes (`offered`) that have every resource a task asks for."""
    needed = [devices_name(name.removeprefix(DEVICES_PREFIX), int(amount))
              if name.startswith(DEVICES_PREFIX) else name for name, amount in resources.items()]
    return set.intersection(*(set(offers.get(name, ())) for name in needed)) if needed else set()
