"""The registry of tuning kinds: each kind's facts in one `KindSpec`, looked up by `Kind`.

A kind says what a task tunes and how: its defaults (the search's budget and strategy), the
platforms it tunes on, how its target is made (the module compiled, the fingerprint its results
are keyed by, the space searched), how its task runs (the tuner's search, or XLA's autotuner),
whether its subject is a whole graph, whether its results reach users folded into graphs, and
where its candidates come from. Every place that handles a kind reads it here: the tuner's
entry point (`tuner.task`), the candidates, the fold, the stage calls and the CLI. A new kind
is one more `Kind` member (`vocabulary.tuning`) and one more entry of `KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from execution.autotune.results import AUTOTUNING_PLATFORMS
from execution.compile import compiler_defaults
from execution.evaluate import per_device_program
from execution.per_device import PerDeviceError
from hlo.environment import current_environment
from storage.home import Home
from tuner.kernels import run_kernels_task
from tuner.result import TuneResult
from tuner.space import SearchSpace, accepted_flags, graph_space, op_space
from tuner.strategies import EvolutionStrategy, ExhaustiveStrategy, TrialRecord
from tuner.target import Subject, TuneTarget
from tuner.tune import TuneSettings, run_task
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind

if TYPE_CHECKING:
    from tuner.candidates import Candidates

__all__ = ["Kind", "KindSpec", "KINDS", "RunTask", "check_platform", "make_target"]

# How a task of a kind runs, here: tune `target` with `settings`, resuming it where it was left,
# and land the result (`env_key`: None, this machine's; `progress`: show a bar; `prior`: what
# won on other graphs, which a search orders its first moves by).
RunTask = Callable[[TuneTarget, Home, TuneSettings, str | None, bool, list[TrialRecord] | None],
                   TuneResult]


@dataclass(frozen=True)
class KindSpec:
    """Every fact of one tuning kind.

    `space(subject, platform)` is the space a task of the kind searches on `platform`, on the
    machine that measures (the accepted flags are that compiler's), one of `platforms` (None:
    any; elsewhere `check_platform` refuses, saying `refusal`). `run` runs a task of the kind
    (`tuner.task.tune` calls it): the tuner's search of that space (`tuner.tune.run_task`), or
    XLA's own autotuner's (`tuner.kernels`). `candidates(home, top, untried, environments)`
    are the latest ranking's best candidates of the kind that this machine (None) or machines
    of those environment keys can measure (`tuner.candidates`).

    `whole_graph`: a task's subject is a whole graph (a module given as a file is one), which
    a sharded environment's graph is measured as its partitioning says (whole or per device:
    `execution.sharded.choose_placement`) on a machine of its kind; otherwise it is a kernel
    cut out of a graph, measured on one device of its very environment. `folded`: the kind's
    results reach users folded into their graphs' configs (`tuner.fold`), which a round of its
    tasks ends with."""

    kind: Kind
    budget_evals: int  # the search's evaluations unless told otherwise
    strategy: str  # the search's last phase, a key of tuner.strategies.STRATEGIES
    space: Callable[[Subject, str], SearchSpace] = field(repr=False)
    candidates: Callable[[Home, int, bool, frozenset[str] | None], Candidates] = field(repr=False)
    run: RunTask = field(default=run_task, repr=False)
    whole_graph: bool = True
    folded: bool = False
    platforms: frozenset[str] | None = None
    refusal: str = ""  # why not elsewhere; "{platform}" and "{PLATFORM}" name the platform


def check_platform(kind: Kind, platform: str) -> None:
    """ValueError, one line naming `platform`, where tasks of `kind` cannot run on it."""
    spec = KINDS[kind]
    if spec.platforms is not None and platform not in spec.platforms:
        raise ValueError(spec.refusal.format(platform=platform, PLATFORM=platform.upper()))


def _graph_space(subject: Subject, platform: str) -> SearchSpace:
    # Flags that act across devices are searched where the program is measured on them.
    return graph_space(platform, accepted_flags(platform), compiler_defaults(),
                       device_count=subject.placement.devices)


def _op_space(subject: Subject, platform: str) -> SearchSpace:
    if subject.op_class is None:
        raise ValueError(f"op {subject.label}: no op class, so no op-level space")
    return op_space(subject.op_class, accepted_flags(platform), compiler_defaults())


def _kernels_space(subject: Subject, platform: str) -> SearchSpace:
    return SearchSpace(())  # nothing of ours: XLA's autotuner searches every fusion's configs


# tuner.candidates reads the warehouse and the blob store, which need the pipeline extra; the
# CLI reads this registry for its help pages in the base install too. So the candidates of a
# kind are imported when they are asked for.
def _graph_candidates(home: Home, top: int, untried: bool,
                      environments: frozenset[str] | None) -> Candidates:
    from tuner.candidates import Candidates, tunable_candidates

    return Candidates(tunable_candidates(home, top, untried, environments))


def _op_candidates(home: Home, top: int, untried: bool,
                   environments: frozenset[str] | None) -> Candidates:
    from tuner.candidates import tunable_op_candidates

    return tunable_op_candidates(home, top, untried, environments)


def _kernels_candidates(home: Home, top: int, untried: bool,
                        environments: frozenset[str] | None) -> Candidates:
    from tuner.candidates import Candidates, tunable_candidates

    return Candidates(tunable_candidates(home, top, untried, environments, Kind.KERNELS,
                                         AUTOTUNING_PLATFORMS))


def _run_kernels(target: TuneTarget, home: Home, settings: TuneSettings, env_key: str | None,
                 progress: bool, prior: list[TrialRecord] | None) -> TuneResult:
    # XLA's autotuner searches, in one compile: no bar of evaluations to show, no moves to order.
    return run_kernels_task(target, home, settings, env_key)


# A graph's search ends in evolution, within a budget; an op's space is small, so it is searched
# whole (up to the budget), in enumeration order. XLA:GPU's per-op channel is its autotune
# results, the kernels kind: an op is a CPU kernel. A kernels task searches nothing itself (XLA's
# autotuner does, exhaustively: "exhaustive" names it): its budget is how many of the costliest
# fusions' results it keeps, few, as a job's compile reads each.
KINDS: dict[Kind, KindSpec] = {
    Kind.GRAPH: KindSpec(Kind.GRAPH, 40, EvolutionStrategy.name, _graph_space, _graph_candidates),
    Kind.OP: KindSpec(Kind.OP, 200, ExhaustiveStrategy.name, _op_space, _op_candidates,
                      whole_graph=False, folded=True, platforms=frozenset({"cpu"}),
                      refusal="op-level tuning on {platform} is not built (CPU only; a GPU's "
                      "kernels are the kernels kind's)"),
    Kind.KERNELS: KindSpec(Kind.KERNELS, 8, ExhaustiveStrategy.name, _kernels_space,
                           _kernels_candidates, run=_run_kernels, platforms=AUTOTUNING_PLATFORMS,
                           refusal="kernel tuning on {platform}: XLA:{PLATFORM} does not autotune "
                           "its kernels, so it has no autotune results to tune (a GPU's only)"),
}


def make_target(kind: Kind, subject: Subject) -> TuneTarget:
    """The target of a task of `kind` tuning `subject` on this machine's platform (ValueError
    where the kind does not tune on it: `check_platform`). Measured per device, its module is
    the subject's per-device program (`execution.evaluate.per_device_program`), or where it has
    none, the subject's module with `unmeasurable` saying why."""
    platform = current_environment().platform
    check_platform(kind, platform)
    module, placement, unmeasurable = subject.module, subject.placement, None
    if placement.mode is MeasureMode.PER_DEVICE:
        assert placement.partitioning is not None
        try:
            module = per_device_program(module, placement.partitioning)
        except PerDeviceError as exc:
            unmeasurable = f"no per-device program: {exc}"
    return TuneTarget(module, subject.fingerprint, kind, KINDS[kind].space(subject, platform),
                      subject.label, placement=placement, unmeasurable=unmeasurable)
