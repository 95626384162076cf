"""A small but complete FDO home for the dashboard tests: five days of a simulated fleet that
went through ranking, tuning, delivery, validation, the compiler hook and savings accounting.

What the tests need of it holds whatever the date and the CPU: the fleet's five days are the
same days of its own calendar (FLEET_DAY after its epoch) ending today, so its jobs and untuned
runs are the same rows on any date; the keys tuned are chosen by where they run, not by where
they happen to rank against this machine's environment (`_tasks`). What still hangs on the
environment keys (this machine's ISA features, the releases' dates): which jobs hold out each
entry, and its true effect in the fleet.

Every table is written by its stage's own code: the simulator and ingestion, the Beam ranking
and savings, deliver and import, the tuner's landing (tuner.persist.land_result) and the
validator's plan, decisions and run (validator.plan, validator.run), and hit ingestion. What
would cost minutes here is the measuring: the tuner's trials and the validator's measurements
are the stages' own result objects (tuner.trial.Trial, execution.evaluate.EvaluationResult)
with figures set here, and the hook's records are spooled as the hook writes them. One entry's
holdout arm is written here as graph_runs rows (HOLDOUT_PART): jobs of the defaults, HOLDOUT_SLOWDOWN
times slower per execution than the entry's tuned jobs, so that its realized speedup is clear. The
run ledger holds today's savings stage as a nightly run records it (`_night`), with the verified
coverage its code computes.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from delivery.deliver import deliver
from delivery.imports import import_file
from delivery.store_writer import Store
from execution.evaluate import EvaluationResult
from hlo.environment import current_environment, store_key
from ingest.hits import STALE_SECONDS, ingest_hits, spool_path, to_line
from ingest.tables import GRAPH_RUNS, GRAPHS
from pipelines.tables import RUNS
from ranking.rank import RankSettings, rank
from ranking.savings import savings
from ranking.verified_coverage import verified_coverage
from storage.warehouse import Warehouse
from tuner.candidates import latest_candidates
from tuner.persist import land_result, task_digest
from tuner.result import TuneResult
from tuner.trial import Trial
from validator.plan import Planner
from validator.run import Run
from validator.toolchains import Registry
from validator.validate import ValidateSettings
from vocabulary.interval import Interval
from vocabulary.tuning import TrialOutcome, Verdict
from workloads.simulator.run import simulate, store_lookup

WORKLOADS = ["mlp-s"]
# Beam's in-process runner in one process: the same pipelines, without starting workers.
BEAM_ARGS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
JOBS = 300
SEED = 3
# The fleet's first day, in days after its epoch (simulate's `epoch`). Counted from the
# simulator's own epoch, the five days ending today would be another fleet each day the suite
# runs, whose keys rank otherwise against this machine's: what the tests need of it would hold
# on some days only.
FLEET_DAY = 120
TASKS = 8  # graph keys tuned the day before (`_tasks`); the last shows no gain
RANKED = 64  # graph keys ranked the day before: every one above the long tail, to choose the tasks from
TRIALS_PER_TASK = 8
TRIAL_SECONDS = 30.0  # each trial's time on the task's clock: the tuner's share of the loop's cost
CONFIGS = ({"xla_cpu_use_xnnpack": False}, {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"})
VALIDATE = ValidateSettings(workers=1)  # the dashboard shows decisions, not how they are measured
MEASURE_SECONDS = 40.0  # each validator measurement's time: the validator's share of the loop's cost
HOLDOUT_PART = "dashboard-holdout"
HOLDOUT_JOBS = 6  # per day: enough for a realized speedup (ranking.realized.MIN_JOBS is 5)
HOLDOUT_SLOWDOWN = 1.25


def build_home(home: Path, today: datetime.date | None = None) -> Path:
    """Fill `home` with days today-4 .. today of the whole loop; returns `home`."""
    today = today or datetime.date.today()
    day = [today - datetime.timedelta(days=4 - i) for i in range(5)]
    fleet = {"jobs": JOBS, "seed": SEED, "workloads": WORKLOADS,
             "epoch": day[0] - datetime.timedelta(days=FLEET_DAY)}
    simulate(home, days=2, start=day[0], **fleet)
    rank(home, RankSettings(date=day[1], window_days=2, top_k=RANKED), BEAM_ARGS)
    keys = _tasks(home)
    measured = store_key(*keys[1])  # the one entry the validator measures here
    for task, key in enumerate(keys):
        land_result(home, _tuned(home, task, key, accepted=task < len(keys) - 1), on=day[1])
    deliver(home, BEAM_ARGS)
    # The first run re-measures the entry it can measure here; the others are on other machines.
    _validate(home, _at(day[2], 6))
    # The fleet's jobs look configs up in the live store: its version changes after the first
    # simulated day of hits, so that the savings come from two config versions.
    simulate(home, days=1, start=day[2], tuned=store_lookup(home), **fleet)
    # A fleet job's compile with the costliest key's config fails: the second run removes it.
    _hook(home, day[3], applied=measured, fallback=store_key(*keys[0]))
    _validate(home, _at(day[3], 12))
    simulate(home, days=2, start=day[3], tuned=store_lookup(home), **fleet)
    _hook(home, day[4], applied=measured, fallback=None)
    _holdout(home, measured, day[3:])
    _import_op_entry(home)  # today, measured now (import stamps it so)
    rank(home, RankSettings(date=today, window_days=5, top_k=5), BEAM_ARGS)
    savings(home, day[0], today, BEAM_ARGS)
    _night(home, day[0], today)
    return home


def _night(home: Path, first: datetime.date, today: datetime.date) -> None:
    """Today's savings stage in the run ledger, as `fdo nightly` records it: done, with the
    verified coverage over the window (`ranking.verified_coverage`) among its counts."""
    covered = verified_coverage(home, first, today)
    Warehouse(home).append(RUNS, pa.Table.from_pylist([{
        "dt": today, "stage": "savings", "attempt": 1, "status": "done",
        "started_at": datetime.datetime.now(datetime.UTC), "seconds": 1.0,
        "counts": json.dumps({"coverage": covered.to_json()}), "error": None}], RUNS.schema), "savings-1")


def _tasks(home: Path) -> list[tuple[str, str]]:
    """The TASKS graph keys (fingerprint, env_key) tuned the day before: the best-ranked keys of
    other machines (another platform, device kind or device count: the validator can neither
    measure nor re-key them here), with the best-ranked key of this machine's environment
    second, the one entry the validator measures here. So the first, whose config the fleet's
    compile fails with, and the last, which shows no gain, are other machines' on any CPU."""
    here = current_environment()
    graphs = Warehouse(home).read(GRAPHS, ["env_key", "platform", "device_kind", "device_count"]).to_pylist()
    machine = {g["env_key"]: (g["platform"], g["device_kind"], g["device_count"]) for g in graphs}
    ranked = [(c["fingerprint"], c["env_key"]) for c in latest_candidates(home, "graph").to_pylist()]
    mine = [key for key in ranked if key[1] == here.key()]
    others = [key for key in ranked if machine[key[1]] != (here.platform, here.device_kind, here.device_count)]
    if not mine or len(others) < TASKS - 1:
        raise AssertionError(f"{len(mine)} ranked keys run here, {len(others)} on other machines: "
                             f"too few for {TASKS} tasks of which one runs here")
    return [others[0], mine[0], *others[1:TASKS - 1]]


def _at(dt: datetime.date, hour: int, minute: int = 0) -> datetime.datetime:
    return datetime.datetime.combine(dt, datetime.time(hour, minute), datetime.UTC)


def _tuned(home: Path, task: int, key: tuple[str, str], accepted: bool) -> TuneResult:
    """A task's result as tuner.tune returns it: its trials in search order (the second task
    meets a failed compile, a program identical to the default's and a duplicate), the best
    verified afresh, or no significant gain."""
    fingerprint, env_key = key
    speedup = 1.22 - 0.02 * task if accepted else 1.004
    config = CONFIGS[task % len(CONFIGS)]
    trials = []
    for index in range(TRIALS_PER_TASK):
        outcome = ((TrialOutcome.FAILED, TrialOutcome.IDENTICAL, TrialOutcome.DUPLICATE)[index]
                   if index < 3 and task == 1 else TrialOutcome.MEASURED)
        figure = 1 + (speedup - 1) * (index + 1) / TRIALS_PER_TASK
        trials.append(Trial(index, config, outcome, program=f"program-{task}-{index}",
                            speedup=(Interval(figure, figure - 0.03, figure + 0.03)
                                     if outcome == TrialOutcome.MEASURED else None),
                            numerics_ok=outcome == TrialOutcome.MEASURED, compile_seconds=0.4,
                            elapsed_seconds=TRIAL_SECONDS * (index + 1),
                            error="compile failed" if outcome == TrialOutcome.FAILED else None))
    return TuneResult(
        task_id=task_digest("graph", fingerprint, env_key, "evolution", task), fingerprint=fingerprint,
        env_key=env_key, status=Verdict.ACCEPTED if accepted else Verdict.NO_GAIN,
        config=config, speedup=Interval(speedup, speedup - 0.05, speedup + 0.05), numerics_ok=True,
        evaluations=len(trials), measured=sum(t.outcome == TrialOutcome.MEASURED for t in trials),
        strategy="evolution", compiler_version=_compiler(home, env_key), trials=trials)


def _compiler(home: Path, env_key: str) -> str:
    graphs = Warehouse(home).read(GRAPHS, ["env_key", "compiler_version"])
    return graphs.filter(pc.equal(graphs.column("env_key"), env_key)).column("compiler_version")[0].as_py()


def _import_op_entry(home: Path) -> None:
    """An owner-validated op config for an environment that ran nowhere, as `fdo store import`."""
    path = home / "owner-configs.jsonl"
    path.write_text('{"fingerprint": "%s", "env_key": "%s", "kind": "op", '
                    '"config": {"xla_cpu_use_xnnpack": false}, "speedup": 1.3}\n' % ("a" * 32, "b" * 32))
    import_file(home, path)


def _validate(home: Path, now: datetime.datetime) -> None:
    """One validation run at `now` as `fdo validate` makes it, under this interpreter's
    toolchain; each entry it queues measures 1.1x [1.06, 1.14] again, MEASURE_SECONDS after the
    last."""
    chain = Registry(home).get(None)
    run = Run.open(home, chain)
    planner = Planner(home, chain, now, VALIDATE.max_age, VALIDATE.revalidate_after)
    free, queue, _ = planner.plan(decided=set())
    for decision in free:
        run.record(decision)
    for n, queued in enumerate(queue):
        found = EvaluationResult(speedup=Interval(1.1, 1.06, 1.14), significant=True, numerics_ok=True,
                                 identical_program=False, compile_seconds=0.3, default_compile_seconds=0.3)
        # Each measurement ends MEASURE_SECONDS after the one before: the run's measuring time.
        ended = now + datetime.timedelta(seconds=MEASURE_SECONDS * (n + 1))
        run.record(queued.measured(found, chain.compiler_version, VALIDATE.measure.noise_band, ended,
                                   VALIDATE.ttl, VALIDATE.max_age))
    run.publish(Store(home))
    run.land(Warehouse(home))


def _hook(home: Path, dt: datetime.date, applied: str, fallback: str | None) -> None:
    """What the compiler hook spools on `dt`: three compiles that applied the live entry of
    `applied`, two misses, and one compile whose tuned config for `fallback` failed (a miss
    when None); then hit ingestion lands the spool."""
    live = {row["key"]: row for row in Store(home).entries().to_pylist()}
    version = Store(home).current()
    records = []
    for n, (outcome, key) in enumerate([("applied", applied)] * 3 + [("miss", None)] * 2
                                       + [("fallback", fallback) if fallback else ("miss", None)]):
        entry = live.get(key, {})
        records.append({
            "at": _at(dt, 8, n), "job_id": f"job-{n}", "key": key or store_key("c" * 32, "d" * 32),
            "fingerprint": entry.get("fingerprint", "c" * 32), "env_key": entry.get("env_key", "d" * 32),
            "module_name": "jit_mlp_train_step", "outcome": outcome, "kind": entry.get("kind"),
            "config_version": version if entry else None,
            "expected_speedup": entry.get("speedup") if outcome == "applied" else None,
            "config": entry.get("config"), "optimized_fingerprint": None,
            "reason": "INTERNAL: tuned compile failed" if outcome == "fallback" else None,
            "hook_seconds": 0.002, "compile_seconds": 0.5})
    path = spool_path(home, started=_at(dt, 8).timestamp())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(map(to_line, records)))
    ingest_hits(home, now=time.time() + STALE_SECONDS + 1)  # its writer is done


def holdout_key(home: Path) -> str:
    """The store key of the entry whose holdout arm the home has (`_holdout`)."""
    warehouse = Warehouse(home)
    part = warehouse.parts_of(GRAPH_RUNS, HOLDOUT_PART)[0]
    return warehouse.read_file(part, GRAPH_RUNS, ["config_key"]).column("config_key")[0].as_py()


def _holdout(home: Path, key: str, days: list[datetime.date]) -> None:
    """The holdout arm of entry `key` on `days`: per day, HOLDOUT_JOBS jobs of their own, each
    like one of the entry's tuned jobs that day (the first by job id) but HOLDOUT_SLOWDOWN times
    slower per execution, as a run of the defaults would be."""
    runs = Warehouse(home).read(GRAPH_RUNS)
    tuned = runs.filter(pc.and_(pc.and_(pc.equal(runs.column("config_key"), key),
                                        pc.invert(pc.fill_null(runs.column("holdout"), False))),
                                pc.is_in(runs.column("dt"), pa.array(days, pa.date32()))))
    rows = []
    for dt in days:
        mine = sorted((r for r in tuned.to_pylist() if r["dt"] == dt), key=lambda r: r["job_id"])
        like = list({r["job_id"]: r for r in mine}.values())[:HOLDOUT_JOBS]
        if len(like) < HOLDOUT_JOBS:
            raise AssertionError(f"{len(like)} tuned jobs of {key} on {dt}: too few to copy a holdout arm from")
        rows += [{**r, "job_id": f"holdout-{n}-{r['job_id']}", "holdout": True,
                  "chip_seconds": r["chip_seconds"] * HOLDOUT_SLOWDOWN} for n, r in enumerate(like)]
    Warehouse(home).append(GRAPH_RUNS, pa.Table.from_pylist(rows, schema=GRAPH_RUNS.schema), HOLDOUT_PART)
