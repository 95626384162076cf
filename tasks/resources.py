"""Routing by environment: the Ray resource of an environment, and which nodes offer it.

A measurement needs its machine to itself and must run where the compiler emits what the
fleet's jobs get (DESIGN.md: a machine only measures entries of its own environment). So a node
offers exactly one unit of one resource, named by its environment's key (`hlo.environment`:
platform, device kind and count, compiler version and the job options of its `XLA_FLAGS`), and
each task asks for one unit of its environment's: at most one measurement per machine, and only
on machines of its environment.
"""

from __future__ import annotations

from typing import Any, Iterable

from hlo.environment import Environment

PREFIX = "fdo-env-"
SLOTS = 1  # measurements one machine runs at a time


def resource_name(env_key: str) -> str:
    """The Ray custom resource of the environment whose key is `env_key`."""
    return f"{PREFIX}{env_key}"


def environment_key(resource: str) -> str:
    """The environment key whose resource is `resource` (`resource_name`'s inverse)."""
    return resource.removeprefix(PREFIX)


def node_resources(environment: Environment) -> dict[str, float]:
    """What a node of `environment` offers: its one measuring slot."""
    return {resource_name(environment.key()): SLOTS}


def offered(nodes: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Resource name -> the ids of the live nodes offering it, from `ray.nodes()` records."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        for name in node.get("Resources", {}):
            if name.startswith(PREFIX):
                found.setdefault(name, []).append(node["NodeID"])
    return found
