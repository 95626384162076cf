"""How a task of a runner ended (`TaskStatus`, of `tasks.records.TaskOutcome`)."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class TaskStatus(ClosedSet):
    """How a task ended. DONE: it ran to a result (whose own verdict may be "no gain").
    FAILED: it raised, or the process running it died on every try (`TaskOutcome.reason`).
    UNROUTABLE: no live node offers its environment (at submission, or after the last one
    died): left for a later run. NOT_STARTED: the deadline left it no time."""

    DONE = "done"
    FAILED = "failed"
    UNROUTABLE = "unroutable"
    NOT_STARTED = "not started"
