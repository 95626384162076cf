"""How work failed: a job in its sandboxed worker (`Fault`), and an evaluation that produced no
measurement (`Failure`). Callers compare these; the messages beside them are for people."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class Fault(ClosedSet):
    """How a job failed in its worker (`execution.worker`): ERROR, the job raised (our code or
    its arguments; the worker lives on); CRASH, OOM, TIMEOUT, the worker died or was killed
    running it (`died`)."""

    ERROR = "error"
    CRASH = "crash"
    OOM = "oom"
    TIMEOUT = "timeout"

    @property
    def died(self) -> bool:
        """Whether the worker died with the job: the job may pass in a fresh worker; an ERROR
        would raise again."""
        return self is not Fault.ERROR


class Failure(ClosedSet):
    """Why an evaluation produced no measurement (`execution.evaluate.EvaluationResult`).
    DEFAULT_FAILS: the default config does not compile or run the module (nothing to compare
    with); CANDIDATE_FAILS: the default runs, the candidate does not compile or run;
    WORKER_*: the worker died running the evaluation (crash, oom, timeout) or raised (error),
    with the default or the candidate, unknown which (`of_fault`). Earlier versions spelled
    the values with underscores ("default_fails"); they read."""

    DEFAULT_FAILS = "default fails"
    CANDIDATE_FAILS = "candidate fails"
    WORKER_ERROR = "worker error"
    WORKER_CRASH = "worker crash"
    WORKER_OOM = "worker oom"
    WORKER_TIMEOUT = "worker timeout"

    @classmethod
    def of_fault(cls, fault: Fault) -> "Failure":
        """The failure of an evaluation whose worker failed with `fault`."""
        return cls(f"worker {fault}")
