"""The GPU checks (issues 31, 32, 42): the loop's compiler stages on a GPU, in three runs that a
lent machine runs one at a time, each worth running alone.

    python benchmarks/gpu_check.py --run N --out DIR [--minutes M] [--state DIR] [--dry-run]
                                   [--workloads LOOP,BREADTH,...]
    python benchmarks/gpu_check.py --restore DIR [--state DIR]

A run measures its steps in order, most telling first, each within the run's minutes (default
5): a step the time left cannot hold is recorded as skipped, not started. Every figure is
written as it is measured to the state (--state, default `.gpu-check/`) and to DIR
(`gpu_check.json`, `gpu_check.md`, and `gpu_check_state.tar.gz`: the figures and the tuning
tasks' journals), so a run cut short, even killed, returns what it measured. A run resumes from
the state: a step measured before is not measured again, a tuning task cut short by the run's
time goes on from its journal. `--restore DIR` unpacks a returned `gpu_check_state.tar.gz` into
the state, for a run on a fresh machine. docs/gpu.md says how a device session runs them.

1. The whole loop on the first workload (transformer-g): the environment and its key, the GPU
   flags the installed compiler accepts and their defaults, the one-GPU space; an A/A `fdo
   evaluate` (no --set) in one process, and the default against itself across two processes as
   the tuner's execute and compile workers build it; the tuner (`pipelines.stages.tune_candidates`,
   what `fdo tune` runs) at a budget that fits: its schedule screens every single move of the
   space first, each timed once (the screen the GPU flags' ranks are to come from), then
   combines, races, prunes and verifies its winner in fresh workers; the best single move
   verified as the winner is, where it is another config (the tuner's share of its gain, in log
   speedup); that winner published in a store, and a JAX program running the train step under
   the compiler hook gets it (`fdo hits`: applied) and runs the tuned executable against the
   default one in interleaved rounds (within the verified interval?); the validator over that
   entry (kept) and a losing single move's (invalidated).
2. Delivered kernels on the first workload: XLA's default autotuning's own results and files
   (the names it writes against `FusionResult.cache_file_name`); its exhaustive autotuning as
   `fdo tune --kind kernels` runs it (`tuner.kernels.offline_results`), the costliest fusions'
   results published; hooked compiles with and without them (median of 3, each in a fresh
   process: XLA keeps results in memory too), what the hook recorded and XLA's cache log lines;
   the hooked compile with JAX's persistent compilation cache on (the default's compile, the
   delivered one: a miss, keyed apart; again: a hit; the default's again: a hit); the graph
   built with the results timed against the default as the kind verifies it
   (`compile_with_results`, `evaluate_built`); the same results labelled as another GPU's and
   another XLA version's (XLA must fall back to its own autotuning); the validator over the
   three entries (kept; re-keyed).
3. Breadth: the other workloads (cnn-g, attention_kv-g) screened, tuned and verified as in
   run 1; then, if time is left, tests/execution/test_gpu.py (its GPU tests run on a GPU).

--dry-run runs the same code on whatever backend JAX has here (the CPU) with the small zoo
sizes and budgets of seconds (tests/project/test_gpu_check.py). `fdo tune` and `fdo validate --once`
check for the pipeline extra (Apache Beam, DuckDB), which a GPU machine lacks and these steps do
not use: the runs call the functions those commands call, and `fdo evaluate` and `fdo hits` as
commands. The modules they import that the device may lack are recorded by each run (`imports`).
"""

from __future__ import annotations

import os

# This process compiles probes and reads defaults on the device its workers measure on: it
# must not take the three quarters of the GPU's memory that JAX preallocates. Before any import
# of JAX; the command-line processes it starts inherit it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit, describe  # noqa: E402

from execution.compile import compiler_defaults  # noqa: E402
from execution.flags import FLAGS, to_json  # noqa: E402
from execution.measure import MeasureSettings  # noqa: E402
from hlo.environment import GPU_PLATFORM, current_environment, describe_gpu, store_key  # noqa: E402
from hlo.fingerprint import graph_fingerprint  # noqa: E402
from hlo.module import HloModule, from_lowered, load_file  # noqa: E402
from pipelines import stages  # noqa: E402
from tuner.candidates import Candidate  # noqa: E402
from tuner.persist import RESULT, task_file  # noqa: E402
from tuner.result import TuneResult  # noqa: E402
from tuner.schedule import neighbourhood  # noqa: E402
from tuner.space import accepted_flags, graph_space  # noqa: E402
from tuner.target import graph_subject  # noqa: E402
from tuner.tune import VERIFY_SETTINGS, TuneSettings  # noqa: E402
from vocabulary.hits import HitOutcome  # noqa: E402
from vocabulary.interval import columns  # noqa: E402
from vocabulary.tuning import (  # noqa: E402
    Kind,  # noqa: E402
    Phase,
    TrialOutcome,
)
from workloads import zoo  # noqa: E402

RESULTS = "gpu_check.json"
REPORT = "gpu_check.md"
STATE_ARCHIVE = "gpu_check_state.tar.gz"
# What a GPU machine of this workplace lacks (docs/gpu.md): a run that imported one of these
# would fail there.
ABSENT_ON_DEVICE = ("apache_beam", "duckdb", "fastapi", "pydantic", "uvicorn", "apscheduler", "plotly")
HOOK_JOB = "gpu-check-hooked"
OUT_OF_TIME = "out of the run's time"
# A search that spent this share of its minutes and not its evaluations was cut by the run's
# time: the next run goes on with it.
CUT_SHARE = 0.9


@dataclass(frozen=True)
class Plan:
    """How big each check is: the GPU's sizes, or the dry run's seconds-long ones."""

    workloads: tuple[str, ...]  # zoo names: the first is runs 1 and 2's, the others run 3's
    aa_seconds: float  # the A/A `fdo evaluate`'s timing budget (--max-seconds)
    budget_evals: int  # the tuner's evaluations (`fdo tune --budget-evals`)
    workers: int  # fresh workers of each verification and validation
    verify: MeasureSettings  # the tuner's verification, and the validator's measurement
    hook_rounds: int  # interleaved rounds of the hooked program, tuned against default
    round_seconds: float  # each side's share of a round
    search_share: float  # of a run's minutes, each tuner's search (its screen first)
    step_seconds: float  # the least time left in which a step that compiles is started
    # Run 1 without a verified gain delivers the best screened move (the dry run: its code
    # path is tested whether or not a CPU's seconds of tuning find a gain).
    deliver_unverified: bool = False
    kernels: int = 8  # run 2: the costliest fusions whose offline results are delivered
    compile_repeats: int = 3  # hooked compiles with and without them, each in a fresh process
    # Run 2 delivers results made here where XLA wrote none, and its hooked compiles count the
    # CPU among the platforms that autotune (the dry run: XLA:CPU autotunes nothing, takes the
    # per-fusion option and ignores it; the store, the hook, JAX's persistent cache and the
    # measurement are tested all the same).
    synthetic_results: bool = False
    # Run 3 ends with tests/execution/test_gpu.py where time is left (the dry run's suite runs it itself).
    gpu_tests: bool = True
    # Searches end at `budget_evals` or at their share of the run's minutes, whichever comes
    # first; the dry run's at their evaluations alone (a loaded CI machine's seconds of search
    # can end before the first evaluation, and leave run 1 nothing to deliver).
    timed_searches: bool = True

    @property
    def loop(self) -> str:
        """Runs 1 and 2's workload."""
        return self.workloads[0]

    def tune_settings(self, minutes: float) -> TuneSettings:
        """A task's settings within `budget_evals` evaluations and (`timed_searches`) `minutes`
        of search."""
        return TuneSettings(budget_evals=self.budget_evals,
                            budget_minutes=minutes if self.timed_searches else None,
                            verify=self.verify, verify_workers=self.workers)


GPU_PLAN = Plan(workloads=tuple(w.name for w in zoo.gpu_workloads()), aa_seconds=5.0, budget_evals=30,
                workers=3, verify=dataclasses.replace(VERIFY_SETTINGS, max_seconds=6.0), hook_rounds=20,
                round_seconds=0.25, search_share=0.4, step_seconds=30.0)
DRY_PLAN = Plan(workloads=tuple(name.replace(f"-{zoo.GPU_SIZE}", "-s") for name in GPU_PLAN.workloads),
                aa_seconds=1.0, budget_evals=2, workers=1,
                verify=dataclasses.replace(VERIFY_SETTINGS, min_pairs=10, max_seconds=1.0),
                hook_rounds=4, round_seconds=0.05, search_share=0.4, step_seconds=1.0,
                deliver_unverified=True, kernels=4, compile_repeats=1, synthetic_results=True,
                gpu_tests=False, timed_searches=False)


class Clock:
    """A run's minutes: what is left of them."""

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        self.deadline = time.monotonic() + 60 * minutes

    def left(self) -> float:
        """Seconds left (0 once past)."""
        return max(0.0, self.deadline - time.monotonic())


class State:
    """The figures of every run so far (`RESULTS` under the state directory), written again to
    `out` at each one (with the report and the state archive), and the files later runs read:
    the modules, the homes."""

    def __init__(self, directory: Path, out: Path | None = None) -> None:
        self.directory = directory
        self.out = out
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RESULTS
        self.results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    def done(self, check: str) -> bool:
        """Whether check `check` was measured in full before (not skipped, not cut short)."""
        figures = self.results.get(check)
        return isinstance(figures, dict) and "skipped" not in figures and not figures.get("cut_short")

    def forget(self, *checks: str) -> None:
        """Drop the figures of `checks` (measured with what has changed since): measured again."""
        for check in checks:
            self.results.pop(check, None)

    def record(self, check: str, figures: dict[str, Any]) -> None:
        """Keep `figures` as check `check`'s (replacing an earlier run's), on disk at once, and
        in `out`: a run killed later still returns them."""
        self.results[check] = figures
        text = json.dumps(self.results, indent=1, sort_keys=True, default=str)
        _write(self.directory / RESULTS, text)
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            _write(self.out / RESULTS, text)
            _write(self.out / REPORT, report(self.results))
            self._archive()

    def _archive(self) -> None:
        """The figures and every tuning task's files (their journals: a task cut short goes on
        from them), as `out/STATE_ARCHIVE`, for `--restore` on a fresh machine."""
        staging = self.out / f"{STATE_ARCHIVE}.tmp"
        with tarfile.open(staging, "w:gz") as archive:
            archive.add(self.directory / RESULTS, RESULTS)
            for path in sorted(self.directory.glob("homes/*/tuner/tasks/*/*")):
                archive.add(path, str(path.relative_to(self.directory)))
        staging.replace(self.out / STATE_ARCHIVE)

    def module(self, name: str) -> Path:
        """The HLO file of zoo workload `name` (written now if it is not there)."""
        path = self.directory / "modules" / f"{name}.hlo"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(from_lowered(_workload(name).lower(), source=f"zoo:{name}").to_text())
        return path

    def home(self, name: str, fresh: bool = False) -> Path:
        """The data root `name` under the state (emptied first when `fresh`)."""
        path = self.directory / "homes" / name
        if fresh and path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
        return path


def _write(path: Path, text: str) -> None:
    staging = path.with_name(f"{path.name}.tmp")
    staging.write_text(text)
    staging.replace(path)


def restore(archive_dir: Path, state: Path) -> None:
    """Unpack `archive_dir/STATE_ARCHIVE` (a run's returned state) into `state`."""
    state.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive_dir / STATE_ARCHIVE) as archive:
        archive.extractall(state, filter="data")


def step(state: State, clock: Clock, check: str, needs: float, measure: Callable[[], dict[str, Any]]) -> None:
    """Measure check `check` unless it was measured before; skipped (recorded so) where fewer
    than `needs` seconds of the run are left. Its seconds go to the figures' `seconds`."""
    if state.done(check):
        return
    if clock.left() < needs:
        state.record(check, {"skipped": OUT_OF_TIME})
        return
    started = time.monotonic()
    figures = measure()
    # What each step took: how the next run's minutes are to be shared.
    state.results.setdefault("seconds", {})[check] = round(time.monotonic() - started, 1)
    state.record(check, figures)


def _workload(name: str) -> zoo.Workload:
    """A zoo workload, GPU-sized or not, by name."""
    sized = {w.name: w for w in zoo.gpu_workloads()}
    return sized[name] if name in sized else zoo.get(name)


def fdo(*args: str, home: Path | None = None, timeout: float = 900) -> dict[str, Any]:
    """`fdo ARGS --json` run as a command from the repository (as `python -m pipelines.cli`), its
    JSON output and exit status; the tail of its error output when it printed no JSON."""
    command = [sys.executable, "-m", "pipelines.cli", *(["--home", str(home)] if home else []), *args,
               "--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    try:
        return {"exit": done.returncode, **json.loads(done.stdout)}
    except json.JSONDecodeError:
        return {"exit": done.returncode, "error": done.stderr.strip()[-2000:]}


# --- run 1: the whole loop --------------------------------------------------------------------

def run_loop(plan: Plan, state: State, clock: Clock) -> None:
    """The loop on `plan.loop`: environment, A/A, screen and tune, deliver, validate."""
    name = plan.loop
    step(state, clock, "environment", 0, environment_figures)
    step(state, clock, f"aa:{name}", plan.step_seconds, lambda: aa_figures(plan, state, name))
    step(state, clock, f"aa_across:{name}", plan.step_seconds,
         lambda: across_processes(load_file(state.module(name)).proto, plan))
    tune_workload(plan, state, clock, name, dependents=(f"deliver:{name}", f"validate:{name}"))
    step(state, clock, f"deliver:{name}", plan.step_seconds, lambda: deliver_figures(plan, state, name))
    step(state, clock, f"validate:{name}", plan.step_seconds, lambda: validate_entries(plan, state, name))


def environment_figures() -> dict[str, Any]:
    """What this machine is and what its compiler takes."""
    import jax

    environment = current_environment()
    devices = jax.devices()
    description = describe_gpu(devices) if environment.platform == GPU_PLATFORM else None
    defaults = compiler_defaults()
    accepted = accepted_flags(environment.platform)
    declared = {name: spec for name, spec in FLAGS.items() if spec.platform == GPU_PLATFORM}
    space = graph_space(environment.platform, accepted, defaults)
    return {
        "environment": environment.to_json(), "env_key": environment.key(),
        "description": dataclasses.asdict(description) if description else None,
        "jax": jax.__version__, "python": sys.version.split()[0], "devices": [str(d) for d in devices],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "commit": commit(),
        "gpu_flags": {name: {"accepted": name in accepted_flags(GPU_PLATFORM),
                             "default": to_json({name: defaults[name]})[name] if name in defaults else None,
                             "rank": spec.rank, "min_devices": spec.min_devices}
                      for name, spec in declared.items()},
        "space": {param.name: [to_json({param.name: v})[param.name] for v in param.values]
                  for param in space.params},
        "single_moves": len(neighbourhood(space)),
    }


def aa_figures(plan: Plan, state: State, name: str) -> dict[str, Any]:
    """An A/A `fdo evaluate` of workload `name` (no --set): the interval should hold 1, and the
    numerics say how far a GPU's default differs from itself."""
    found = fdo("evaluate", str(state.module(name)), "--max-seconds", str(plan.aa_seconds))
    return {**{k: found.get(k) for k in (
        "exit", "error", "speedup", "ci_low", "ci_high", "pairs", "numerics_ok", "compile_seconds",
        "default_compile_seconds", "default_seconds", "stop_reason")},
        "holds_one": found.get("ci_low") is not None and found["ci_low"] <= 1.0 <= found["ci_high"],
        "numerics": _checks(found.get("numerics", []))}


def _checks(numerics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: c.get(k) for k in ("index", "ok", "max_error", "tolerance")} for c in numerics]


def across_processes(module_proto: bytes, plan: Plan) -> dict[str, Any]:
    """The default against itself as the tuner's screens see a flag that changes nothing: kept
    in one worker (as the execute worker keeps it), compiled again in another (as a compile
    worker builds a candidate) and measured there against it. On a GPU each compile autotunes
    its GEMMs and fusions afresh, so the two may be other programs, and time apart."""
    from execution import session
    from execution.worker import Worker, WorkerFailure

    settings = dataclasses.replace(plan.verify, confidence=0.99)
    try:
        with Worker() as executor, Worker() as compiler:
            kept = executor.call(session.prepare, timeout=900, module_proto=module_proto)
            built = compiler.call(session.compile_serialized, timeout=900, module_proto=module_proto,
                                  config={})
            if kept.error is not None or built.error is not None:
                return {"error": kept.error or built.error}
            found = executor.call(session.measure_serialized, timeout=900, executable=built.executable,
                                  config={}, settings=settings)
    except WorkerFailure as failure:
        return {"error": str(failure)}
    if found.error is not None:
        return {"error": found.error}
    return {"same_program": kept.program == built.program, **columns(found.measurement.speedup),
            "numerics_ok": found.numerics_ok,
            "numerics": _checks([dataclasses.asdict(c) for c in found.numerics.outputs])}


def tune_workload(plan: Plan, state: State, clock: Clock, name: str, share: float | None = None,
                  dependents: tuple[str, ...] = ()) -> None:
    """Workload `name` tuned (`tune:NAME`: its screen of every single move, the tuner's winner
    verified in fresh workers), then its best single move verified likewise where it is not the
    winner (`oracle:NAME`). The search gets `share` of the run's minutes (default the plan's),
    and at most half the time left: the verifications after it take the rest. A search cut
    short goes on in the next run; where its winner then changes, the checks that used the old
    one (`oracle:NAME` and `dependents`) are measured again."""
    module = load_file(state.module(name))
    minutes = min((share or plan.search_share) * clock.minutes, clock.left() / 120)
    before = _winner_config(state.results.get(f"tune:{name}"))
    step(state, clock, f"tune:{name}", plan.step_seconds, lambda: tune_figures(plan, state, name, module, minutes))
    tuned = state.results[f"tune:{name}"]
    if "tuned" not in tuned:
        return
    if before is not None and _winner_config(tuned) != before:
        state.forget(f"oracle:{name}", *dependents)
    step(state, clock, f"oracle:{name}", plan.step_seconds, lambda: oracle_figures(plan, tuned, module))


def _winner_config(tuned: dict[str, Any] | None) -> tuple[bool, str] | None:
    """Whether a task's figures accepted a config, and which (None: no figures of a result)."""
    if not tuned or "tuned" not in tuned:
        return None
    return tuned["tuned"]["accepted"], json.dumps(tuned["tuned"]["config"], sort_keys=True)


def tune_figures(plan: Plan, state: State, name: str, module: HloModule, minutes: float) -> dict[str, Any]:
    """The tuner over workload `name` from a cold start (a home of its own) within `minutes` of
    search: its screen (every single move of the space it reached, each timed once or known by
    its program), its winner and that verification. A search the run's time cut is marked
    `cut_short`: the next run takes it up from its journal (its result is dropped, so the task
    is unfinished again and resumes; `tuner.persist`)."""
    from storage.home_factory import open_home

    home = state.home(f"{name}-tune")
    earlier = state.results.get(f"tune:{name}") or {}
    if earlier.get("cut_short"):
        local = open_home(home)
        local.delete([task_file(local, earlier["task_id"], RESULT)])
    candidate = Candidate(name, graph_subject(module), current_environment().key())
    outcome = stages.tune_candidates(Kind.GRAPH, home, [candidate], plan.tune_settings(minutes)).outcomes[0]
    if outcome.result is None:
        return {"error": f"{outcome.status}: {outcome.reason}"}
    result = outcome.result
    environment = current_environment()
    space = graph_space(environment.platform, accepted_flags(environment.platform), compiler_defaults())
    screens = [{"config": to_json(t.config), "outcome": t.outcome, **columns(t.speedup),
                "numerics_ok": t.numerics_ok, "compile_seconds": t.compile_seconds, "error": t.error}
               for t in result.trials if t.phase == Phase.SEARCH and t.baseline is None and len(t.config) == 1]
    search = next((p for p in result.phases if p.phase == Phase.SEARCH), None)
    cut = bool(plan.timed_searches and search is not None and search.evaluations < plan.budget_evals
               and search.seconds >= CUT_SHARE * 60 * minutes)
    return {"task_id": result.task_id, "moves": len(neighbourhood(space)), "budget_evals": plan.budget_evals,
            "search_minutes": round(minutes, 2), "cut_short": cut, "tuned": _result(result),
            "phases": [dataclasses.asdict(p) for p in result.phases], "screens": screens}


def _result(result: TuneResult) -> dict[str, Any]:
    """What a task found, as the figures show it."""
    return {key: value for key, value in result.to_json().items()
            if key in ("status", "accepted", "config", "speedup", "ci_low", "ci_high", "numerics_ok",
                       "evaluations", "measured", "speedups", "seconds_to_best", "reason")}


def best_single(screens: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The screened single move that measured fastest (None: none measured)."""
    return max((s for s in screens if s["outcome"] == TrialOutcome.MEASURED and s["speedup"] is not None),
               key=lambda s: s["speedup"], default=None)


def oracle_figures(plan: Plan, tuned: dict[str, Any], module: HloModule) -> dict[str, Any]:
    """The best single move of the screen (the oracle of one move), verified as the tuner
    verifies its winner (`plan.workers` fresh workers, `plan.verify`), unless it is the winner
    (then the tuner's verification is its); the tuner's verified gain as a share of it."""
    from execution.evaluate import evaluate_independently

    best = best_single(tuned["screens"])
    if best is None or best["speedup"] <= 1.0:
        return {"config": None, "share_of_oracle": None, "why": "no single move screened faster than the default"}
    winner = tuned["tuned"]
    if winner["accepted"] and winner["config"] == best["config"]:
        verified = {k: winner[k] for k in ("speedup", "ci_low", "ci_high", "numerics_ok", "speedups")}
        return {"config": best["config"], "screened": best["speedup"], "verified": verified,
                "verified_by": "the tuner (its winner)", "share_of_oracle": gain_share(winner, verified)}
    from execution.flags import trusted_config

    found = evaluate_independently(module, trusted_config(best["config"]), plan.workers, settings=plan.verify)
    verified = {**columns(found.speedup), "numerics_ok": found.numerics_ok, "speedups": found.speedups,
                "significant": found.significant, "error": found.error}
    return {"config": best["config"], "screened": best["speedup"], "verified": verified,
            "verified_by": f"{plan.workers} fresh workers", "share_of_oracle": gain_share(winner, verified)}


def gain_share(tuned: dict[str, Any], oracle: dict[str, Any]) -> float | None:
    """The tuner's verified gain as a share of the oracle's, in log speedup (1: the oracle's
    gain, 0: none; a slower or rejected find counts 0); None where the oracle verified no gain."""
    if not oracle.get("speedup") or oracle["speedup"] <= 1.0 or oracle.get("numerics_ok") is False:
        return None
    found = tuned["speedup"] if tuned.get("accepted") and tuned.get("speedup") else 1.0
    return max(0.0, math.log(found) / math.log(oracle["speedup"]))


def winner_of(plan: Plan, state: State, name: str) -> dict[str, Any] | None:
    """What run 1 delivers for workload `name`: the tuner's accepted winner, else the verified
    best single move (a significant gain, numerics ok), else (`deliver_unverified`) the best
    screened move; each with its claim (speedup and interval). None: none of these."""
    tuned = state.results.get(f"tune:{name}", {})
    winner = tuned.get("tuned", {})
    if winner.get("accepted"):
        return {**winner, "source": "the tuner's winner, verified"}
    oracle = state.results.get(f"oracle:{name}", {})
    verified = oracle.get("verified") or {}
    if verified.get("significant") and verified.get("numerics_ok"):
        return {"config": oracle["config"], **verified, "source": "the best single move, verified"}
    best = best_single(tuned.get("screens", []))
    if best is not None and plan.deliver_unverified:
        return {**best, "source": "the best screened move (unverified: the dry run)"}
    return None


def deliver_figures(plan: Plan, state: State, name: str) -> dict[str, Any]:
    """Workload `name`'s winner through the store to a hooked program: applied, and as fast as
    claimed?"""
    winner = winner_of(plan, state, name)
    if winner is None:
        return {"skipped": f"neither the tuner nor the best single move verified a gain on {name}"}
    module = load_file(state.module(name))
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    home = state.home("deliver", fresh=True)
    publish(home, [entry(fingerprint, env_key, environment.compiler_version, winner, "gpu-check")])
    run = _json_of([sys.executable, str(Path(__file__).resolve()), "--hook-job", name, "--home", str(home),
                    "--rounds", str(plan.hook_rounds), "--round-seconds", str(plan.round_seconds)])
    hits = fdo("hits", "--job", HOOK_JOB, home=home)
    within = (None if "speedup" not in run or winner.get("ci_low") is None
              else winner["ci_low"] <= run["speedup"] <= winner["ci_high"])
    return {"workload": name, "config": winner["config"], "claimed": winner["speedup"],
            "claimed_low": winner.get("ci_low"), "claimed_high": winner.get("ci_high"), "source": winner["source"],
            "hooked_run": run, "within_claimed_interval": within, "hits": hits.get("outcomes"),
            "hit_keys": sorted({r["key"] for r in hits.get("records", []) if HitOutcome(r["outcome"]).ran_tuned}),
            "entry_key": store_key(fingerprint, env_key)}


def losing_move(screens: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A single move the validator should remove: the slowest screened wholly slower than the
    default, else one that compiled to the default's program (None: neither was screened)."""
    slower = [s for s in screens if s["outcome"] == TrialOutcome.MEASURED and s["ci_high"] is not None
              and s["ci_high"] < 1.0]
    return min(slower, key=lambda s: s["speedup"], default=None) or next(
        (s for s in screens if s["outcome"] == TrialOutcome.IDENTICAL), None)


def validate_entries(plan: Plan, state: State, name: str) -> dict[str, Any]:
    """The validator on this machine, over the delivered winner's entry and a losing single
    move's (`losing_move`, stored with the winner's claim): kept and invalidated expected."""
    winner = winner_of(plan, state, name)
    if winner is None:
        return {"skipped": f"run 1 found nothing to deliver on {name}"}
    module = load_file(state.module(name))
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    claims = {"winner (expected: kept)": winner}
    losing = losing_move(state.results[f"tune:{name}"].get("screens", []))
    if losing is not None:
        claims[f"losing move, {losing['outcome']} when screened (expected: invalidated)"] = {
            **winner, "config": losing["config"]}
    return _validate_each(plan, state, name, {
        label: entry(fingerprint, env_key, environment.compiler_version, claim, f"gpu-check {label}")
        for label, claim in claims.items()})


def _validate_each(plan: Plan, state: State, name: str, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The validator on this machine over each of `entries` (store rows of workload `name`'s
    graph, one key: each in a run of its own), measured two days after: its decisions."""
    from ingest.symbols import ingest_symbols
    from validator.validate import ValidateSettings, validate

    home = state.home("validate", fresh=True)
    symbols = home.parent / "validate-symbols"
    symbols.mkdir(exist_ok=True)
    shutil.copy(state.module(name), symbols / f"{name}.hlo")
    (symbols / "fdo-environment.json").write_text(json.dumps(current_environment().to_json()))
    ingest_symbols([symbols], home)
    two_days_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
    decided = {}
    for label, row in entries.items():
        publish(home, [{**row, "measured_at": two_days_ago}])
        report = validate(home, settings=ValidateSettings(workers=plan.workers, measure=plan.verify))
        decided[label] = [{"outcome": d.outcome, "reason": d.reason, "config": row["config"],
                           "autotune_fate": d.autotune_fate} for d in report.decisions]
    return decided


def entry(fingerprint: str, env_key: str, compiler_version: str, claim: dict[str, Any], source: str,
          measured_at: datetime.datetime | None = None, autotune_results: str | None = None) -> dict[str, Any]:
    """A store entry of `claim` (a config, its speedup and interval), as deliver writes one,
    with `autotune_results` (XLA's text of them) where given."""
    measured_at = measured_at or datetime.datetime.now(datetime.UTC)
    return {"key": store_key(fingerprint, env_key), "fingerprint": fingerprint, "env_key": env_key,
            "kind": "graph", "speedup": claim["speedup"],
            "expires_at": measured_at + datetime.timedelta(days=30), "provenance": "tuner",
            "config": json.dumps(claim["config"], sort_keys=True), "ci_low": claim.get("ci_low"),
            "ci_high": claim.get("ci_high"), "compiler_version": compiler_version, "measured_at": measured_at,
            "source": source, "autotune_results": autotune_results}


def publish(home: Path, rows: list[dict[str, Any]]) -> None:
    """`rows` as the store's next version, replacing every entry (deliver needs Apache Beam)."""
    import pyarrow as pa

    from delivery.store_writer import Store
    from storage.store_schema import ENTRIES

    store = Store(home)
    store.publish(pa.Table.from_pylist(rows, ENTRIES), store.current(), "gpu_check")


def _json_of(command: list[str]) -> dict[str, Any]:
    """A child process's JSON answer; its exit status and error tail when it has none."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"exit": done.returncode, "error": done.stderr.strip()[-2000:]}


def hook_job(name: str, home: Path, rounds: int, round_seconds: float) -> dict[str, Any]:
    """A JAX program's train step under the compiler hook (job HOOK_JOB), then the same step
    compiled without it: each timed against the other in `rounds` interleaved rounds (the
    order alternating), their median ratio the tuned executable's speedup."""
    import jax

    from delivery import hook

    fn, abstract = _workload(name).build()
    hook.install(home=home, job_id=HOOK_JOB, holdout=0.0)  # the applied arm, whatever the entry's share
    tuned = jax.jit(fn).lower(*abstract).compile()
    hook.uninstall()
    # Another function object: JAX would hand back the tuned executable for the same one.
    plain = jax.jit(lambda *args: fn(*args)).lower(*abstract).compile()
    args = _arguments(abstract)
    for executable in (tuned, plain):  # warm
        _timed(executable, args, 2)
    steps = max(1, math.ceil(round_seconds / _timed(plain, args, 1)))
    ratios, times = [], {"tuned": [], "plain": []}
    for index in range(rounds):
        order = ("tuned", "plain") if index % 2 == 0 else ("plain", "tuned")
        took = {side: _timed(tuned if side == "tuned" else plain, args, steps) for side in order}
        ratios.append(took["plain"] / took["tuned"])
        for side in took:
            times[side].append(took[side] / steps)
    return {"speedup": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "rounds": rounds,
            "steps": steps, "tuned_seconds": statistics.median(times["tuned"]),
            "plain_seconds": statistics.median(times["plain"])}


def _arguments(abstract: Any) -> Any:
    """Inputs of a zoo workload's step for its abstract arguments, on the device (seed 0)."""
    import jax
    import numpy as np

    rng = np.random.default_rng(0)
    # Small integers index every table of the three workloads (tokens, labels, a cache position).
    return jax.tree.map(lambda s: jax.device_put(
        rng.integers(0, 8, s.shape).astype(s.dtype) if np.issubdtype(s.dtype, np.integer)
        else (0.02 * rng.standard_normal(s.shape)).astype(s.dtype)), abstract)


def _timed(executable: Callable[..., Any], args: Any, steps: int) -> float:
    """Seconds `steps` runs of `executable` on `args` take, each waited for."""
    import jax

    started = time.perf_counter()
    for _ in range(steps):
        jax.block_until_ready(executable(*args))
    return time.perf_counter() - started


# --- run 2: delivered kernels -----------------------------------------------------------------
# XLA keeps the autotune results of a process in memory and looks there before the per-fusion
# cache directory: every compile whose autotuning is observed runs in a process of its own, and
# the executables are measured, serialized, in another.

KERNEL_JOB = "gpu-check-kernels"
# XLA:GPU's log lines about its autotune caches (their modules at log level 1), counted per
# compile: evidence, beside the files, of which fusions were found and which autotuned.
XLA_CACHE_LINES = ("File-based autotune cache hit", "In-memory autotune cache hit", "Autotune cache miss",
                   "Writing autotune result to file")
_XLA_CACHE_LOGGING = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_MAX_VLOG_LEVEL": "1"}
# The compiles of the persistent-cache check, in order, each in a fresh process on one JAX cache
# directory: (label, holdout share: 1 is the job's own compile, 0 the delivered results).
PERSISTENT_SEQUENCE = (("default", 1.0), ("delivered", 0.0), ("delivered again", 0.0), ("default again", 1.0))
FOREIGN = ("another GPU", "another XLA version")


def run_kernels(plan: Plan, state: State, clock: Clock) -> None:
    """Offline autotune results of `plan.loop` delivered through the store to hooked compiles
    (see the module docstring), most telling first."""
    name = plan.loop
    module = load_file(state.module(name))
    step(state, clock, f"kernels_default:{name}", plan.step_seconds, lambda: default_autotuning(plan, module))
    # The exhaustive search may run long: half the time left, and the rest still happens.
    step(state, clock, f"kernels_exhaustive:{name}", plan.step_seconds,
         lambda: exhaustive_autotuning(plan, module, clock.left() / 2))
    found = delivered_results(plan, state, name)
    if isinstance(found, str):
        state.record(f"kernels:{name}", {"skipped": found})
        return
    results, source = found
    rows = kernel_entries(state, name, module, results)
    state.record(f"kernels:{name}", {"results_source": source, "delivered": len(results.fusions),
                                     "kinds": sorted({f.kind for f in results.fusions}),
                                     "device": results.fusions[0].device, "key_version": results.fusions[0].version,
                                     "run_time_us": [round(f.run_time_seconds * 1e6, 1) for f in results.fusions]})
    step(state, clock, f"kernels_compiles:{name}", plan.step_seconds,
         lambda: hooked_compiles(plan, state, clock, name, rows, 1))
    step(state, clock, f"persistent_cache:{name}", plan.step_seconds,
         lambda: persistent_cache(plan, state, clock, name, rows["delivered"]))
    step(state, clock, f"kernels_measured:{name}", plan.step_seconds,
         lambda: measured_with_results(plan, module, results))
    step(state, clock, f"kernels_foreign:{name}", plan.step_seconds,
         lambda: {label: _kernel_child(plan, {"home": str(_entry_home(state, name, label, rows[label])),
                                              "workload": name, "holdout": 0.0}, clock)
                  for label in FOREIGN})
    step(state, clock, f"kernels_validate:{name}", plan.step_seconds, lambda: _validate_each(plan, state, name, {
        f"{label} (expected: {expected})": rows[label] for label, expected in (
            ("delivered", "kept"), ("another XLA version", "rekeyed"), ("another GPU", "rekeyed"))}))
    # The other compiles of each arm last, alternating, as load drifts.
    step(state, clock, f"kernels_compiles:{name}", plan.step_seconds,
         lambda: hooked_compiles(plan, state, clock, name, rows, plan.compile_repeats))


def _outcome_figures(outcome: Any, seconds: float | None, chosen: Any = None) -> dict[str, Any]:
    """What a compile did in its per-fusion directory (an `AutotuneOutcome`): its seconds, the
    files XLA wrote and how many read as xla.AutotuneResult (the start of one that does not),
    whether it dumped its results, how many of them `cache_file_name` names as XLA named their
    files; and the results chosen for delivery, as text (what a later run delivers)."""
    return {"compile_seconds": seconds, "files_written": outcome.uptake.autotuned,
            "files_read_as_autotune_result": outcome.readable, "first_unreadable_file": outcome.unreadable_sample,
            "dumped": outcome.dumped is not None, "dump_error": outcome.dump_error, "names_match": outcome.named,
            "names": len(outcome.dumped.fusions) if outcome.dumped else 0,
            "chosen": chosen.to_text() if chosen is not None else None}


def default_autotuning(plan: Plan, module: HloModule) -> dict[str, Any]:
    """One compile with XLA's default autotuning in a fresh worker's own directory, its results
    dumped: how XLA names and writes its files, and its results (the costliest `plan.kernels`
    of them delivered where the exhaustive search gives none)."""
    from execution.autotune.results import NO_RESULTS
    from execution.evaluate import compile_with_results

    built = compile_with_results(module, NO_RESULTS)
    if built.error is not None:
        return {"error": built.error}
    dumped = built.autotune.dumped
    return _outcome_figures(built.autotune, built.compile_seconds,
                            dumped.select(plan.kernels) if dumped and dumped.fusions else None)


def exhaustive_autotuning(plan: Plan, module: HloModule, seconds: float) -> dict[str, Any]:
    """XLA's autotuner run exhaustively over the module as `fdo tune --kind kernels` runs it
    (`tuner.kernels.offline_results`), given `seconds` (a minute at least)."""
    from tuner.kernels import offline_results

    found = offline_results(module, plan.kernels, timeout=max(60.0, seconds))
    if found.offline.error is not None:
        return {"error": found.offline.error, "why": found.why}
    return {**_outcome_figures(found.offline.autotune, found.offline.compile_seconds, found.chosen),
            "why": found.why}


def delivered_results(plan: Plan, state: State, name: str) -> tuple[Any, str] | str:
    """The results run 2 delivers and where they come from: the exhaustive search's, else the
    default autotuning's (the delivery is checked all the same), else (the dry run) results made
    here; or why there are none."""
    from execution.autotune.results import parse_results

    if plan.synthetic_results:
        return parse_results(_synthetic_results(state.module(name))), "synthetic (dry run: XLA:CPU autotunes nothing)"
    exhaustive = state.results.get(f"kernels_exhaustive:{name}", {})
    default = state.results.get(f"kernels_default:{name}", {})
    if exhaustive.get("chosen"):
        return parse_results(exhaustive["chosen"]), "XLA's exhaustive autotuning"
    if default.get("chosen"):
        why = exhaustive.get("why") or exhaustive.get("error") or exhaustive.get("skipped")
        return parse_results(default["chosen"]), f"XLA's default autotuning (the exhaustive search gave none: {why})"
    why_default = default.get('error') or default.get('skipped') or 'none'
    return (f"no autotune results to deliver: default autotuning: {why_default}; "
            f"exhaustive: {exhaustive.get('why') or exhaustive.get('error') or exhaustive.get('skipped')}")


def kernel_entries(state: State, name: str, module: HloModule, results: Any) -> dict[str, dict[str, Any]]:
    """The store entries of `results` (config {}), and of the same results labelled as another
    GPU's and another XLA version's (XLA's keys then differ from this GPU's)."""
    device, version = results.fusions[0].device, results.fusions[0].version
    labelled = {"delivered": results, "another GPU": results.for_device(device + " (another GPU)", version),
                "another XLA version": results.for_device(device, version + 1)}
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    return {label: entry(fingerprint, env_key, environment.compiler_version,
                         {"config": {}, "speedup": 1.0, "ci_low": None, "ci_high": None},
                         f"gpu-check kernels {label}", autotune_results=given.to_text())
            for label, given in labelled.items()}


def _entry_home(state: State, name: str, label: str, row: dict[str, Any]) -> Path:
    """A home whose store holds `row` alone."""
    home = state.home(f"{name}-kernels-{label.replace(' ', '-')}", fresh=True)
    publish(home, [row])
    return home


def hooked_compiles(plan: Plan, state: State, clock: Clock, name: str, rows: dict[str, dict[str, Any]],
                    repeats: int) -> dict[str, Any]:
    """Hooked compiles of workload `name` without the delivered results (the holdout arm: the
    job's own compile) and with them, each in a fresh process, alternating, until each arm has
    `repeats` (those of an earlier run kept); `cut_short` where the time left ran out first."""
    home = _entry_home(state, name, "delivered", rows["delivered"])
    earlier = state.results.get(f"kernels_compiles:{name}", {})
    runs = {arm: list(earlier.get(arm, {}).get("runs", [])) for arm in ("without", "delivered")}
    while any(len(r) < repeats for r in runs.values()) and clock.left() >= plan.step_seconds:
        for arm, holdout in (("without", 1.0), ("delivered", 0.0)):
            if len(runs[arm]) < repeats:
                runs[arm].append(_kernel_child(plan, {"home": str(home), "workload": name, "holdout": holdout}, clock))
    figures = {arm: {"median_seconds": _median([r.get("compile_seconds") for r in each]), "runs": each}
               for arm, each in runs.items()}
    return {**figures, "cut_short": any(len(r) < plan.compile_repeats for r in runs.values())}


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def persistent_cache(plan: Plan, state: State, clock: Clock, name: str, row: dict[str, Any]) -> dict[str, Any]:
    """The hooked compile of workload `name` with JAX's persistent compilation cache on, each
    compile of PERSISTENT_SEQUENCE in a fresh process on one cache directory: the default's
    (a miss), the delivered results' (a miss: keyed apart from the default's; XLA takes them
    from the results' own directory), the same again (a hit), the default's again (a hit: its
    executable untouched). With what the hook recorded, JAX's cache hits, the files in the
    job's own per-fusion directory (what JAX names for its cache) and the step's cache entries."""
    home = _entry_home(state, name, "persistent", row)
    cache = state.directory / "jax-cache" / name
    if cache.exists():
        shutil.rmtree(cache)
    figures: dict[str, Any] = {}
    for label, holdout in PERSISTENT_SEQUENCE:
        if clock.left() < plan.step_seconds:
            figures[label] = {"skipped": OUT_OF_TIME}
            continue
        figures[label] = _kernel_child(plan, {"home": str(home), "workload": name, "holdout": holdout,
                                              "jax_cache": str(cache)}, clock)
    entries = sorted(p.name for p in cache.glob("*-cache")) if cache.exists() else []
    return {"compiles": figures, "cache_entries": len(entries),
            "cut_short": any("skipped" in f for f in figures.values())}


def measured_with_results(plan: Plan, module: HloModule, results: Any) -> dict[str, Any]:
    """The graph built with `results` delivered in a fresh worker (what XLA took), timed against
    the default in `plan.workers` fresh workers as the kernels kind verifies it."""
    from execution.evaluate import compile_with_results, evaluate_built

    built = compile_with_results(module, results)
    if built.error is not None:
        return {"compile": {"error": built.error}}
    figures = {"compile": {"compile_seconds": built.compile_seconds, **dataclasses.asdict(built.autotune.uptake)}}
    return {**figures, "measured": evaluate_built(module, built, plan.workers, settings=plan.verify).to_json()}


def _synthetic_results(module_path: Path) -> str:
    """Autotune results for the dry run: one per dot of the module's text, as XLA's dump lays
    them out, for a device and key version of the dry run's own."""
    from execution.autotune.results import parse_results

    dots = [line.strip() for line in module_path.read_text().splitlines()
            if " dot(" in line or " convolution(" in line][:8]
    entries = "".join(
        f'results {{ device: "dry run" hlo: {json.dumps(dot)} version: 1 '
        f'result {{ run_time {{ nanos: {1000 * (i + 1)} }} triton {{ block_m: 32 block_n: 32 block_k: 32 '
        f'split_k: 1 num_stages: 1 num_warps: 4 num_ctas: 1 }} }} }}\n' for i, dot in enumerate(dots))
    return parse_results(f"version: 3\n{entries}").to_text()


def _kernel_child(plan: Plan, spec: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """`kernel_job(spec)` in a fresh process, with XLA's autotune cache logging on, given the
    run's time left (a minute at least): its JSON answer, and how often each of XLA_CACHE_LINES
    appeared in its log. The dry run's counts the CPU among the platforms that autotune."""
    spec = {**spec, "cpu_autotunes": plan.synthetic_results}
    command = [sys.executable, str(Path(__file__).resolve()), "--kernel-job", json.dumps(spec)]
    seconds = max(60.0, clock.left())
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds,
                              env={**os.environ, **_XLA_CACHE_LOGGING})
    except subprocess.TimeoutExpired:
        return {"error": f"the hooked compile ran past the run's time ({seconds:.0f} s)"}
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"exit": done.returncode, "error": done.stderr.strip()[-2000:]}
    return {**answer, "xla_log": {line: done.stderr.count(line) for line in XLA_CACHE_LINES}}


def kernel_job(spec: dict[str, Any]) -> dict[str, Any]:
    """A hooked compile of run 2, in this process (`_kernel_child`): workload
    `spec["workload"]`'s step compiled under the compiler hook in `spec["home"]` (holdout share
    `spec["holdout"]`), with JAX's persistent cache in `spec["jax_cache"]` where given, timed;
    the hook's record of it, JAX's persistent-cache hits, and the files in the per-fusion
    directory JAX names for its cache."""
    import jax
    from jax._src import monitoring

    from delivery import hook
    from execution.autotune import jax_cache, results
    from execution.autotune.per_fusion_directory import CACHE_DIR_OPTION

    if spec.get("cpu_autotunes"):
        results.AUTOTUNING_PLATFORMS = frozenset({GPU_PLATFORM, "cpu"})
    hits: list[str] = []
    cache = spec.get("jax_cache")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        monitoring.register_event_listener(
            lambda event, **_: hits.append(event) if event == jax_cache.CACHE_HIT_EVENT else None)
    fn, abstract = _workload(spec["workload"]).build()
    home = Path(spec["home"])
    job = f"{KERNEL_JOB}-{os.getpid()}"
    hook.install(home=home, job_id=job, holdout=spec["holdout"])
    lowered = jax.jit(fn).lower(*abstract)
    started = time.perf_counter()
    lowered.compile()
    seconds = time.perf_counter() - started
    hook.uninstall()
    records = [json.loads(line) for path in (home / "spool" / "hits").glob("*.jsonl")
               for line in path.read_text().splitlines()]
    mine = [r for r in records if r["job_id"] == job and r["outcome"] != "miss"]
    last = mine[-1] if mine else {}
    answer = {"compile_seconds": seconds, "outcome": last.get("outcome"), "reason": last.get("reason"),
              "hook_compile_seconds": last.get("compile_seconds")}
    if cache:
        jobs_own = Path(cache) / CACHE_DIR_OPTION  # where JAX points XLA for its cache
        answer.update(persistent_cache_hits=len(hits),
                      job_dir_files=len(list(jobs_own.glob("*.textproto"))) if jobs_own.exists() else 0)
    return answer


# --- run 3: breadth -----------------------------------------------------------------------------

def run_breadth(plan: Plan, state: State, clock: Clock) -> None:
    """The other workloads screened, tuned and verified as run 1 does its own, each given an
    even share of the run; then (`plan.gpu_tests`) tests/execution/test_gpu.py where time is left."""
    others = plan.workloads[1:]
    for name in others:
        tune_workload(plan, state, clock, name, share=plan.search_share / len(others))
    if plan.gpu_tests:
        step(state, clock, "gpu_tests", plan.step_seconds, run_gpu_tests)


def run_gpu_tests() -> dict[str, Any]:
    """tests/execution/test_gpu.py under pytest: on a GPU its GPU tests run, elsewhere they skip. The
    suite's conftest (the browser fixture) is left out: a GPU machine has no Playwright."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--noconftest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/execution/test_gpu.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    return {"exit": done.returncode, "summary": lines[-1] if lines else "",
            "failures": [line for line in lines if line.startswith(("FAILED", "ERROR", "SKIPPED"))]}


# --- the report ---------------------------------------------------------------------------------

def _by(results: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The figures of checks `prefix:NAME`, by NAME."""
    return {k.split(":", 1)[1]: v for k, v in results.items() if k.startswith(f"{prefix}:")}


def _num(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(figures: dict[str, Any]) -> str:
    low, high = figures.get("ci_low"), figures.get("ci_high")
    return "" if low is None or high is None else f"{low:.3f} .. {high:.3f}"


def _why(figures: dict[str, Any]) -> str:
    """Why a check has no figures: skipped, or its error (one line, short)."""
    return str(figures.get("skipped") or figures.get("error") or "")[:160].replace("\n", " ")


def report(results: dict[str, Any]) -> str:
    """The figures so far as markdown."""
    lines = ["# GPU check figures", ""]
    runs = {k: v for k, v in results.items() if k.startswith("run ")}
    for label, meta in sorted(runs.items()):
        lines.append(f"- {label}: {meta.get('date')}, {meta.get('device')}, JAX {meta.get('jax')}, commit "
                     f"{meta.get('commit')}: {meta['seconds']} s ({'dry run' if meta['dry_run'] else 'GPU plan'}, "
                     f"{meta['minutes']} minutes given); imports the device lacks: {meta['imports'] or 'none'}")
    if results.get("seconds"):
        lines.append("- seconds per step: " + ", ".join(f"{k} {v}" for k, v in results["seconds"].items()))
    lines.append("")
    env = results.get("environment")
    if env and "skipped" not in env:
        lines += [f"{env.get('date')}, commit {env.get('commit')}, JAX {env['jax']}, Python {env.get('python')}, "
                  f"devices {', '.join(env['devices'])}.", "",
                  f"Environment key `{env['env_key']}`: "
                  + ", ".join(f"{k} `{v}`" for k, v in env["environment"].items()),
                  f"{env['single_moves']} single moves in the graph space.", "",
                  "| GPU flag | accepted | default | rank | devices |", "|---|---|---|---:|---:|"]
        lines += [f"| {name} | {'yes' if f['accepted'] else 'no'} | {f['default']} | {f['rank']} | "
                  f"{f['min_devices']}+ |" for name, f in sorted(env["gpu_flags"].items())]
        lines.append("")
    lines += _aa_lines(results) + _tune_lines(results) + _deliver_lines(results)
    for name in sorted({k.split(":", 1)[1] for k in results if k.startswith("kernels")}):
        lines += [f"## Offline autotune results delivered: {name}", ""] + _kernel_lines(results, name) + [""]
    if "gpu_tests" in results:
        tests = results["gpu_tests"]
        lines += [f"tests/execution/test_gpu.py: {tests.get('summary') or _why(tests)}", ""]
    return "\n".join(lines)


def _aa_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    aa = _by(results, "aa")
    if aa:
        lines += ["## A/A (`fdo evaluate`, no --set)", "",
                  "| workload | speedup | 99% interval | holds 1 | numerics (max error / tolerance) | compile s |",
                  "|---|---:|---|---|---|---:|"]
        for name, r in aa.items():
            if r.get("speedup") is None:
                lines.append(f"| {name} | {_why(r)} | | | | |")
                continue
            numerics = ", ".join(f"{c['max_error']:.1e}/{c['tolerance']:.0e}" for c in r["numerics"][:4])
            lines.append(f"| {name} | {r['speedup']:.3f} | {_interval(r)} | {'yes' if r['holds_one'] else 'NO'} | "
                         f"{numerics} | {_num(r.get('default_compile_seconds'), '.1f')} |")
        lines.append("")
    across = _by(results, "aa_across")
    if across:
        lines += ["The default kept in one worker, compiled again in another and timed against it "
                  "(what a screen of a flag that changes nothing sees):", "",
                  "| workload | same program | speedup | 99% interval | numerics |", "|---|---|---:|---|---|"]
        for name, r in across.items():
            if r.get("speedup") is None:
                lines.append(f"| {name} | {_why(r)} | | | |")
                continue
            lines.append(f"| {name} | {'yes' if r['same_program'] else 'NO'} | {r['speedup']:.3f} | "
                         f"{_interval(r)} | {'ok' if r['numerics_ok'] else 'FAILED'} |")
        lines.append("")
    return lines


def _tune_lines(results: dict[str, Any]) -> list[str]:
    tunes, oracles = _by(results, "tune"), _by(results, "oracle")
    if not tunes:
        return []
    lines = ["## Screen, tuner and the best single move", "",
             "| workload | screened | tuner (budget) | its config | verified workers | best single move | "
             "verified | share |", "|---|---:|---:|---|---|---|---:|---:|"]
    for name, t in tunes.items():
        if "tuned" not in t:
            lines.append(f"| {name} | {_why(t)} | | | | | | |")
            continue
        won, oracle = t["tuned"], oracles.get(name, {})
        speed = f"{won['speedup']:.3f} [{_interval(won)}]" if won.get("speedup") else won["status"]
        verified = (oracle.get("verified") or {}).get("speedup")
        lines.append(f"| {name} | {len(t['screens'])} of {t['moves']}{' (cut short)' if t.get('cut_short') else ''} | "
                     f"{speed}{'' if won['accepted'] else ' (rejected)'} ({t['budget_evals']}) | "
                     f"{json.dumps(won['config']) if won['accepted'] else '-'} | "
                     f"{[round(x, 3) for x in won.get('speedups') or []]} | "
                     f"{json.dumps(oracle.get('config')) if oracle.get('config') else _why(oracle) or '-'} | "
                     f"{_num(verified)} | {_num(oracle.get('share_of_oracle'), '.2f')} |")
    lines += ["", "Single moves screened, each timed once (the measurements the GPU flags' ranks are to come from):",
              "", "| workload | move | speedup | interval | outcome | compile s |", "|---|---|---:|---|---|---:|"]
    for name, t in tunes.items():
        for s in t.get("screens", []):
            lines.append(f"| {name} | {json.dumps(s['config'])} | {_num(s['speedup'])} | {_interval(s)} | "
                         f"{s['outcome']} | {_num(s['compile_seconds'], '.1f')} |")
    return lines + [""]


def _deliver_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, d in _by(results, "deliver").items():
        lines += [f"## Delivered to a hooked program: {name}", ""]
        if "hooked_run" not in d:
            lines += [_why(d), ""]
            continue
        run = d["hooked_run"]
        ran = (f"{run['speedup']:.3f}x (median of {run['rounds']} interleaved rounds, {run['low']:.3f} .. "
               f"{run['high']:.3f}); within the claimed interval: {d['within_claimed_interval']}"
               if "speedup" in run else str(run)[:300])
        lines += [f"Config {json.dumps(d['config'])}, {d['source']}: claimed {d['claimed']:.3f}x "
                  f"[{_num(d['claimed_low'])}, {_num(d['claimed_high'])}]; hits {d['hits']}; hooked run {ran}", ""]
    for name, v in _by(results, "validate").items():
        if "skipped" in v or "error" in v:
            lines += [f"Validator on {name}: {_why(v)}", ""]
            continue
        for label, decisions in v.items():
            lines += [f"Validator, {label}: " + "; ".join(f"{x['outcome']} ({x['reason']})" for x in decisions), ""]
    return lines


def _autotune_line(label: str, t: dict[str, Any]) -> list[str]:
    if "files_written" not in t:
        return [f"{label}: {_why(t) or t.get('why') or 'not run'}."]
    lines = [f"{label}: compile {_num(t['compile_seconds'], '.2f')} s; XLA wrote {t['files_written']} files "
             f"({t['files_read_as_autotune_result']} read as xla.AutotuneResult), {t['names_match']} of {t['names']} "
             f"named as `cache_file_name` names them; results dumped: {t['dumped']}."
             + (f" {t['why']}." if t.get("why") else "")]
    if t.get("first_unreadable_file"):
        lines.append(f"First file XLA wrote that does not read as xla.AutotuneResult: `{t['first_unreadable_file']}`")
    return lines


def _kernel_lines(results: dict[str, Any], name: str) -> list[str]:
    """Run 2's figures of workload `name`, as markdown lines."""
    lines = _autotune_line("Default autotuning", results.get(f"kernels_default:{name}", {}))
    lines += _autotune_line("Exhaustive autotuning", results.get(f"kernels_exhaustive:{name}", {}))
    k = results.get(f"kernels:{name}", {})
    if "delivered" not in k:
        return lines + [_why(k)]
    lines += [f"Delivered the {k['delivered']} costliest fusions' results ({', '.join(k['kinds'])}; autotuner run "
              f"times {k['run_time_us']} us) of {k['results_source']}, device `{k['device']}`, key version "
              f"{k['key_version']}.", "",
              "| compile (hooked, fresh process) | median s | each s | hook's record | XLA's cache log |",
              "|---|---:|---|---|---|"]
    compiles = results.get(f"kernels_compiles:{name}", {})
    for arm in ("without", "delivered"):
        runs = compiles.get(arm, {}).get("runs", [])
        records = "; ".join(f"{r.get('outcome')}: {r.get('reason') or ''}" if not r.get("error") else r["error"][:100]
                            for r in runs)
        lines.append(f"| {arm} results | {_num(compiles.get(arm, {}).get('median_seconds'), '.2f')} | "
                     f"{[_num(r.get('compile_seconds'), '.2f') for r in runs]} | {records} | "
                     f"{json.dumps(runs[0].get('xla_log')) if runs else ''} |")
    for label, f in results.get(f"kernels_foreign:{name}", {}).items():
        if isinstance(f, dict):
            lines.append(f"| results of {label} | {_num(f.get('compile_seconds'), '.2f')} | | "
                         f"{f.get('outcome')}: {f.get('reason') or _why(f)} | {json.dumps(f.get('xla_log'))} |")
    lines += _persistent_lines(results.get(f"persistent_cache:{name}"))
    m = results.get(f"kernels_measured:{name}", {})
    if "compile" in m:
        lines += ["", f"The compile the measurement times (a fresh worker, as `fdo tune --kind kernels` builds it): "
                  f"{m['compile']}."]
    measured = m.get("measured")
    if measured is None:
        lines.append(f"Not measured: {_why(m) or 'the compile failed'}.")
    elif measured.get("speedup") is None:
        lines.append(f"Not measured: {(measured.get('error') or '')[:200]}")
    else:
        worst = max((c["max_error"] for c in measured["numerics"]), default=0.0)
        timed = "the default's program" if measured["identical_program"] else f"{measured['pairs']} pairs"
        lines.append(f"Measured against the default, {len(measured['speedups']) or 1} fresh workers: "
                     f"{measured['speedup']:.3f}x [{_interval(measured)}] (workers {measured['speedups']}; {timed}; "
                     f"outputs differ by at most {worst:.2e}).")
    validated = results.get(f"kernels_validate:{name}", {})
    for label, decisions in validated.items():
        if isinstance(decisions, list):
            lines.append(f"Validator, {label}: " + "; ".join(
                f"{d['outcome']} ({d['reason']}; results {d['autotune_fate']})" for d in decisions))
    if "skipped" in validated:
        lines.append(f"Validator: {_why(validated)}")
    return lines


def _persistent_lines(p: dict[str, Any] | None) -> list[str]:
    if p is None:
        return []
    if "compiles" not in p:
        return ["", f"With JAX's persistent cache: {_why(p)}"]
    lines = ["", "With JAX's persistent compilation cache on (one cache directory, each compile a fresh process; "
             f"{p['cache_entries']} cache entries at the end):", "",
             "| compile | s | JAX cache hits | files in the job's per-fusion directory | hook's record |",
             "|---|---:|---:|---:|---|"]
    for label, c in p["compiles"].items():
        lines.append(f"| {label} | {_num(c.get('compile_seconds'), '.2f')} | {c.get('persistent_cache_hits', '-')} | "
                     f"{c.get('job_dir_files', '-')} | {c.get('outcome')}: {c.get('reason') or _why(c)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=int, choices=sorted(RUNS), help="the run: 1 loop, 2 kernels, 3 breadth")
    parser.add_argument("--out", type=Path, help="where the figures so far go (JSON, markdown, the state archive)")
    parser.add_argument("--state", type=Path, default=ROOT / ".gpu-check",
                        help="what the runs keep for one another (default: .gpu-check/)")
    parser.add_argument("--minutes", type=float, default=5.0,
                        help="the run's time: no step starts past it (default 5)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the small workloads and budgets, on whatever backend JAX has here")
    parser.add_argument("--workloads", metavar="NAMES",
                        help="comma-separated zoo workloads instead of the plan's: the first is runs 1 and "
                             "2's, the others run 3's")
    parser.add_argument("--restore", type=Path, metavar="DIR",
                        help=f"unpack DIR/{STATE_ARCHIVE} (a run's returned files) into the state, and stop")
    parser.add_argument("--hook-job", metavar="WORKLOAD", help=argparse.SUPPRESS)  # run 1's hooked program
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--round-seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--kernel-job", metavar="JSON", help=argparse.SUPPRESS)  # a compile of run 2
    args = parser.parse_args()
    if args.kernel_job:
        print(json.dumps(kernel_job(json.loads(args.kernel_job))))
        return
    if args.hook_job:
        print(json.dumps(hook_job(args.hook_job, args.home, args.rounds, args.round_seconds)))
        return
    if args.restore:
        restore(args.restore, args.state)
        return
    if args.run is None or args.out is None:
        parser.error("--run and --out are needed")
    plan = DRY_PLAN if args.dry_run else GPU_PLAN
    if args.workloads:
        plan = dataclasses.replace(plan, workloads=tuple(args.workloads.split(",")))
    if args.run == 3 and len(plan.workloads) < 2:
        parser.error("run 3 tunes the workloads after the first: --workloads gives one")
    state = State(args.state, args.out)
    started = time.monotonic()
    RUNS[args.run](plan, state, Clock(args.minutes))
    import jax

    # Each run's own machine, date and commit: the runs of the figures may be sessions apart.
    state.record(f"run {args.run}", {
        "seconds": round(time.monotonic() - started, 1), "dry_run": args.dry_run, "minutes": args.minutes,
        "device": jax.devices()[0].device_kind, "jax": jax.__version__, "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "imports": sorted(name for name in ABSENT_ON_DEVICE if name in sys.modules)})
    print(report(state.results))


RUNS: dict[int, Callable[[Plan, State, Clock], None]] = {1: run_loop, 2: run_kernels, 3: run_breadth}

if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
