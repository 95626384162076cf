"""How a tuning task ended (`TuneResult`), and the opt-in config that relaxes numerics beside
it (`RelaxedOption`), with the JSON form a task's `result.json` holds (`tuner.persist`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from execution.flags import CompilerConfig, trusted_config
from execution.numerics import OutputCheck
from tuner.search import PhaseSpend
from tuner.space import config_key
from tuner.trial import Trial
from vocabulary.interval import Interval, as_flat, columns, from_columns, from_flat
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind, Origin, Phase, StopReason, Verdict


@dataclass(frozen=True)
class RelaxedOption:
    """A config that relaxes numerics (`execution.flags.relaxes_numerics`), verified a
    significant gain with numerics ok, and a larger one than the task's strict config where that
    was accepted: what a job that opts in to relaxed numerics would gain. Its verification's
    speedup over the default, as a result's."""

    config: CompilerConfig
    speedup: Interval


@dataclass
class TuneResult:
    """How a task ended: `speedup`, the verification's over the default (None: nothing
    verified to a figure)."""

    task_id: str
    fingerprint: str
    env_key: str
    status: Verdict  # why it ended so: `reason` says more
    config: CompilerConfig
    speedup: Interval | None
    numerics_ok: bool | None
    evaluations: int  # configs timed or failed, in every phase (the sum over `phases`)
    measured: int  # those timed to a result, in every phase (the sum over `phases`)
    strategy: str
    compiler_version: str
    kind: Kind = Kind.GRAPH
    sources: list[str] = field(default_factory=list)  # a folded result's op tasks
    trials: list[Trial] = field(default_factory=list)
    reason: str = ""  # the status's details, for people: what failed, or the figures that decided
    # NUMERICS_DIFFER: the outputs that failed (by how much, against what tolerance), on the
    # first set of inputs that failed in the verification; empty otherwise.
    numerics: list[OutputCheck] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # each verification worker's
    # What each phase spent, search first, verify last (none in a result of a task landed
    # before phases were told).
    phases: list[PhaseSpend] = field(default_factory=list)
    # Seconds into the task when the config verified was found: the first trial that ran its
    # program (`tuner.search.seconds_to_find`). None: no config to verify.
    seconds_to_best: float | None = None
    # The opt-in config that relaxes numerics, where the best config found did and it held up
    # in its verification (`RelaxedOption`); None otherwise. `config` relaxes nothing.
    relaxed: RelaxedOption | None = None
    # A kernels task's (`tuner.kernels`): the autotune results it delivered with `config`, an
    # xla.AutotuneResults in XLA's text format; None for every other task.
    autotune_results: str | None = None
    # Why its search ended (`vocabulary.tuning.StopReason`); None where no search ran (a default that
    # fails, a kernels task) or in a result landed before it was told.
    search_stop: StopReason | None = None
    # A nightly stage's task: its share of the stage's budget and why (`tuner.allot`); None
    # for a task given its own budget.
    budget_share: float | None = None
    budget_reason: str | None = None
    # How the graph was measured (execution.sharded): whole, or its per-device program.
    measure_mode: MeasureMode = MeasureMode.WHOLE
    # Where its config came from (`vocabulary.tuning.Origin`): the task's own search, a transfer
    # check of its siblings' configs, or another key's task measured alike; and the graph key
    # ("<fingerprint>/<env_key>") the config was verified for first, where it came from one
    # (a transferred config that won; None: the search's own, or nothing beat the default).
    origin: Origin = Origin.SEARCH
    transferred_from: str | None = None

    @property
    def accepted(self) -> bool:
        """Whether its config is delivered: the verdict is ACCEPTED."""
        return self.status == Verdict.ACCEPTED

    @property
    def seconds(self) -> float | None:
        """The task's seconds in all: the sum of its phases' (None where they were not told)."""
        return sum(p.seconds for p in self.phases) if self.phases else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (without the trials): `accepted` beside `status`, `seconds` (in
        all) beside `phases`; each speedup as `speedup`, `ci_low`, `ci_high`, the opt-in's
        within `relaxed`."""
        data = as_flat(self)
        data.pop("trials")
        data.update(config=json.loads(config_key(self.config)), accepted=self.accepted,
                    seconds=self.seconds)
        if self.relaxed is not None:
            data["relaxed"] = {"config": json.loads(config_key(self.relaxed.config)),
                               **columns(self.relaxed.speedup)}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneResult:
        """A result as `to_json` wrote it with its trials beside (`tuner.persist.save_result`),
        or as a version before a field was added: every field as written, the config, status,
        trials, phases and opt-in decoded. A result written before the status was a `Verdict`
        ("default fails: <reason>", with `accepted` and `failure` beside it) reads as its verdict
        and reason."""
        written = {k: v for k, v in from_flat(data).items()
                   if k not in ("accepted", "failure", "seconds")}
        if "reason" in data:
            status, reason = Verdict(data["status"]), data["reason"]
        else:
            status, reason = Verdict.parse(data["status"])
        return cls(**{**written, "config": trusted_config(data["config"]),
                      "status": status, "reason": reason,
                      "numerics": [OutputCheck(**check) for check in data.get("numerics", [])],
                      "kind": Kind(data.get("kind", Kind.GRAPH)),
                      "search_stop": (StopReason(data["search_stop"])
                                      if data.get("search_stop") is not None else None),
                      "measure_mode": MeasureMode(data.get("measure_mode", MeasureMode.WHOLE)),
                      "origin": Origin(data.get("origin") or Origin.SEARCH),
                      "relaxed": _relaxed_from_json(data.get("relaxed")),
                      "trials": [Trial.from_json(t) for t in data.get("trials", [])],
                      "phases": [PhaseSpend(**{**p, "phase": Phase(p["phase"])})
                                 for p in data.get("phases", [])]})


def _relaxed_from_json(data: dict[str, Any] | None) -> RelaxedOption | None:
    """The opt-in as `TuneResult.to_json` wrote it (None: there was none)."""
    if data is None:
        return None
    speedup = from_columns(data)
    if speedup is None:
        raise ValueError(f"a result's relaxed option {data!r} has no speedup")
    return RelaxedOption(trusted_config(data["config"]), speedup)
