"""What a tuning task tunes (`Kind`) and how it ended (`Verdict`): the closed sets the tuner,
the task records, delivery, the pipelines and the tuning results share."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What a tuning task tunes, and so which space it searches: a whole graph's flags
    (`tuner.space.graph_space`), one kernel cut out of it (`op_space`), or a GPU graph's kernel
    configs, XLA's own autotune results (`tuner.kernels`: no space, XLA's autotuner searches).
    Its value is the `kind` column of the tuning results (and of the candidates, for graphs and
    ops); each kind's facts are registered in `tuner.kinds`."""

    GRAPH = "graph"
    OP = "op"
    KERNELS = "kernels"


class Verdict(StrEnum):
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



class Origin(StrEnum):
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


class KeyDecision(StrEnum):
    """What the loop has decided for a graph key (`tuner.decided`): FASTER, a verified config
    faster than the defaults is live in the store; DEFAULTS, the defaults were verified best (a
    search, or the very measurement of a key measured alike, found nothing that holds up)."""

    FASTER = "faster"
    DEFAULTS = "defaults"
