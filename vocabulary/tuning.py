"""What a tuning task tunes (`Kind`), how its search went (each trial's `TrialOutcome`, the
`Phase` it spends its time on, why its search stopped: `StopReason`), how it ended (`Verdict`),
where its config came from (`Origin`), and what the loop has decided for a key (`KeyDecision`):
the closed sets the tuner, the task records, delivery, the pipelines and the tuner's tables
share."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class Kind(ClosedSet):
    """What a tuning task tunes, and so which space it searches: a whole graph's flags
    (`tuner.space.graph_space`), one kernel cut out of it (`op_space`), or a GPU graph's kernel
    configs, XLA's own autotune results (`tuner.kernels`: no space, XLA's autotuner searches).
    Its value is the `kind` column of the tuning results (and of the candidates, for graphs and
    ops); each kind's facts are registered in `tuner.kinds`."""

    GRAPH = "graph"
    OP = "op"
    KERNELS = "kernels"


class Verdict(ClosedSet):
    """How a tuning task ended (`tuner.result.TuneResult.status`; its `reason` says more).
    ACCEPTED: the verification showed a significant gain with numerics ok. NO_GAIN: nothing
    beat the default, or the verification showed no significant gain. NUMERICS_DIFFER: the
    verified config's outputs differ from the default's beyond what the check allows, on most of
    the inputs checked (`TuneResult.numerics` names the outputs), whatever its speed.
    VERIFICATION_FAILED: the verification could not measure the config (it failed to compile or
    run, or its worker died). DEFAULT_FAILS: the default config does not compile or run the
    module, so there is nothing to measure against."""

    ACCEPTED = "accepted"
    NO_GAIN = "no significant gain"
    NUMERICS_DIFFER = "numerics differ"
    VERIFICATION_FAILED = "verification failed"
    DEFAULT_FAILS = "default fails"

    @classmethod
    def parse(cls, status: str) -> tuple["Verdict", str]:
        """(verdict, reason) of a status as results wrote it before it was an enum: the verdict,
        or the verdict, a colon and the reason ("default fails: <reason>")."""
        for verdict in cls:
            if status == verdict or status.startswith(f"{verdict}: "):
                return verdict, status[len(verdict) + 2:]
        raise ValueError(f"status {status!r}: not one of {', '.join(map(repr, cls))}")


class Origin(ClosedSet):
    """Where a tuning result's config came from (`tuner.result.TuneResult.origin`, and the
    `origin` of tuning_results and of the store's entries). SEARCH: the task's own search, which
    transferred configs may have seeded (`transferred_from` then names the key whose config it
    verified, where one of them won). TRANSFER: a transfer check (`tuner.transfer`): only
    configs verified for the graph's siblings, or that won broadly on its platform, were tried,
    and the best judged by the task's own verification (fresh workers, the same statistics and
    numerics rule); `transferred_from` names the key it came from. SHARED: another key's very
    task (`transferred_from`), whose program the tuner compiles and measures identically: the
    same graph, platform, device kind and partitioning; the keys differ only in what the tuner
    does not run (the compiler release their jobs ran)."""

    SEARCH = "search"
    TRANSFER = "transfer"
    SHARED = "shared"


class KeyDecision(ClosedSet):
    """What the loop has decided for a graph key (`tuner.decided`): FASTER, a verified config
    faster than the defaults is live in the store; DEFAULTS, the defaults were verified best (a
    search, or the very measurement of a key measured alike, found nothing that holds up)."""

    FASTER = "faster"
    DEFAULTS = "defaults"


class TrialOutcome(ClosedSet):
    """How a trial's config fared (`tuner.search`): timed to a result (MEASURED); compiled to
    a program measured before in the search (DUPLICATE) or to the default's (IDENTICAL), so not
    timed; or it failed to compile or run (FAILED, the trial's `error` says why). The `outcome`
    of the `trials` table (`tuner.tables.TRIALS`)."""

    MEASURED = "measured"
    DUPLICATE = "duplicate"
    IDENTICAL = "identical"
    FAILED = "failed"


# Outcomes of a config whose program the search knew already: compiled, not timed.
UNTIMED = (TrialOutcome.IDENTICAL, TrialOutcome.DUPLICATE)


class Phase(ClosedSet):
    """What a task spends its time on, in this order: the search proper (`tuner.search`), the
    finalists' race (a finalist against the best so far) and the winner's pruning (the winner
    without one change, against the winner; both `tuner.winner`), and the winner's verification
    in fresh workers (`tuner.tune`: it makes no trial)."""

    SEARCH = "search"
    RACE = "race"
    PRUNE = "prune"
    VERIFY = "verify"


class StopReason(ClosedSet):
    """Why a task's search phase ended (`tuner.search.search`): its evaluations (or its trials,
    free ones included) were spent (BUDGET); it had stalled, by the rule of docs/tuner.md
    (STALLED: `tuner.search.Stall`); its minutes were spent (TIME: `--budget-minutes`, or a
    nightly stage's deadline); or its strategy had nothing left to propose (EXHAUSTED: a fixed
    list's end, a space tried whole)."""

    BUDGET = "budget"
    STALLED = "stalled"
    TIME = "time"
    EXHAUSTED = "exhausted"
