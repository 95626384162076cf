"""The decision for one compile, taken by this process (steps 1 and 2 of delivery.hook).

`Decider.identify` names the module: its graph fingerprint (delivery.fingerprint_memo), the
compile's environment (the process's, plus the compiler options the job set for this compile
and how it partitions the module) and the store key of the two. `Decider.plan` looks the key up
(delivery.lookup) and `Decider.decide` takes what it found: the entry's relaxed-numerics config
where it has one and the job takes it (`HookSettings.takes_relaxed`), else its strict one,
checked against the allowlist and each flag's declared domain; its XLA:GPU autotune results,
checked as XLA's own protos (a refused one refuses the entry); then the arm: with the share of
`HookSettings.holdout_share`, `ingest.hits.holdout_arm` of (job id, key) sends the job's
compiles of this key to the holdout arm, which compiles with the job's own options and records
outcome 'holdout' with the entry's (strict) speedup. A store that has published nothing is
outcome 'no store'; one that cannot answer, and any failure of the hook's own, 'error': the
job compiles with its own options, and the plan never raises.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable

from delivery.compile_plan import Plan
from delivery.fingerprint_memo import FingerprintMemo
from delivery.hook_log import HookLog
from delivery.hook_settings import HookSettings
from delivery.jax_objects import mesh, module_name
from delivery.lookup import ConfigSource, NoStore, StoreUnavailable
from delivery.symbol_spool import SymbolSpool
from execution.autotune.results import ResultsError, parse_results
from execution.compile import job_build_options, job_partitioning
from execution.flags import FlagError, checked_config
from hlo.environment import Environment, current_environment, store_key
from hlo.module import from_stablehlo
from ingest.hits import holdout_arm
from vocabulary.errors import first_line
from vocabulary.hits import HitOutcome


class Decider:
    """Takes the decision for a compile this process decides itself."""

    def __init__(self, settings: HookSettings, source: ConfigSource, memo: FingerprintMemo,
                 symbols: SymbolSpool, log: HookLog, job_id: Callable[[], str]) -> None:
        self.settings = settings
        self.source = source
        self._memo = memo
        self._symbols = symbols
        self._log = log
        self._job_id = job_id  # the job's: read at the arm, as a multi-process job learns it late
        self._environment: Environment | None = None

    def plan(self, computation: Any, compile_options: Any) -> Plan:
        """The plan for this compile: the module named, looked up and decided; outcome 'error'
        where the hook itself fails (never an exception: the job's own compile goes on)."""
        try:
            return self._look_up(computation, compile_options)
        except Exception as exc:  # the hook's own failure must never fail the job's compile
            reason = f"hook could not look up this module: {first_line(exc)}"
            self._log.warn(reason, "plan")
            return Plan(outcome=HitOutcome.ERROR, reason=reason)

    def identify(self, computation: Any, compile_options: Any) -> Plan:
        """A plan that names the module: its fingerprint, its environment and its store key."""
        plan = Plan(module_name=module_name(computation))
        plan.digest, plan.fingerprint, module = self._memo.fingerprint(computation)
        plan.environment = environment = self._environment_for(computation, compile_options)
        plan.env_key, plan.platform = environment.key(), environment.platform
        plan.key = store_key(plan.fingerprint, plan.env_key)
        if self.settings.spool_hlo and not self._symbols.spooled(plan):
            plan.unoptimized_text = (module or from_stablehlo(computation)).to_text()
        return plan

    def decide(self, plan: Plan) -> Plan:
        """`plan`, whose look-up found an entry, with the entry's config to apply (its relaxed
        one where it has one and the job takes it), or refused, or sent to the holdout arm."""
        assert plan.found is not None
        entry = plan.found.entry
        if entry.relaxed_config is not None and self.settings.takes_relaxed(plan.found):
            plan.config_text, plan.expected_speedup = entry.relaxed_config, entry.relaxed_speedup
        else:
            plan.config_text, plan.expected_speedup = entry.config, entry.speedup
        try:
            plan.config = checked_config(json.loads(plan.config_text))
        except (FlagError, json.JSONDecodeError, TypeError) as exc:
            plan.outcome, plan.reason = HitOutcome.REFUSED, f"config refused: {exc}"
            self._log.warn(f"entry {plan.key}: {plan.reason}", f"refused {plan.key}")
            return plan
        if entry.autotune_results is not None:
            try:
                plan.results = parse_results(entry.autotune_results)
            except ResultsError as exc:
                plan.config, plan.outcome, plan.reason = None, HitOutcome.REFUSED, f"entry refused: {exc}"
                self._log.warn(f"entry {plan.key}: {plan.reason}", f"refused {plan.key}")
                return plan
        if holdout_arm(self._job_id(), plan.key, self.settings.holdout_share(plan.found)):
            # The arm compares the defaults with the entry as it stands: its own speedup.
            plan.config, plan.results, plan.outcome = None, None, HitOutcome.HOLDOUT
            plan.expected_speedup = entry.speedup
        return plan

    def _look_up(self, computation: Any, compile_options: Any) -> Plan:
        plan = self.identify(computation, compile_options)
        try:
            plan.found = self.source.lookup(plan.key)
        except NoStore as exc:  # a fresh home: nothing is wrong, nothing is tuned yet
            plan.outcome, plan.reason = HitOutcome.NO_STORE, str(exc)
            self._log.warn(f"{exc}; compiling with the defaults", "store")
            return plan
        except StoreUnavailable as exc:
            plan.outcome, plan.reason = HitOutcome.ERROR, str(exc)
            self._log.warn(f"{exc}; compiling with the defaults", "store")
            return plan
        if plan.found is None:
            return plan
        return self.decide(plan)

    def _environment_for(self, computation: Any, compile_options: Any) -> Environment:
        """The process's environment, plus the compiler options the job set for this compile
        (its overrides, and the effort level it asked of XLA: `job_build_options`) and how it
        partitions the module across devices and processes (`job_partitioning`)."""
        if self._environment is None:
            self._environment = current_environment()
        partitioning = job_partitioning(compile_options, mesh(computation))
        job_options = {**{str(name): str(value) for name, value in compile_options.env_option_overrides},
                       **job_build_options(compile_options)}
        environment = self._environment.with_partitioning(partitioning)
        if not job_options:
            return environment
        # The machine and XLA_FLAGS do not change between compiles: only the compile's options.
        merged = {**self._environment.job_options, **job_options}
        return replace(environment, job_options=dict(sorted(merged.items())))
