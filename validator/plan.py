"""A validation run's plan: which entries to decide without measuring, which to measure, and
in which order (the rules: validator.rules; the signals: validator.signals).

Per live entry, first match wins: expired; reported failing in the fleet (fallbacks since it was
last measured); regressed in the fleet (its realized interval wholly below 1); not measurable
here (an op-level config, no symbols, an unknown environment, another machine, autotune results
for a platform whose XLA autotunes nothing, or that do not parse): 'unmeasured';
on the toolchain's compiler and measured recently: skipped, unless the fleet flagged it (its
realized speedup far short of the expected one); on another compiler but re-keyed or decided
for this one already: skipped; else measured, most fleet hits first, then least recently
measured. Every decision carries the fleet's figures of its entry where there are some.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from execution.autotune.results import AutotuneResults, ResultsError, autotunes, parse_results
from execution.evaluate import EvaluationResult
from execution.sharded import Placement, choose_placement, whole_capacity
from hlo.environment import Environment, Partitioning, machine_kind, store_key
from ingest.tables import GRAPHS, partitioning_of
from storage.blobs import BlobStore
from storage.home import Home
from storage.store_reader import StoreReader
from storage.store_schema import StoreEntry
from storage.warehouse import Warehouse
from validator import rules
from validator.rules import Decision, ResultsCheck
from validator.signals import FLEET_WINDOW, History, fallbacks, fleet_hits, fleet_realized
from validator.toolchains import Registry, Toolchain
from vocabulary.decisions import DecisionOutcome, StoreChange
from vocabulary.tuning import Kind

_ENV_FIELDS = ("platform", "device_kind", "device_count", "compiler_version")


class EnvFields(NamedTuple):
    """What the warehouse records of an environment (not the job's own compile options): the
    machine, the compiler, and how the job partitioned the graph (None: one device of one
    process)."""

    platform: str
    device_kind: str
    device_count: int
    compiler_version: str
    partitioning: Partitioning | None = None

    @classmethod
    def of(cls, env: Environment) -> EnvFields:
        """The fields of `env` the warehouse records."""
        return cls(env.platform, env.device_kind, env.device_count, env.compiler_version, env.partitioning)

    def environment(self) -> Environment:
        """The environment of these fields, with no job options."""
        return Environment(self.platform, self.device_kind, self.device_count, self.compiler_version,
                           partitioning=self.partitioning)


@dataclass
class Queued:
    """An entry to measure, and what its decision will carry. `results`: the entry's autotune
    results, checked (`parse_results`): they travel with it to the machine that measures."""

    entry: StoreEntry
    base: dict[str, Any]
    blob: str
    same_compiler: bool
    new_key: str | None
    new_env_key: str | None
    origin: datetime.datetime
    priority: tuple
    flagged: str | None = None  # why the fleet flagged it, leading each decision's reason
    results: AutotuneResults | None = None
    # How its graph is measured (execution.sharded), and for a sharded one, the machine kind
    # that measures it (tasks.resources.machine_kind; None: a node of its environment).
    placement: Placement = Placement()
    machine: str | None = None

    @property
    def invalidates(self) -> StoreChange:
        """How invalidating it changes the store: removed on its own compiler; on another, the
        measurement says nothing of the entry's own compiler, so it stays."""
        return StoreChange.REMOVE if self.same_compiler else StoreChange.NONE

    def decide(self, outcome: DecisionOutcome, reason: str, change: StoreChange, now: datetime.datetime,
               ttl: datetime.timedelta, max_age: datetime.timedelta,
               result: EvaluationResult | None = None,
               check: ResultsCheck | None = None) -> Decision:
        """The decision on this entry at `now`: the measured figures when there are some, a
        fresh expiry when kept or re-keyed, the new key when re-keyed, what XLA did with its
        autotune results (`check`) and the results a kept or re-keyed entry carries on."""
        extra: dict[str, Any] = {}
        if result is not None and result.speedup is not None:
            extra = {"speedup": result.speedup, "numerics_ok": result.numerics_ok}
        if outcome.renewed:
            extra["expires_at"] = rules.expiry(now, self.origin, ttl, max_age).isoformat()
        if outcome == DecisionOutcome.REKEYED:
            extra.update(new_key=self.new_key, new_env_key=self.new_env_key)
        if check is not None:
            extra["autotune_fate"] = check.fate
            if outcome.renewed:
                extra["autotune_results"] = check.results.to_text()
        if self.flagged:
            reason = f"{self.flagged}; {reason}"
        return Decision(**{**self.base, "decided_at": now.isoformat()}, outcome=outcome,
                        reason=reason, change=change, measure_mode=self.placement.mode, **extra)

    def measured(self, result: EvaluationResult | None, compiler_version: str, noise_band: float,
                 now: datetime.datetime, ttl: datetime.timedelta, max_age: datetime.timedelta,
                 check: ResultsCheck | None = None) -> Decision:
        """The decision from a completed measurement (no harness error) under `compiler_version`,
        and for an entry with autotune results, from what XLA did with them (`check`; `result`
        None: they were not taken, nothing was measured). Re-keyed on the entry's own compiler
        (its results relabelled) refreshes the entry; on another, adds one under the new key."""
        if check is not None:
            outcome, reason = rules.results_outcome(check, result, self.same_compiler,
                                                    compiler_version, noise_band)
        elif result is not None:
            outcome, reason = rules.measured_outcome(result, self.same_compiler, compiler_version, noise_band)
        else:
            raise ValueError(f"entry {self.entry.key}: nothing measured and no autotune results to decide on")
        rekeyed = StoreChange.REFRESH if self.same_compiler else StoreChange.ADD
        change = {DecisionOutcome.KEPT: StoreChange.REFRESH,
                  DecisionOutcome.REKEYED: rekeyed}.get(outcome, self.invalidates)
        return self.decide(outcome, reason, change, now, ttl, max_age, result, check)


class Planner:
    """Everything a run knows before measuring: the live entries and what the warehouse says."""

    def __init__(self, home: Home, chain: Toolchain, now: datetime.datetime,
                 max_age: datetime.timedelta, revalidate_after: datetime.timedelta,
                 fleet_window: datetime.timedelta = FLEET_WINDOW) -> None:
        self.home, self.chain, self.now = home, chain, now
        self.max_age, self.revalidate_after = max_age, revalidate_after
        self.here = chain.env()
        self.entries = StoreReader(home).records()
        graphs = Warehouse(home).read(GRAPHS, columns=["fingerprint", "env_key", "hlo_blob", *_ENV_FIELDS,
                                                       "partitioning"])
        # The HLO is the same in every environment (its blob is named by the fingerprint); an
        # environment is known from any graph seen in it, or from a toolchain (re-keyed entries).
        self.blobs = dict(zip(graphs.column("fingerprint").to_pylist(), graphs.column("hlo_blob").to_pylist()))
        self.envs = {row["env_key"]: EnvFields(row["platform"], row["device_kind"], row["device_count"],
                                               row["compiler_version"], partitioning_of(row["partitioning"]))
                     for row in graphs.select(["env_key", *_ENV_FIELDS, "partitioning"]).to_pylist()}
        for known in [*Registry(home).list(), chain]:
            env = known.env()
            self.envs[env.key()] = EnvFields.of(env)
        self.hits = fleet_hits(home, now)
        self.fallbacks = fallbacks(home)
        self.history = History(home)
        self.fleet = fleet_realized(home, now, {e.key: self.history.origin(e) for e in self.entries},
                                    fleet_window)

    def plan(self, decided: set[str]) -> tuple[list[Decision], list[Queued], int]:
        """(decisions made without measuring, entries to measure by priority, entries skipped)."""
        free: list[Decision] = []
        queue: list[Queued] = []
        skipped = 0
        live_keys = {e.key for e in self.entries}
        for entry in self.entries:
            if entry.key in decided:
                continue
            origin = self.history.origin(entry)
            fleet = self.fleet.get(entry.key)
            base = {**self._base(entry, origin), **rules.fleet_figures(fleet)}
            expired = rules.expired_reason(entry, origin, self.now, self.max_age)
            if expired:
                free.append(Decision(**base, outcome=DecisionOutcome.EXPIRED, reason=expired,
                                     change=StoreChange.REMOVE))
                continue
            failed = [f for f in self.fallbacks.get(entry.key, [])
                      if f.at > rules.measured_at(entry) and rules.config_matches(f.config, entry.config)]
            if failed:
                reason = (f"the fleet's compile with it failed {len(failed)} time(s) since it was "
                          f"last measured (fell back to the defaults): {failed[-1].reason}")
                free.append(Decision(**base, outcome=DecisionOutcome.INVALIDATED, reason=reason,
                                     change=StoreChange.REMOVE))
                continue
            if fleet is not None and fleet.regressed:
                free.append(Decision(**base, outcome=DecisionOutcome.INVALIDATED, change=StoreChange.REMOVE,
                                     reason=f"regressed in the fleet: {rules.fleet_summary(fleet)}"))
                continue
            flagged = None
            if fleet is not None and rules.short_of_expected(fleet):
                flagged = ("flagged in the fleet, far short of its expected gain: "
                           + rules.fleet_summary(fleet))
            queued = self._queued(entry, base, origin, live_keys, flagged)
            if isinstance(queued, str):
                known = self.history.decided(entry.key, DecisionOutcome.UNMEASURED, self.chain.compiler_version,
                                             rules.measured_at(entry), queued)
                free.append(Decision(**base, outcome=DecisionOutcome.UNMEASURED, reason=queued, change=StoreChange.NONE,
                                     audited=not known))
            elif queued is None:
                skipped += 1
            else:
                queue.append(queued)
        return free, sorted(queue, key=lambda q: q.priority), skipped

    def _queued(self, entry: StoreEntry, base: dict[str, Any], origin: datetime.datetime,
                live_keys: set[str], flagged: str | None) -> Queued | str | None:
        """What to measure for `entry`; a reason why it cannot be measured; None: nothing to do.
        An entry the fleet `flagged` is measured on its own compiler however recently it was."""
        if entry.kind != Kind.GRAPH:
            return "op-level configs cannot be re-measured yet"
        blob = self.blobs.get(entry.fingerprint)
        if blob is None:
            return "no symbols: its graph is not in the warehouse"
        if not BlobStore(self.home).exists(blob):
            return f"its HLO blob {blob} is missing"
        env = self.envs.get(entry.env_key)
        if env is None:
            return "its environment is unknown here: no graph seen in it, no toolchain runs it"
        # A sharded graph is measured on any machine of its kind, whole or per device
        # (execution.sharded); any other only where the toolchain's devices are its own.
        sharded = env.partitioning is not None
        if (env[:2] != (self.here.platform, self.here.device_kind)
                or (not sharded and env.device_count != self.here.device_count)):
            return (f"measured for {env.platform} {env.device_kind} x{env.device_count}; toolchain "
                    f"{self.chain.name} runs on {self.here.platform} {self.here.device_kind} "
                    f"x{self.here.device_count}")
        placement = choose_placement(env.partitioning, whole_capacity(env.platform))
        machine = (machine_kind(env.platform, env.device_kind, self.chain.compiler_version)
                   if sharded else None)
        results = None
        if entry.autotune_results is not None:
            if not autotunes(env.platform):
                return (f"its autotune results cannot be re-checked on {env.platform}: XLA "
                        "autotunes nothing there")
            try:
                results = parse_results(entry.autotune_results)
            except ResultsError as exc:
                return f"its autotune results do not parse here: {exc}"
        measured_at = rules.measured_at(entry)
        priority = (-self.hits.get(entry.key, 0), measured_at, entry.key)
        if env.compiler_version == self.chain.compiler_version:
            if self.now - measured_at < self.revalidate_after and not flagged:
                return None
            return Queued(entry, base, blob, True, None, None, origin, priority, flagged, results,
                          placement, machine)
        if env.environment().key() != entry.env_key:
            return "its environment has job options the warehouse does not record: cannot re-key it"
        # Re-keyed to this compiler; a sharded one in its own devices and partitioning.
        new_env_key = (replace(env.environment(), compiler_version=self.here.compiler_version).key()
                       if sharded else self.here.key())
        new_key = store_key(entry.fingerprint, new_env_key)
        if new_key in live_keys or any(
                self.history.decided(entry.key, outcome, self.chain.compiler_version, measured_at)
                for outcome in (DecisionOutcome.REKEYED, DecisionOutcome.INVALIDATED)):
            return None
        return Queued(entry, base, blob, False, new_key, new_env_key, origin, priority,
                      results=results, placement=placement, machine=machine)

    def _base(self, entry: StoreEntry, origin: datetime.datetime) -> dict[str, Any]:
        measured_at = rules.measured_at(entry)
        return {"key": entry.key, "fingerprint": entry.fingerprint, "env_key": entry.env_key,
                "kind": entry.kind, "config": entry.config, "source": entry.source,
                "relaxed_config": entry.relaxed_config,
                "config_origin": entry.origin, "transferred_from": entry.transferred_from,
                "toolchain": self.chain.name, "compiler_version": self.chain.compiler_version,
                "fleet_hits": self.hits.get(entry.key, 0),
                "age_days": (self.now - measured_at).total_seconds() / 86400,
                "decided_at": self.now.isoformat(), "origin_at": origin.isoformat(),
                "entry_measured_at": measured_at.isoformat(),
                "entry_expires_at": rules.expires_at(entry).isoformat()}
