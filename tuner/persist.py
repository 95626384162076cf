"""Where a tuning task's records live, and how they are written and read back.

A task is named by its id (`task_digest` of what defines it) and keeps its files under
`tuner/tasks/<task>/` of the home (`task_file`): its journal of trials, `trials.jsonl`, one
appended per trial and durable before the next (`journal_trial`, `journaled_trials`:
`storage.journal`), so a task killed at any moment resumes without repeating a finished one;
and once finished, its result with every trial, `result.json`, written atomically
(`save_result`): the task is then done, and running it again reads it back
(`finished_result`). A finished task lands in the warehouse's `trials` and `tuning_results`
tables under its id, each row a record of `tuner.tables` (`trial_row`, `result_row`), so
landing it twice adds nothing (`land_result`). The home may be local or a URL
(`storage.home.Home`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from dataclasses import replace
from typing import Any

import pyarrow as pa

from execution.numerics import OutputCheck
from storage.home import Home
from storage.journal import append_record, read_records
from storage.warehouse import Warehouse
from tuner.result import TuneResult
from tuner.space import config_key
from tuner.tables import TRIALS, TUNING_RESULTS, ResultRow, TrialRow
from tuner.trial import Trial
from vocabulary.interval import Interval
from vocabulary.tuning import Origin

JOURNAL = "trials.jsonl"  # a task's trials, one appended per trial
RESULT = "result.json"  # a finished task's result, with its trials


def task_digest(*parts: object) -> str:
    """A task's (or a trial's) id from what defines it."""
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()


def task_file(home: Home, task_id: str, name: str) -> Any:
    """Where a task keeps file `name`: its journal (`JOURNAL`) and, once finished, its result
    (`RESULT`), under `tuner/tasks/<task>/` of the home."""
    return home.location("tuner", "tasks", task_id, name)


def journaled_trials(home: Home, task_id: str) -> list[Trial]:
    """The trials task `task_id` journaled so far, in order (none for a task not started)."""
    return [Trial.from_json(data) for data in read_records(home, task_file(home, task_id, JOURNAL))]


def journal_trial(home: Home, task_id: str, trial: Trial) -> None:
    """Append `trial` to the task's journal, durably, before the task goes on."""
    append_record(home, task_file(home, task_id, JOURNAL), trial.to_json())


def save_result(home: Home, result: TuneResult) -> None:
    """Write a finished task's result and trials, atomically: the task is then done."""
    trials = [t.to_json() for t in result.trials]
    home.atomic_write(task_file(home, result.task_id, RESULT),
                      json.dumps({**result.to_json(), "trials": trials}) + "\n")


def finished_result(home: Home, task_id: str) -> TuneResult | None:
    """The result of task `task_id` finished before, if it was."""
    done = task_file(home, task_id, RESULT)
    return TuneResult.from_json(json.loads(home.read_bytes(done))) if home.exists(done) else None


def land_result(home: Home, result: TuneResult, on: datetime.date | None = None) -> None:
    """The task's trials and result into the warehouse, named by the task: idempotent. They
    land under the day `on` (default today: the day the task finished). The `trials` table
    holds speedups over the default: the race's and pruning's comparisons of one config with
    another stay in the task's own files (`save_result`)."""
    today = on or datetime.date.today()
    trials = [trial_row(result, t, today) for t in result.trials if t.baseline is None]
    warehouse = Warehouse(home)
    warehouse.append(TRIALS, pa.Table.from_pylist([t.to_row() for t in trials], TRIALS.schema),
                     f"task-{result.task_id}")
    warehouse.append(TUNING_RESULTS, pa.Table.from_pylist([result_row(result, today).to_row()],
                                                          TUNING_RESULTS.schema), f"task-{result.task_id}")


def trial_row(result: TuneResult, trial: Trial, on: datetime.date) -> TrialRow:
    """The `trials` row of one trial of `result`'s task, landed on day `on`."""
    speedup, low, high = _flat(trial.speedup)
    return TrialRow(dt=on, trial_id=task_digest(result.task_id, trial.index), task_id=result.task_id,
                    kind=result.kind, fingerprint=result.fingerprint, env_key=result.env_key,
                    strategy=result.strategy, index=trial.index, config=config_key(trial.config),
                    program=trial.program, outcome=trial.outcome, speedup=speedup, ci_low=low,
                    ci_high=high, numerics_ok=trial.numerics_ok, compile_seconds=trial.compile_seconds,
                    error=trial.error, finished_at=trial.finished_at,
                    elapsed_seconds=trial.elapsed_seconds, measure_mode=result.measure_mode)


def result_row(result: TuneResult, on: datetime.date) -> ResultRow:
    """The `tuning_results` row of `result`, landed on day `on` (its trials and phases stay in
    the task's own files)."""
    speedup, low, high = _flat(result.speedup)
    relaxed = result.relaxed
    relaxed_speedup, relaxed_low, relaxed_high = _flat(relaxed.speedup if relaxed is not None else None)
    return ResultRow(
        dt=on, task_id=result.task_id, kind=result.kind, fingerprint=result.fingerprint,
        env_key=result.env_key, config=config_key(result.config), speedup=speedup, ci_low=low,
        ci_high=high, numerics_ok=result.numerics_ok, compiler_version=result.compiler_version,
        accepted=result.accepted, status=result.status, strategy=result.strategy,
        evaluations=result.evaluations, measured=result.measured, seconds_to_best=result.seconds_to_best,
        relaxed_config=config_key(relaxed.config) if relaxed is not None else None,
        relaxed_speedup=relaxed_speedup, relaxed_ci_low=relaxed_low, relaxed_ci_high=relaxed_high,
        autotune_results=result.autotune_results, reason=result.reason,
        numerics=_failed_outputs_json(result.numerics) if result.numerics else None,
        measure_mode=result.measure_mode, search_stop=result.search_stop,
        budget_share=result.budget_share, budget_reason=result.budget_reason, origin=result.origin,
        transferred_from=result.transferred_from, seconds=result.seconds)


def share_result(home: Home, result: TuneResult, env_key: str,
                 on: datetime.date | None = None) -> TuneResult:
    """`result` as the result of the same graph in environment `env_key`, which the tuner
    measures alike (the same program, platform, device kind and partitioning: the keys differ
    only in the compiler release their jobs ran, which the tuner does not run): the same
    verdict and figures, `Origin.SHARED` from the measured key, as a task of its own (its id
    from the result's and `env_key`, its trials the measured task's), landed under the day `on`
    (default today). Idempotent."""
    source = f"{result.fingerprint}/{result.env_key}"
    shared = replace(result, task_id=task_digest(result.task_id, "shared", env_key), env_key=env_key,
                     trials=[], origin=Origin.SHARED, transferred_from=source,
                     reason=f"{result.reason}; measured as {source}, a key measured alike")
    if finished_result(home, shared.task_id) is None:
        save_result(home, shared)
    land_result(home, shared, on)
    return shared


def _flat(interval: Interval | None) -> tuple[float | None, float | None, float | None]:
    """An interval's estimate and bounds, as a table's three columns hold them (None: null)."""
    return (None, None, None) if interval is None else (interval.estimate, interval.low, interval.high)


def _failed_outputs_json(checks: list[OutputCheck]) -> str:
    """The `tuning_results` table's `numerics`: the failed outputs as JSON, an error or
    tolerance that is not a finite number (a NaN the default did not produce) as null."""
    def number(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return json.dumps([{"index": c.index, "max_error": number(c.max_error),
                        "tolerance": number(c.tolerance), "detail": c.detail} for c in checks])
