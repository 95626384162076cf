"""The compiler hook: every `jax.jit` compile in the process looks up a tuned config for its module.

Enable it with one call at start-up (`delivery.hook.install()`), with `FDO_HOOK=1` in the
environment (JAX loads `delivery.jax_plugin` when it starts its backends), or by running the
program under `fdo run -- python prog.py`. Settings come from the arguments, else from the
`FDO_*` variables (delivery.hook_settings). The hook takes the place of JAX's compile function
(delivery.jax_patch). Per compile (`Hook.compile`), each step in a room of its own:
1. name the module: its graph fingerprint, exactly as symbol ingestion fingerprints a dump of it
   (remembered on disk: delivery.fingerprint_memo), keyed with the process's environment plus any
   compiler options the job set itself (delivery.compile_decision);
2. decide (delivery.compile_decision): look the key up (delivery.lookup), take the entry's strict
   or relaxed-numerics config, checked against the allowlist, and its autotune results, checked
   as XLA's own protos; then the arm: a job in the entry's holdout arm compiles with its own
   options, skips steps 3 to 5 and records outcome 'holdout'. A compile that spans the processes
   of a multi-process job is decided once, by its leader, for all of them (delivery.multiprocess);
3. has this machine compiled the module with the config in a sandboxed worker before
   (delivery.sandbox; once per entry and machine)? A config that aborts or hangs XLA there is
   refused, and the job compiles with its own options;
4. compile with the config applied to the job's compile options (execution.compile.apply_config):
   its flags added to the options' overrides, its backend extra options merged into the
   options' `xla_backend_extra_options` map, both for this executable only; a flag the job set
   itself stays the job's. JAX's persistent compilation cache keys on the serialized options,
   map included, so it can never hand back an executable built with other flags. An entry's
   XLA:GPU autotune results go to that compile alone (delivery.autotune_handoff);
5. if the tuned compile fails, compile again with the job's own options and record why;
6. record: the optimized module's fingerprint of a tuned or held-out executable (which is how a
   profile of the job finds the hit), the modules for symbol ingestion where asked
   (delivery.symbol_spool), and a hit (ingest.tables.Hit) appended to the process's spool
   (delivery.hit_spool): outcome, key, store version, expected speedup, the hook's own time.
Whatever goes wrong in the hook itself (store missing, corrupt, unreachable, slow; a module it
cannot fingerprint) ends in the job's own compile and a warning (delivery.hook_log), never in a
failed job.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from delivery import jax_patch, multiprocess
from delivery.autotune_handoff import AutotuneHandoff
from delivery.compile_decision import Decider
from delivery.compile_plan import Plan
from delivery.fingerprint_memo import MEMO_DIR, FingerprintMemo
from delivery.hit_spool import HitSpool, hit_of
from delivery.hook_log import HookLog
from delivery.hook_settings import HookSettings
from delivery.jax_objects import bytecode, device_count, module_name, optimized_text
from delivery.lookup import ConfigSource, EmbeddedStore, RemoteStore
from delivery.sandbox import CompileJob, SandboxCheck
from delivery.symbol_spool import SymbolSpool
from execution.compile import apply_config
from vocabulary.errors import first_line
from vocabulary.hits import HitOutcome

_installed: "Hook | None" = None
_install_lock = threading.Lock()


class Hook:
    """Looks up, applies and records tuned configs around JAX's compile function."""

    def __init__(self, settings: HookSettings) -> None:
        self.settings = settings
        self.source: ConfigSource = (RemoteStore(settings.url, settings.timeout) if settings.url
                                     else EmbeddedStore(settings.home, settings.version))
        self._own_job_id = settings.job_id or f"{socket.gethostname()}-{os.getpid()}"
        self.log = HookLog()
        self.memo = FingerprintMemo(settings.home / MEMO_DIR)
        self.sandbox = SandboxCheck(settings.home)
        self.symbols = SymbolSpool(settings.home, self.log)
        self.hits = HitSpool(settings.home, self.log)
        self.autotune = AutotuneHandoff(settings.home, self.log)
        self.decider = Decider(settings, self.source, self.memo, self.symbols, self.log, lambda: self.job_id)
        self.shared = multiprocess.SharedDecisions(self.decider, self.sandbox, self.log,
                                                   settings.decision_timeout, lambda: self.job_id)
        multiprocess.announce(self._own_job_id)  # process 0 says the job's id as early as it can

    @property
    def job_id(self) -> str:
        """The job's id: the settings', else host-pid; in a multi-process job, process 0's
        (delivery.multiprocess), for every process."""
        return multiprocess.job_id(self._own_job_id, self.settings.decision_timeout, self.log)

    def compile(self, original: Callable[..., Any], backend: Any, computation: Any, devices: Any,
                compile_options: Any, *args: Any, **kwargs: Any) -> Any:
        """Compile as JAX would, with the tuned config for this module when the store has one."""

        def compile_with(options: Any) -> Any:
            return original(backend, computation, devices, options, *args, **kwargs)

        started = time.perf_counter()
        plan = self._plan(computation, compile_options, devices)  # steps 1 and 2
        hook_seconds = time.perf_counter() - started
        executable = None
        if plan.config or plan.results is not None:  # steps 3 to 5
            executable = self._compile_tuned(plan, computation, devices, compile_options, compile_with)
        if executable is None:  # the job's own compile
            executable = compile_with(compile_options)
        compile_seconds = time.perf_counter() - started - hook_seconds
        if plan.fingerprint:  # step 6
            self._record(plan, executable, hook_seconds, compile_seconds)
        return executable

    def _plan(self, computation: Any, compile_options: Any, devices: Any) -> Plan:
        """The plan for this compile: this process's own, or, for a compile across processes
        (delivery.multiprocess), the one its leader decides for all of them."""
        try:
            shared = multiprocess.channel()
            slot = None if shared is None else shared.slot(module_name(computation), devices)
        except Exception as exc:  # every process of the compile fails alike: the defaults in all
            reason = f"hook could not place this compile in its job: {first_line(exc)}"
            self.log.warn(reason, "job")
            return Plan(outcome=HitOutcome.ERROR, reason=reason)
        if slot is None:
            return self.decider.plan(computation, compile_options)
        assert shared is not None
        if slot.leads:
            return self.shared.lead(shared, slot, computation, compile_options, devices)
        return self.shared.follow(shared, slot, computation, compile_options)

    def _compile_tuned(self, plan: Plan, computation: Any, devices: Any, compile_options: Any,
                       compile_with: Callable[[Any], Any]) -> Any:
        """Steps 3 to 5: the sandbox's verdict on `plan`'s config where no leader took it, then
        the compile with the config (and the entry's autotune results); None where the config
        is refused or its compile fails: the job's own compile follows."""
        assert plan.config is not None
        try:
            tuned = apply_config(compile_options, plan.config)
            # Results alone change no flag: nothing for the sandbox to check.
            refused = self.sandbox.verdict(plan.key, plan.config, lambda: CompileJob(
                bytecode(computation), tuned.SerializeAsString(), device_count(devices))
            ) if plan.config and not plan.checked else None
            if refused:
                plan.outcome, plan.reason = HitOutcome.REFUSED, refused
                self.log.warn(f"entry {plan.key}: {refused}", f"refused {plan.key}")
                return None
            executable = self.autotune.compile(plan, compile_with, tuned)
            plan.outcome = HitOutcome.APPLIED
            return executable
        except Exception as exc:  # any failure of the tuned compile: the job's own compile decides
            plan.outcome, plan.reason = HitOutcome.FALLBACK, f"tuned compile failed: {first_line(exc)}"
            self.log.warn(plan.reason, f"fallback {plan.key}")
            return None

    def _record(self, plan: Plan, executable: Any, hook_seconds: float, compile_seconds: float) -> None:
        """Step 6: the optimized module's fingerprint where an entry served the compile, the
        module spooled for symbol ingestion where asked, and the hit."""
        started = time.perf_counter()
        optimized_fingerprint = None
        if plan.outcome.served:
            optimized_fingerprint = self.memo.optimized(
                plan.digest, plan.env_key, plan.compiled_with if plan.outcome.ran_tuned else None, executable)
        if self.settings.spool_hlo and not self.symbols.spooled(plan):
            self.symbols.spool(plan, None if plan.outcome.ran_tuned else optimized_text(executable))
        hook_seconds += time.perf_counter() - started
        self.hits.append(hit_of(plan, self.job_id, optimized_fingerprint, hook_seconds, compile_seconds))


def install(home: Path | str | None = None, url: str | None = None, version: int | None = None,
            timeout: float | None = None, spool_hlo: bool | None = None,
            job_id: str | None = None, team: str | None = None, holdout: float | None = None,
            opt_out: bool | None = None, relaxed_numerics: bool | None = None,
            decision_timeout: float | None = None) -> Hook:
    """Route every JAX compile of this process through the hook; returns it. Each parameter is
    the HookSettings field of its name: those given (not None) replace the settings of the FDO_*
    environment variables. Installing again replaces the settings."""
    global _installed
    # Read first, while the parameters are the only locals: the settings given, by field name.
    settings = HookSettings.given(**locals())
    hook = Hook(settings)
    with _install_lock:
        jax_patch.route(hook.compile)
        _installed = hook
    return hook


def uninstall() -> None:
    """Give JAX its own compile function back."""
    global _installed
    with _install_lock:
        jax_patch.restore()
        _installed = None


def installed() -> Hook | None:
    """The installed hook, if any."""
    return _installed
