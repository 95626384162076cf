"""One tuning task of any kind: the entry point every task runs through, here or on a cluster
node (`tasks.records.perform`).

A kind's registry entry (`tuner.kinds.KINDS`) says whether its task is the tuner's own search of
its space (`tuner.tune.run_task`: a graph's flags, an op's knobs) or XLA's own autotuner's
(`tuner.kernels.run_kernels_task`: a GPU graph's kernels).
"""

from __future__ import annotations

from storage.home import Home
from tuner.kernels import run_kernels_task
from tuner.kinds import KINDS, Subject, make_target
from tuner.strategies import TrialRecord
from tuner.tune import TuneResult, TuneSettings, run_task
from vocabulary.tuning import Kind


def tune(kind: Kind, subject: Subject, home: Home, settings: TuneSettings,
         env_key: str | None = None, progress: bool = False,
         prior: list[TrialRecord] | None = None) -> TuneResult:
    """Tune `subject` as a task of `kind` on this machine (its space and how it is tuned from
    the kind registry; ValueError where the kind does not tune on this platform) and land the
    result. `progress` and `prior` (what won on other graphs) serve a search."""
    target = make_target(kind, subject)
    if KINDS[kind].searched:
        return run_task(target, home, settings, env_key, progress, prior)
    return run_kernels_task(target, home, settings, env_key)
