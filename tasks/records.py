"""Task records: what one tuning or validation measurement needs, and how it ended.

A task is a plain, picklable record of everything its measurement needs besides the home: the
module as serialized bytes (`hlo.module.HloModule`), its kind, its environment
and its settings. The home travels as its string form (`home_address`): a URL, or a path that
every node sees. A runner (`tasks.runner.LocalRunner`, `tasks.ray_runner.RayRunner`) runs a list of them and gives one
`TaskOutcome` per task, in the tasks' order, with its status as a `TaskStatus`, the node that
ran it, how many tries it took, and its result or the reason it has none.

What a task does is `perform`: the same call wherever it runs. A tuning task lands its result
idempotently by task id (`tuner.tune.run_task`: a rerun after a lost node resumes from the
task's journal and lands nothing twice); a validation task only measures and decides: the
validator's run journals the decision on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from execution.sharded import Placement
from hlo.module import HloModule
from storage.home import Home
from storage.home_factory import open_home
from tasks.resources import task_resources
from tuner.persist import task_digest
from tuner.result import TuneResult
from tuner.target import Subject
from tuner.task import tune
from tuner.tune import TuneSettings
from validator.plan import Queued
from validator.rules import Decision
from validator.toolchains import Toolchain
from validator.validate import ValidateSettings, measure
from vocabulary.tasks import TaskStatus
from vocabulary.tuning import Kind

R = TypeVar("R")


@dataclass(frozen=True)
class TuneTask:
    """One tuning task: a graph's flags, an op or a GPU graph's kernels (`kind`) of
    environment `env_key`, to tune with `settings`. `module` is what the tuner compiles (an HloModule is the serialized
    HloModuleProto and its name; for an op, its kernel cut out as a runnable module),
    `fingerprint` what its results are keyed by."""

    kind: Kind
    label: str
    module: HloModule
    fingerprint: str
    env_key: str
    settings: TuneSettings
    op_class: str | None = None  # an op's class: which knobs act on it
    placement: Placement = Placement()  # how a graph compiled across devices is measured
    # A sharded graph's machine kind (hlo.environment.machine_kind): any node of the kind
    # measures it; None, a graph of one device: a node of its very environment.
    machine: str | None = None

    @classmethod
    def of(cls, kind: Kind, label: str, subject: Subject, env_key: str,
           settings: TuneSettings, machine: str | None = None) -> TuneTask:
        """The task tuning `subject` (see `tuner.target.graph_subject`, `op_subject`), a sharded
        one on machines of kind `machine`."""
        return cls(kind, label, subject.module, subject.fingerprint, env_key, settings,
                   subject.op_class, subject.placement, machine)

    def resources(self) -> dict[str, float]:
        """What a node needs to offer to run the task (`tasks.resources.task_resources`)."""
        return task_resources(self.env_key, self.machine, self.placement.devices)

    @property
    def key(self) -> str:
        """What names the task's attempts in the home: its kind, key, environment and budget
        (and, for a sharded graph, how it is measured)."""
        measured_as = [self.placement.mode] if self.placement.partitioning is not None else []
        checked = ["transfer check"] if self.settings.transfer_check else []
        return task_digest("tune", self.kind, self.fingerprint, self.env_key,
                           self.settings.strategy, self.settings.seed, self.settings.budget_evals,
                           *measured_as, *checked)

    def subject(self) -> Subject:
        """What the tuner is given to tune."""
        return Subject(self.module, self.fingerprint, self.label, self.op_class, self.placement)


@dataclass(frozen=True)
class MeasureTask:
    """One validation measurement: the queued store entry under toolchain `chain`, whose
    environment (`env_key`, the toolchain's) a node must offer. The entry's autotune results
    travel in it, checked (`Queued.results`): a GPU node compiles with them delivered."""

    label: str
    queued: Queued
    chain: Toolchain
    env_key: str
    settings: ValidateSettings

    @property
    def key(self) -> str:
        """What names the task's attempts in the home: the entry, the toolchain's compiler."""
        return task_digest("validate", self.queued.entry.key, self.chain.compiler_version)

    @property
    def machine(self) -> str | None:
        """A sharded entry's machine kind (as `TuneTask.machine`); None otherwise."""
        return self.queued.machine

    def resources(self) -> dict[str, float]:
        """What a node needs to offer to run the task (`tasks.resources.task_resources`)."""
        return task_resources(self.env_key, self.machine, self.queued.placement.devices)


Task = TuneTask | MeasureTask


@dataclass
class TaskOutcome(Generic[R]):
    """How one task ended: its status; the node that ran it (None: it ran nowhere; "local" in
    this process); how many tries it took (a try ends when its process dies); its result, or
    the reason it has none."""

    label: str
    status: TaskStatus
    node: str | None = None
    tries: int = 0
    result: R | None = None
    reason: str | None = None


def perform(task: Task, home: Home | str, progress: bool = False) -> TuneResult | Decision:
    """Run `task` on this machine against `home`: a tuning task tunes and lands its result
    (idempotent by task id; `progress`: its bar), a validation task measures and returns its
    decision."""
    home = open_home(home)
    if isinstance(task, TuneTask):
        return tune(task.kind, task.subject(), home, task.settings, task.env_key, progress)
    return measure(task.queued, home, task.chain, task.settings)


def home_address(home: Home) -> str:
    """The string form of `home` a node opens: a URL as it is, a local path made absolute."""
    return str(home.local("a cluster's shared home").resolve()) if home.is_local else str(home)
