"""Search quality: what each search finds, against an oracle, per workload.

    python benchmarks/bench_search_quality.py [--workloads cnn-s,nbody-s] [--budgets 8,16,40]
        [--seeds 2] [--schedule-seeds 2] [--replays optuna-tpe,evolution] [--before DIR]
        [--cache DIR] [--json]

Per workload (every zoo workload at both sizes by default; `fdo workloads list`):

1. Oracle (cached on disk): every one-move config of the tuner's graph space (each fusion
   type's placement, each flag's values: `tuner.schedule.neighbourhood`) is compiled, and
   screened when its program differs from the default's; then every pair of two such active
   moves on different params (at most the `--pair-moves` best singles) is screened; the three
   best screens are verified once each (a fresh worker, 99.9% interval, at most 10 s of
   timing: one of the tuner's verification workers), the best verified config is the oracle, and
   its figure is the median of `REPEATS` further independent verifications (the best of three
   is biased upward; significant when the median of their intervals' lower ends clears 1.01; a
   workload without a significant oracle has nothing to find, and no search is run on it).
   What this leaves out, and says so: a move whose program is the default's is taken to change
   nothing in a pair either.
2. The default schedule (`fdo tune`'s: neighbours by prior, combinations, evolution, then the
   finalists' race, pruning and verification), live: the real tuner (`fdo tune` on the module,
   in a process of its own: compile pool, early stop, stall rule) at each budget,
   `--schedule-seeds` seeds, each in a fresh home (a cold start: no prior), timed; cached while
   the tuner's code is the same. With `--before DIR` (a checkout of other code, e.g. `git
   worktree add DIR <commit>`), the same with DIR's code on PYTHONPATH beside each run, in
   alternating order from seed to seed, so that a drift in the machine's load falls on both:
   "schedule (before)" and "schedule", side by side.
3. Every strategy alone (`--plain`), and Optuna's TPE and random samplers, on the same encoding
   (placements and flags; Optuna sets every param, "(default)" one of its choices), `--seeds`
   seeds, each run once at the largest budget and read at each budget B as its trials up to
   the B-th evaluation (a config whose program the search knew costs none, as in the tuner),
   on replayed screens: the tuner's own search loop (`tuner.search.search`) over
   an evaluator that answers from the cache (`Replay`), a config's screen measured live the
   first time (compiled, deduped by program, screened as the tuner screens). Each
   run's best config, and the schedule's accepted one, is verified against the oracle's config
   itself, paired and interleaved in one worker (the tuner's verification settings, the
   default replaced by the oracle): found/oracle is measured directly, not as the ratio of two
   verifications taken at other times, which differ by up to 15% on a loaded machine; its
   figure is the median of `REPEATS` such measurements, each in a fresh worker (one worker's
   interval leaves out the spread between processes, a percent or two). A found config of the
   oracle's very program is the oracle (cached per program).

Figures: `gain` = log(oracle's speedup x found/oracle) / log(oracle's speedup), so 1.0 is the
oracle's gain and 0 no gain (a found config verified slower than the default counts as 0), the
median over seeds, and `worst` the worst seed's;
`to90` = evaluations until a screen reached 90% of the oracle's gain (- if never); `m90` =
minutes into the task until then (the live schedule's, from its trials' `elapsed_seconds`);
`min` = minutes per search in all (the schedule: wall time of the live `fdo tune`, its race,
pruning and verification included; replayed runs: what their evaluations cost when first
measured). Only workloads whose oracle is significant enter the geometric means. Results and
caches: `--cache` (default ~/.cache/fleet-fdo/search_quality).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from provenance import describe
from tqdm import tqdm

import tuner
from execution.compile import compiler_defaults
from execution.cores import plan_cores
from execution.evaluate import FRESH_WORKERS, EvaluationResult, evaluate
from execution.flags import CompilerConfig, on_top_of, to_json, trusted_config
from execution.measure import MeasureSettings
from hlo.environment import current_environment
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule, from_lowered
from storage.home_factory import atomic_write
from tuner.schedule import neighbourhood
from tuner.search import Against, Build, Propose, most_trials, proposals, ready, run_one, search
from tuner.space import accepted_flags, config_key, graph_space
from tuner.strategies import FAILED, STRATEGIES, TrialRecord
from tuner.trial import Trial
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS
from tuner.worker_evaluator import WorkerEvaluator
from vocabulary.interval import Interval
from vocabulary.tuning import TrialOutcome
from workloads import zoo

OPTUNA = ("optuna-tpe", "optuna-random")
# Each figure scored is the median of this many independent measurements (fresh workers, other
# seeds), each with the settings of one of the tuner's verification workers: one process's
# interval covers the noise within it, not the spread between processes (two compiles of a
# program can run a percent or two apart), which is as large as a 2% gain.
REPEATS = FRESH_WORKERS
# A live run of the schedule is cached under the digest of the tuner's code (the search and the
# execution core): any change to it runs it again; the replayed screens stay valid (they depend
# on the compiler only).
HERE = Path(tuner.__file__).resolve().parent.parent  # this checkout


def code_digest(root: Path) -> str:
    """The digest of a checkout's search and execution core: a live run is cached under it."""
    return hashlib.sha256(b"".join(
        path.read_bytes() for package in ("execution", "tuner")
        for path in sorted((root / package).glob("*.py")))).hexdigest()[:12]


TUNER_DIGEST = code_digest(HERE)
BEFORE = "schedule (before)"  # the live schedule with the code of --before
DEFAULT_LABEL = "(default)"
DEFAULT_PROGRAM = "(the default's program)"  # a replayed build of an "identical" screen


@dataclass
class Screen:
    """One config as the tuner's search screened it."""

    speedup: float | None
    ci_low: float | None
    outcome: str
    program: str | None
    seconds: float  # what it cost: compile, and the timing when its program was new
    numerics_ok: bool = True  # False: it ran and got the numerics wrong

    @property
    def fitness(self) -> float:
        return math.log(self.speedup) if self.speedup and self.outcome != "failed" else FAILED


class Cache:
    """A workload's screens and verifications, on disk, written after each (a killed run
    resumes); another fingerprint or compiler starts afresh."""

    def __init__(self, path: Path, identity: dict[str, str]) -> None:
        self.path, self.identity = path, identity
        data = json.loads(path.read_text()) if path.exists() else {}
        if data.get("identity") != identity:
            data = {"identity": identity}
        self.screens = {k: Screen(**v) for k, v in data.get("screens", {}).items()}
        self.verified: dict[str, list[float]] = data.get("verified", {})
        self.results: dict[str, Any] = data.get("results", {})

    def save(self) -> None:
        data = {"identity": self.identity, "verified": self.verified, "results": self.results,
                "screens": {k: asdict(v) for k, v in self.screens.items()}}
        atomic_write(self.path, json.dumps(data), durable=False)


class Bench:
    """One workload: its module, space, cache, and the tuner's search session to screen in."""

    def __init__(self, name: str, cache_dir: Path) -> None:
        self.name = name
        self.module: HloModule = from_lowered(zoo.get(name).lower(), source=f"zoo:{name}")
        self.defaults = compiler_defaults()
        self.space = graph_space("cpu", accepted_flags("cpu"), self.defaults)
        # Screens depend on the CPU (its ISA features) and the parallelism they ran with
        # (execution.cores): both are part of what a cached screen is valid for.
        here = current_environment()
        identity = {"fingerprint": graph_fingerprint(self.module), "compiler": here.compiler_version,
                    "device": here.device_kind, "execute_cores": str(len(plan_cores().execute))}
        self.cache = Cache(cache_dir / f"{name}.json", identity)
        self.evaluator: WorkerEvaluator | None = None
        self.trials: list[Trial] = []
        self.oracle: tuple[CompilerConfig, float, str | None] | None = None  # config, speedup, program

    def screen(self, config: CompilerConfig) -> Screen:
        """The config's screen, measured now if the cache has none."""
        key = config_key(config)
        if key not in self.cache.screens:
            if self.evaluator is None:
                self.evaluator = WorkerEvaluator(self.module.proto, 0).__enter__()
            started = time.perf_counter()
            trial = run_one(self.evaluator, len(self.trials), config, self.trials, SEARCH_SETTINGS)
            self.trials.append(trial)
            speedup = trial.speedup
            self.cache.screens[key] = Screen(speedup and speedup.estimate, speedup and speedup.low,
                                             trial.outcome, trial.program,
                                             time.perf_counter() - started,
                                             trial.numerics_ok is not False)
            self.cache.save()
        return self.cache.screens[key]

    def verify(self, config: CompilerConfig) -> float:
        """The verified speedup of the config's program over the default (1.0 for the
        default's), cached per program; after `oracle`, measured against the oracle's config
        itself, paired and interleaved (`versus_oracle`), times the oracle's speedup: a far
        steadier comparison than two verifications against the default taken at other times."""
        screen = self.screen(config) if config else None
        if screen is None or screen.outcome == "identical":
            return 1.0
        if self.oracle is None:
            return self._verified(screen.program or config_key(config), config, seed=1)[0]
        oracle_config, oracle_speedup, oracle_program = self.oracle
        if screen.program == oracle_program:
            return oracle_speedup
        return oracle_speedup * self.versus_oracle(config)

    def versus_oracle(self, config: CompilerConfig) -> float:
        """The config's speedup over the oracle's config, the median of `REPEATS` paired
        measurements (0 when it fails or is wrong)."""
        oracle_config, oracle_speedup, _ = self.oracle
        program = self.screen(config).program or config_key(config)
        change = on_top_of(config, oracle_config, self.defaults)
        if change is None:
            # A default the compiler does not report cannot be written back: the ratio of two
            # verifications against the default instead.
            return self._verified(program, config, seed=1)[0] / oracle_speedup
        return self._median(f"vs-oracle:{program}", range(1, 1 + REPEATS), lambda seed: evaluate(
            self.module, change, default=oracle_config, settings=VERIFY_SETTINGS,
            seed=seed))[0]

    def verify_again(self, config: CompilerConfig) -> tuple[float, float]:
        """The oracle's figure: the median of `REPEATS` further independent verifications of
        the config (speedup, and the median of their intervals' low ends)."""
        return self._median(f"again:{config_key(config)}", range(2, 2 + REPEATS),
                            functools.partial(self._against_default, config))

    def _verified(self, key: str, config: CompilerConfig, seed: int) -> list[float]:
        """[speedup, interval low, interval high] of one verification cached under `key`."""
        return self._cached(key, functools.partial(self._against_default, config, seed))

    def _against_default(self, config: CompilerConfig, seed: int) -> EvaluationResult:
        """One verification of the config against the default, in a fresh worker."""
        return evaluate(self.module, config, settings=VERIFY_SETTINGS, seed=seed)

    def _median(self, key: str, seeds: range,
                check: Callable[[int], EvaluationResult]) -> tuple[float, float]:
        """The median speedup and the median interval low of `check(seed)` over `seeds`, each
        a fresh worker's measurement cached under `key` (the first) or `key#seed`."""
        results = [self._cached(key if seed == seeds[0] else f"{key}#{seed}",
                                functools.partial(check, seed)) for seed in seeds]
        return (statistics.median(r[0] for r in results),
                statistics.median(r[1] for r in results))

    def _cached(self, key: str, check: Callable[[], EvaluationResult]) -> list[float]:
        """[speedup, interval low, interval high] of `check()`, cached under `key` (0 when the
        config failed or got the numerics wrong)."""
        if key not in self.cache.verified:
            result = check()
            ok = result.speedup is not None and result.numerics_ok
            self.cache.verified[key] = ([result.speedup.estimate if ok else 0.0, result.speedup.low,
                                         result.speedup.high] if result.speedup is not None
                                        else [0.0, 0.0, 0.0])
            self.cache.save()
        return self.cache.verified[key]

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.__exit__(None, None, None)


class Replay:
    """An Evaluator (`tuner.search`) that answers from the bench's screens: a config builds to
    the program its screen found, and measures as it screened; a config without a screen is
    screened live first (`Bench.screen`). What each config cost when first screened is kept,
    in the order asked."""

    default_program = DEFAULT_PROGRAM
    depth = 1

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.costs: list[float] = []

    def build(self, config: CompilerConfig) -> Future[Build]:
        screen = self.bench.screen(config)
        self.costs.append(screen.seconds)
        if screen.outcome == "identical":
            return ready(Build(DEFAULT_PROGRAM))
        if screen.program is None:  # it did not compile
            return ready(Build(error="failed when screened"))
        return ready(Build(screen.program, artifact=screen))

    def measure(self, index: int, config: CompilerConfig, build: Build,
                settings: MeasureSettings, against: Against | None = None) -> Trial:
        if against is not None:
            raise ValueError("a replay holds screens against the default only: it runs no race")
        screen: Screen = build.artifact
        if screen.outcome == "failed":
            return Trial(index, config, TrialOutcome.FAILED, screen.program,
                         error="failed when screened")
        # A screen keeps no numeric check: a screened config counts as correct, as it did when
        # the replay read the screens itself. Nor its interval's upper end: the estimate stands
        # in (only a race reads it, and a replay runs none).
        return Trial(index, config, TrialOutcome.MEASURED, screen.program,
                     speedup=Interval(screen.speedup, screen.ci_low, screen.speedup),
                     numerics_ok=True)


def oracle(bench: Bench, pair_moves: int) -> tuple[CompilerConfig, float, bool]:
    """The best verified config of the one- and two-move sweep, its speedup, and whether its
    interval clears the noise band (see the module docstring)."""
    if "oracle" not in bench.cache.results:
        bench.cache.results["oracle"] = {"config": to_json(_sweep(bench, pair_moves))}
        bench.cache.save()
    config = trusted_config(bench.cache.results["oracle"]["config"])
    # The best of three verifications is biased upward: the oracle's figure is measured anew.
    speedup, low = bench.verify_again(config) if config else (1.0, 1.0)
    return config, speedup, low > 1.01


def _sweep(bench: Bench, pair_moves: int) -> CompilerConfig:
    """The best verified config of the one- and two-move sweep ({} if none beats the default)."""
    singles = [{name: value} for name, value in neighbourhood(bench.space)]
    screens = {config_key(c): bench.screen(c) for c in tqdm(singles, desc=f"{bench.name} singles")}
    active = sorted((c for c in singles if screens[config_key(c)].outcome != "identical"
                     and screens[config_key(c)].outcome != "failed"),
                    key=lambda c: -screens[config_key(c)].fitness)[:pair_moves]
    pairs = [{**a, **b} for i, a in enumerate(active) for b in active[i + 1:]
             if set(a).isdisjoint(b)]
    for config in tqdm(pairs, desc=f"{bench.name} pairs"):
        screens[config_key(config)] = bench.screen(config)
    best = sorted((k for k, s in screens.items() if s.fitness > 0),
                  key=lambda k: -screens[k].fitness)[:3]
    verified = {k: bench.verify(trusted_config(json.loads(k))) for k in best}
    key = max(verified, key=verified.get, default=None)
    return trusted_config(json.loads(key)) if key else {}


@dataclass
class Run:
    """One search of one strategy at one budget."""

    strategy: str
    budget: int
    seed: int
    best: CompilerConfig
    verified: float
    to_target: int | None  # evaluations until a screen reached 90% of the oracle's gain
    minutes: float
    minutes_to_target: float | None = None  # minutes into the task until then (a live run's)


def _to_target(trials: list[Trial], target: float) -> int | None:
    """Evaluations (timed trials) until a screen reached 90% of the oracle's gain."""
    counts = itertools.accumulate(int(t.timed) for t in trials)  # a count, never a bool
    return next((count for t, count in zip(trials, counts)
                 if target > 0 and t.fitness >= 0.9 * target), None)


def _minutes_to_target(trials: list[Trial], target: float) -> float | None:
    """Minutes into the task until a trial (a screen, or a comparison's config) first ran a
    program whose screen reached 90% of the oracle's gain."""
    reached = {t.program for t in trials if t.baseline is None and target > 0
               and t.fitness >= 0.9 * target}
    return next((t.elapsed_seconds / 60 for t in trials
                 if t.program in reached and t.elapsed_seconds is not None), None)


def _within(trials: list[Trial], budget: int) -> int:
    """How many of a longer search's `trials` a search of `budget` evaluations makes: those
    before its (budget + 1)-th timed one, and at most the loop's cap (`most_trials`)."""
    timed = itertools.accumulate(t.timed for t in trials)
    over = next((i for i, count in enumerate(timed) if count > budget), len(trials))
    return min(over, most_trials(budget))


def run_schedule(bench: Bench, budget: int, seed: int, target: float, root: Path = HERE,
                 label: str = "schedule") -> Run:
    """The tuner's default schedule, live, from a cold start: `fdo tune` with the code of
    checkout `root`, in a process and a fresh home of its own; cached per budget and seed while
    that code is the same (`code_digest`)."""
    key = f"schedule/{budget}/{seed}/{code_digest(root)}"
    if key not in bench.cache.results:
        with tempfile.TemporaryDirectory() as home:
            module = Path(home) / "module.pb"
            module.write_bytes(bench.module.proto)
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pipelines.cli", "--home", home, "tune", str(module), "--json",
                 "--budget-evals", str(budget), "--seed", str(seed)], cwd=root, capture_output=True,
                text=True, env={**os.environ, "PYTHONPATH": str(root)})
            minutes = (time.perf_counter() - started) / 60
            if done.returncode != 0:
                raise RuntimeError(f"fdo tune ({label}) exited {done.returncode}: {done.stderr[-2000:]}")
            (task,) = Path(home, "tuner", "tasks").glob("*/result.json")
            result = json.loads(task.read_text())
        trials = [Trial.from_json(t) for t in result["trials"]]
        searched = [t for t in trials if t.phase == "search"]
        found = trusted_config(result["config"]) if result["accepted"] else {}
        bench.cache.results[key] = asdict(Run(label, budget, seed, found, bench.verify(found),
                                              _to_target(searched, target), minutes,
                                              _minutes_to_target(trials, target)))
        bench.cache.save()
    data = bench.cache.results[key]
    best = trusted_config(data["best"])
    return Run(**{**data, "strategy": label, "best": best, "verified": bench.verify(best)})


def _replay(bench: Bench, strategy: str, budgets: list[int], seed: int, target: float,
            next_config: Propose) -> list[Run]:
    """One run of the search loop at the largest budget over the cached screens (`Replay`);
    the run at a smaller budget B is its trials up to the B-th evaluation (`_within`; the
    proposals of Optuna's samplers, random, exhaustive and model do not depend on the budget; anneal and evolution
    scale their schedule by it, so for them this is the anytime view of the longest run)."""
    replay, trials = Replay(bench), []
    search(replay, next_config, trials, max(budgets), SEARCH_SETTINGS, lambda: True,
           lambda trial: None)
    history = [TrialRecord({}, 0.0, 0.0)] + [t.record() for t in trials]
    runs = []
    for budget in budgets:
        made = _within(trials, budget)
        best = max(history[:made + 1], key=lambda t: t.fitness)
        runs.append(Run(strategy, budget, seed, best.config, bench.verify(best.config),
                        _to_target(trials[:made], target), sum(replay.costs[:made]) / 60))
    return runs


def run_plain(bench: Bench, name: str, budgets: list[int], seed: int, target: float) -> list[Run]:
    """One of the tuner's strategies alone, on replayed screens."""
    strategy = STRATEGIES[name](bench.space, max(budgets), seed)
    return _replay(bench, name, budgets, seed, target, proposals(strategy))


def run_optuna(bench: Bench, name: str, budgets: list[int], seed: int, target: float) -> list[Run]:
    """Optuna's TPE or random sampler on the same encoding, on replayed screens; a config it
    asks for twice is told its known value, and costs no evaluation (its program is known),
    as for every search."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = (optuna.samplers.TPESampler(seed=seed) if name == "optuna-tpe"
               else optuna.samplers.RandomSampler(seed=seed))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    labels = {p.name: [DEFAULT_LABEL, *map(json.dumps, p.values)] for p in bench.space.params}
    distributions = {n: CategoricalDistribution(v) for n, v in labels.items()}
    study.add_trial(optuna.trial.create_trial(
        params={n: DEFAULT_LABEL for n in labels}, distributions=distributions, value=0.0))
    asked: list = []

    def ask(trials: list[Trial], pending: list[CompilerConfig]) -> CompilerConfig:
        if asked:
            study.tell(asked[-1], max(trials[-1].fitness, FAILED))
        asked.append(study.ask(distributions))
        return {n: json.loads(v) for n, v in asked[-1].params.items() if v != DEFAULT_LABEL}

    return _replay(bench, name, budgets, seed, target, ask)


def gain(run: Run, oracle_speedup: float) -> float:
    """The run's verified gain as a share of the oracle's, in log speedup (0 at worst)."""
    if oracle_speedup <= 1.0:
        return 1.0
    return max(0.0, math.log(max(run.verified, 1e-9))) / math.log(oracle_speedup)


def bench_workload(bench: Bench, budgets: list[int], seeds: int, schedule_seeds: int,
                   pair_moves: int, replays: list[str], before: Path | None = None) -> dict[str, Any]:
    """Every search of one workload, summarized per strategy and budget (the live schedule of
    `before` beside this checkout's, in alternating order, where given)."""
    config, speedup, significant = oracle(bench, pair_moves)
    bench.oracle = (config, speedup, bench.screen(config).program if config else None)
    target = math.log(speedup) if speedup > 1 else 0.0
    result = {"workload": bench.name, "oracle": {"config": config, "speedup": speedup,
                                                 "significant": significant}, "rows": []}
    if not significant:  # nothing to find: no search can be scored against it
        return result
    runs: list[Run] = []
    for seed in range(schedule_seeds):
        for b in budgets:
            codes = [(before, BEFORE)] if before is not None else []
            codes = [*codes, (HERE, "schedule")] if seed % 2 == 0 else [(HERE, "schedule"), *codes]
            runs += [run_schedule(bench, b, seed, target, root, label) for root, label in codes]
    for seed in range(seeds):
        for name in replays:
            run = run_optuna if name in OPTUNA else run_plain
            runs += run(bench, name, budgets, seed, target)
    rows = []
    for strategy in strategies(replays, before):
        for budget in budgets:
            mine = [r for r in runs if r.strategy == strategy and r.budget == budget]
            reached = [r.to_target for r in mine if r.to_target is not None]
            timed = [r.minutes_to_target for r in mine if r.minutes_to_target is not None]
            rows.append({"workload": bench.name, "strategy": strategy, "budget": budget,
                         "gain": statistics.median(gain(r, speedup) for r in mine),
                         "worst_seed_gain": min(gain(r, speedup) for r in mine),
                         "verified": statistics.median(r.verified for r in mine),
                         "to90": statistics.median(reached) if len(reached) * 2 > len(mine) else None,
                         "minutes_to90": statistics.median(timed) if len(timed) * 2 > len(mine) else None,
                         "minutes": statistics.median(r.minutes for r in mine)})
    result["rows"] = rows
    return result


def strategies(replays: list[str], before: Path | None) -> list[str]:
    """The rows of a workload: the live schedule (before and after, where both ran), then the
    replays."""
    return [*([BEFORE] if before is not None else []), "schedule", *replays]


def overall(results: list[dict[str, Any]], budgets: list[int],
            replays: list[str], before: Path | None = None) -> list[dict[str, Any]]:
    """Per strategy and budget: the geometric mean of verified speedups over the workloads whose
    oracle is significant, the mean gain share and the worst, the workloads at 0.9 of their
    oracle's gain or more, and the median minutes (to 90% of the oracle, and in all)."""
    counted = [r for r in results if r["oracle"]["significant"]]
    summary = []
    for strategy in strategies(replays, before):
        for budget in budgets:
            rows = [row for r in counted for row in r["rows"]
                    if row["strategy"] == strategy and row["budget"] == budget]
            if not rows:
                continue
            oracle_logs = sum(math.log(r["oracle"]["speedup"]) for r in counted)
            found_logs = sum(math.log(max(row["verified"], 1.0)) for row in rows)
            to90 = [row["minutes_to90"] for row in rows if row.get("minutes_to90") is not None]
            summary.append({"strategy": strategy, "budget": budget,
                            "geomean_verified": math.exp(found_logs / len(rows)),
                            "gain_of_geomean": found_logs / oracle_logs if oracle_logs else 1.0,
                            "worst_gain": min(row["worst_seed_gain"] for row in rows),
                            "at_90": sum(row["gain"] >= 0.9 for row in rows), "workloads": len(rows),
                            "minutes": statistics.mean(row["minutes"] for row in rows),
                            "median_minutes": statistics.median(row["minutes"] for row in rows),
                            "median_minutes_to90": statistics.median(to90) if to90 else None})
    return summary


def print_results(results: list[dict[str, Any]], summary: list[dict[str, Any]],
                  budgets: list[int], replays: list[str], before: Path | None = None) -> None:
    for result in results:
        o = result["oracle"]
        print(f"\n{result['workload']}: oracle {o['speedup']:.3f}x "
              f"{'(significant)' if o['significant'] else '(not significant: no search run)'} "
              f"{o['config']}")
        if not result["rows"]:
            continue
        print(f"  {'strategy':<18}" + "".join(f"  gain@{b:<3}/worst ver@{b:<3} to90  m90  min  "
                                              for b in budgets))
        for strategy in strategies(replays, before):
            cells = []
            for budget in budgets:
                row = next(r for r in result["rows"]
                           if r["strategy"] == strategy and r["budget"] == budget)
                to90 = "-" if row["to90"] is None else f"{row['to90']:.0f}"
                m90 = "-" if row.get("minutes_to90") is None else f"{row['minutes_to90']:.1f}"
                cells.append(f"  {row['gain']:>4.2f}/{row['worst_seed_gain']:<4.2f} "
                             f"{row['verified']:>6.3f}x {to90:>4} {m90:>4} "
                             f"{row['minutes']:>4.1f}")
            print(f"  {strategy:<18}" + "".join(cells))
    print("\nover the workloads with a significant oracle:")
    print(f"  {'strategy':<18} {'budget':>6} {'geomean':>9} {'gain':>6} {'worst':>6} {'>=0.9':>6} "
          f"{'m90':>5} {'min':>5}")
    for row in summary:
        m90 = "-" if row["median_minutes_to90"] is None else f"{row['median_minutes_to90']:.1f}"
        print(f"  {row['strategy']:<18} {row['budget']:>6} {row['geomean_verified']:>8.3f}x "
              f"{row['gain_of_geomean']:>6.2f} {row['worst_gain']:>6.2f} "
              f"{row['at_90']:>2}/{row['workloads']:<3} {m90:>5} {row['median_minutes']:>5.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(w.name for w in zoo.all_workloads()),
                        help="comma-separated zoo workloads (default: all, both sizes)")
    parser.add_argument("--budgets", default="8,16,40", help="evaluations per search")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per replayed strategy")
    parser.add_argument("--schedule-seeds", type=int, default=2,
                        help="seeds of the live schedule (each a full live search per budget)")
    parser.add_argument("--replays", default=",".join([*sorted(STRATEGIES), *OPTUNA]),
                        help="the replayed searches beside the schedule: strategies alone and "
                             "Optuna's samplers (default: all)")
    parser.add_argument("--pair-moves", type=int, default=10,
                        help="the oracle pairs this many best active single moves")
    parser.add_argument("--cache", type=Path,
                        default=Path.home() / ".cache" / "fleet-fdo" / "search_quality")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of other code (its root: pipelines/, tuner/, ...) whose live "
                        "schedule runs beside this one's, side by side")
    parser.add_argument("--json", action="store_true", help="machine-readable results")
    args = parser.parse_args()
    if args.before is not None and not (args.before / "tuner" / "tune.py").exists():
        parser.error(f"--before {args.before}: no checkout of this project there (no tuner/tune.py)")
    before = args.before.resolve() if args.before is not None else None
    budgets = [int(b) for b in args.budgets.split(",")]
    replays = args.replays.split(",") if args.replays else []
    unknown = set(replays) - {*STRATEGIES, *OPTUNA}
    if unknown:
        parser.error(f"--replays: unknown {', '.join(sorted(unknown))}")
    names = args.workloads.split(",")
    strangers = sorted(set(names) - {w.name for w in zoo.all_workloads()})
    if strangers:
        parser.error(f"--workloads: unknown {', '.join(strangers)} (`fdo workloads list`)")
    args.cache.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        bench = Bench(name, args.cache)
        try:
            results.append(bench_workload(bench, budgets, args.seeds, args.schedule_seeds,
                                          args.pair_moves, replays, before))
        finally:
            bench.close()
    summary = overall(results, budgets, replays, before)
    if args.json:
        print(json.dumps({"workloads": results, "overall": summary}, indent=1, default=str))
    else:
        print_results(results, summary, budgets, replays, before)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
