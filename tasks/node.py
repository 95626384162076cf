"""A Ray node of this machine: `ray start` with this machine's measuring slot, `ray stop`.

The node offers its environment's resource (`tasks.resources`), taken from this process's
environment (the same `XLA_FLAGS` and devices as the raylet it starts, whose workers inherit
them). Ray's own CPU accounting does not schedule the tasks (they ask for no CPU): the slot
does. The dashboard is left out (memory and start-up time, and nothing here reads it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from execution.sharded import whole_capacity
from hlo.environment import current_environment
from tasks.resources import node_resources


@dataclass(frozen=True)
class Started:
    """What `ray start` did: its exit status, the resources offered, the cluster's address,
    and its error output's last line where it failed."""

    returncode: int
    resources: dict[str, float]
    address: str
    error: str = ""


def ray_command() -> str:
    """The `ray` executable beside this interpreter (its venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start_command(head: bool, port: int, address: str | None,
                  resources: dict[str, float]) -> list[str]:
    """The `ray start` command line of a node offering `resources`: the head on `port`, or a
    node joining the head at `address`."""
    where = ["--head", f"--port={port}"] if head else [f"--address={address}"]
    return [ray_command(), "start", *where, f"--resources={json.dumps(resources)}",
            "--include-dashboard=false", "--disable-usage-stats"]


def start_node(head: bool, port: int, address: str | None) -> Started:
    """Start a Ray node here offering this machine's environment (see `start_command`)."""
    environment = current_environment()
    resources = node_resources(environment, whole_capacity(environment.platform))
    done = subprocess.run(start_command(head, port, address, resources), capture_output=True,
                          text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    lines = (done.stderr or done.stdout).strip().splitlines()
    # A head tells the address other nodes join it at ("ray start --address='10.0.0.5:6379'").
    told = re.search(r"--address='([^']+)'", done.stdout + done.stderr)
    joined = told.group(1) if head and told else (address or f"port {port}")
    return Started(done.returncode, resources, joined, lines[-1] if done.returncode and lines else "")


def stop_node() -> bool:
    """Stop this machine's Ray processes; True if there were any."""
    done = subprocess.run([ray_command(), "stop"], capture_output=True, text=True)
    return "Stopped" in done.stdout + done.stderr and "Did not find" not in done.stdout + done.stderr
