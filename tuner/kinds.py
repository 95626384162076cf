"""The registry of tuning kinds: each kind's facts in one `KindSpec`, looked up by `Kind`.

A kind says what a task tunes and how: its defaults (the search's budget and strategy), the
platforms it tunes on, how its target is made (the module compiled, the fingerprint its results
are keyed by, the space searched), whether the tuner searches it and where its candidates come
from. Every place that handles a kind reads it here: the tuner's entry points (`tuner.task`,
`tuner.tune`), the candidates, the fold, the stage calls and the CLI. A new kind is one more
`Kind` member (`vocabulary.tuning`) and one more entry of `KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from execution.autotune.results import AUTOTUNING_PLATFORMS
from execution.compile import compiler_defaults
from execution.evaluate import per_device_program
from execution.flags import CompilerConfig
from execution.per_device import PerDeviceError
from execution.sharded import MeasureMode, Placement
from hlo.environment import current_environment
from hlo.module import HloModule
from storage.home import Home
from tuner.space import SearchSpace, accepted_flags, graph_space, op_space
from tuner.strategies import EvolutionStrategy, ExhaustiveStrategy
from vocabulary.tuning import Kind

if TYPE_CHECKING:
    from tuner.candidates import Candidates

__all__ = ["Kind", "KindSpec", "KINDS", "TuneTarget", "check_platform", "make_target"]


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
class KindSpec:
    """Every fact of one tuning kind.

    `space(subject, platform)` is the space a task of the kind searches on `platform`, on the
    machine that measures (the accepted flags are that compiler's), one of `platforms` (None:
    any; elsewhere `check_platform` refuses, saying `refusal`). `searched`: a task is the
    tuner's search of that space (`tuner.tune.run_task`), or else XLA's own autotuner's
    (`tuner.kernels`; `tuner.task.tune` runs either). `candidates(home, top, untried,
    environments)` are the latest ranking's best candidates of the kind that this machine
    (None) or machines of those environment keys can measure (`tuner.candidates`)."""

    kind: Kind
    budget_evals: int  # the search's evaluations unless told otherwise
    strategy: str  # the search's last phase, a key of tuner.strategies.STRATEGIES
    space: Callable[[Subject, str], SearchSpace] = field(repr=False)
    candidates: Callable[[Home, int, bool, frozenset[str] | None], Candidates] = field(repr=False)
    searched: bool = True
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

    return Candidates(list(tunable_candidates(home, top, untried, environments)))


def _op_candidates(home: Home, top: int, untried: bool,
                   environments: frozenset[str] | None) -> Candidates:
    from tuner.candidates import tunable_op_candidates

    return tunable_op_candidates(home, top, untried, environments)


def _kernels_candidates(home: Home, top: int, untried: bool,
                        environments: frozenset[str] | None) -> Candidates:
    from tuner.candidates import Candidates, tunable_candidates

    return Candidates(list(tunable_candidates(home, top, untried, environments, Kind.KERNELS,
                                              AUTOTUNING_PLATFORMS)))


# A graph's search ends in evolution, within a budget; an op's space is small, so it is searched
# whole (up to the budget), in enumeration order. XLA:GPU's per-op channel is its autotune
# results, the kernels kind: an op is a CPU kernel. A kernels task searches nothing itself (XLA's
# autotuner does, exhaustively: "exhaustive" names it): its budget is how many of the costliest
# fusions' results it keeps, few, as a job's compile reads each.
KINDS: dict[Kind, KindSpec] = {
    Kind.GRAPH: KindSpec(Kind.GRAPH, 40, EvolutionStrategy.name, _graph_space, _graph_candidates),
    Kind.OP: KindSpec(Kind.OP, 200, ExhaustiveStrategy.name, _op_space, _op_candidates,
                      platforms=frozenset({"cpu"}),
                      refusal="op-level tuning on {platform} is not built (CPU only; a GPU's "
                      "kernels are the kernels kind's)"),
    Kind.KERNELS: KindSpec(Kind.KERNELS, 8, ExhaustiveStrategy.name, _kernels_space,
                           _kernels_candidates, searched=False, platforms=AUTOTUNING_PLATFORMS,
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
