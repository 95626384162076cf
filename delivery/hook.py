"""The compiler hook: every `jax.jit` compile in the process looks up a tuned config for its module.

Enable it with one call at start-up (`delivery.hook.install()`), with `FDO_HOOK=1` in the
environment (JAX loads `delivery.jax_plugin` when it starts its backends), or by running the
program under `fdo run -- python prog.py`. Settings come from the arguments, else from
`FDO_HOME` (data root, default ~/.fdo), `FDO_STORE_URL` (ask the config service instead of
the embedded store), `FDO_STORE_VERSION` (pin an embedded version), `FDO_STORE_TIMEOUT`
(seconds), `FDO_SPOOL_HLO=1` (spool modules for symbol ingestion), `FDO_JOB_ID`, `FDO_TEAM`
(the job's team, which a store version may opt in to relaxed numerics), `FDO_HOLDOUT` (force
the holdout share, 0 to 1), `FDO_OPT_OUT=1` (no holdout arm for this job),
`FDO_RELAXED_NUMERICS=1` (take entries' relaxed-numerics configs) and `FDO_DECISION_TIMEOUT`
(seconds a process of a multi-process job waits for its job's decision, default 300).

JAX lowers a jitted function to StableHLO and hands it to `jax._src.compiler.
compile_or_get_cached`; the hook wraps that function. Per compile it:
1. fingerprints the module exactly as symbol ingestion fingerprints a dump of it, and keys it
   with the process's environment (plus any compiler options the job set itself);
2. looks the key up (delivery.lookup) and re-checks the entry's config against the allowlist
   and each flag's declared domain: its relaxed-numerics config (`relaxed_config`, expected
   speedup `relaxed_speedup`) where it has one and the job opted in, itself or by its team
   (`HookSettings.takes_relaxed`), else its strict one;
   then decides the arm: with the share of the settings' forced holdout, else none for a job
   that opted out, else the entry's (`Found.holdout_share`), `ingest.hits.holdout_arm` of
   (job id, key) sends the job's compiles of this key to the holdout arm, which compiles with
   the job's own options, skips steps 3 to 5 and records outcome 'holdout' with the entry's
   key, version, (strict) speedup and the default executable's optimized fingerprint (so the
   job's profile joins it: realized savings compare the two arms);
3. has this machine compiled the module with the config in a sandboxed worker before
   (delivery.sandbox; once per entry and machine)? A config that aborts or hangs XLA there is
   refused, and the job compiles with its own options;
4. compiles with the config applied to the job's compile options (execution.compile.apply_config):
   its flags added to the options' overrides, its backend extra options merged into the
   options' `xla_backend_extra_options` map, both for this executable only; a flag the job set
   itself stays the job's. JAX's persistent compilation cache keys on the serialized options,
   map included, so it can never hand back an executable built with other flags;
   an entry's XLA:GPU per-fusion autotune results (execution.autotune), checked as
   XLA's own protos in step 2 (a refused one refuses the entry), are written into a directory
   the hook creates for this compile alone under `$FDO_HOME/cache/autotune/` (never a path
   from the store), XLA is pointed at it for this executable only, and the directory is
   removed afterwards; the hit's reason says how many were delivered, how many XLA took and
   how many fusions it autotuned itself. With JAX's persistent compilation cache on (which
   also names a per-fusion directory of the job's own in the debug options), the directory is
   instead one per set of results (`results-<digest>` there, the same path in every compile,
   kept), it takes the job's directory's place for this compile alone, and the results' digest
   joins JAX's cache key for it (`CacheKeyed`): the next compile of the module with the same
   results is a cache hit (recorded "executable from JAX's persistent cache"), and the
   default's executable and other results' are keyed apart. Not on a platform that does not
   autotune (the CPU), nor to a compile whose own compile options name a per-fusion cache
   directory (the job chose it): the reason says so;
5. if the tuned compile fails, compiles again with the job's own options and records why;
6. appends a hit record to its spool (ingest.hits): outcome (a home that has published no
   store yet records 'no store'; a store that cannot answer, 'error'), key, store version, expected
   speedup, and for a tuned or held-out executable the fingerprint of its optimized module,
   which is how a profile of the job finds the hit.
Whatever goes wrong in the hook itself (store missing, corrupt, unreachable, slow; a module it
cannot fingerprint) ends in the job's own compile and a warning, never in a failed job.

A job of several processes (`jax.distributed`) takes one decision per compile that spans them
(delivery.job): its leader, the lowest of those processes, takes steps 2 and 3 for all of them
(the sandbox compiles the program whole once, on a worker's own devices: delivery.sandbox) and
shares the outcome through JAX's distributed key-value store; the others skip the look-up, the
arm and the check and compile what it decided, or the defaults where no decision comes within
`FDO_DECISION_TIMEOUT`. Every process keys, compiles and records (step 6) on its own, under
the job's one id: process 0's. A compile on one process's own devices is decided there, and a
single-process job never waits for anything.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from delivery import job
from delivery.lookup import ConfigSource, EmbeddedStore, Found, NoStore, RemoteStore, StoreUnavailable
from delivery.sandbox import CompileJob, SandboxCheck
from execution.autotune.delivery import Delivery, job_cache_dir, job_sets_cache_dir
from execution.autotune.jax_cache import CacheKeyed, persistent_cache_on
from execution.autotune.results import AutotuneResults, ResultsError, autotunes, parse_results
from execution.compile import apply_config, job_build_options, job_partitioning
from execution.flags import CompilerConfig, FlagError, checked_config
from hlo.environment import ENVIRONMENT_FILE, Environment, current_environment, parse_mesh, store_key
from hlo.fingerprint import DOMAIN as FINGERPRINT_DOMAIN
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule, from_proto_bytes, from_stablehlo
from ingest.hits import holdout_arm, spool_path, to_line
from storage.homes import atomic_write, open_home
from vocabulary.errors import first_line
from vocabulary.hits import HitOutcome

log = logging.getLogger("fleet_fdo.hook")
SPOOL_SYMBOLS = Path("spool") / "symbols"
_HEX = set("0123456789abcdef")
MEMO_DIR = Path("cache") / "fingerprints"
AUTOTUNE_DIR = Path("cache") / "autotune"  # each compile's delivered autotune results, while it runs
MEMO_SCHEME = b"/entry-layouts-default"  # what from_stablehlo does before fingerprinting

_installed: "Hook | None" = None
_install_lock = threading.Lock()


@dataclass(frozen=True)
class HookSettings:
    """Where the hook looks configs up, and what it records."""

    home: Path
    url: str | None = None  # the config service; None: the embedded store under `home`
    version: int | None = None  # embedded: pin this version (default: the live one at first use)
    timeout: float = 0.25
    spool_hlo: bool = False
    job_id: str = ""
    team: str = ""  # the job's team: it takes relaxed configs where an entry's version lists it
    holdout: float | None = None  # a forced holdout share, 0 to 1; None: the entries' shares
    opt_out: bool = False  # the job takes no part in the holdout arm (unless one is forced)
    relaxed_numerics: bool = False  # the job takes entries' relaxed-numerics configs
    decision_timeout: float = job.DEFAULT_TIMEOUT  # seconds a process waits for its job's decision

    @classmethod
    def from_environment(cls) -> "HookSettings":
        """Settings from the FDO_* environment variables; ValueError names a bad one."""
        env = os.environ
        home = Path(env.get("FDO_HOME") or Path.home() / ".fdo")
        return cls(home=home, url=env.get("FDO_STORE_URL") or None,
                   version=_int_var("FDO_STORE_VERSION"),
                   timeout=_float_var("FDO_STORE_TIMEOUT", 0.25),
                   spool_hlo=_flag_var("FDO_SPOOL_HLO"), job_id=env.get("FDO_JOB_ID", ""),
                   team=env.get("FDO_TEAM", ""), holdout=_share_var("FDO_HOLDOUT"),
                   opt_out=_flag_var("FDO_OPT_OUT"), relaxed_numerics=_flag_var("FDO_RELAXED_NUMERICS"),
                   decision_timeout=_timeout_var("FDO_DECISION_TIMEOUT", job.DEFAULT_TIMEOUT))

    def holdout_share(self, found: Found) -> float:
        """The share of jobs held out to the defaults for `found`'s key: the forced one, else
        none for a job that opted out, else the entry's."""
        if self.holdout is not None:
            return self.holdout
        return 0.0 if self.opt_out else found.holdout_share

    def takes_relaxed(self, found: Found) -> bool:
        """Whether the job takes `found`'s relaxed-numerics config, where it has one: the job
        opted in itself, or its team is one the entry's version lists. Neither by default."""
        return self.relaxed_numerics or self.team in found.relaxed_numerics_teams


@dataclass
class _Plan:
    """What the hook decided for one compile before compiling."""

    digest: str = ""  # of the StableHLO, see FingerprintMemo
    fingerprint: str = ""
    env_key: str = ""
    environment: Environment | None = None  # of this compile: the job's options, its partitioning
    key: str = ""
    module_name: str = ""
    unoptimized_text: str | None = None
    found: Found | None = None
    config: CompilerConfig | None = None  # to apply: the entry's, checked against the allowlist
    config_text: str | None = None  # the entry's config (strict or relaxed) that `config` is
    expected_speedup: float | None = None  # of `config_text`
    platform: str = ""  # of the compile's environment
    results: AutotuneResults | None = None  # the entry's autotune results, checked
    outcome: HitOutcome = HitOutcome.MISS
    reason: str | None = None
    checked: bool = False  # the sandbox's verdict on `config` is in: this compile's leader's (delivery.job)


class Hook:
    """Looks up, applies and records tuned configs around JAX's compile function."""

    def __init__(self, settings: HookSettings) -> None:
        self.settings = settings
        self.source: ConfigSource = (RemoteStore(settings.url, settings.timeout) if settings.url
                                     else EmbeddedStore(settings.home, settings.version))
        self._own_job_id = settings.job_id or f"{socket.gethostname()}-{os.getpid()}"
        self._spool = spool_path(settings.home)
        self._lock = threading.Lock()
        self._environment: Environment | None = None
        self._warned: set[str] = set()
        self._memo = FingerprintMemo(settings.home / MEMO_DIR)
        self._sandbox = SandboxCheck(settings.home)
        with contextlib.suppress(Exception):  # a job whose processes cannot talk still runs
            channel = job.channel()
            if channel is not None:  # process 0 says the job's id as early as it can
                channel.announce(self._own_job_id)

    @property
    def job_id(self) -> str:
        """The job's id: the settings', else host-pid; in a multi-process job, process 0's
        (delivery.job), for every process."""
        try:
            channel = job.channel()
        except Exception:  # JAX's distributed state unreadable: none to share the id with
            channel = None
        if channel is None:
            return self._own_job_id
        job_id, problem = channel.job_id(self._own_job_id, self.settings.decision_timeout)
        if problem:
            self._warn(problem, "job id")
        return job_id

    def compile(self, original: Callable[..., Any], backend: Any, computation: Any, devices: Any,
                compile_options: Any, *args: Any, **kwargs: Any) -> Any:
        """Compile as JAX would, with the tuned config for this module when the store has one."""
        started = time.perf_counter()
        plan = self._plan_safely(computation, compile_options, devices)
        hook_seconds = time.perf_counter() - started
        optimized_fingerprint = None
        executable = None
        if plan.config or plan.results is not None:
            assert plan.config is not None
            try:
                tuned = apply_config(compile_options, plan.config)
                # Results alone change no flag: nothing for the sandbox to check.
                refused = self._sandbox.verdict(plan.key, plan.config, lambda: CompileJob(
                    _bytecode(computation), tuned.SerializeAsString(), _device_count(devices))
                ) if plan.config and not plan.checked else None
                if refused:
                    plan.outcome, plan.reason = HitOutcome.REFUSED, refused
                    self._warn(f"entry {plan.key}: {refused}", f"refused {plan.key}")
                else:
                    executable = self._compile_tuned(
                        plan, lambda options: original(backend, computation, devices, options, *args, **kwargs),
                        tuned)
                    plan.outcome = HitOutcome.APPLIED
            except Exception as exc:  # any failure of the tuned compile: the job's own compile decides
                plan.outcome, plan.reason = HitOutcome.FALLBACK, f"tuned compile failed: {first_line(exc)}"
                self._warn(plan.reason, f"fallback {plan.key}")
        if executable is None:
            executable = original(backend, computation, devices, compile_options, *args, **kwargs)
        compile_seconds = time.perf_counter() - started - hook_seconds
        if plan.fingerprint:
            extra_started = time.perf_counter()
            if plan.outcome.served:
                optimized_fingerprint = self._memo.optimized(
                    plan.digest, plan.env_key, _compiled_with(plan) if plan.outcome.ran_tuned else None,
                    executable)
            if self.settings.spool_hlo and not self._spooled(plan):
                self._spool_symbols(plan, None if plan.outcome.ran_tuned
                                    else _optimized_text(executable))
            hook_seconds += time.perf_counter() - extra_started
            self._record(plan, optimized_fingerprint, hook_seconds, compile_seconds)
        return executable

    def _compile_tuned(self, plan: _Plan, compile: Callable[[Any], Any], tuned: Any) -> Any:
        """`compile(tuned)`, with the entry's autotune results delivered to it where XLA
        autotunes (see the module's step 4); the hit's reason says what became of them."""
        if plan.results is None:
            return compile(tuned)
        if not autotunes(plan.platform):
            plan.reason = f"autotune results not delivered: {plan.platform} compiles do not autotune"
            return compile(tuned)
        if job_sets_cache_dir(tuned):
            plan.reason = "autotune results not delivered: the job names its own per-fusion cache directory"
            return compile(tuned)
        parent = self.settings.home / AUTOTUNE_DIR
        with contextlib.ExitStack() as stack:
            try:
                # JAX's persistent cache keys the executable on the options: a directory of
                # these results' own, the same for each compile of them.
                delivery = stack.enter_context(Delivery(plan.results, parent, kept=persistent_cache_on()))
            except OSError as exc:
                plan.reason = f"autotune results not delivered: cannot write under {parent}: {exc}"
                self._warn(plan.reason, "autotune dir")
                return compile(tuned)
            with CacheKeyed(plan.results) as keyed:
                executable = compile(delivery.options(tuned))
            if keyed.from_cache:  # XLA compiled nothing: there is no uptake to tell
                plan.reason = (f"autotune results: {len(plan.results.fusions)} delivered, executable from "
                               "JAX's persistent cache")
            else:
                plan.reason = delivery.uptake().describe() + (
                    " (in place of the job's own per-fusion cache directory, for this compile)"
                    if job_cache_dir(tuned) else "")
            return executable

    def _plan_safely(self, computation: Any, compile_options: Any, devices: Any) -> _Plan:
        """The plan for this compile: this process's own, or, for a compile across processes
        (delivery.job), the one its leader decides for all of them."""
        try:
            channel = job.channel()
            slot = None if channel is None else channel.slot(_module_name(computation), devices)
        except Exception as exc:  # every process of the compile fails alike: the defaults in all
            reason = f"hook could not place this compile in its job: {first_line(exc)}"
            self._warn(reason, "job")
            return _Plan(outcome=HitOutcome.ERROR, reason=reason)
        if slot is None:
            return self._own_plan(computation, compile_options)
        assert channel is not None
        if slot.leads:
            return self._lead(channel, slot, computation, compile_options, devices)
        return self._follow(channel, slot, computation, compile_options)

    def _own_plan(self, computation: Any, compile_options: Any) -> _Plan:
        try:
            return self._plan(computation, compile_options)
        except Exception as exc:  # the hook's own failure must never fail the job's compile
            reason = f"hook could not look up this module: {first_line(exc)}"
            self._warn(reason, "plan")
            return _Plan(outcome=HitOutcome.ERROR, reason=reason)

    def _lead(self, channel: job.JobChannel, slot: job.Slot, computation: Any, compile_options: Any,
              devices: Any) -> _Plan:
        """This process decides the compile for every process it spans: its own plan, the
        sandbox's verdict taken here for all of them, shared. A decision it cannot share is
        none: it compiles the defaults, as the others will when theirs does not come."""
        plan = self._own_plan(computation, compile_options)
        if plan.config:
            self._check_across_processes(plan, computation, compile_options, devices)
        plan.checked = True
        decision = job.Decision(
            job_id=self.job_id, key=plan.key, outcome=plan.outcome, reason=plan.reason, found=plan.found,
            config_text=plan.config_text, expected_speedup=plan.expected_speedup,
            apply=plan.config is not None, results=plan.results is not None)
        try:
            channel.publish(slot, decision)
        except job.ChannelError as exc:
            plan.config, plan.results, plan.outcome, plan.reason = None, None, HitOutcome.ERROR, str(exc)
            self._warn(str(exc), "share")
        return plan

    def _check_across_processes(self, plan: _Plan, computation: Any, compile_options: Any,
                                devices: Any) -> None:
        """The sandbox's verdict on `plan`'s config for a compile across processes, compiled
        whole on a worker's own devices (delivery.sandbox); `plan` refused where it fails."""
        assert plan.config is not None
        try:
            tuned = apply_config(compile_options, plan.config)
        except Exception as exc:  # as the tuned compile would fail in every process: the defaults
            plan.config, plan.results = None, None
            plan.outcome, plan.reason = HitOutcome.FALLBACK, f"tuned compile failed: {first_line(exc)}"
            self._warn(plan.reason, f"fallback {plan.key}")
            return
        try:
            refused = self._sandbox.verdict(plan.key, plan.config, lambda: CompileJob(
                _bytecode(computation), tuned.SerializeAsString(), _device_count(devices),
                spans_processes=True))
        except Exception as exc:  # a sandbox that cannot start checks nothing: not risked
            refused = f"the sandbox could not check the tuned compile: {first_line(exc)}"
        if refused:
            plan.config, plan.results, plan.outcome, plan.reason = None, None, HitOutcome.REFUSED, refused
            self._warn(f"entry {plan.key}: {refused}", f"refused {plan.key}")

    def _follow(self, channel: job.JobChannel, slot: job.Slot, computation: Any,
                compile_options: Any) -> _Plan:
        """This process compiles what the compile's leader decided: it waits for the decision
        and never looks the store up; its own fingerprint and key only name its hit."""
        try:
            plan = self._identify(computation, compile_options)
        except Exception as exc:  # its hit goes unrecorded; the decision still holds here
            plan = _Plan(outcome=HitOutcome.ERROR, reason=f"hook could not fingerprint this module: {first_line(exc)}")
        try:
            decision = channel.wait(slot, self.settings.decision_timeout)
        except job.ChannelError as exc:
            plan.outcome, plan.reason = HitOutcome.ERROR, str(exc)
            self._warn(str(exc), "decision")
            return plan
        plan.found, plan.config_text = decision.found, decision.config_text
        plan.expected_speedup, plan.outcome, plan.reason = decision.expected_speedup, decision.outcome, decision.reason
        plan.checked = True
        if decision.apply:
            results = decision.found.entry.autotune_results if decision.results and decision.found else None
            try:
                plan.config = checked_config(json.loads(decision.config_text or ""))
                plan.results = parse_results(results) if results is not None else None
            except (ValueError, TypeError) as exc:  # FlagError, ResultsError, JSON's
                # The leader took it: this process runs another fleet-fdo; it compiles the defaults.
                plan.config, plan.results = None, None
                plan.outcome, plan.reason = HitOutcome.REFUSED, f"process {slot.leader}'s decision refused here: {exc}"
                self._warn(plan.reason, f"refused {plan.key}")
        if plan.key and decision.key and decision.key != plan.key:
            said = f"decided by process {slot.leader} for its key {decision.key}"
            plan.reason = f"{plan.reason}; {said}" if plan.reason else said
        return plan

    def _identify(self, computation: Any, compile_options: Any) -> _Plan:
        """A plan that names the module: its fingerprint, its environment and its store key."""
        plan = _Plan(module_name=_module_name(computation))
        plan.digest, plan.fingerprint, module = self._memo.fingerprint(computation)
        plan.environment = environment = self._environment_for(computation, compile_options)
        plan.env_key, plan.platform = environment.key(), environment.platform
        plan.key = store_key(plan.fingerprint, plan.env_key)
        if self.settings.spool_hlo and not self._spooled(plan):
            plan.unoptimized_text = (module or from_stablehlo(computation)).to_text()
        return plan

    def _plan(self, computation: Any, compile_options: Any) -> _Plan:
        plan = self._identify(computation, compile_options)
        try:
            plan.found = self.source.lookup(plan.key)
        except NoStore as exc:  # a fresh home: nothing is wrong, nothing is tuned yet
            plan.outcome, plan.reason = HitOutcome.NO_STORE, str(exc)
            self._warn(f"{exc}; compiling with the defaults", "store")
            return plan
        except StoreUnavailable as exc:
            plan.outcome, plan.reason = HitOutcome.ERROR, str(exc)
            self._warn(f"{exc}; compiling with the defaults", "store")
            return plan
        if plan.found is None:
            return plan
        return self._decide(plan)

    def _decide(self, plan: _Plan) -> _Plan:
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
            self._warn(f"entry {plan.key}: {plan.reason}", f"refused {plan.key}")
            return plan
        if entry.autotune_results is not None:
            try:
                plan.results = parse_results(entry.autotune_results)
            except ResultsError as exc:
                plan.config, plan.outcome, plan.reason = None, HitOutcome.REFUSED, f"entry refused: {exc}"
                self._warn(f"entry {plan.key}: {plan.reason}", f"refused {plan.key}")
                return plan
        if holdout_arm(self.job_id, plan.key, self.settings.holdout_share(plan.found)):
            # The arm compares the defaults with the entry as it stands: its own speedup.
            plan.config, plan.results, plan.outcome = None, None, HitOutcome.HOLDOUT
            plan.expected_speedup = entry.speedup
        return plan

    def _environment_for(self, computation: Any, compile_options: Any) -> Environment:
        """The process's environment, plus the compiler options the job set for this compile
        (its overrides, and the effort level it asked of XLA: `job_build_options`) and how it
        partitions the module across devices and processes (`job_partitioning`)."""
        if self._environment is None:
            self._environment = current_environment()
        partitioning = job_partitioning(compile_options, _mesh(computation))
        job_options = {**{str(name): str(value) for name, value in compile_options.env_option_overrides},
                       **job_build_options(compile_options)}
        environment = self._environment.with_partitioning(partitioning)
        if not job_options:
            return environment
        # The machine and XLA_FLAGS do not change between compiles: only the compile's options.
        merged = {**self._environment.job_options, **job_options}
        return replace(environment, job_options=dict(sorted(merged.items())))

    def _record(self, plan: _Plan, optimized_fingerprint: str | None, hook_seconds: float,
                compile_seconds: float) -> None:
        applied = plan.outcome.tried
        record = {
            "at": datetime.datetime.now(datetime.UTC), "job_id": self.job_id, "key": plan.key,
            "fingerprint": plan.fingerprint, "env_key": plan.env_key,
            "module_name": plan.module_name, "outcome": plan.outcome,
            "kind": plan.found.entry.kind if plan.found is not None else None,
            "config_version": plan.found.version if plan.found is not None else None,
            "expected_speedup": plan.expected_speedup if plan.outcome.served else None,
            "config": plan.config_text if applied else None,
            "optimized_fingerprint": optimized_fingerprint, "reason": plan.reason,
            "hook_seconds": hook_seconds, "compile_seconds": compile_seconds,
        }
        try:
            with self._lock:
                self._spool.parent.mkdir(parents=True, exist_ok=True)
                with open(self._spool, "a") as handle:
                    handle.write(to_line(record))
        except OSError as exc:
            self._warn(f"cannot record hits in {self._spool}: {exc}", "spool")

    def _spool_symbols(self, plan: _Plan, optimized: str | None) -> None:
        """Leave the module as an XLA dump would, once per fingerprint and environment (a module
        compiled in two environments, say partitioned two ways, is a graph in each), for symbol
        ingestion."""
        target = self._spool_target(plan)
        if target.exists() or plan.unoptimized_text is None:
            return
        try:
            stem = f"module_{plan.fingerprint[:8]}.{plan.module_name}"
            environment = plan.environment or current_environment()
            with open_home(target.parent).staged_directory(target, durable=False) as staging:
                (staging / f"{stem}.before_optimizations.txt").write_text(plan.unoptimized_text)
                if optimized is not None:
                    (staging / f"{stem}.after_optimizations.txt").write_text(optimized)
                (staging / ENVIRONMENT_FILE).write_text(json.dumps(
                    {**environment.to_json(),
                     "captured_at": datetime.datetime.now(datetime.UTC).isoformat()}) + "\n")
        except OSError as exc:
            self._warn(f"cannot spool HLO under {target.parent}: {exc}", "spool symbols")

    def _spool_target(self, plan: _Plan) -> Path:
        name = f"{plan.fingerprint}-{plan.env_key[:16]}"
        return self.settings.home / SPOOL_SYMBOLS / plan.fingerprint[:2] / name

    def _spooled(self, plan: _Plan) -> bool:
        return self._spool_target(plan).exists()

    def _warn(self, message: str, kind: str) -> None:
        """Log a problem once per kind, so a broken store does not flood the job's log."""
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        log.warning("fleet-fdo hook: %s", message)


class FingerprintMemo:
    """Graph fingerprints by digest of the StableHLO that JAX hands the compiler.

    Converting StableHLO to HLO to fingerprint it costs a few percent of a compile; a fleet
    compiles the same programs over and over, so the fingerprint is remembered on disk per
    (jaxlib version, module bytecode) and a repeat costs a serialization and a hash. Only the
    first compile of a program on a machine pays the conversion.
    """

    def __init__(self, directory: Path) -> None:
        import jaxlib

        self.directory = directory
        # A new jaxlib may convert differently, a new fingerprint scheme hashes differently.
        self._salt = f"jaxlib-{jaxlib.__version__}\n".encode() + FINGERPRINT_DOMAIN + MEMO_SCHEME
        self._known: dict[str, str] = {}

    def fingerprint(self, computation: Any) -> tuple[str, str, HloModule | None]:
        """(digest, graph fingerprint) of the module, and the converted module when it had to
        convert."""
        from jax._src.interpreters import mlir

        bytecode = mlir.module_to_bytecode(computation)
        digest = hashlib.blake2b(self._salt + bytecode, digest_size=16).hexdigest()
        known = self._recall(digest)
        if known is not None:
            return digest, known, None
        module = from_stablehlo(bytecode)
        fingerprint = graph_fingerprint(module)
        self._remember(digest, fingerprint)
        return digest, fingerprint, module

    def optimized(self, digest: str, env_key: str, config: str | None, executable: Any) -> str | None:
        """The fingerprint of the optimized module a compile of `digest` in `env_key` produced,
        with `config` (its JSON text, and its autotune results' text where it had them:
        `_compiled_with`) or, None, with the job's own options (a holdout)."""
        compiled_with = "defaults" if config is None else config  # a config's text is an object
        key = hashlib.blake2b(f"{digest}/{env_key}/{compiled_with}".encode(), digest_size=16).hexdigest()
        known = self._recall(key)
        if known is not None:
            return known
        optimized = _optimized_proto(executable)
        fingerprint = _fingerprint_proto(optimized) if optimized is not None else None
        if fingerprint is not None:
            self._remember(key, fingerprint)
        return fingerprint

    def _recall(self, digest: str) -> str | None:
        known = self._known.get(digest) or self._read(digest)
        if known is not None:
            self._known[digest] = known
        return known

    def _remember(self, digest: str, fingerprint: str) -> None:
        self._known[digest] = fingerprint
        self._write(digest, fingerprint)

    def _path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest

    def _read(self, digest: str) -> str | None:
        try:
            text = self._path(digest).read_text()
        except OSError:
            return None
        return text if len(text) == 32 and set(text) <= _HEX else None

    def _write(self, digest: str, fingerprint: str) -> None:
        path = self._path(digest)
        try:
            atomic_write(path, fingerprint, durable=False)
        except OSError:
            pass  # a memo that cannot be written only costs the next process a conversion


def _compiled_with(plan: _Plan) -> str | None:
    """What an applied compile of `plan` was given beside the module: its config's text, and
    its autotune results' (they change the optimized module's kernel configs)."""
    if plan.results is None or plan.found is None:
        return plan.config_text
    return f"{plan.config_text}\n{plan.found.entry.autotune_results}"


def _bytecode(computation: Any) -> bytes:
    """The StableHLO module JAX hands the compiler, serialized for the sandbox."""
    from jax._src.interpreters import mlir

    return computation if isinstance(computation, bytes) else mlir.module_to_bytecode(computation)


def _device_count(devices: Any) -> int:
    """How many devices a compile is for (JAX passes them as an array of devices)."""
    size = getattr(devices, "size", None)
    return int(size) if size is not None else len(devices)


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
    given: dict[str, Any] = {name: value for name, value in locals().items() if value is not None}
    from jax._src import compiler

    base = HookSettings.from_environment()
    if holdout is not None and not 0 <= holdout <= 1:
        raise ValueError(f"holdout={holdout!r}: must be a share from 0 to 1")
    if decision_timeout is not None and not 0 < decision_timeout <= 3600:
        raise ValueError(f"decision_timeout={decision_timeout!r}: must be between 0 and 3600 seconds")
    if home is not None:
        given["home"] = Path(home)
    settings = replace(base, **given)
    hook = Hook(settings)
    with _install_lock:
        original = getattr(compiler.compile_or_get_cached, "__wrapped__",
                           compiler.compile_or_get_cached)

        @functools.wraps(original)
        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            return hook.compile(original, *args, **kwargs)

        compiler.compile_or_get_cached = compile_or_get_cached
        _installed = hook
    return hook


def uninstall() -> None:
    """Give JAX its own compile function back."""
    global _installed
    from jax._src import compiler

    with _install_lock:
        compiler.compile_or_get_cached = getattr(compiler.compile_or_get_cached, "__wrapped__",
                                                 compiler.compile_or_get_cached)
        _installed = None


def installed() -> Hook | None:
    """The installed hook, if any."""
    return _installed


def _optimized_proto(executable: Any) -> bytes | None:
    """An executable's optimized module, serialized; None if it hides it."""
    try:
        return executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    except Exception:  # some executables (e.g. deserialized ones on some backends) hide their HLO
        return None


def _optimized_text(executable: Any) -> str | None:
    """An executable's optimized module as text; None if it hides it."""
    try:
        return executable.hlo_modules()[0].to_string()
    except Exception:  # as above
        return None


def _mesh(computation: Any) -> tuple[tuple[str, int], ...]:
    """The axes of the module's Shardy mesh (its first `sdy.mesh` op); empty where it has none
    (a GSPMD module, or one for a single device)."""
    if isinstance(computation, bytes):
        return ()
    for op in computation.body.operations:
        if op.operation.name == "sdy.mesh":
            return parse_mesh(str(op.operation.attributes["mesh"]))
    return ()


def _module_name(computation: Any) -> str:
    from jax._src.lib.mlir import ir

    return ir.StringAttr(computation.operation.attributes["sym_name"]).value


def _fingerprint_proto(proto: bytes) -> str | None:
    try:
        return graph_fingerprint(from_proto_bytes(proto, "jax:optimized"))
    except Exception:  # a module the fingerprinter cannot read: the hit still counts
        return None


def _int_var(name: str) -> int | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r}: must be a non-negative integer")
    return int(raw)


def _flag_var(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


def _share_var(name: str) -> float | None:
    """$name as a share from 0 to 1; None where it is unset or empty."""
    return _number_var(name, lambda value: 0 <= value <= 1, "a number from 0 to 1",
                       "a share from 0 to 1")


def _timeout_var(name: str, default: float) -> float:
    """$name as seconds, over 0 and at most an hour; `default` where it is unset or empty."""
    value = _number_var(name, lambda value: 0 < value <= 3600, "a number of seconds",
                        "between 0 and 3600 seconds")
    return default if value is None else value


def _float_var(name: str, default: float) -> float:
    """$name as seconds, over 0 and at most 60; `default` where it is unset or empty."""
    value = _number_var(name, lambda value: 0 < value <= 60, "a number of seconds",
                        "between 0 and 60 seconds")
    return default if value is None else value


def _number_var(name: str, within: Callable[[float], bool], number: str, domain: str) -> float | None:
    """$name as a number for which `within` holds (a NaN never does); None where it is unset
    or empty. ValueError naming the variable: not a number ("must be {number}"), or outside
    its domain ("must be {domain}")."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be {number}") from None
    if not within(value):
        raise ValueError(f"{name}={raw!r}: must be {domain}")
    return value
