"""The runner interface, and the local runner: tasks run here, in order, as without a cluster.

A `Runner` is given a list of task records (`tasks.records`) and the home they share, and gives
one `TaskOutcome` per task, as each ends. Its guarantees, whichever runner it is:
- every task gets exactly one outcome, in any order (`run_all` puts them in the tasks' order),
  but that the local runner lets a task's exception end the run, as a local stage always has;
- a task runs with its own settings, except that under a `Deadline` a tuning task's search,
  race and pruning get a share of the time left, less what its verification, which comes on
  top, is expected to take (`within`): its stage's allotment where it has one (`weight`:
  what its graph is worth, `tuner.allot`), an equal share otherwise (a transfer check, which
  has no search, runs whole: `within`); and a task the deadline leaves no time for, or fewer
  seconds than it is expected to take (`TuneSettings.expected_seconds`), is not started
  (TaskStatus.NOT_STARTED: `unstartable`), while a later one that fits still may be;
- a task's landing is its own (`tasks.records.perform`): idempotent by task id, so a task run
  twice lands once.
The stages are given a runner; they do not build one (`pipelines.stages.open_runner` does,
from `--cluster` or $FDO_CLUSTER).
"""

from __future__ import annotations

import abc
import sys
import time
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

from storage.home import Home
from tasks.records import MeasureTask, Task, TaskOutcome, TuneTask, perform
from validator.plan import Queued
from validator.rules import Decision
from validator.toolchains import Toolchain
from validator.validate import Measurer, ValidateSettings
from vocabulary.tasks import TaskStatus

LOCAL_NODE = "local"


@dataclass(frozen=True)
class Deadline:
    """When the tasks' time is up (`time.time()`), and how many more shares of the time left to
    keep for what the caller runs after them."""

    at: float
    reserve: int = 0

    def left(self) -> float:
        """Minutes left."""
        return (self.at - time.time()) / 60


def unstartable(task: Task, deadline: Deadline) -> str | None:
    """Why `task` may not start now under `deadline`: no time left, or less than it is expected
    to take; None: it may."""
    left = deadline.left() * 60
    if left <= 0:
        return "the deadline left it no time"
    expected = task.settings.expected_seconds if isinstance(task, TuneTask) else None
    if expected is not None and expected > left:
        return f"expected to take {expected:.0f} s, and {left:.0f} s were left"
    return None


def weight(task: Task, count: int) -> float:
    """What `task` weighs when time is shared among `count` tasks: its allotted share of its
    stage (`TuneSettings.allotment`), else an equal share."""
    if isinstance(task, TuneTask) and task.settings.allotment is not None:
        return task.settings.allotment.share
    return 1.0 / count


def time_share(tasks: Sequence[Task], index: int, reserve: int) -> float:
    """The part of the time left that task `index` gets when the tasks before it are done: its
    weight over the weights of the tasks from it on plus `reserve` average tasks (equal weights:
    one part in the tasks left plus `reserve`)."""
    weights = [weight(task, len(tasks)) for task in tasks]
    rest = sum(weights[index:]) + reserve * sum(weights) / len(weights)
    return weights[index] / rest if rest > 0 else 1.0 / (len(tasks) - index + reserve)


def within(task: Task, minutes: float) -> Task:
    """`task` with its search, race and pruning limited to `minutes`, less what its verification
    is expected to take (`TuneSettings.verify_seconds`), which comes on top, but at most half of
    them (a short share still searches). A validation task has no search to limit, nor has a
    transfer check: it screens its few configs whole (a share of a stage's time left among a
    hundred checks is a second or two, in which a check measures none of them)."""
    if isinstance(task, TuneTask) and not task.settings.transfer_check:
        verify = (task.settings.verify_seconds or 0.0) / 60
        return replace(task, settings=replace(task.settings, budget_minutes=max(minutes - verify, minutes / 2)))
    return task


class Runner(abc.ABC):
    """Runs task records against a home; see the module docstring for its guarantees."""

    name: str

    @abc.abstractmethod
    def run(self, tasks: Sequence[Task], home: Home, deadline: Deadline | None = None,
            progress: bool = False) -> Iterator[tuple[int, TaskOutcome]]:
        """(index in `tasks`, outcome) of every task, as each ends."""

    def environments(self) -> frozenset[str] | None:
        """The keys of the environments the runner's machines measure, which the candidates to
        tune are chosen from (`tuner.candidates`); None: this machine's platform and device
        kind, as a run without a cluster has always taken them."""
        return None

    def close(self) -> None:
        """Let go of what the runner holds (a cluster connection)."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalRunner(Runner):
    """Each task in this process, one after another, in order: what a run without a cluster
    does. A task that raises propagates (as a local stage always has): no outcome hides it."""

    name = "local"

    def run(self, tasks: Sequence[Task], home: Home, deadline: Deadline | None = None,
            progress: bool = False) -> Iterator[tuple[int, TaskOutcome]]:
        for index, task in enumerate(tasks):
            if deadline is not None:
                reason = unstartable(task, deadline)
                if reason is not None:
                    yield index, TaskOutcome(task.label, TaskStatus.NOT_STARTED, reason=reason)
                    continue
                task = within(task, deadline.left() * time_share(tasks, index, deadline.reserve))
            result = perform(task, home, progress)
            yield index, TaskOutcome(task.label, TaskStatus.DONE, LOCAL_NODE, 1, result)


def run_all(runner: Runner, tasks: Sequence[Task], home: Home, deadline: Deadline | None = None,
            progress: bool = False, label: str = "tasks") -> list[TaskOutcome]:
    """Every task's outcome, in the tasks' order, with an overall bar (tasks done of all) when
    `progress` is on and there are several."""
    from console.progress import progress_bar

    outcomes: list[TaskOutcome | None] = [None] * len(tasks)
    bar = progress_bar(total=len(tasks), desc=label, unit="task",
                       enabled=progress and len(tasks) >= 2)
    try:
        for index, outcome in runner.run(tasks, home, deadline, progress):
            outcomes[index] = outcome
            bar.update()
    finally:
        bar.close()
    return [o for o in outcomes if o is not None]


def measuring(runner: Runner) -> Measurer:
    """The validator's `Measurer` (`validator.validate`) that measures each queued entry as a
    task on `runner`, in the toolchain's environment. An entry whose task has no decision
    (failed, no node for its environment, out of time) is told on stderr and deferred."""
    def measure_all(queue: list[Queued], home: Home, chain: Toolchain, settings: ValidateSettings,
                    deadline: float | None) -> Iterator[Decision]:
        env_key = chain.env().key()
        records = [MeasureTask(f"entry {q.entry.key[:12]}", q, chain, env_key, settings)
                   for q in queue]
        for _, outcome in runner.run(records, home, Deadline(deadline) if deadline else None):
            if outcome.result is not None:
                yield outcome.result
            else:
                print(f"{outcome.label}: {outcome.status}: {outcome.reason}; deferred",
                      file=sys.stderr)
    return measure_all
