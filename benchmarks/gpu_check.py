"""The GPU checks (issue 31): the loop's compiler stages on a GPU, in parts a lent machine runs.

    python benchmarks/gpu_check.py --part N --out DIR [--state DIR] [--minutes M] [--dry-run]

Each part writes every figure so far to DIR (`gpu_check.json`, `gpu_check.md`) and keeps what
later parts need under --state (default `.gpu-check/` in the repository: the modules, the homes
of the tuning tasks, the figures), so a part resumes from what earlier ones wrote, and a
tuning task cut short resumes from its journal. docs/gpu.md says how a device session runs it.

1. environment: what JAX reports and the environment key built from it; the GPU flags the
   installed compiler accepts and their defaults; the one-GPU graph space; the tests of
   tests/test_gpu.py (those that need a GPU run there); the workloads' modules; an A/A `fdo
   evaluate` (no --set) of each: every interval should hold 1, and the numerics say how far a
   GPU's default differs from itself; and the default against itself across two processes, as
   the tuner's execute and compile workers build it (each compile autotunes afresh).
2, 4, 5. tune WORKLOAD (the first, second, third workload): the one-move oracle (every single
   move of the graph space screened, the best verified in fresh workers: the tuner's own task
   over that fixed list), then `fdo tune`'s search at --budget-evals 40 in a home of its own (a
   cold start), its verified gain as a share of the oracle's, and the winner confirmed by `fdo
   evaluate --set ... --workers 3`. Each screen is a measured single move: the figures the GPU
   flags' cold-start ranks are to come from.
3. deliver: the first workload's winner (else its oracle) published in a store; a JAX program
   running that train step under the compiler hook gets it (`fdo hits`: applied) and runs the
   tuned executable against the default one in interleaved rounds (their speedup against the
   verified one); then the validator measures that entry, and a slower single move's entry,
   on this machine: kept and invalidated.
6, 7. kernels WORKLOAD (the first, second workload): XLA's own autotuner run exhaustively over
   the step's GEMM and convolution fusions as `fdo tune --kind kernels` runs it (tuner.kernels:
   a fresh worker's own directory, its results dumped, the names of the files it wrote compared
   with `FusionResult.cache_file_name`); the costliest fusions' results published as a store
   entry; hooked compiles with and without them, each in a fresh process (XLA keeps results in
   memory too): their compile times, what the hook recorded (delivered, taken, autotuned) and
   XLA's cache log lines; the graph with the delivered results measured against the default as
   the kind verifies it (execution.evaluate: built in a fresh worker, timed in fresh workers);
   the same results labelled as another GPU's and another XLA version's, which XLA must not
   take; and the validator re-checking the three entries (kept; re-keyed, relabelled as XLA
   keys its results).

--dry-run runs the same code on whatever backend JAX has here (the CPU) with the small zoo
sizes and budgets of seconds, so the script is tested where there is no GPU
(tests/test_gpu_check.py). `fdo tune` and `fdo validate --once` check for the pipeline extra
(Apache Beam, DuckDB), which a GPU machine lacks and these stages do not use: the parts call
the same functions those commands call (`pipelines.stages.tune_graphs`, `validator.validate`),
and `fdo evaluate` and `fdo hits` as commands. The modules they import that the device may lack
are recorded by each part (`imports`).
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
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from execution.compile import compiler_defaults  # noqa: E402
from execution.flags import FLAGS, to_json  # noqa: E402
from execution.measure import MeasureSettings  # noqa: E402
from hlo.environment import GPU_PLATFORM, current_environment, describe_gpu, store_key  # noqa: E402
from hlo.fingerprint import graph_fingerprint  # noqa: E402
from hlo.interval import columns  # noqa: E402
from hlo.module import HloModule, from_lowered, load_file  # noqa: E402
from pipelines import stages  # noqa: E402
from tuner.schedule import neighbourhood, order_moves  # noqa: E402
from tuner.space import Kind, accepted_flags, graph_space  # noqa: E402
from tuner.trial import Phase  # noqa: E402
from tuner.tune import VERIFY_SETTINGS, TuneResult, TuneSettings, TuneTarget, run_task  # noqa: E402
from workloads import zoo  # noqa: E402

RESULTS = "gpu_check.json"
REPORT = "gpu_check.md"
# What a GPU machine of this workplace lacks (docs/gpu.md): a part that imported one of these
# would fail there.
ABSENT_ON_DEVICE = ("apache_beam", "duckdb", "fastapi", "pydantic", "uvicorn", "apscheduler", "plotly")
HOOK_JOB = "gpu-check-hooked"


@dataclass(frozen=True)
class Plan:
    """How big each check is: the GPU's sizes, or the dry run's seconds-long ones."""

    workloads: tuple[str, ...]  # zoo names: tuned by parts 2, 4, 5; the first delivered by 3
    aa_seconds: float  # each A/A `fdo evaluate`'s timing budget (--max-seconds)
    confirm_seconds: float  # each confirming `fdo evaluate`'s, per worker
    oracle_moves: int | None  # single moves the oracle screens (None: every one)
    budget_evals: int  # `fdo tune --budget-evals`
    workers: int  # fresh workers of each verification, confirmation and validation
    verify: MeasureSettings  # the tuner's verification, and the validator's measurement
    hook_rounds: int  # interleaved rounds of the hooked program, tuned against default
    round_seconds: float  # each side's share of a round
    # Part 3 without a verified gain delivers the best screened move (the dry run: its code
    # path is tested whether or not a CPU's seconds of tuning find a gain).
    deliver_unverified: bool = False
    kernels: int = 8  # parts 6, 7: the costliest fusions whose offline results are delivered
    compile_repeats: int = 3  # hooked compiles with and without them, each in a fresh process
    # Parts 6, 7 deliver results made here where XLA wrote none (the dry run: XLA:CPU autotunes
    # nothing, and the store, the hook and the measurement are tested all the same).
    synthetic_results: bool = False
    # Searches end at `budget_evals` or at their share of the part's minutes, whichever comes
    # first; the dry run's at their evaluations alone (a loaded CI machine's seconds of search
    # can end before the first evaluation, and leave part 3 nothing to deliver).
    timed_searches: bool = True

    def tune_settings(self, budget_evals: int, minutes: float) -> TuneSettings:
        """A task's settings within `budget_evals` evaluations and (`timed_searches`)
        `minutes` of search."""
        return TuneSettings(budget_evals=budget_evals, budget_minutes=minutes if self.timed_searches else None,
                            verify=self.verify, verify_workers=self.workers)


GPU_PLAN = Plan(workloads=tuple(w.name for w in zoo.gpu_workloads()), aa_seconds=10.0,
                confirm_seconds=10.0, oracle_moves=None, budget_evals=40, workers=3,
                verify=VERIFY_SETTINGS, hook_rounds=20, round_seconds=0.25)
DRY_PLAN = Plan(workloads=tuple(name.replace(f"-{zoo.GPU_SIZE}", "-s") for name in GPU_PLAN.workloads),
                aa_seconds=1.0, confirm_seconds=1.0, oracle_moves=2, budget_evals=2, workers=1,
                verify=dataclasses.replace(VERIFY_SETTINGS, min_pairs=10, max_seconds=1.0),
                hook_rounds=4, round_seconds=0.05, deliver_unverified=True, kernels=4, compile_repeats=1,
                synthetic_results=True, timed_searches=False)


class State:
    """The figures of every part so far (`RESULTS` under the state directory), and the files
    later parts read: the modules, the homes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RESULTS
        self.results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    def record(self, check: str, figures: dict[str, Any]) -> None:
        """Keep `figures` as check `check`'s (replacing an earlier run's), on disk at once."""
        self.results[check] = figures
        staging = self.directory / f"{RESULTS}.tmp"
        staging.write_text(json.dumps(self.results, indent=1, sort_keys=True, default=str))
        staging.replace(self.directory / RESULTS)

    def module(self, name: str) -> Path:
        """The HLO file of zoo workload `name` (written by part 1, or now)."""
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


def settings_text(config: dict[str, Any]) -> list[str]:
    """A config as `fdo evaluate --set` arguments."""
    text = []
    for name, value in sorted(to_json(config).items()):
        if isinstance(value, list):
            shown = ",".join(value)
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
        text += ["--set", f"{name}={shown}"]
    return text


# --- part 1 ---------------------------------------------------------------------------------

def part_environment(plan: Plan, state: State, minutes: float) -> None:
    """What this machine is, what its compiler takes, and an A/A of each workload."""
    import jax

    environment = current_environment()
    devices = jax.devices()
    description = describe_gpu(devices) if environment.platform == GPU_PLATFORM else None
    defaults = compiler_defaults()
    accepted = accepted_flags(environment.platform)
    declared = {name: spec for name, spec in FLAGS.items() if spec.platform == GPU_PLATFORM}
    space = graph_space(environment.platform, accepted, defaults)
    state.record("environment", {
        "environment": environment.to_json(), "env_key": environment.key(),
        "description": dataclasses.asdict(description) if description else None,
        "jax": jax.__version__, "devices": [str(d) for d in devices],
        "gpu_flags": {name: {"accepted": name in accepted_flags(GPU_PLATFORM),
                             "default": to_json({name: defaults[name]})[name] if name in defaults else None,
                             "rank": spec.rank, "min_devices": spec.min_devices}
                      for name, spec in declared.items()},
        "space": {param.name: [to_json({param.name: v})[param.name] for v in param.values]
                  for param in space.params},
        "single_moves": len(neighbourhood(space)),
    })
    state.record("gpu_tests", run_gpu_tests())
    deadline = time.monotonic() + 60 * minutes
    rows, across = {}, {}
    for name in plan.workloads:
        path = state.module(name)
        if time.monotonic() > deadline:
            rows[name] = {"skipped": "out of the part's time"}
            continue
        found = fdo("evaluate", str(path), "--max-seconds", str(plan.aa_seconds))
        rows[name] = {**{k: found.get(k) for k in (
            "exit", "error", "speedup", "ci_low", "ci_high", "pairs", "numerics_ok", "compile_seconds",
            "default_compile_seconds", "default_seconds", "stop_reason")},
            "holds_one": found.get("ci_low") is not None and found["ci_low"] <= 1.0 <= found["ci_high"],
            "numerics": _checks(found.get("numerics", []))}
        across[name] = across_processes(load_file(path).proto, plan)
    state.record("aa", rows)
    state.record("aa_across_processes", across)


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


def run_gpu_tests() -> dict[str, Any]:
    """tests/test_gpu.py under pytest: on a GPU its GPU tests run, elsewhere they skip. The
    suite's conftest (the browser fixture) is left out: a GPU machine has no Playwright."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--noconftest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_gpu.py"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    return {"exit": done.returncode, "summary": lines[-1] if lines else "",
            "failures": [line for line in lines if line.startswith(("FAILED", "ERROR", "SKIPPED"))]}


# --- parts 2, 4, 5 ----------------------------------------------------------------------------

def part_tune(plan: Plan, state: State, minutes: float, name: str) -> None:
    """The one-move oracle of workload `name`, the tuner's search, and its winner confirmed."""
    path = state.module(name)
    module = load_file(path)
    environment = current_environment()
    space = graph_space(environment.platform, accepted_flags(environment.platform), compiler_defaults())
    singles = tuple({move[0]: move[1]} for move in order_moves(neighbourhood(space))[:plan.oracle_moves])
    # The search gets 2/5 of the part, the oracle as long (it screens every move), the
    # verifications and the confirmation the rest.
    oracle = run_task(TuneTarget(module, graph_fingerprint(module), Kind.GRAPH, space, f"{name} oracle",
                                 configs=singles),
                      state.home(f"{name}-oracle"), plan.tune_settings(len(singles), 0.3 * minutes))
    tuned = stages.tune_graphs(state.home(f"{name}-tune"), [(name, module, None)],
                               plan.tune_settings(plan.budget_evals, 0.3 * minutes))[0].result
    figures = {"moves": len(singles), "budget_evals": plan.budget_evals, "oracle": _result(oracle),
               "tuned": _result(tuned),
               "screens": [{"config": to_json(t.config), "outcome": t.outcome, **columns(t.speedup),
                            "numerics_ok": t.numerics_ok,
                            "compile_seconds": t.compile_seconds, "error": t.error}
                           for t in oracle.trials if t.baseline is None and t.phase == Phase.SEARCH],
               "share_of_oracle": gain_share(tuned, oracle)}
    if tuned.accepted:
        figures["confirmed"] = fdo("evaluate", str(path), *settings_text(tuned.config), "--workers",
                                   str(plan.workers), "--max-seconds", str(plan.confirm_seconds))
    state.record(f"tune:{name}", figures)


def _result(result: TuneResult) -> dict[str, Any]:
    """What a task found, as the figures show it."""
    return {key: value for key, value in result.to_json().items()
            if key in ("status", "accepted", "config", "speedup", "ci_low", "ci_high", "numerics_ok",
                       "evaluations", "measured", "speedups", "seconds_to_best", "reason")}


def gain_share(tuned: TuneResult, oracle: TuneResult) -> float | None:
    """The tuner's verified gain as a share of the oracle's, in log speedup (1: the oracle's
    gain, 0: none; a slower or rejected find counts 0); None where the oracle found none."""
    if not oracle.accepted or not oracle.speedup or oracle.speedup.estimate <= 1.0:
        return None
    found = tuned.speedup.estimate if tuned.accepted and tuned.speedup else 1.0
    return max(0.0, math.log(found) / math.log(oracle.speedup.estimate))


# --- part 3 -----------------------------------------------------------------------------------

def part_deliver(plan: Plan, state: State, minutes: float) -> None:
    """The first workload's winner through the store to a hooked program, and the validator."""
    name = plan.workloads[0]
    tuned = state.results.get(f"tune:{name}")
    if tuned is None:
        state.record("deliver", {"skipped": f"part 2 has not tuned {name} yet"})
        return
    winner = next((tuned[k] for k in ("tuned", "oracle") if tuned[k]["accepted"]), None)
    if winner is None and plan.deliver_unverified:
        winner = max((s for s in tuned["screens"] if s["outcome"] == "measured"),
                     key=lambda s: s["speedup"], default=None)
    if winner is None:
        state.record("deliver", {"skipped": f"neither the tuner nor the oracle found a gain on {name}"})
        return
    module = load_file(state.module(name))
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    home = state.home("deliver", fresh=True)
    publish(home, [entry(fingerprint, env_key, environment.compiler_version, winner, "gpu-check")])
    report = _json_of([sys.executable, str(Path(__file__).resolve()), "--hook-job", name, "--home", str(home),
                       "--rounds", str(plan.hook_rounds), "--round-seconds", str(plan.round_seconds)])
    hits = fdo("hits", "--job", HOOK_JOB, home=home)
    state.record("deliver", {"workload": name, "config": winner["config"], "verified": winner["speedup"],
                             "unverified": "accepted" not in winner,
                             "hooked_run": report, "hits": hits.get("outcomes"),
                             "hit_keys": sorted({r["key"] for r in hits.get("records", [])
                                                 if r["outcome"] == "applied"}),
                             "entry_key": store_key(fingerprint, env_key)})
    state.record("validate", validate_entries(plan, state, name, module, winner, tuned["screens"]))


def losing_move(screens: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A single move the validator should remove: the slowest screened wholly slower than the
    default, else one that compiled to the default's program (None: neither was screened)."""
    slower = [s for s in screens if s["outcome"] == "measured" and s["ci_high"] is not None
              and s["ci_high"] < 1.0]
    return min(slower, key=lambda s: s["speedup"], default=None) or next(
        (s for s in screens if s["outcome"] == "identical"), None)


def validate_entries(plan: Plan, state: State, name: str, module: HloModule, winner: dict[str, Any],
                     screens: list[dict[str, Any]]) -> dict[str, Any]:
    """The validator on this machine, over the winner's entry and a losing single move's
    (`losing_move`, stored with the winner's claim): measured, then kept or invalidated."""
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    claims = {"winner": winner}
    losing = losing_move(screens)
    if losing is not None:
        claims[f"losing move ({losing['outcome']} when screened)"] = {**winner, "config": losing["config"]}
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
    """A store entry of `claim` (a task's config, speedup and interval), as deliver writes one,
    with `autotune_results` (XLA's text of them) where given."""
    measured_at = measured_at or datetime.datetime.now(datetime.UTC)
    return {"key": store_key(fingerprint, env_key), "fingerprint": fingerprint, "env_key": env_key,
            "kind": "graph", "speedup": claim["speedup"],
            "expires_at": measured_at + datetime.timedelta(days=30), "provenance": "tuner",
            "config": json.dumps(claim["config"], sort_keys=True), "ci_low": claim["ci_low"],
            "ci_high": claim["ci_high"], "compiler_version": compiler_version, "measured_at": measured_at,
            "source": source, "autotune_results": autotune_results}


def publish(home: Path, rows: list[dict[str, Any]]) -> None:
    """`rows` as the store's next version, replacing every entry (deliver needs Apache Beam)."""
    import pyarrow as pa

    from delivery.store import Store
    from storage.store import ENTRIES

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
    hook.install(home=home, job_id=HOOK_JOB)
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


# --- parts 6, 7 ---------------------------------------------------------------------------------
# XLA keeps the autotune results of a process in memory and looks there before the per-fusion
# cache directory: every compile whose autotuning is observed runs in a process of its own, and
# the executables are measured, serialized, in another.

KERNEL_JOB = "gpu-check-kernels"
# XLA:GPU's log lines about its autotune caches (their modules at log level 1), counted per
# compile: evidence, beside the files, of which fusions were found and which autotuned.
XLA_CACHE_LINES = ("File-based autotune cache hit", "In-memory autotune cache hit", "Autotune cache miss",
                   "Writing autotune result to file")
_XLA_CACHE_LOGGING = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_MAX_VLOG_LEVEL": "1"}


def part_kernels(plan: Plan, state: State, minutes: float, name: str) -> None:
    """Workload `name`'s GEMM and convolution fusions tuned offline by XLA's own autotuner as the
    kernels kind tunes them (`tuner.kernels.offline_results`: exhaustive tiling, in a directory
    of a fresh worker's own), the costliest delivered through the store to hooked compiles: the
    graph measured with them against XLA's default autotuning as the kind verifies it
    (`compile_with_results`, `evaluate_built`), the hooked compile time with and without them,
    what XLA took, results made for another GPU and another XLA version falling back, and the
    validator re-checking each entry (kept; re-keyed, relabelled as XLA keys its results)."""
    from execution.autotune_results import parse_results
    from execution.evaluate import compile_with_results, evaluate_built
    from tuner.kernels import offline_results

    deadline = time.monotonic() + 60 * minutes
    module = load_file(state.module(name))
    found = offline_results(module, plan.kernels)
    figures: dict[str, Any] = {"workload": name, "tune": _offline_figures(found)}
    chosen = found.chosen
    if plan.synthetic_results:
        # XLA:CPU autotunes nothing: the dry run delivers results made here, to test the path.
        chosen = parse_results(_synthetic_results(state.module(name)))
        figures["results_source"] = "synthetic (dry run: XLA:CPU autotunes nothing)"
    if chosen is None:
        state.record(f"kernels:{name}", {**figures, "skipped": found.why})
        return
    dumped = found.offline.autotune.dumped if found.offline.autotune else None
    figures["results"] = {"autotuned_fusions": len(dumped.fusions) if dumped else len(chosen.fusions),
                          "delivered": len(chosen.fusions), "kinds": sorted({f.kind for f in chosen.fusions}),
                          "device": chosen.fusions[0].device, "key_version": chosen.fusions[0].version,
                          "run_time_us": [round(f.run_time_seconds * 1e6, 1) for f in chosen.fusions]}
    # Another GPU's and another XLA's results for the same fusions: XLA's keys differ.
    foreign = {"another GPU": chosen.for_device(chosen.fusions[0].device + " (another GPU)",
                                                chosen.fusions[0].version),
               "another XLA version": chosen.for_device(chosen.fusions[0].device, chosen.fusions[0].version + 1)}
    environment = current_environment()
    fingerprint, env_key = graph_fingerprint(module), environment.key()
    rows: dict[str, dict[str, Any]] = {}
    homes: dict[str, Path] = {}
    for label, results in {"delivered": chosen, **foreign}.items():
        homes[label] = state.home(f"{name}-kernels-{label.replace(' ', '-')}", fresh=True)
        rows[label] = entry(fingerprint, env_key, environment.compiler_version,
                            {"config": {}, "speedup": 1.0, "ci_low": None, "ci_high": None},
                            f"gpu-check kernels {label}", autotune_results=results.to_text())
        publish(homes[label], [rows[label]])
    compiles: dict[str, list[dict[str, Any]]] = {"without": [], "delivered": []}
    skipped = {"skipped": "out of the part's time"}

    def compile_arm(arm: str) -> None:
        if time.monotonic() < deadline:
            compiles[arm].append(_kernel_child({
                "home": str(homes["delivered"]), "workload": name,
                "holdout": 1.0 if arm == "without" else 0.0}, deadline))  # holdout: the job's own compile

    # What matters most first: a compile of each arm, the measurement, the foreign results, the
    # validator; then the rest of the compiles, alternating arms, as load drifts.
    for arm in compiles:
        compile_arm(arm)
    built = compile_with_results(module, chosen)
    figures["delivered_compile"] = ({"error": built.error} if built.error is not None
                                    else dataclasses.asdict(built.autotune.uptake))
    if built.error is None and time.monotonic() < deadline:
        measured = evaluate_built(module, built, plan.workers, settings=plan.verify)
        figures["measured"] = measured.to_json()
    figures["foreign"] = {label: _kernel_child({"home": str(homes[label]), "workload": name, "holdout": 0.0},
                                               deadline)
                          if time.monotonic() < deadline else skipped for label in foreign}
    figures["validate"] = (_validate_each(plan, state, name, {
        f"{label} (expected: {expected})": rows[label] for label, expected in (
            ("delivered", "kept"), ("another XLA version", "rekeyed"), ("another GPU", "rekeyed"))})
        if time.monotonic() < deadline else skipped)
    for _ in range(plan.compile_repeats - 1):
        for arm in compiles:
            compile_arm(arm)
    figures["compiles"] = {arm: _compile_figures(runs) for arm, runs in compiles.items()}
    state.record(f"kernels:{name}", figures)


def _offline_figures(found: Any) -> dict[str, Any]:
    """What XLA's exhaustive autotuning compile did (`tuner.kernels.OfflineResults`): its
    seconds, the files it wrote and how many read as xla.AutotuneResult (the start of one that
    does not), whether it dumped its results, and how many of them `cache_file_name` names as
    XLA named their files."""
    offline = found.offline
    if offline.error is not None:
        return {"error": offline.error}
    outcome = offline.autotune
    return {"compile_seconds": offline.compile_seconds, "files_written": outcome.uptake.autotuned,
            "files_read_as_autotune_result": outcome.readable, "first_unreadable_file": outcome.unreadable_sample,
            "dumped": outcome.dumped is not None, "dump_error": outcome.dump_error, "names_match": outcome.named,
            "names": len(outcome.dumped.fusions) if outcome.dumped else 0}


def _compile_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median compile time of `runs` (each a hooked compile in a fresh process) and what
    the hook and XLA said of each."""
    timed = [r["compile_seconds"] for r in runs if "compile_seconds" in r]
    return {"median_seconds": statistics.median(timed) if timed else None, "seconds": timed,
            "hits": [{k: r.get(k) for k in ("outcome", "reason", "xla_log", "error")} for r in runs]}


def _synthetic_results(module_path: Path) -> str:
    """Autotune results for the dry run: one per dot of the module's text, as XLA's dump lays
    them out, for a device and key version of the dry run's own."""
    from execution.autotune_results import parse_results

    dots = [line.strip() for line in module_path.read_text().splitlines()
            if " dot(" in line or " convolution(" in line][:8]
    entries = "".join(
        f'results {{ device: "dry run" hlo: {json.dumps(dot)} version: 1 '
        f'result {{ run_time {{ nanos: {1000 * (i + 1)} }} triton {{ block_m: 32 block_n: 32 block_k: 32 '
        f'split_k: 1 num_stages: 1 num_warps: 4 num_ctas: 1 }} }} }}\n' for i, dot in enumerate(dots))
    return parse_results(f"version: 3\n{entries}").to_text()


def _kernel_child(spec: dict[str, Any], deadline: float) -> dict[str, Any]:
    """`kernel_job(spec)` in a fresh process, with XLA's autotune cache logging on, given until
    `deadline` (time.monotonic(); a minute at least): its JSON answer, and how often each of
    XLA_CACHE_LINES appeared in its log."""
    command = [sys.executable, str(Path(__file__).resolve()), "--kernel-job", json.dumps(spec)]
    seconds = max(60.0, deadline - time.monotonic())
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds,
                              env={**os.environ, **_XLA_CACHE_LOGGING})
    except subprocess.TimeoutExpired:
        return {"error": f"the hooked compile ran past the part's time ({seconds:.0f} s)"}
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"exit": done.returncode, "error": done.stderr.strip()[-2000:]}
    return {**answer, "xla_log": {line: done.stderr.count(line) for line in XLA_CACHE_LINES}}


def kernel_job(spec: dict[str, Any]) -> dict[str, Any]:
    """A hooked compile of parts 6 and 7, in this process (`_kernel_child`): workload
    `spec["workload"]`'s step compiled under the compiler hook in `spec["home"]` (holdout share
    `spec["holdout"]`), timed, and the hook's record of it."""
    import jax

    from delivery import hook

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
    return {"compile_seconds": seconds, "outcome": last.get("outcome"), "reason": last.get("reason"),
            "hook_compile_seconds": last.get("compile_seconds")}


# --- the report ---------------------------------------------------------------------------------

def report(results: dict[str, Any]) -> str:
    """The figures so far as markdown."""
    lines = ["# GPU check figures", ""]
    env = results.get("environment")
    if env:
        lines += [f"Environment key `{env['env_key']}`: " + ", ".join(
            f"{k} `{v}`" for k, v in env["environment"].items()), f"JAX {env['jax']}, devices "
            f"{', '.join(env['devices'])}; {env['single_moves']} single moves in the graph space.", "",
                  "| GPU flag | accepted | default | rank | devices |", "|---|---|---|---:|---:|"]
        lines += [f"| {name} | {'yes' if f['accepted'] else 'no'} | {f['default']} | {f['rank']} | "
                  f"{f['min_devices']}+ |" for name, f in sorted(env["gpu_flags"].items())]
        lines.append("")
    if "gpu_tests" in results:
        lines += [f"tests/test_gpu.py: {results['gpu_tests']['summary']}", ""]
    if "aa" in results:
        lines += ["## A/A (`fdo evaluate`, no --set)", "",
                  "| workload | speedup | 99% interval | holds 1 | numerics (max error / tolerance) | compile s |",
                  "|---|---:|---|---|---|---:|"]
        for name, r in results["aa"].items():
            if r.get("speedup") is None:
                lines.append(f"| {name} | {r.get('skipped') or r.get('error', '')[:80]} | | | | |")
                continue
            numerics = ", ".join(f"{c['max_error']:.1e}/{c['tolerance']:.0e}" for c in r["numerics"][:4])
            lines.append(f"| {name} | {r['speedup']:.3f} | {r['ci_low']:.3f} .. {r['ci_high']:.3f} | "
                         f"{'yes' if r['holds_one'] else 'NO'} | {numerics} | {r['default_compile_seconds']:.1f} |")
        lines.append("")
    if "aa_across_processes" in results:
        lines += ["The default kept in one worker, compiled again in another and timed against it "
                  "(what a screen of a flag that changes nothing sees):", "",
                  "| workload | same program | speedup | 99% interval | numerics |", "|---|---|---:|---|---|"]
        for name, r in results["aa_across_processes"].items():
            if "error" in r:
                lines.append(f"| {name} | {r['error'][:100]} | | | |")
                continue
            lines.append(f"| {name} | {'yes' if r['same_program'] else 'NO'} | {r['speedup']:.3f} | "
                         f"{r['ci_low']:.3f} .. {r['ci_high']:.3f} | {'ok' if r['numerics_ok'] else 'FAILED'} |")
        lines.append("")
    tunes = {k.split(":", 1)[1]: v for k, v in results.items() if k.startswith("tune:")}
    if tunes:
        lines += ["## Oracle and tuner", "",
                  "| workload | moves screened | oracle | its config | tuner (budget) | its config | share | "
                  "confirmed |", "|---|---:|---:|---|---:|---|---:|---:|"]
        for name, t in tunes.items():
            confirmed = t.get("confirmed", {}).get("speedup")
            share = t["share_of_oracle"]
            lines.append(f"| {name} | {len(t['screens'])} of {t['moves']} | {_speed(t['oracle'])} | "
                         f"{_config(t['oracle'])} | {_speed(t['tuned'])} ({t.get('budget_evals', '?')}) | "
                         f"{_config(t['tuned'])} | "
                         f"{'-' if share is None else f'{share:.2f}'} | "
                         f"{'-' if confirmed is None else f'{confirmed:.3f}'} |")
        lines += ["", "Single moves screened (the measurements the cold-start ranks are to come from):", "",
                  "| workload | move | speedup | interval | outcome |", "|---|---|---:|---|---|"]
        for name, t in tunes.items():
            for s in t["screens"]:
                interval = f"{s['ci_low']:.3f} .. {s['ci_high']:.3f}" if s["ci_low"] is not None else ""
                speed = f"{s['speedup']:.3f}" if s["speedup"] is not None else ""
                lines.append(f"| {name} | {json.dumps(s['config'])} | {speed} | {interval} | {s['outcome']} |")
        lines.append("")
    deliver = results.get("deliver")
    if deliver:
        lines += ["## Delivered to a hooked program", ""]
        if "skipped" in deliver:
            lines.append(deliver["skipped"])
        else:
            run = deliver["hooked_run"]
            claimed = "screened (unverified: the dry run's best screen)" if deliver["unverified"] else "verified"
            lines.append(f"{deliver['workload']}: config {json.dumps(deliver['config'])}, {claimed} "
                         f"{deliver['verified']:.3f}x; hits {deliver['hits']}; hooked run "
                         + (f"{run['speedup']:.3f}x (median of {run['rounds']} interleaved rounds, "
                            f"{run['low']:.3f} .. {run['high']:.3f})" if "speedup" in run else str(run)))
        lines.append("")
    for label, decisions in (results.get("validate") or {}).items():
        lines += [f"Validator, {label}: " + "; ".join(f"{d['outcome']} ({d['reason']})" for d in decisions), ""]
    kernels = {k.split(":", 1)[1]: v for k, v in results.items() if k.startswith("kernels:")}
    for name, k in kernels.items():
        lines += [f"## Offline autotune results delivered: {name}", ""] + _kernel_lines(k) + [""]
    return "\n".join(lines)


def _kernel_lines(k: dict[str, Any]) -> list[str]:
    """Parts 6 and 7's figures of one workload, as markdown lines."""
    tune = k["tune"]
    lines = [f"Exhaustive autotuning compile {_seconds(tune.get('compile_seconds'))}: XLA wrote "
             f"{tune.get('files_written')} files ({tune.get('files_read_as_autotune_result')} read as "
             f"xla.AutotuneResult), {tune.get('names_match', 0)} of {tune.get('names', 0)} named as "
             f"`cache_file_name` names them; results dumped: {tune.get('dumped')}." + (
                 f" {k['results_source']}." if "results_source" in k else "")]
    if "error" in tune:
        lines.append(f"It failed: {tune['error'][:300]}")
    if tune.get("first_unreadable_file"):
        lines.append(f"First file XLA wrote that does not read as xla.AutotuneResult: `{tune['first_unreadable_file']}`")
    if "skipped" in k:
        return lines + [k["skipped"]]
    r = k["results"]
    lines.append(f"Delivered the {r['delivered']} costliest of {r['autotuned_fusions']} fusions ({', '.join(r['kinds'])}; "
                 f"autotuner run times {r['run_time_us']} us), device `{r['device']}`, key version {r['key_version']}.")
    lines += ["", "| compile (hooked, fresh process) | median s | each s | hook's record | XLA's cache log |",
              "|---|---:|---|---|---|"]
    for arm, c in k["compiles"].items():
        hits = "; ".join(f"{h['outcome']}: {h['reason']}" if not h.get("error") else h["error"][:100]
                         for h in c["hits"])
        logs = "; ".join(json.dumps(h.get("xla_log")) for h in c["hits"][:1])
        lines.append(f"| {arm} results | {_seconds(c['median_seconds'])} | {c['seconds']} | {hits} | {logs} |")
    for label, f in k["foreign"].items():
        lines.append(f"| results of {label} | {_seconds(f.get('compile_seconds'))} | | "
                     f"{f.get('outcome')}: {f.get('reason') or (f.get('error') or f.get('skipped', ''))[:100]} | "
                     f"{json.dumps(f.get('xla_log'))} |")
    lines += ["", f"The compile the measurement times (a fresh worker, as `fdo tune --kind kernels` builds it): "
              f"{k['delivered_compile']}."]
    m = k.get("measured")
    if m is None:
        lines.append("Not measured (the compile failed, or out of the part's time).")
    elif m.get("speedup") is None:
        lines.append(f"Not measured: {(m.get('error') or '')[:200]}")
    else:
        worst = max((c["max_error"] for c in m["numerics"]), default=0.0)
        timed = "the default's program" if m["identical_program"] else f"{m['pairs']} pairs"
        lines.append(f"Measured against the default, {len(m['speedups']) or 1} fresh workers: {m['speedup']:.3f}x "
                     f"[{m['ci_low']:.3f}, {m['ci_high']:.3f}] (workers {m['speedups']}; {timed}; "
                     f"outputs differ by at most {worst:.2e}).")
    for label, decisions in (k.get("validate") or {}).items():
        if isinstance(decisions, list):
            lines.append(f"Validator, {label}: " + "; ".join(
                f"{d['outcome']} ({d['reason']}; results {d['autotune_fate']})" for d in decisions))
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _speed(result: dict[str, Any]) -> str:
    if result.get("speedup") is None:
        return result.get("status", "")
    return f"{result['speedup']:.3f}{'' if result['accepted'] else ' (rejected)'}"


def _config(result: dict[str, Any]) -> str:
    return json.dumps(result["config"]) if result.get("accepted") else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", type=int, choices=sorted(PARTS), help="the part to run")
    parser.add_argument("--out", type=Path, help="where the figures so far go (JSON and markdown)")
    parser.add_argument("--state", type=Path, default=ROOT / ".gpu-check",
                        help="what the parts keep for one another (default: .gpu-check/)")
    parser.add_argument("--minutes", type=float, default=7.0, help="the part's time (its searches share it)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the small workloads and budgets, on whatever backend JAX has here")
    parser.add_argument("--workloads", metavar="NAMES",
                        help="comma-separated zoo workloads instead of the plan's three (part 1 checks "
                             "each; parts 2, 4 and 5 tune the first, second and third)")
    parser.add_argument("--hook-job", metavar="WORKLOAD", help=argparse.SUPPRESS)  # part 3's program
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--round-seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--kernel-job", metavar="JSON", help=argparse.SUPPRESS)  # a step of parts 6, 7
    args = parser.parse_args()
    if args.kernel_job:
        print(json.dumps(kernel_job(json.loads(args.kernel_job))))
        return
    if args.hook_job:
        print(json.dumps(hook_job(args.hook_job, args.home, args.rounds, args.round_seconds)))
        return
    if args.part is None or args.out is None:
        parser.error("--part and --out are needed")
    plan = DRY_PLAN if args.dry_run else GPU_PLAN
    if args.workloads:
        plan = dataclasses.replace(plan, workloads=tuple(args.workloads.split(",")))
    tuned = {2: 0, 4: 1, 5: 2, 6: 0, 7: 1}.get(args.part, 0)
    if tuned >= len(plan.workloads):
        parser.error(f"part {args.part} tunes workload {tuned + 1} of the plan; --workloads gives "
                     f"{len(plan.workloads)}")
    state = State(args.state)
    started = time.monotonic()
    PARTS[args.part](plan, state, args.minutes)
    state.record(f"part {args.part}", {
        "seconds": round(time.monotonic() - started, 1), "dry_run": args.dry_run,
        "imports": sorted(name for name in ABSENT_ON_DEVICE if name in sys.modules)})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / RESULTS).write_text(json.dumps(state.results, indent=1, sort_keys=True, default=str))
    (args.out / REPORT).write_text(report(state.results))
    print(report(state.results))


PARTS: dict[int, Callable[[Plan, State, float], None]] = {
    1: part_environment,
    2: lambda plan, state, minutes: part_tune(plan, state, minutes, plan.workloads[0]),
    3: part_deliver,
    4: lambda plan, state, minutes: part_tune(plan, state, minutes, plan.workloads[1]),
    5: lambda plan, state, minutes: part_tune(plan, state, minutes, plan.workloads[2]),
    6: lambda plan, state, minutes: part_kernels(plan, state, minutes, plan.workloads[0]),
    7: lambda plan, state, minutes: part_kernels(plan, state, minutes, plan.workloads[1]),
}

if __name__ == "__main__":
    main()
