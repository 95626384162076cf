"""One tuning task of any kind: the entry point every task runs through, here or on a cluster
node (`tasks.records.perform`).

A kind's registry entry (`tuner.kinds.KINDS`) makes the task's target from its subject and runs
it (`KindSpec.run`): the tuner's own search of its space (`tuner.tune.run_task`: a graph's
flags, an op's knobs) or XLA's own autotuner's (`tuner.kernels.run_kernels_task`: a GPU graph's
kernels). `tune_module` and `tune_op` are the task of a graph and of an op for a caller holding
the module or the cut.
"""

from __future__ import annotations

from execution.sharded import Placement
from hlo.module import HloModule
from storage.home import Home
from tuner.kinds import KINDS, make_target
from tuner.op_cut import OpCut
from tuner.result import TuneResult
from tuner.strategies import TrialRecord
from tuner.target import Subject, graph_subject, op_subject
from tuner.tune import TuneSettings
from vocabulary.tuning import Kind


def tune(kind: Kind, subject: Subject, home: Home, settings: TuneSettings,
         env_key: str | None = None, progress: bool = False,
         prior: list[TrialRecord] | None = None) -> TuneResult:
    """Tune `subject` as a task of `kind` on this machine (its space and how it is tuned from
    the kind registry; ValueError where the kind does not tune on this platform) and land the
    result; a task finished before is landed again, not run, and one cut short resumes.
    `progress` and `prior` (what won on other graphs) serve a search."""
    return KINDS[kind].run(make_target(kind, subject), home, settings, env_key, progress, prior)


def tune_module(module: HloModule, home: Home, settings: TuneSettings, env_key: str | None = None,
                progress: bool = False, prior: list[TrialRecord] | None = None,
                placement: Placement = Placement()) -> TuneResult:
    """Tune `module`'s graph-level flags within the budget, measured as `placement` says (a
    sharded graph whole, or per device): the graph task of `tune`."""
    return tune(Kind.GRAPH, graph_subject(module, placement), home, settings, env_key, progress, prior)


def tune_op(cut: OpCut, home: Home, settings: TuneSettings, env_key: str | None = None,
            progress: bool = False) -> TuneResult:
    """Tune one kernel cut out of its graph (`tuner.op_cut`) over its op-level space: the op
    task of `tune`, keyed by the op fingerprint, with kind 'op'. On CPU it reaches users folded
    into a graph-level config (`tuner.fold`)."""
    return tune(Kind.OP, op_subject(cut), home, settings, env_key, progress)
