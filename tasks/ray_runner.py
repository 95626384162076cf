"""The Ray runner: each task a Ray task on a node that offers its environment (the one module
that imports ray; it needs the `cluster` extra).

Routing (`tasks.resources`): a task asks for one unit of its environment's resource, so it runs
only on a node of that environment, one measurement per node at a time. Before submitting, and
every `POLL_SECONDS` while waiting, the runner reads the live nodes: a task whose resource no
live node offers is cancelled and reported UNROUTABLE at once (at submission, or when the last
node offering it died), never left pending.

Lost nodes and workers: Ray reruns a task whose worker or node died (`retries` times, on any
node with the resource); a task's own exception is not retried (`retry_exceptions=False`): it
is a FAILED outcome with its message. A rerun tuning task resumes from its journal in the shared
home and lands once (`tuner.tune.run_task`). Each try first writes an attempt record under
`cluster/attempts/<run>/<task>/` of the home (node id, pid, start), so that the outcome says
how many tries a task took and on which node the last ran, and a task whose worker died on
every try is FAILED with that reason.

The driver keeps Ray's own output off stdout (`--json` stays clean): Ray logs go to stderr,
workers' output is not forwarded.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import uuid
from typing import Any, Iterator, Sequence

import ray
from ray import exceptions as ray_errors

from hlo.environment import current_environment
from storage.home import Home
from storage.home_factory import open_home
from tasks.records import Task, TaskOutcome, home_address, perform
from tasks.resources import KIND_PREFIX, PREFIX, environment_key, kind_of, offered, offering
from tasks.runner import Deadline, Runner, unstartable, weight, within
from vocabulary.tasks import TaskStatus

RETRIES = 3  # reruns after a worker or node died: four tries in all
POLL_SECONDS = 1.0
# A died worker or node, as Ray reports the last of a task's tries.
_SYSTEM_FAILURES = (ray_errors.WorkerCrashedError, ray_errors.NodeDiedError,
                    ray_errors.LocalRayletDiedError, ray_errors.OutOfMemoryError)


class WrongEnvironment(RuntimeError):
    """A node asked to measure a task of an environment other than its own: the node offers a
    resource its processes do not match (started under other XLA_FLAGS, another jaxlib)."""


def attempt(task: Task, home: str, run_id: str) -> tuple[Any, str]:
    """One try of `task` on this Ray worker: its attempt record first (node, pid, this
    process's environment key), then the task, only where this process's environment is the
    task's (WrongEnvironment otherwise); returns (the task's result, this node's id)."""
    node = ray.get_runtime_context().get_node_id()
    environment = current_environment()
    here = environment.key()
    opened = open_home(home)
    record = {"node": node, "pid": os.getpid(), "env_key": here,
              "started_at": datetime.datetime.now(datetime.UTC).isoformat()}
    name = f"{node[:12]}-{os.getpid()}.json"
    opened.atomic_write(opened.location("cluster", "attempts", run_id, task.key, name),
                        json.dumps(record) + "\n")
    if task.machine is not None and kind_of(environment) != task.machine:
        raise WrongEnvironment(f"node {node[:12]} is a machine of kind {kind_of(environment)}, "
                               f"not the task's {task.machine}")
    if task.machine is None and here != task.env_key:
        raise WrongEnvironment(f"node {node[:12]} measures environment {here}, not the task's "
                               f"{task.env_key}")
    return perform(task, opened), node


def attempts(home: Home, run_id: str, task: Task) -> list[dict[str, Any]]:
    """The attempt records of `task` in run `run_id`, oldest first."""
    folder = home.location("cluster", "attempts", run_id, task.key)
    if not home.exists(folder):
        return []
    records = [json.loads(home.read_bytes(home.location("cluster", "attempts", run_id, task.key, name)))
               for name, is_dir in home.children(folder) if not is_dir and name.endswith(".json")]
    return sorted(records, key=lambda r: r["started_at"])


class RayRunner(Runner):
    """Tasks on the Ray cluster at `address` (a Ray address, or "auto"); see the module
    docstring. Connects on creation (ConnectionError names an address that does not answer)
    unless this process is connected already."""

    name = "ray"

    def __init__(self, address: str, retries: int = RETRIES) -> None:
        self.address, self.retries = address, retries
        self._owns = not ray.is_initialized()
        if self._owns:
            _answers(address)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                         configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConnectionError(f"--cluster {address}: no Ray cluster answers there "
                                      f"({_first_line(exc)})") from exc
        self._remote = ray.remote(attempt)

    def environments(self) -> frozenset[str]:
        """The environments the live nodes offer now, and their machine kinds (which measure
        sharded graphs: `tasks.resources`)."""
        return frozenset(environment_key(name) for name in offered(ray.nodes())
                         if name.startswith((PREFIX, KIND_PREFIX)))

    def close(self) -> None:
        if self._owns and ray.is_initialized():
            ray.shutdown()

    def run(self, tasks: Sequence[Task], home: Home, deadline: Deadline | None = None,
            progress: bool = False) -> Iterator[tuple[int, TaskOutcome]]:
        run_id = uuid.uuid4().hex[:16]
        home = open_home(home)
        address = home_address(home)
        nodes = offered(ray.nodes())
        pending: dict[Any, int] = {}
        for index, task in enumerate(tasks):
            wanted = task.resources()
            if not offering(wanted, nodes):
                yield index, _unroutable(task, "no live node offers its environment")
                continue
            if deadline is not None:
                peers = [t for t in tasks if t.resources() == wanted]
                share = max(1, -(-len(peers) // len(offering(wanted, nodes))))  # tasks per node, rounded up
                # A node's slot, scaled by what the task weighs among the tasks of its resources.
                scale = weight(task, len(peers)) * len(peers) / sum(weight(t, len(peers)) for t in peers)
                task = within(task, deadline.left() / (share + deadline.reserve) * scale)
            ref = self._remote.options(resources=wanted, num_cpus=0, max_retries=self.retries,
                                       retry_exceptions=False).remote(task, address, run_id)
            pending[ref] = index
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            for ref in ready:
                index = pending.pop(ref)
                yield index, self._outcome(ref, tasks[index], home, run_id)
            if ready:
                continue
            nodes = offered(ray.nodes())
            for ref, index in list(pending.items()):
                task = tasks[index]
                if not offering(task.resources(), nodes):
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    yield index, _unroutable(task, "the last live node offering its environment "
                                             "died", attempts(home, run_id, task))
                elif (deadline is not None and (reason := unstartable(task, deadline)) is not None
                      and not attempts(home, run_id, task)):
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    yield index, TaskOutcome(task.label, TaskStatus.NOT_STARTED, reason=reason)

    def _outcome(self, ref: Any, task: Task, home: Home, run_id: str) -> TaskOutcome:
        """The outcome of a finished Ray task."""
        tries = attempts(home, run_id, task)
        last = tries[-1]["node"] if tries else None
        try:
            result, node = ray.get(ref)
        except ray_errors.RayTaskError as exc:  # the task raised: not retried
            cause = exc.cause if exc.cause is not None else exc
            return TaskOutcome(task.label, TaskStatus.FAILED, last, len(tries),
                               reason=f"{type(cause).__name__}: {_first_line(cause)}")
        except _SYSTEM_FAILURES as exc:
            return TaskOutcome(task.label, TaskStatus.FAILED, last, len(tries),
                               reason=f"its worker or node died on each of {len(tries)} tries "
                               f"({type(exc).__name__})")
        except ray_errors.RayError as exc:  # Ray lost the task otherwise (its result, say)
            return TaskOutcome(task.label, TaskStatus.FAILED, last, len(tries),
                               reason=f"{type(exc).__name__}: {_first_line(exc)}")
        return TaskOutcome(task.label, TaskStatus.DONE, node, len(tries), result)


def _first_line(exc: BaseException) -> str:
    return next(iter(str(exc).splitlines()), "")


def _answers(address: str, seconds: float = 5.0) -> None:
    """ConnectionError, naming `address`, unless something accepts a connection at its host and
    port: Ray itself retries an address that does not answer for minutes. "auto" (this
    machine's cluster, found by Ray at once or refused at once) is left to Ray."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--cluster {address}: not a Ray address (host:port, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as exc:
        raise ConnectionError(f"--cluster {address}: no Ray cluster answers there ({exc})") from exc


def _unroutable(task: Task, why: str, tries: list[dict[str, Any]] | None = None) -> TaskOutcome:
    tries = tries or []
    return TaskOutcome(task.label, TaskStatus.UNROUTABLE, tries[-1]["node"] if tries else None,
                       len(tries), reason=f"{why} (environment {task.env_key}): left for a later run")

