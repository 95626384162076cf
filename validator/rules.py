"""The validator's decisions: the rules that make them, and how they change the store.

Rules (CATWILD 3.4), for an entry checked under a toolchain's compiler:
- expired: now is past its `expires_at`, or past its absolute lifetime (`max_age` since its
  config was first measured, however often it was re-validated): whatever it would measure.
- invalidated without measuring: the fleet reported fallbacks for it (the tuned compile failed
  and the hook compiled with the defaults) after it was last measured; or it regressed in the
  fleet: its realized speedup's interval (ranking.realized, holdout arm against tuned arm)
  lies wholly below 1. With the two-sided 99% interval the upper bound is one-sided at 99.5%:
  a config of no effect at all is removed so in nominally 0.5% of checks (docs/validator.md).
- flagged in the fleet: decided there, but its realized interval's upper end is under
  1 + (expected - 1) / 2 (it delivers less than half the promised gain): re-measured in this
  run even if it was measured recently, and decided by that measurement.
- measured on the entry's own compiler: invalidated if the candidate no longer compiles,
  crashes, compiles to the very program the defaults give (no gain left), fails the numeric
  check, or if the interval's upper end is under 1 + noise band (the data rule out a gain
  worth having; where one of the workers measured it faster, only once more workers agree:
  `settled`). Otherwise kept: speedup and interval replaced by the new measurement, expiry
  refreshed to min(now + ttl, origin + max_age). An inconclusive interval keeps the entry: it
  passed a strict verification once, and only evidence against it removes it.
- measured on another compiler (the entry's environment but for the compiler version):
  re-keyed only on the evidence the tuner demands of a new entry (the whole interval above
  1 + noise band, numerics ok): a new entry under the key of the new environment, with the
  same expiry rule; the old entry stays for the fleet's jobs on the old compiler until it
  expires. Anything less is 'invalidated' for the new compiler: no new key, and the old entry,
  which this measurement says nothing about, stays too.
- unmeasured: what cannot be measured here (an op-level config, no symbols, another machine,
  a graph that does not compile on this compiler, autotune results where XLA autotunes nothing)
  is left as it is until it expires.
- an entry carrying XLA:GPU autotune results (`results_outcome`) is compiled with them
  delivered first, and what XLA did with them decides before any timing (`ResultsCheck`): not
  every one taken, as stored nor relabelled as XLA keys its results now: invalidated (the
  fusions they were made for are not this compile's). Taken (or the file system cannot tell):
  the measurement decides as for any config. Taken only once relabelled (XLA's key version or
  device description changed) and measured as kept: re-keyed, the results carried as XLA keys
  them now, under the entry's own key on its own compiler, under the new environment's key on
  another (measured as re-keyed there).
- an entry's relaxed-numerics config (`relaxed_config`, for jobs that opted in), where its
  strict config was kept or re-keyed, is re-measured in the same run, the same way, and decided
  by the same rules (`relaxed_outcome`): kept (its speedup refreshed) or re-keyed (carried to
  the new entry), else invalidated: dropped from the entry, which keeps its strict config (a
  re-keyed entry goes without it). Where the strict config goes or is not measured, the relaxed
  one is not measured either.

A decision is applied to the store entries live at publish time (not a snapshot from the start
of a run), and only if the entry is still the one decided on; applying it twice changes nothing.
"""

from __future__ import annotations

import datetime
import enum
import json
from dataclasses import dataclass, fields, replace
from typing import Any

import pyarrow as pa

from execution.autotune.per_fusion_directory import AutotuneOutcome, Uptake
from execution.autotune.results import AutotuneResults, Keying
from execution.evaluate import EvaluationResult
from ranking.realized import Realized
from storage.store_schema import StoreEntry, entries_of, entries_table
from vocabulary.decisions import Applied, DecisionOutcome, StoreChange
from vocabulary.interval import Interval, as_flat, columns, from_flat
from vocabulary.measure import MeasureMode
from vocabulary.store import Provenance
from vocabulary.tuning import Kind, Origin

# What the audit row carries of the fleet's arms: Decision fields and columns alike.
_FLEET_ARMS = ("fleet_tuned_jobs", "fleet_tuned_runs", "fleet_holdout_jobs", "fleet_holdout_runs")
# The prefix of the fleet's speedup in the journal and the audit row: fleet_speedup,
# fleet_ci_low, fleet_ci_high.
_FLEET = "fleet_"
# Likewise of the relaxed-numerics config's speedup: relaxed_speedup, relaxed_ci_low, relaxed_ci_high.
_RELAXED = "relaxed_"


class ResultsFate(enum.StrEnum):
    """What XLA did with an entry's autotune results under a toolchain's compiler
    (`ResultsCheck.fate`). TAKEN: every result delivered was read, as stored. REKEYED: XLA keys
    its results otherwise now (another key version or device description), and relabelled so,
    every one was read. NOT_TAKEN: not every one was read, relabelled or not. UNKNOWN: the file
    system keeps no access times, so whether XLA read them cannot be told."""

    TAKEN = "taken"
    REKEYED = "rekeyed"
    NOT_TAKEN = "not taken"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ResultsCheck:
    """An entry's autotune results compiled with them delivered under a toolchain's compiler:
    the `uptake` of `results` as delivered last: the entry's own, or, where XLA's dump of that
    compile keyed its results otherwise (`rekeyed_from`: the entry's keying), the entry's
    relabelled as XLA keys them now (`AutotuneResults.for_device`)."""

    results: AutotuneResults
    uptake: Uptake
    rekeyed_from: Keying | None = None

    @property
    def fate(self) -> ResultsFate:
        """What XLA did with them (see ResultsFate)."""
        if self.uptake.taken is None:
            return ResultsFate.UNKNOWN
        if self.uptake.taken < self.uptake.delivered:
            return ResultsFate.NOT_TAKEN
        return ResultsFate.TAKEN if self.rekeyed_from is None else ResultsFate.REKEYED

    def describe(self) -> str:
        """One phrase for a decision's reason."""
        taken = "unknown how many (no access times here)" if self.uptake.taken is None else self.uptake.taken
        text = f"{taken} of its {self.uptake.delivered} autotune results taken"
        keyed = self.results.keying()
        if self.rekeyed_from is not None and keyed is not None:  # relabelled: some results, keyed anew
            text += f" relabelled from {self.rekeyed_from.describe()} to {keyed.describe()}, as XLA keys them now"
        return text


@dataclass
class Decision:
    """One entry's outcome in a validation run, as journaled and audited. `speedup`: as
    measured in this run (None: not measured); `fleet_speedup`: the entry's realized speedup
    in the fleet (`fleet_figures`; None: undecided there, or no runs of it)."""

    key: str
    fingerprint: str
    env_key: str
    kind: Kind  # the entry's
    config: str
    source: str | None
    outcome: DecisionOutcome
    reason: str
    change: StoreChange
    toolchain: str
    compiler_version: str  # the toolchain's
    fleet_hits: int
    age_days: float
    decided_at: str  # ISO 8601, UTC
    origin_at: str
    entry_measured_at: str  # what the entry looked like when decided: the guard when applying
    entry_expires_at: str
    new_key: str | None = None
    new_env_key: str | None = None
    expires_at: str | None = None  # refreshed expiry (kept, rekeyed)
    speedup: Interval | None = None
    numerics_ok: bool | None = None
    audited: bool = True  # False: an 'unmeasured' the audit trail already holds, not written again
    # The fleet's figures of the entry (`fleet_figures`), where it had runs of it.
    fleet_speedup: Interval | None = None
    fleet_tuned_jobs: int | None = None
    fleet_tuned_runs: int | None = None
    fleet_holdout_jobs: int | None = None
    fleet_holdout_runs: int | None = None
    # An entry with autotune results: what XLA did with them (None: it has none, or they were
    # not compiled), and the results a kept or re-keyed entry carries on (its own, or relabelled).
    autotune_fate: ResultsFate | None = None
    autotune_results: str | None = None
    measure_mode: MeasureMode = MeasureMode.WHOLE  # how its graph was measured (vocabulary.measure)
    # The entry's relaxed-numerics config (None: it has none), its outcome in this run
    # (`relaxed_outcome`; None: not measured) and its speedup as measured in this run.
    relaxed_config: str | None = None
    relaxed_outcome: DecisionOutcome | None = None
    relaxed_speedup: Interval | None = None
    # Where the entry's config came from (StoreEntry.origin, .transferred_from): a re-key keeps it.
    config_origin: Origin | None = None
    transferred_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The journal's form: every field, each speedup as flat keys (`speedup`, `ci_low`,
        `ci_high`; `fleet_speedup`, `fleet_ci_low`, `fleet_ci_high`; `relaxed_speedup`,
        `relaxed_ci_low`, `relaxed_ci_high`)."""
        return as_flat(self, "", _FLEET, _RELAXED)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Decision":
        """Back from the journal."""
        names = {f.name for f in fields(cls)}
        fate = data.get("autotune_fate")
        return cls(**{**{k: v for k, v in from_flat(data, "", _FLEET, _RELAXED).items() if k in names},
                      "kind": Kind(data["kind"]), "outcome": DecisionOutcome(data["outcome"]),
                      "change": StoreChange(data["change"]),
                      "relaxed_outcome": (DecisionOutcome(data["relaxed_outcome"])
                                          if data.get("relaxed_outcome") is not None else None),
                      "autotune_fate": ResultsFate(fate) if fate is not None else None,
                      "measure_mode": MeasureMode(data.get("measure_mode", MeasureMode.WHOLE)),
                      "config_origin": (Origin(data["config_origin"])
                                        if data.get("config_origin") is not None else None)})


def expiry(now: datetime.datetime, origin: datetime.datetime, ttl: datetime.timedelta,
           max_age: datetime.timedelta) -> datetime.datetime:
    """A re-validated entry's new expiry: a fresh ttl, never past its absolute lifetime."""
    return min(now + ttl, origin + max_age)


def measured_at(entry: StoreEntry) -> datetime.datetime:
    """When `entry` was last measured. Every writer of the store sets it (deliver, an import,
    the validator), and the validator needs it; ValueError naming the entry where it is null."""
    if entry.measured_at is None:
        raise ValueError(f"entry {entry.key}: no measured_at: the validator cannot tell its age")
    return entry.measured_at


def expires_at(entry: StoreEntry) -> datetime.datetime:
    """When `entry` expires. Every writer of the store sets it (deliver, an import, the
    validator), and the validator needs it; ValueError naming the entry where it is null."""
    if entry.expires_at is None:
        raise ValueError(f"entry {entry.key}: no expires_at: the validator cannot tell its expiry")
    return entry.expires_at


def expired_reason(entry: StoreEntry, origin: datetime.datetime, now: datetime.datetime,
                   max_age: datetime.timedelta) -> str | None:
    """Why `entry` is expired at `now`, or None if it is not."""
    if now >= expires_at(entry):
        return f"past its expiry ({expires_at(entry):%Y-%m-%d %H:%M} UTC)"
    if now >= origin + max_age:
        return (f"past its absolute lifetime of {max_age.days} days since first measured "
                f"({origin:%Y-%m-%d})")
    return None


def fleet_figures(realized: Realized | None) -> dict[str, Any]:
    """The Decision fields that record the fleet's figures of an entry; none without runs."""
    if realized is None:
        return {}
    return {"fleet_speedup": realized.speedup,
            "fleet_tuned_jobs": realized.tuned.jobs, "fleet_tuned_runs": realized.tuned.runs,
            "fleet_holdout_jobs": realized.holdout.jobs, "fleet_holdout_runs": realized.holdout.runs}


def short_of_expected(realized: Realized) -> bool:
    """Whether the fleet rules out half the promised gain: decided, and the interval's upper
    end under 1 + (expected - 1) / 2."""
    return (realized.speedup is not None
            and realized.speedup.high < 1.0 + (realized.expected_speedup - 1.0) / 2)


def fleet_summary(realized: Realized) -> str:
    """The fleet's figures of an entry, for a decision's reason."""
    figure = "undecided" if realized.speedup is None else realized.speedup.as_speedup()
    return (f"{figure} against {realized.expected_speedup:.3f}x expected "
            f"(v{realized.config_version}; "
            f"tuned {realized.tuned.jobs} jobs, {realized.tuned.runs} runs; "
            f"holdout {realized.holdout.jobs} jobs, {realized.holdout.runs} runs)")


def measured_outcome(result: EvaluationResult, same_compiler: bool, compiler_version: str,
                     noise_band: float) -> tuple[DecisionOutcome, str]:
    """(outcome, reason) of a completed measurement (no harness error) under `compiler_version`."""
    where = f"on {compiler_version}"
    if result.identical_program:
        return DecisionOutcome.INVALIDATED, f"compiles to the same program as the defaults {where}: no gain left"
    if not result.numerics_ok:
        return DecisionOutcome.INVALIDATED, f"numerics off {where}: {result.judged().describe()}"
    speedup = _timed(result)
    figure = speedup.as_speedup()
    if len(result.speedups) > 1:
        figure += (f", the median of {len(result.speedups)} workers "
                   f"({', '.join(f'{s:.3f}x' for s in result.speedups)})")
    if same_compiler:
        if speedup.high < 1.0 + noise_band:
            return DecisionOutcome.INVALIDATED, f"no longer faster {where}: {figure}"
        return DecisionOutcome.KEPT, f"still faster {where}: {figure}"
    if speedup.low > 1.0 + noise_band:
        return DecisionOutcome.REKEYED, f"faster {where} too: {figure}"
    return DecisionOutcome.INVALIDATED, f"not shown faster {where}: {figure}; not re-keyed"


def relaxed_outcome(result: EvaluationResult, same_compiler: bool, compiler_version: str,
                    noise_band: float) -> tuple[DecisionOutcome, str]:
    """(outcome, reason) of an entry's relaxed-numerics config, measured in the run that kept or
    re-keyed its strict config: as `measured_outcome` decides the strict one; a measurement
    that failed (the defaults ran for the strict one) invalidates it."""
    if result.error is not None:
        return DecisionOutcome.INVALIDATED, f"{result.error} on {compiler_version}"
    return measured_outcome(result, same_compiler, compiler_version, noise_band)


def with_relaxed(decision: Decision, outcome: DecisionOutcome, reason: str,
                 result: EvaluationResult | None = None) -> Decision:
    """`decision` (kept or re-keyed) with its relaxed-numerics config decided: `outcome`, why,
    and the figure `result` measured (None: not measured)."""
    said = "dropped: " if outcome is DecisionOutcome.INVALIDATED else ""
    speedup = result.speedup if result is not None and result.error is None else None
    return replace(decision, relaxed_outcome=outcome, relaxed_speedup=speedup,
                   reason=f"{decision.reason}; its relaxed-numerics config {said}{reason}")


def relabelled(results: AutotuneResults, outcome: AutotuneOutcome) -> AutotuneResults | None:
    """`results` relabelled as XLA keys its results now, where the compile they were delivered
    to (`outcome`) took not every one (or cannot tell) and XLA's dump of it keys its results
    otherwise (another key version or device description); None where relabelling cannot help."""
    keying = outcome.keying()
    taken = ResultsCheck(results, outcome.uptake).fate == ResultsFate.TAKEN
    if taken or keying is None or keying == results.keying():
        return None
    return results.for_device(keying.device, keying.version)


def results_outcome(check: ResultsCheck, result: EvaluationResult | None, same_compiler: bool,
                    compiler_version: str, noise_band: float) -> tuple[DecisionOutcome, str]:
    """(outcome, reason) of an entry with autotune results under `compiler_version`: what XLA
    did with them (`check`), then, unless that decides (NOT_TAKEN: nothing is measured, `result`
    may be None), the completed measurement of the graph compiled with them (`result`) as for
    any config (`measured_outcome`); a kept entry whose results were relabelled is re-keyed."""
    if check.fate == ResultsFate.NOT_TAKEN:
        return DecisionOutcome.INVALIDATED, (f"XLA does not take its autotune results on {compiler_version}: "
                               f"{check.describe()} (the fusions they were made for are not this "
                               "compile's)")
    if result is None:
        raise ValueError(f"no measurement to decide on: {check.describe()}")
    outcome, reason = measured_outcome(result, same_compiler, compiler_version, noise_band)
    if outcome == DecisionOutcome.KEPT and check.rekeyed_from is not None:
        outcome = DecisionOutcome.REKEYED
    return outcome, f"{reason}; {check.describe()}"


def settled(result: EvaluationResult, same_compiler: bool, noise_band: float) -> bool:
    """Whether the median of several workers' measurements decides an entry firmly: not when it
    would remove an entry that one of the workers measured faster than 1 + `noise_band` (now
    and then a process runs a library's kernels 20% slow: the median outvotes one such worker
    of three, not two, so more workers measure it; `ValidateSettings.most_workers`)."""
    if not same_compiler or result.identical_program or not result.numerics_ok:
        return True
    return _timed(result).high >= 1.0 + noise_band or max(result.speedups) <= 1.0 + noise_band


def apply(decisions: list[Decision], live: pa.Table) -> tuple[pa.Table, list[Applied]]:
    """The live entries with `decisions` applied, and how each went (`Applied`).

    A decision applies only to the entry it was made on (same config, measured and expiry
    times): one that deliver or an import replaced meanwhile is left alone (STALE). A decision
    already applied (a rerun after a kill) applies again as a no-op.
    """
    rows = {entry.key: entry for entry in entries_of(live)}
    status = [_apply_one(decision, rows) for decision in decisions]
    return entries_table(rows.values()), status


def _apply_one(decision: Decision, rows: dict[str, StoreEntry]) -> Applied:
    if decision.change == StoreChange.NONE:
        return Applied.IN_EFFECT
    if decision.change == StoreChange.ADD:
        wanted = new_entry(decision)
        present = rows.get(wanted.key)
        if present is None:
            rows[wanted.key] = wanted
            return Applied.IN_EFFECT
        return Applied.IN_EFFECT if present == wanted else Applied.STALE
    current = rows.get(decision.key)
    if decision.change == StoreChange.REMOVE:
        if current is None:
            return Applied.IN_EFFECT  # gone already: removed by this decision before a kill, or by another
        if not _decided_on(decision, current):
            return Applied.STALE
        del rows[decision.key]
        return Applied.IN_EFFECT
    if current is None:
        return Applied.STALE
    refreshed = refreshed_entry(decision, current)
    if current == refreshed:
        return Applied.IN_EFFECT
    if not _decided_on(decision, current):
        return Applied.STALE
    rows[decision.key] = refreshed
    return Applied.IN_EFFECT


def refreshed_entry(decision: Decision, entry: StoreEntry) -> StoreEntry:
    """A kept entry, or one re-keyed on its own compiler: re-measured now, by the validator,
    carrying the autotune results the decision names (relabelled ones), else its own."""
    speedup = _decided_speedup(decision)
    relaxed_config, relaxed_speedup = entry.relaxed_config, entry.relaxed_speedup  # not measured: as it was
    if decision.relaxed_outcome is DecisionOutcome.INVALIDATED:
        relaxed_config, relaxed_speedup = None, None
    elif decision.relaxed_outcome is not None:
        assert decision.relaxed_speedup is not None  # kept: measured
        relaxed_speedup = decision.relaxed_speedup.estimate
    return replace(entry, provenance=Provenance.VALIDATOR, speedup=speedup.estimate, ci_low=speedup.low,
                   ci_high=speedup.high, compiler_version=decision.compiler_version,
                   measured_at=_time(decision.decided_at), expires_at=_optional_time(decision.expires_at),
                   autotune_results=(entry.autotune_results if decision.autotune_results is None
                                     else decision.autotune_results),
                   relaxed_config=relaxed_config, relaxed_speedup=relaxed_speedup)


def new_entry(decision: Decision) -> StoreEntry:
    """A re-keyed entry: the same config (and autotune results, as the decision carries them)
    under the new environment's key; its relaxed-numerics config too where that was re-keyed."""
    assert decision.new_key is not None and decision.new_env_key is not None  # an ADD is a re-key
    relaxed = decision.relaxed_speedup if decision.relaxed_outcome is DecisionOutcome.REKEYED else None
    speedup = _decided_speedup(decision)
    return StoreEntry(key=decision.new_key, fingerprint=decision.fingerprint, env_key=decision.new_env_key,
                      kind=decision.kind, speedup=speedup.estimate, ci_low=speedup.low, ci_high=speedup.high,
                      expires_at=_optional_time(decision.expires_at),
                      provenance=Provenance.VALIDATOR, config=decision.config,
                      compiler_version=decision.compiler_version, measured_at=_time(decision.decided_at),
                      source=decision.source, autotune_results=decision.autotune_results,
                      relaxed_config=decision.relaxed_config if relaxed is not None else None,
                      relaxed_speedup=relaxed.estimate if relaxed is not None else None,
                      origin=decision.config_origin, transferred_from=decision.transferred_from)


def audit_row(decision: Decision, run_id: str, store_version: int | None, status: Applied) -> dict[str, Any]:
    """The `validations` row of a decision."""
    reason = decision.reason
    if status == Applied.STALE:
        reason += "; not applied: the entry changed meanwhile"
        store_version = None
    decided = _time(decision.decided_at)
    return {"dt": decided.date(), "run_id": run_id, "validated_at": decided, "key": decision.key,
            "fingerprint": decision.fingerprint, "env_key": decision.env_key, "kind": decision.kind,
            "outcome": decision.outcome, "reason": reason, "new_key": decision.new_key,
            "toolchain": decision.toolchain, "compiler_version": decision.compiler_version,
            **columns(decision.speedup), "numerics_ok": decision.numerics_ok,
            "fleet_hits": decision.fleet_hits,
            "age_days": decision.age_days, "store_version": store_version,
            "config": decision.config, "origin_at": _time(decision.origin_at),
            **columns(decision.fleet_speedup, prefix=_FLEET),
            **{name: getattr(decision, name) for name in _FLEET_ARMS},
            "autotune_fate": decision.autotune_fate, "measure_mode": decision.measure_mode,
            "relaxed_config": decision.relaxed_config, "relaxed_outcome": decision.relaxed_outcome,
            **columns(decision.relaxed_speedup, prefix=_RELAXED)}


def config_matches(recorded: str | None, config: str) -> bool:
    """Whether a config the hook recorded (JSON, maybe None) is the entry's `config`."""
    if recorded is None:
        return True  # the hook did not say: the fallback was on this key, so it counts
    try:
        return json.loads(recorded) == json.loads(config)
    except json.JSONDecodeError:
        return False


def _decided_on(decision: Decision, entry: StoreEntry) -> bool:
    # A decision on the relaxed config holds only for the one decided on.
    return (entry.config == decision.config
            and (decision.relaxed_outcome is None or entry.relaxed_config == decision.relaxed_config)
            and entry.measured_at == _time(decision.entry_measured_at)
            and entry.expires_at == _time(decision.entry_expires_at))


def _timed(result: EvaluationResult) -> Interval:
    """The speedup of a completed measurement, which one with no harness error always has."""
    if result.speedup is None:
        raise ValueError(f"a measurement that timed nothing has no outcome: {result.error}")
    return result.speedup


def _decided_speedup(decision: Decision) -> Interval:
    """The speedup a kept or re-keyed entry was measured at now, which such a decision carries."""
    if decision.speedup is None:
        raise ValueError(f"entry {decision.key}: {decision.outcome} with no speedup measured")
    return decision.speedup


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _optional_time(text: str | None) -> datetime.datetime | None:
    return None if text is None else _time(text)
