"""One tuning task: search a module's compiler flags, then verify the best config afresh.

A task tunes a graph (`tune_module`: the unoptimized module, the graph-level space, results
keyed by the graph fingerprint) or an op (`tune_op`: a kernel cut out of its optimized graph,
the op-level space of its class, results keyed by the op fingerprint); both run `run_task`.

The search runs in a sandboxed worker that compiled the default once (`tuner.session`). Each
proposed config is compiled; if its program (optimized module + codegen flags) equals the
default's or one already measured, the known result is reused instead of running it again.
Each trial is appended to the task's journal (`<home>/tuner/tasks/<task>/trials.jsonl`,
flushed and fsynced), so a task killed at any moment resumes without repeating a finished
trial. A crash or timeout is recorded for its candidate (after one retry in a new worker) and
the search goes on.

The best trial is then re-measured in a fresh worker with a stricter interval and the numeric
check (the screen's winner is biased upward by selection). Only if its interval clears the
noise band is the result accepted; otherwise the task ends "no significant gain". The trials
and the result land in the warehouse under the task id, so finishing a task twice adds nothing.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.environment import current_environment
from ingest.fingerprint import graph_fingerprint
from ingest.hlo_module import HloModule
from ingest.warehouse import Warehouse
from tuner.compile import compiler_defaults
from tuner.evaluate import EvaluationResult, evaluate
from tuner.flags import CompilerConfig
from tuner.journal import append_record, read_records
from tuner.measure import MeasureSettings
from tuner.op_cut import OpCut
from tuner.space import SearchSpace, accepted_flags, config_key, graph_space, op_space
from tuner.strategies import FAILED, STRATEGIES, Strategy, TrialRecord, propose
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.worker import Worker, WorkerFailure

SEARCH_SETTINGS = MeasureSettings(max_seconds=6.0, target_half_width=0.02, max_pairs=200)
VERIFY_SETTINGS = MeasureSettings(confidence=0.999, min_pairs=40, max_seconds=30.0)


@dataclass(frozen=True)
class TuneSettings:
    """The budget and the strategy of a task."""

    budget_evals: int = 40
    budget_minutes: float | None = None
    strategy: str = "evolution"
    seed: int = 0
    search: MeasureSettings = SEARCH_SETTINGS
    verify: MeasureSettings = VERIFY_SETTINGS


@dataclass
class Trial:
    """One evaluated config of a search."""

    index: int
    config: CompilerConfig
    outcome: str  # measured | duplicate | identical | failed
    program: str | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    numerics_ok: bool | None = None
    compile_seconds: float | None = None
    error: str | None = None

    @property
    def fitness(self) -> float:
        """log(speedup) of a correct trial; FAILED otherwise."""
        if self.outcome == "failed" or not self.numerics_ok or not self.speedup:
            return FAILED
        return math.log(self.speedup)


@dataclass
class TuneResult:
    """How a task ended."""

    task_id: str
    fingerprint: str
    env_key: str
    status: str
    accepted: bool
    config: CompilerConfig
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    numerics_ok: bool | None
    evaluations: int
    measured: int
    strategy: str
    compiler_version: str
    kind: str = "graph"  # graph | op
    sources: list[str] = field(default_factory=list)  # a folded result's op tasks
    trials: list[Trial] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (without the trials)."""
        data = asdict(self)
        data.pop("trials")
        data["config"] = json.loads(config_key(self.config))
        return data


@dataclass(frozen=True)
class TuneTarget:
    """What a task tunes: the module it compiles, the fingerprint and kind its results are keyed
    by, and the space it searches."""

    module: HloModule
    fingerprint: str
    kind: str  # graph | op
    space: SearchSpace
    label: str
    configs: tuple[CompilerConfig, ...] = ()  # a fixed list to evaluate in order, not a search
    sources: tuple[str, ...] = ()  # the tasks the target was derived from (a fold's op tasks)


def tune_module(module: HloModule, home: Path, settings: TuneSettings, env_key: str | None = None,
                progress: bool = False, prior: list[TrialRecord] | None = None) -> TuneResult:
    """Tune `module`'s graph-level flags within the budget; resumes the task if interrupted."""
    platform = current_environment().platform
    fingerprint = graph_fingerprint(module)
    target = TuneTarget(module, fingerprint, "graph", graph_space(platform, accepted_flags(platform)),
                        module.name or fingerprint[:8])
    return run_task(target, home, settings, env_key, progress, prior)


def tune_op(cut: OpCut, home: Path, settings: TuneSettings, env_key: str | None = None,
            progress: bool = False) -> TuneResult:
    """Tune one kernel cut out of its graph (`tuner.op_cut`) over its op-level space; the
    result is keyed by the op fingerprint, with kind 'op'. On CPU it reaches users folded into
    a graph-level config (`tuner.fold`)."""
    platform = current_environment().platform
    if platform != "cpu":
        raise ValueError(f"op-level tuning on {platform} is not built (CPU only)")
    space = op_space(cut.op_class, accepted_flags(platform), compiler_defaults())
    return run_task(TuneTarget(cut.module, cut.fingerprint, "op", space, cut.name),
                    home, settings, env_key, progress)


def run_task(target: TuneTarget, home: Path, settings: TuneSettings, env_key: str | None = None,
             progress: bool = False, prior: list[TrialRecord] | None = None) -> TuneResult:
    """Search `target.space` for `target.module`, verify the best afresh, land the task."""
    from tqdm import tqdm

    environment = current_environment()
    env_key = env_key or environment.key()
    task_id = task_digest(target.kind, target.fingerprint, env_key, settings.strategy,
                          settings.seed, settings.budget_evals, environment.compiler_version,
                          *map(config_key, target.configs))
    task_dir = task_directory(home, task_id)
    finished = finished_result(task_dir)
    if finished is not None:  # landing again is a no-op unless a kill cut it short
        land_result(home, finished)
        return finished
    trials = _read_journal(task_dir / "trials.jsonl")
    strategy = None if target.configs else STRATEGIES[settings.strategy](
        target.space, settings.budget_evals, settings.seed, prior or [])
    started = time.monotonic()
    bar = tqdm(total=settings.budget_evals, initial=len(trials), desc=f"tune {target.label}",
               unit="eval", disable=not progress)
    with _Search(target.module.proto, settings.seed) as search:
        while len(trials) < settings.budget_evals:
            if settings.budget_minutes and time.monotonic() - started > 60 * settings.budget_minutes:
                break
            config = _next_config(target, strategy, trials)
            if config is None:
                break
            trial = search.run(len(trials), config, trials, settings.search)
            append_record(task_dir / "trials.jsonl", asdict(trial))
            trials.append(trial)
            bar.update()
    bar.close()
    result = _verify(target, trials, settings, task_id, env_key, environment.compiler_version)
    save_result(task_dir, result)
    land_result(home, result)
    return result


def _next_config(target: TuneTarget, strategy: Strategy | None, trials: list[Trial]) -> CompilerConfig | None:
    """The target's next listed config, or the strategy's next proposal; None when done."""
    if target.configs:
        return dict(target.configs[len(trials)]) if len(trials) < len(target.configs) else None
    history = [TrialRecord({}, 0.0)] + [TrialRecord(t.config, t.fitness) for t in trials]
    return propose(strategy, history)


def task_directory(home: Path, task_id: str) -> Path:
    """Where a task keeps its journal and, once finished, its result."""
    return Path(home) / "tuner" / "tasks" / task_id


def save_result(task_dir: Path, result: TuneResult) -> None:
    """Write a finished task's result and trials, atomically: the task is then done."""
    done = task_dir / "result.json"
    done.parent.mkdir(parents=True, exist_ok=True)
    tmp = done.with_name(f".{done.name}.tmp")
    tmp.write_text(json.dumps({**result.to_json(), "trials": [asdict(t) for t in result.trials]}) + "\n")
    os.replace(tmp, done)


def finished_result(task_dir: Path) -> TuneResult | None:
    """The result of a task finished before, if it was."""
    done = task_dir / "result.json"
    return _result_from_json(json.loads(done.read_text())) if done.exists() else None


class _Search:
    """The search's worker: the default compiled once, candidates compiled and measured."""

    def __init__(self, module_proto: bytes, seed: int) -> None:
        self.module_proto, self.seed = module_proto, seed
        self.worker = Worker()
        self.default_program = ""

    def __enter__(self) -> "_Search":
        self._prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.close()

    def _prepare(self) -> None:
        prepared = self.worker.call("tuner.session:prepare", module_proto=self.module_proto, seed=self.seed)
        self.default_program = prepared["program"]

    def run(self, index: int, config: CompilerConfig, earlier: list[Trial],
            settings: MeasureSettings) -> Trial:
        """Evaluate one config, reusing the result of a program already measured."""
        for attempt in range(2):
            try:
                return self._run(index, config, earlier, settings)
            except WorkerFailure as failure:
                if attempt == 0 and failure.kind in ("crash", "timeout", "oom"):
                    time.sleep(1.0)  # back off, then retry once in a fresh worker
                    self._prepare()
                    continue
                self._prepare()
                return Trial(index, config, "failed", error=f"{failure.kind}: {failure.reason}")
        raise AssertionError("unreachable")

    def _run(self, index: int, config: CompilerConfig, earlier: list[Trial],
             settings: MeasureSettings) -> Trial:
        compiled = self.worker.call("tuner.session:compile_candidate", config=config)
        if "error" in compiled:
            return Trial(index, config, "failed", error=compiled["error"])
        program = compiled["program"]
        seconds = compiled["compile_seconds"]
        if program == self.default_program:
            self.worker.call("tuner.session:discard_candidate", program=program)
            return Trial(index, config, "identical", program, 1.0, 1.0, 1.0, True, seconds)
        known = next((t for t in earlier if t.program == program and t.outcome == "measured"), None)
        if known is not None:
            self.worker.call("tuner.session:discard_candidate", program=program)
            return Trial(index, config, "duplicate", program, known.speedup, known.ci_low,
                         known.ci_high, known.numerics_ok, seconds)
        measured = self.worker.call("tuner.session:measure_candidate", timeout=300,
                                    program=program, settings=settings)
        return Trial(index, config, "measured", program, measured["speedup"], measured["ci_low"],
                     measured["ci_high"], measured["numerics_ok"], seconds)


def _verify(target: TuneTarget, trials: list[Trial], settings: TuneSettings, task_id: str,
            env_key: str, compiler_version: str) -> TuneResult:
    """Re-measure the best trial in a fresh worker; accept it only if it holds up."""
    measured = [t for t in trials if t.outcome == "measured" and t.fitness > 0]
    base = dict(task_id=task_id, fingerprint=target.fingerprint, env_key=env_key,
                evaluations=len(trials), measured=sum(t.outcome == "measured" for t in trials),
                strategy=settings.strategy, compiler_version=compiler_version, kind=target.kind,
                sources=list(target.sources), trials=trials)
    if not measured:
        return TuneResult(status="no significant gain", accepted=False, config={}, speedup=None,
                          ci_low=None, ci_high=None, numerics_ok=None, **base)
    best = max(measured, key=lambda t: t.fitness)
    check: EvaluationResult = evaluate(target.module, best.config, settings=settings.verify,
                                       seed=settings.seed + 1)
    if check.error:
        return TuneResult(status=f"verification failed: {check.error}", accepted=False,
                          config=best.config, speedup=None, ci_low=None, ci_high=None,
                          numerics_ok=None, **base)
    accepted = bool(check.significant and check.numerics_ok)
    return TuneResult(status="accepted" if accepted else "no significant gain", accepted=accepted,
                      config=best.config, speedup=check.speedup, ci_low=check.ci_low,
                      ci_high=check.ci_high, numerics_ok=check.numerics_ok, **base)


def land_result(home: Path, result: TuneResult) -> None:
    """The task's trials and result into the warehouse, named by the task: idempotent."""
    today = datetime.date.today()
    rows = [{"dt": today, "trial_id": task_digest(result.task_id, config_key(t.config)),
             "task_id": result.task_id, "kind": result.kind, "fingerprint": result.fingerprint,
             "env_key": result.env_key, "strategy": result.strategy, "index": t.index,
             "config": config_key(t.config), "program": t.program, "outcome": t.outcome,
             "speedup": t.speedup, "ci_low": t.ci_low, "ci_high": t.ci_high,
             "numerics_ok": t.numerics_ok, "compile_seconds": t.compile_seconds, "error": t.error}
            for t in result.trials]
    warehouse = Warehouse(home)
    warehouse.append(TRIALS, pa.Table.from_pylist(rows, TRIALS.schema), f"task-{result.task_id}")
    summary = {k: v for k, v in result.to_json().items()
               if k in TUNING_RESULTS.schema.names}
    summary.update(dt=today, config=config_key(result.config))
    warehouse.append(TUNING_RESULTS, pa.Table.from_pylist([summary], TUNING_RESULTS.schema),
                     f"task-{result.task_id}")


def _read_journal(path: Path) -> list[Trial]:
    """The trials journaled so far (see tuner.journal: a line torn by a kill is dropped)."""
    trials = []
    for data in read_records(path):
        data["config"] = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()}
        trials.append(Trial(**data))
    return trials


def _result_from_json(data: dict[str, Any]) -> TuneResult:
    trials = data.pop("trials", [])
    data["config"] = {k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()}
    result = TuneResult(**data)
    result.trials = [Trial(**{**t, "config": {k: tuple(v) if isinstance(v, list) else v
                                              for k, v in t["config"].items()}}) for t in trials]
    return result


def task_digest(*parts: object) -> str:
    """A task's (or a trial's) id from what defines it."""
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()
