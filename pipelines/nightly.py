"""`fdo nightly`: one turn of the loop for a date: ingest, rank, tune, deliver, validate, savings.

Each stage appends a row to the `runs` ledger when it ends, done or failed, with its timings and
counts. A date whose stages are all done is not redone; a run that failed or was killed resumes
at the first stage not done. That is safe because every stage is idempotent on its own:
ingestion skips inputs it has (markers), ranking and savings replace the date's rows, a tuning
task resumes from its journal and lands once, deliver and validate publish only a change.
One run at a time per home: a lock file held by the process (the OS drops it if it dies).
"""

from __future__ import annotations

import datetime
import json
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from pipelines import stages
from pipelines.tables import RUNS
from storage.home import Home
from storage.home_factory import open_home
from storage.warehouse import Warehouse, partition_days
from tasks.records import TaskOutcome
from tasks.runner import LocalRunner, Runner
from tuner.kinds import KINDS
from vocabulary.tasks import TaskStatus
from vocabulary.tuning import Kind

if TYPE_CHECKING:
    from tuner.task_seconds import TaskSeconds

# The share of a tune stage's minutes its transfer checks may take: the rest is the searches'.
CHECK_SHARE = 0.75
# The nights whose tune stages say what a check and a search take (`task_seconds`): a week's,
# so the figure follows the fleet's programs and this machine as they change.
TASK_SECONDS_DAYS = 7
# The share of the searches' time kept for the late checks where tonight's searches left kin
# waiting (one search a family a night, tuner.plan): night 1 of the reach fleet spent it all on
# searches without it, and their families' other groups waited a night (docs/bench_reach.md).
LATE_CHECK_SHARE = 0.3


@dataclass(frozen=True)
class NightlySettings:
    """What one nightly run does and how much it may spend."""

    date: datetime.date
    inbox: tuple[Path, ...] = ()  # where inputs arrive (default: HOME/inbox on a local home)
    window_days: int = 7
    top: int = 3  # graph searches a night (transfer checks and shared results come on top)
    top_ops: int = 2  # ops to tune, then fold into their graphs
    # GPU graphs whose kernels XLA's autotuner tunes offline (where a node autotunes: a GPU's)
    top_kernels: int = 2
    tune_evals: int = 24  # per graph
    tune_minutes: float = 20.0  # for the whole stage
    # Graph candidates the ranking keeps (`ranking.rank.RankSettings.top_k`): the keys a night
    # may cover with checks and shared results, beyond the `top` it searches.
    rank_top: int = 20
    # The ranking's long tail (`ranking.rank.RankSettings.min_share`): keys under this share of
    # the fleet's chip-time are not candidates, and a night reaches them only by shared results.
    rank_min_share: float = 0.001
    # Transfer checks before searches, searches seeded with transfers (`tuner.transfer`), and
    # keys measured alike sharing a result; False: each key searched on its own, as before.
    transfer: bool = True
    # With `transfer` False, keys measured alike still share a result (for comparisons that
    # tell sharing from transfer apart).
    share_alike: bool = False
    validate_minutes: float = 10.0
    # Fresh workers per tuned winner and per validated entry (None: the tuner's default).
    verify_workers: int | None = None
    # Entries measured more recently on the validator's compiler are not measured again.
    revalidate_after: datetime.timedelta = datetime.timedelta(days=1)
    beam_args: tuple[str, ...] = ()
    force: bool = False  # run every stage again, even for a finished date


class StageStatus(StrEnum):
    """How a stage of a run ended, as the `runs` ledger holds it: DONE or FAILED (each
    attempt's row); SKIPPED, done by an earlier attempt (in the report only: no row)."""

    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class StageResult:
    """One stage of a run: what it did, or why it failed, or that it was done before."""

    stage: str
    status: StageStatus
    seconds: float = 0.0
    counts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class NightlyReport:
    """A nightly run, stage by stage."""

    date: str
    stages: list[StageResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every stage is done."""
        return (all(s.status in (StageStatus.DONE, StageStatus.SKIPPED) for s in self.stages)
                and len(self.stages) == len(STAGES))

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"date": self.date, "ok": self.ok, "stages": [s.__dict__ for s in self.stages]}


def run_nightly(home: Home, settings: NightlySettings, progress: bool = False,
                runner: Runner | None = None) -> NightlyReport:
    """Run the stages of `settings.date` not yet done, in order, on `home` (local or a URL);
    stops at the first failure. The tuning tasks and the validator's measurements run on
    `runner` (default: here, one after another; `tasks.runner`)."""
    runner = runner or LocalRunner()
    home = open_home(home)
    report = NightlyReport(settings.date.isoformat())
    with home.lock(home.location("pipelines", "nightly.lock"), "nightly run", wait=False):
        ledger = stage_attempts(home, settings.date)
        for stage in STAGES:
            attempts = ledger.get(stage, [])
            if StageStatus.DONE in attempts and not settings.force:
                report.stages.append(StageResult(stage, StageStatus.SKIPPED))
                continue
            result = _run_stage(stage, home, settings, progress, runner)
            _record(home, settings.date, result, len(attempts) + 1)
            report.stages.append(result)
            if result.status == StageStatus.FAILED:
                break
    return report


def ledger_rows(home: Home, date: datetime.date | None = None) -> pa.Table:
    """The run ledger, of one date or all."""
    runs = Warehouse(home).read(RUNS)
    if date is not None:
        runs = runs.filter(pc.equal(runs.column("dt"), pa.scalar(date, pa.date32())))
    return runs.sort_by([("dt", "ascending"), ("started_at", "ascending")])


def _run_stage(stage: str, home: Home, settings: NightlySettings, progress: bool,
               runner: Runner) -> StageResult:
    started = time.perf_counter()
    try:
        counts = _STAGE_FUNCTIONS[stage](home, settings, progress, runner)
    except Exception as exc:  # a failed stage is recorded and ends the run; the next run resumes
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        return StageResult(stage, StageStatus.FAILED, time.perf_counter() - started, {}, error)
    return StageResult(stage, StageStatus.DONE, time.perf_counter() - started, counts)


def _ingest(home: Home, settings: NightlySettings, progress: bool,
            runner: Runner | None = None) -> dict[str, Any]:
    # Inputs are local files: a URL home has no default inbox, and the hook spools its modules
    # only into a local home.
    local = home.local("the home's inbox") if home.is_local else None
    inbox = [p for p in (settings.inbox or ((local / "inbox",) if local else ())) if p.exists()]
    spooled = local / "spool" / "symbols" if local else None
    symbol_paths = inbox + ([spooled] if spooled and spooled.exists() else [])
    symbols = stages.ingest(home, "symbols", symbol_paths, progress) if symbol_paths else None
    profiles = stages.ingest(home, "profiles", inbox, progress) if inbox else None
    hits = stages.ingest(home, "hits", (), progress)
    return {"modules": symbols.modules if symbols else 0,
            "graph_runs": profiles.graph_runs if profiles else 0,
            "op_runs": profiles.op_runs if profiles else 0, "hits": hits.rows,
            "quarantined": len((symbols.quarantined if symbols else []) +
                               (profiles.quarantined if profiles else []) + hits.quarantined)}


def _rank(home: Home, settings: NightlySettings, progress: bool,
          runner: Runner | None = None) -> dict[str, Any]:
    from ranking.rank import RankSettings, rank

    candidates, _ = rank(home, RankSettings(date=settings.date, window_days=settings.window_days,
                                            top_k=settings.rank_top, min_share=settings.rank_min_share),
                         settings.beam_args)
    kinds = candidates.column("kind").to_pylist()
    return {"graph_candidates": kinds.count(Kind.GRAPH), "op_candidates": kinds.count(Kind.OP)}


def _tune(home: Home, settings: NightlySettings, progress: bool,
          runner: Runner | None = None) -> dict[str, Any]:
    """The night's graph tasks in the order `tuner.plan` states (shares, the checks that come
    first, within `CHECK_SHARE` of the stage's minutes, searches, less `LATE_CHECK_SHARE` where
    they left kin waiting, then the other checks), at the past nights' seconds a task
    (`task_seconds`); then the kernels and the ops, in what time is left."""
    from tuner import plan
    from tuner.transfer import transferred

    deadline = time.time() + 60 * settings.tune_minutes
    runner = runner or LocalRunner()
    base = stages.tune_settings(Kind.GRAPH, budget_evals=settings.tune_evals,
                                verify_workers=settings.verify_workers, day=settings.date)
    share_alike = settings.transfer or settings.share_alike
    state = plan.NightState.load(home, runner.environments(), settings.date, share_alike=share_alike)
    shared = plan.share_standing(home, state, settings.date)
    seconds = task_seconds(home, settings.date, base.verify_workers)
    planned = plan.plan_checks(home, settings.date, state, seconds, settings.force) if settings.transfer else []
    checks, waiting = plan.checks_first(state, planned, seconds)  # waiting: after searches
    checked = stages.run_planned(home, checks, state, base, runner,
                                 deadline=time.time() + CHECK_SHARE * (deadline - time.time()),
                                 progress=progress)
    accepted = {task.key: transfer for task, result in zip(checks, checked.results)
                if result is not None and result.accepted
                and (transfer := transferred(result.config, task.transfers)) is not None}
    state = plan.NightState.load(home, runner.environments(), settings.date, share_alike=share_alike)  # checked
    searches = plan.plan_searches(home, settings.date, state, settings.top, settings.tune_evals, accepted,
                                  settings.transfer, settings.force, frozenset(c.key for c in waiting), seconds)
    searches_until = deadline
    if settings.transfer and plan.deferred_kin(state, searches):
        searches_until = time.time() + (1 - LATE_CHECK_SHARE) * (deadline - time.time())
    searched = stages.run_planned(home, searches, state, base, runner, deadline=searches_until,
                                  reserve=1 if settings.top_ops else 0, progress=progress)
    if settings.transfer and time.time() < deadline:  # the checks tonight's results made possible
        state = plan.NightState.load(home, runner.environments(), settings.date, share_alike=share_alike)
        late = plan.plan_checks(home, settings.date, state, seconds, settings.force, late=True)
        checks += late
        checked.extend(stages.run_planned(home, late, state, base, runner, deadline=deadline,
                                       reserve=1 if settings.top_ops else 0, progress=progress))
    results = [r for r in searched.results if r is not None]
    counts = {"graphs": len(searches), "tuned": len(results), "accepted": sum(r.accepted for r in results),
              "budget_shares": [round(t.allotment.share, 4) for t in searches if t.allotment is not None],
              "budget_evals": [t.allotment.budget_evals for t in searches if t.allotment is not None],
              "search_stops": [r.search_stop for r in results],
              **plan.night_counts(checks, checked.results, searches, searched.results,
                                  len(shared) + len(checked.shared) + len(searched.shared)),
              **_not_tuned(checked.outcomes + searched.outcomes)}
    if settings.top_kernels:
        counts.update(_tune_kernels(home, settings, progress, runner, deadline))
    if settings.top_ops and deadline > time.time():
        counts.update(_tune_ops(home, settings, progress, runner, deadline))
    return counts


def _tune_ops(home: Home, settings: NightlySettings, progress: bool, runner: Runner,
              deadline: float) -> dict[str, int]:
    """The ops' tasks of the night (`settings.top_ops`), sharing the stage's minutes left."""
    left = (deadline - time.time()) / 60
    found = KINDS[Kind.OP].candidates(home, settings.top_ops, True, runner.environments())
    ops = stages.tune_candidates(Kind.OP, home, found.tunable,
                                 stages.tune_settings(Kind.OP, budget_minutes=left / settings.top_ops,
                                                      verify_workers=settings.verify_workers, day=settings.date),
                                 progress, runner=runner)
    return {"ops": len(ops.results), "ops_accepted": sum(r.accepted for r in ops.results),
            "folds": len(ops.folds), "folds_accepted": sum(f.accepted for _, f in ops.folds)}


def task_seconds(home: Home, date: datetime.date, verify_workers: int) -> TaskSeconds:
    """What a night's tasks are expected to take (`tuner.task_seconds`), from the
    `TASK_SECONDS_DAYS` nights before `date`: a check and a search on average over their tune
    stages (the ledger's counts), each where some ran, `TaskSeconds`' defaults where none did;
    and a check of each key by its step time, from the checks those nights ran, verified in
    `verify_workers` fresh workers."""
    from tuner.task_seconds import TaskSeconds, past_checks, step_seconds

    days = set(partition_days(date - datetime.timedelta(days=TASK_SECONDS_DAYS), date - datetime.timedelta(days=1)))
    spent = {"checks": [0.0, 0], "searches": [0.0, 0]}
    for row in Warehouse(home).read(RUNS, filter_dt=days.__contains__).to_pylist():
        if row["stage"] == "tune" and row["status"] == StageStatus.DONE:
            counts = json.loads(row["counts"] or "{}")
            for path, total in spent.items():
                total[0] += counts.get(f"{path}_seconds", 0.0)
                total[1] += counts.get(path, 0)
    default = TaskSeconds()
    (check_seconds, checks), (search_seconds, searches) = spent["checks"], spent["searches"]
    steps = step_seconds(home, days | {date.isoformat()})  # tonight's profiles too: the keys planned
    return TaskSeconds(check_seconds / checks if checks else default.check,
                       search_seconds / searches if searches else default.search,
                       steps, past_checks(home, days, steps), verify_workers)


def _tune_kernels(home: Home, settings: NightlySettings, progress: bool, runner: Runner,
                  deadline: float) -> dict[str, int]:
    """The kernels tasks of the top GPU graphs not tuned so far that the runner's machines can
    measure (none where no machine autotunes: a CPU's), within the stage's `deadline`."""
    candidates = KINDS[Kind.KERNELS].candidates(home, settings.top_kernels, True, runner.environments()).tunable
    if not candidates:
        return {"kernels": 0}
    kernels = stages.tune_settings(Kind.KERNELS, verify_workers=settings.verify_workers,
                                   day=settings.date)
    results = stages.tune_candidates(Kind.KERNELS, home, candidates, kernels, progress, deadline=deadline,
                                     reserve=1 if settings.top_ops else 0, runner=runner).results
    return {"kernels": len(candidates), "kernels_tuned": len(results),
            "kernels_accepted": sum(r.accepted for r in results)}


def _not_tuned(outcomes: list[TaskOutcome]) -> dict[str, int]:
    """The graph tasks with no result, by why: the budget left them no time (`out_of_budget`),
    no node measures their environment (`unroutable`: left for a later night), they failed."""
    found = Counter(o.status for o in outcomes if o.result is None)
    return {"out_of_budget": found[TaskStatus.NOT_STARTED], "unroutable": found[TaskStatus.UNROUTABLE],
            "failed": found[TaskStatus.FAILED]}


def _deliver(home: Home, settings: NightlySettings, progress: bool,
             runner: Runner | None = None) -> dict[str, Any]:
    from delivery.deliver import deliver

    return {"version": deliver(home, settings.beam_args)}


def _validate(home: Home, settings: NightlySettings, progress: bool,
              runner: Runner | None = None) -> dict[str, Any]:
    from validator.validate import ValidateSettings, validate

    run = ValidateSettings(budget_minutes=settings.validate_minutes,
                           revalidate_after=settings.revalidate_after,
                           workers=settings.verify_workers or ValidateSettings.workers)
    return validate(home, settings=run, progress=progress,
                    measurer=stages.measurer(runner)).to_json()


def _savings(home: Home, settings: NightlySettings, progress: bool,
             runner: Runner | None = None) -> dict[str, Any]:
    from ranking.savings import BookedSavings, savings
    from ranking.verified_coverage import verified_coverage
    from tuner.decided import defaults_kept

    first = settings.date - datetime.timedelta(days=settings.window_days - 1)
    rows = savings(home, first, settings.date, settings.beam_args)
    booked = BookedSavings.of(rows)
    # What the night left the fleet: the store after its deliver and validate, and the keys
    # whose defaults it verified best, over the window.
    covered = verified_coverage(home, first, settings.date, (runner or LocalRunner()).environments(),
                                defaults_kept=defaults_kept(home, settings.date))
    # The dashboard's names: run time, compile time, both.
    return {"rows": rows.num_rows, "chip_hours_saved": round(booked.runtime / 3600, 3),
            "compile_chip_hours_saved": round(booked.compile / 3600, 3),
            "total_chip_hours_saved": round(booked.total / 3600, 3),
            "coverage": covered.to_json()}


@dataclass(frozen=True)
class NightCoverage:
    """The verified coverage a nightly run left (`ranking.verified_coverage`, as its savings
    stage recorded it): the run's date, which night of the ledger it was (1 for the first that
    recorded one), the covered share of the tunable chip-time (running a verified faster config;
    None: nothing tunable), and its figures in chip-seconds; and the decided share (covered, or
    defaults verified best; None: nothing tunable, or a night recorded before it was)."""

    date: datetime.date
    night: int
    share: float | None
    tunable_chip_seconds: float
    covered_chip_seconds: float
    decided_share: float | None = None
    decided_chip_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, the date in ISO form."""
        return {**self.__dict__, "date": self.date.isoformat()}


def coverage_by_night(home: Home) -> list[NightCoverage]:
    """The verified coverage each nightly run recorded, oldest first: its savings stage's last
    done attempt (a run from before coverage was recorded counts no night)."""
    recorded: dict[datetime.date, dict[str, Any]] = {}
    for row in ledger_rows(open_home(home)).to_pylist():
        if row["stage"] == "savings" and row["status"] == StageStatus.DONE:
            figure = json.loads(row["counts"] or "{}").get("coverage")
            if figure is not None:
                recorded[row["dt"]] = figure
    return [NightCoverage(date, night, figure["share"], figure["tunable_chip_seconds"],
                          figure["covered_chip_seconds"], figure.get("decided_share"),
                          figure.get("decided_chip_seconds"))
            for night, (date, figure) in enumerate(sorted(recorded.items()), start=1)]


# The one table of the nightly stages, in the order a run takes them: each stage's name and its
# function, (home, settings, progress, runner) -> its counts (the runner runs the tasks of the
# stages that have some: tune, validate).
_STAGE_FUNCTIONS: dict[str, Callable[[Home, NightlySettings, bool, Runner], dict[str, Any]]] = {
    "ingest": _ingest, "rank": _rank, "tune": _tune, "deliver": _deliver, "validate": _validate,
    "savings": _savings,
}
STAGES = tuple(_STAGE_FUNCTIONS)


def stage_attempts(home: Home, date: datetime.date) -> dict[str, list[StageStatus]]:
    """Stage -> the statuses of its attempts for `date` so far, in order (a stage not tried: absent)."""
    found: dict[str, list[StageStatus]] = {}
    for row in ledger_rows(home, date).select(["stage", "status"]).to_pylist():
        found.setdefault(row["stage"], []).append(StageStatus(row["status"]))
    return found


def _record(home: Home, date: datetime.date, result: StageResult, attempt: int) -> None:
    now = datetime.datetime.now(datetime.UTC)
    row = {"dt": date, "stage": result.stage, "attempt": attempt, "status": result.status,
           "started_at": now - datetime.timedelta(seconds=result.seconds), "seconds": result.seconds,
           "counts": json.dumps(result.counts, sort_keys=True, default=str), "error": result.error}
    Warehouse(home).append(RUNS, pa.Table.from_pylist([row], RUNS.schema), f"{result.stage}-{attempt}")
