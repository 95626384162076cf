"""One decision per multi-process job: every process of a job compiles the same program.

A job of several processes (`jax.distributed.initialize`, one process per host or per GPU) runs
one SPMD program across them, compiled in each process for all of their devices. Were each
process to look that compile up on its own, a store version published between two look-ups, one
look-up timing out, a per-process job id (the holdout arm hashes it) or a per-process setting
(relaxed numerics, a forced holdout) would give them different programs, and processes running
different programs hang in their collectives or compute wrong results. So for a compile whose
devices span several processes, the lowest of those processes (the leader: process 0 for a step
over the whole job) decides alone: look-up, relaxed-numerics choice, arm and sandbox verdict
(delivery.sandbox checks the program once, whole). It publishes the `Decision` through JAX's
distributed key-value store (the client `jax.distributed.initialize` creates; JAX shares its
PGLE profiles between processes the same way), and the other processes never look the store up
for that compile: they wait for the decision, at most `timeout` seconds (FDO_DECISION_TIMEOUT,
default 300: over what the leader's look-up, fingerprint and sandbox check take, so only a
leader that reaches the compile that much later, or runs no hook, runs out the clock), and
apply it as it is.

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
FDO_JOB_ID, else process 0's host-pid), which its hook publishes under `job_id` when it starts;
every process records its hits under it, each in its own spool (one that finds none within the
timeout records its own, and says so once). A job with one process, or
whose processes share no JAX distributed client, has no channel (`channel()` is None): its
compiles pay one attribute read for all of this.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from delivery.lookup import Found
from storage.store_schema import ENTRIES, StoreEntry
from vocabulary.errors import first_line
from vocabulary.hits import HitOutcome

KEY_PREFIX = "fleet_fdo/"
JOB_ID_KEY = KEY_PREFIX + "job_id"
DEFAULT_TIMEOUT = 300.0  # seconds a process waits for its leader's decision
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


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))
