"""What a tuning task is given (`Subject`) and what it tunes (`TuneTarget`).

A subject is a graph (its unoptimized module, keyed by its graph fingerprint, measured as its
placement says) or an op (a kernel cut out of its optimized graph, keyed by the op fingerprint,
with its class). A kind makes a subject into a target on the machine that measures:
`tuner.kinds.make_target` adds the space the kind searches there and, measured per device, the
graph's per-device program.
"""

from __future__ import annotations

from dataclasses import dataclass

from execution.flags import CompilerConfig
from execution.sharded import Placement
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule
from tuner.op_cut import OpCut
from tuner.space import SearchSpace
from vocabulary.tuning import Kind


@dataclass(frozen=True)
class Subject:
    """What a task of some kind is given to tune: the module the tuner compiles (a graph, or an
    op cut out as a runnable module), its fingerprint, a label, and for an op its class (which
    knobs act on it: `tuner.space.OP_KNOBS`)."""

    module: HloModule
    fingerprint: str
    label: str
    op_class: str | None = None
    placement: Placement = Placement()  # how a graph compiled across devices is measured


@dataclass(frozen=True)
class TuneTarget:
    """What a task tunes: the module it compiles, the fingerprint and kind its results are keyed
    by, and the space it searches."""

    module: HloModule
    fingerprint: str
    kind: Kind
    space: SearchSpace
    label: str
    configs: tuple[CompilerConfig, ...] = ()  # a fixed list to evaluate in order, not a search
    sources: tuple[str, ...] = ()  # the tasks the target was derived from (a fold's op tasks)
    # How `module` is measured: whole (compiled for the devices `placement.compiled_for`
    # spans) or, per device, `module` is the graph's per-device program.
    placement: Placement = Placement()
    # Why `module` cannot be measured at all (a per-device program XLA would not partition):
    # the task ends as one whose default fails, without a search.
    unmeasurable: str | None = None


def graph_subject(module: HloModule, placement: Placement = Placement()) -> Subject:
    """A graph as a task's subject, measured as `placement` says: keyed by its graph
    fingerprint."""
    fingerprint = graph_fingerprint(module)
    return Subject(module, fingerprint, module.name or fingerprint[:8], placement=placement)


def op_subject(cut: OpCut) -> Subject:
    """An op cut out of its graph as a task's subject: keyed by the op fingerprint."""
    return Subject(cut.module, cut.fingerprint, cut.name, cut.op_class)
