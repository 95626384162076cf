"""One decision per multi-process job: every process of a job compiles the same program.

A job of several processes (`jax.distributed.initialize`, one process per host or per GPU) runs
one SPMD program across them, compiled in each process for all of their devices. Were each
process to look that compile up on its own, a store version published between two look-ups, one
look-up timing out, a per-process job id (the holdout arm hashes it) or a per-process setting
(relaxed numerics, a forced holdout) would give them different programs, and processes running
different programs hang in their collectives or compute wrong results. So for a compile whose
devices span several processes, the lowest of those processes (the leader: process 0 for a step
over the whole job) decides alone (`SharedDecisions.lead`): look-up, relaxed-numerics choice,
arm (delivery.compile_decision) and sandbox verdict (delivery.sandbox checks the program once,
whole). It publishes the `Decision` through JAX's distributed key-value store (the client
`jax.distributed.initialize` creates; JAX shares its PGLE profiles between processes the same
way: `JobChannel`), and the other processes never look the store up for that compile
(`SharedDecisions.follow`): they wait for the decision, at most `timeout` seconds
(FDO_DECISION_TIMEOUT, default 300: over what the leader's look-up, fingerprint and sandbox check
take, so only a leader that reaches the compile that much later, or runs no hook, runs out the
clock), and apply it as it is.

No decision to share means the defaults everywhere: a leader that cannot publish compiles
with the job's own options, as does a process that gets no decision in time (outcome 'error',
the reason saying why). The one gap a timeout leaves: a leader that publishes after a waiting
process gave up compiles what it decided while that process compiles the defaults.

Keys in the store (`KEY_PREFIX`): `job_id`, and one per shared compile,
`decision/<module name>/<digest of the compile's device ids>/<n>`, n counting this process's
earlier compiles of that module over those devices. The processes of an SPMD program compile
the same modules over the same devices in the same order, so the n-th compile in one process is
the n-th in every other: a module compiled again (JAX's caches dropped it, a second `jit` of one
function) gets a decision of its own, and processes that compile different modules on their own
devices never wait for each other.

A compile on one process's own devices is that process's alone (no collective joins it to
another's): it decides it itself, with the job's id. The job's id is process 0's (`--job-id`,
FDO_JOB_ID, else process 0's host-pid), which its hook publishes under `job_id` when it starts
(`announce`); every process records its hits under it (`job_id`), each in its own spool (one that
finds none within the timeout records its own, and says so once). A job with one process, or
whose processes share no JAX distributed client, has no channel (`channel()` is None): its
compiles pay one attribute read for all of this.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa

from delivery.compile_decision import Decider
from delivery.compile_plan import Plan
from delivery.hook_log import HookLog
from delivery.jax_objects import bytecode, device_count
from delivery.lookup import Found
from delivery.sandbox import CompileJob, SandboxCheck
from execution.autotune.results import parse_results
from execution.compile import apply_config
from execution.flags import checked_config
from storage.store_schema import ENTRIES, StoreEntry
from vocabulary.errors import first_line
from vocabulary.hits import HitOutcome

KEY_PREFIX = "fleet_fdo/"
JOB_ID_KEY = KEY_PREFIX + "job_id"
FORMAT = 1  # of a decision's text
_TIMESTAMPS = frozenset(f.name for f in ENTRIES if pa.types.is_timestamp(f.type))


class ChannelError(Exception):
    """No decision could be shared; the message says why."""


@dataclass(frozen=True)
class Decision:
    """What a compile's leader decided, as every process of the compile applies it."""

    job_id: str
    key: str  # the store key the leader looked up ("" where it could not key the module)
    outcome: HitOutcome  # the hook's outcome before compiling: 'miss' also where `apply` (applied once compiled)
    reason: str | None = None
    found: Found | None = None  # the entry the leader's look-up found, and its version
    config_text: str | None = None  # the entry's config the leader chose: strict, or relaxed
    expected_speedup: float | None = None
    apply: bool = False  # compile with `config_text` (the leader's sandbox passed it); else the job's own options
    results: bool = False  # and deliver `found`'s autotune results

    def to_text(self) -> str:
        """The decision as JSON, its entry as a row of the store (StoreEntry.to_row: the configs
        their text) with its times in ISO 8601."""
        found = None if self.found is None else {
            "version": self.found.version, "holdout_share": self.found.holdout_share,
            "relaxed_numerics_teams": list(self.found.relaxed_numerics_teams),
            "entry": {name: value.isoformat() if isinstance(value, datetime.datetime) else value
                      for name, value in self.found.entry.to_row().items()}}
        return json.dumps({"format": FORMAT, "job_id": self.job_id, "key": self.key,
                           "outcome": self.outcome, "reason": self.reason, "found": found,
                           "config_text": self.config_text, "expected_speedup": self.expected_speedup,
                           "apply": self.apply, "results": self.results})

    @classmethod
    def from_text(cls, text: str) -> "Decision":
        """The decision `to_text` wrote; ValueError where `text` is not one."""
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            found = data["found"]
            if found is not None:
                row = {name: datetime.datetime.fromisoformat(value)
                       if name in _TIMESTAMPS and value is not None else value
                       for name, value in found["entry"].items()}
                found = Found(int(found["version"]), StoreEntry.from_row(row), float(found["holdout_share"]),
                              tuple(found["relaxed_numerics_teams"]))
            return cls(job_id=str(data["job_id"]), key=str(data["key"]), outcome=HitOutcome(data["outcome"]),
                       reason=data["reason"], found=found, config_text=data["config_text"],
                       expected_speedup=data["expected_speedup"], apply=bool(data["apply"]),
                       results=bool(data["results"]))
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed decision: {exc!r}") from None


@dataclass(frozen=True)
class Slot:
    """One compile's place among the job's shared decisions."""

    key: str  # in the key-value store
    leader: int  # the process that decides
    process: int  # this one

    @property
    def leads(self) -> bool:
        return self.leader == self.process


@dataclass
class JobChannel:
    """This process's link to the other processes of its job, through JAX's distributed client.
    Kept per client for the process's life (`channel()`): the compile counts must survive a
    hook installed again, or the n-th compile would read an earlier compile's decision."""

    client: Any  # jaxlib DistributedRuntimeClient
    process: int
    processes: int
    waits: list[float] = field(default_factory=list)  # seconds each wait for a decision took
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _job_id: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _job_lock: threading.Lock = field(default_factory=threading.Lock)  # held while waiting for the id

    def announce(self, job_id: str) -> None:
        """In process 0: publish the job's id, once (a later hook of the process keeps the first
        id, as the other processes may hold it already); a store that fails is left unsaid, and
        the others go on with their own ids after their timeout."""
        if self.process != 0:
            return
        try:
            self.client.key_value_set(JOB_ID_KEY, job_id)
        except Exception:  # ALREADY_EXISTS from an earlier hook of this process; or the store is down
            pass

    def job_id(self, own: str, timeout: float) -> tuple[str, str | None]:
        """The job's id: process 0's, waited for at most `timeout` seconds the first time, else
        `own`; and, the first time only, why it is `own` where it had to be."""
        with self._job_lock:
            if self._job_id is not None:
                return self._job_id, None
            if self.process == 0:
                self.announce(own)
            try:
                self._job_id = self.client.blocking_key_value_get(JOB_ID_KEY, _milliseconds(timeout))
                return self._job_id, None
            except Exception as exc:  # jaxlib's JaxRuntimeError: DEADLINE_EXCEEDED, UNAVAILABLE
                self._job_id = own
                return own, (f"process 0 published no job id within {timeout:g} s ({first_line(exc)}); "
                             f"this process records its own, {own!r}")

    def slot(self, module_name: str, devices: Any) -> Slot | None:
        """The shared decision of a compile of `module_name` over `devices` (JAX's array of the
        compile's devices); None where they are all this process's: it decides alone."""
        flat = list(getattr(devices, "flat", devices))
        owners = {device.process_index for device in flat}
        if owners == {self.process}:
            return None
        ids = ",".join(str(device.id) for device in flat)
        digest = hashlib.blake2b(ids.encode(), digest_size=8).hexdigest()
        with self._lock:
            n = self._counts.get((module_name, digest), 0)
            self._counts[(module_name, digest)] = n + 1
        return Slot(key=f"{KEY_PREFIX}decision/{module_name}/{digest}/{n}", leader=min(owners),
                    process=self.process)

    def publish(self, slot: Slot, decision: Decision) -> None:
        """In the leader: share `decision`; ChannelError where the store will not take it."""
        try:
            self.client.key_value_set(slot.key, decision.to_text())
        except Exception as exc:  # jaxlib's JaxRuntimeError; an entry JSON cannot carry
            raise ChannelError(f"cannot share the decision for the job's processes: {first_line(exc)}") from None

    def wait(self, slot: Slot, timeout: float) -> Decision:
        """In another process: the leader's decision, waited for at most `timeout` seconds;
        ChannelError where none comes or it cannot be read."""
        started = time.perf_counter()
        try:
            text = self.client.blocking_key_value_get(slot.key, _milliseconds(timeout))
        except Exception as exc:  # DEADLINE_EXCEEDED, or the coordinator gone
            raise ChannelError(f"no decision from process {slot.leader} within {timeout:g} s "
                               f"({first_line(exc)}); compiling with the defaults") from None
        finally:
            with self._lock:
                self.waits.append(time.perf_counter() - started)
        try:
            return Decision.from_text(text)
        except ValueError as exc:
            raise ChannelError(f"process {slot.leader}'s decision: {exc}") from None


_channels: dict[int, JobChannel] = {}
_channels_lock = threading.Lock()


def channel() -> JobChannel | None:
    """This process's channel to the other processes of its job; None in a job of one process,
    or one whose processes share no JAX distributed client."""
    from jax._src import distributed

    state = distributed.global_state
    client = state.client
    if client is None or state.num_processes <= 1:
        return None
    with _channels_lock:
        found = _channels.get(id(client))
        if found is None or found.client is not client:
            found = _channels[id(client)] = JobChannel(client, state.process_id, state.num_processes)
        return found


def announce(own_job_id: str) -> None:
    """In process 0 of a multi-process job: say the job's id, as early as its hook can; a job
    whose processes cannot talk still runs."""
    with contextlib.suppress(Exception):
        shared = channel()
        if shared is not None:
            shared.announce(own_job_id)


def job_id(own_job_id: str, timeout: float, log: HookLog) -> str:
    """The job's id: `own_job_id` (the settings', else host-pid), in a multi-process job process
    0's, for every process (waited for at most `timeout` seconds, the first time)."""
    try:
        shared = channel()
    except Exception:  # JAX's distributed state unreadable: none to share the id with
        shared = None
    if shared is None:
        return own_job_id
    found, problem = shared.job_id(own_job_id, timeout)
    if problem:
        log.warn(problem, "job id")
    return found


class SharedDecisions:
    """This process's part in the decisions of compiles that span its job's processes: the
    leader's (`lead`) or another's (`follow`)."""

    def __init__(self, decider: Decider, sandbox: SandboxCheck, log: HookLog, timeout: float,
                 job_id: Callable[[], str]) -> None:
        self._decider = decider
        self._sandbox = sandbox
        self._log = log
        self._timeout = timeout  # seconds a follower waits for its leader's decision
        self._job_id = job_id

    def lead(self, shared: JobChannel, slot: Slot, computation: Any, compile_options: Any,
             devices: Any) -> Plan:
        """This process decides the compile for every process it spans: its own plan, the
        sandbox's verdict taken here for all of them, shared. A decision it cannot share is
        none: it compiles the defaults, as the others will when theirs does not come."""
        plan = self._decider.plan(computation, compile_options)
        if plan.config:
            self._check_across_processes(plan, computation, compile_options, devices)
        plan.checked = True
        decision = Decision(
            job_id=self._job_id(), key=plan.key, outcome=plan.outcome, reason=plan.reason, found=plan.found,
            config_text=plan.config_text, expected_speedup=plan.expected_speedup,
            apply=plan.config is not None, results=plan.results is not None)
        try:
            shared.publish(slot, decision)
        except ChannelError as exc:
            plan.config, plan.results, plan.outcome, plan.reason = None, None, HitOutcome.ERROR, str(exc)
            self._log.warn(str(exc), "share")
        return plan

    def follow(self, shared: JobChannel, slot: Slot, computation: Any, compile_options: Any) -> Plan:
        """This process compiles what the compile's leader decided: it waits for the decision
        and never looks the store up; its own fingerprint and key only name its hit."""
        try:
            plan = self._decider.identify(computation, compile_options)
        except Exception as exc:  # its hit goes unrecorded; the decision still holds here
            plan = Plan(outcome=HitOutcome.ERROR, reason=f"hook could not fingerprint this module: {first_line(exc)}")
        try:
            decision = shared.wait(slot, self._timeout)
        except ChannelError as exc:
            plan.outcome, plan.reason = HitOutcome.ERROR, str(exc)
            self._log.warn(str(exc), "decision")
            return plan
        plan.found, plan.config_text = decision.found, decision.config_text
        plan.expected_speedup, plan.outcome, plan.reason = decision.expected_speedup, decision.outcome, decision.reason
        plan.checked = True
        if decision.apply:
            self._take(plan, decision, slot)
        if plan.key and decision.key and decision.key != plan.key:
            said = f"decided by process {slot.leader} for its key {decision.key}"
            plan.reason = f"{plan.reason}; {said}" if plan.reason else said
        return plan

    def _take(self, plan: Plan, decision: Decision, slot: Slot) -> None:
        """`plan` with the config (and autotune results) its leader decided to apply, read here;
        refused where this process cannot read them."""
        results = decision.found.entry.autotune_results if decision.results and decision.found else None
        try:
            plan.config = checked_config(json.loads(decision.config_text or ""))
            plan.results = parse_results(results) if results is not None else None
        except (ValueError, TypeError) as exc:  # FlagError, ResultsError, JSON's
            # The leader took it: this process runs another fleet-fdo; it compiles the defaults.
            plan.config, plan.results = None, None
            plan.outcome, plan.reason = HitOutcome.REFUSED, f"process {slot.leader}'s decision refused here: {exc}"
            self._log.warn(plan.reason, f"refused {plan.key}")

    def _check_across_processes(self, plan: Plan, computation: Any, compile_options: Any,
                                devices: Any) -> None:
        """The sandbox's verdict on `plan`'s config for a compile across processes, compiled
        whole on a worker's own devices (delivery.sandbox); `plan` refused where it fails."""
        assert plan.config is not None
        try:
            tuned = apply_config(compile_options, plan.config)
        except Exception as exc:  # as the tuned compile would fail in every process: the defaults
            plan.config, plan.results = None, None
            plan.outcome, plan.reason = HitOutcome.FALLBACK, f"tuned compile failed: {first_line(exc)}"
            self._log.warn(plan.reason, f"fallback {plan.key}")
            return
        try:
            refused = self._sandbox.verdict(plan.key, plan.config, lambda: CompileJob(
                bytecode(computation), tuned.SerializeAsString(), device_count(devices),
                spans_processes=True))
        except Exception as exc:  # a sandbox that cannot start checks nothing: not risked
            refused = f"the sandbox could not check the tuned compile: {first_line(exc)}"
        if refused:
            plan.config, plan.results, plan.outcome, plan.reason = None, None, HitOutcome.REFUSED, refused
            self._log.warn(f"entry {plan.key}: {refused}", f"refused {plan.key}")


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))
