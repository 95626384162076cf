"""The tuner's search strategies against Optuna's TPE and random samplers, on replayed measurements.

Real measurements on this 2-core shared machine cost seconds each and carry noise, so running
every strategy for many seeds live would take hours and compare the noise as much as the
strategies. The benchmark therefore measures once and replays:

1. Measure (once per graph, cached): configs are evaluated for real by the tuner's own search
   session (`tuner.tune.Search`: the default compiled once in the execute worker, each
   candidate compiled in the compile pool, and a program identical to the default's or already timed in this
   session not timed again), with the tuner's screening settings. Results are cached as JSON
   keyed by `config_key` under `--cache` (default ~/.cache/fleet-fdo/bench_tuner/<graph>.json),
   written atomically after every config, so a killed run resumes; a cache of another graph
   fingerprint or compiler version is measured anew. The best config of the space is then
   re-measured as the tuner verifies a winner (screening winners are biased upward).
2. Replay: every strategy runs for several seeds against the measured table.

Two spaces (`--space`):
- bench (default): the flags and values of BENCH_FLAGS, 120 configs, every one measured, so the
  replay is exact: each proposal gets the value measured for that very config.
- graph: the tuner's whole graph space (`tuner.space.graph_space`, ~3e10 configs). Measured:
  every one-flag config, `--sample` random ones of about two flags and a few dense ones; any
  other config gets the value of its nearest measured config (fewest flags set differently,
  ties broken by a fixed hash), or is measured on demand with `--live`. The columns `exact` and
  `dist` say how much of a run was replayed exactly; far proposals (Optuna's samplers set every
  flag) mostly land on the few dense samples, so this mode flatters whoever proposes like them.

All strategies get the same budget B of evaluations after the default (which each knows for
free: ours start from it, Optuna gets it as a finished trial). Ours never propose a config
twice (`tuner.strategies.propose`); Optuna may ask for one it already got: such a duplicate is
told its known value and counted as a wasted evaluation of the budget.

Per graph and strategy: median over seeds of the best speedup found at each budget, evaluations
to reach 95% of the best known gain (in log speedup; the best known is the table's best),
the strategy's own time per proposal (Optuna: ask + tell), the wall time a real search
would have spent (compiles, plus timing each program the first time the run meets it, as
measured in phase 1) and the evaluations per hour that makes, the share of evaluations that
cost no timing (their program was the default's or timed earlier in the run: the dedupe), and
`verified`: the config the median seed found best at the largest budget, re-measured in a
fresh worker as the tuner verifies a winner (cached). Ratios are against Optuna TPE.

    python benchmarks/bench_tuner.py [--space bench|graph] [--graphs cnn-s,rnn-s,mlp-s]
        [--seeds 20] [--budgets 8,16,32] [--sample 40] [--cache DIR] [--live] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from tqdm import tqdm

from tuner.flags import CompilerConfig, from_json
from tuner.space import Param, SearchSpace, accepted_flags, config_key, graph_space
from tuner.strategies import FAILED, STRATEGIES, ExhaustiveStrategy, TrialRecord, propose, random_config
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS, Search, Trial

DEFAULT_GRAPHS = ("cnn-s", "rnn-s", "mlp-s")
DENSE_SAMPLES = 8  # configs with every flag drawn, as Optuna's samplers propose them
REACH = 0.95  # "evaluations to reach 95% of the best known gain" (in log speedup)
OPTUNA = ("optuna-tpe", "optuna-random")
# The default benchmark space: flags where FIELD-NOTES and a one-flag screen of the zoo graphs
# found speed on CPU (library routing, scheduling, copy insertion, emitters, and the optimization
# level, whose 0 is a known trap), with few enough values (5 x 2 x 2 x 2 x 3 = 120 configs) that
# every config is measured and the replay is exact.
BENCH_FLAGS: dict[str, tuple] = {
    "xla_cpu_experimental_ynn_fusion_type": ((), ("INDIVIDUAL_DOT",), ("REDUCE",), ("ELTWISE",)),
    "xla_cpu_scheduler_type": ("MEMORY_OPTIMIZED",),
    "xla_cpu_copy_insertion_use_region_analysis": (True,),
    "xla_cpu_use_fusion_emitters": (False,),
    "xla_backend_optimization_level": (0, 1),
}


@dataclass
class Entry:
    """One measured config of a graph."""

    config: CompilerConfig
    outcome: str  # measured | duplicate | identical | failed (as the tuner records trials)
    speedup: float | None
    numerics_ok: bool | None
    program: str | None
    compile_seconds: float
    measure_seconds: float  # timing this config's program (0 when it was not timed)

    @property
    def fitness(self) -> float:
        """log(speedup), or FAILED, as the tuner scores the trial."""
        return Trial(0, self.config, self.outcome, speedup=self.speedup, numerics_ok=self.numerics_ok).fitness


@dataclass
class Table:
    """The measured configs of one graph, as cached on disk."""

    graph: str
    fingerprint: str
    compiler_version: str
    entries: dict[str, Entry] = field(default_factory=dict)
    measuring_seconds: float = 0.0  # wall time spent measuring, summed over runs
    # The best config's re-measurement as the tuner verifies a winner: config key -> speedup,
    # ci_low, ci_high. Screening winners are biased upward by selection.
    verified: dict[str, list[float]] = field(default_factory=dict)

    def view(self, keys: set[str] | None) -> "Table":
        """The table limited to the configs `keys` (all when None); shares the entries' values."""
        if keys is None:
            return self
        entries = {k: e for k, e in self.entries.items() if k in keys}
        return Table(self.graph, self.fingerprint, self.compiler_version, entries,
                     self.measuring_seconds, self.verified)

    def best(self) -> float:
        """The best speedup measured for the graph (1.0: nothing beat the default)."""
        return max([1.0] + [e.speedup for e in self.entries.values() if e.fitness != FAILED])

    def best_key(self) -> str | None:
        """The config key of the best measured config, if one beat the default."""
        winners = [(e.speedup, key) for key, e in self.entries.items() if e.fitness > 0]
        return max(winners)[1] if winners else None

    def program_seconds(self) -> dict[str, float]:
        """Seconds it took to time each program (measured once per program)."""
        return {e.program: e.measure_seconds for e in self.entries.values()
                if e.program and e.outcome == "measured"}


def load_table(path: Path, graph: str, fingerprint: str, compiler_version: str) -> Table:
    """The cached table of `graph`, or an empty one when there is none for this graph
    fingerprint and compiler."""
    empty = Table(graph, fingerprint, compiler_version)
    if not path.exists():
        return empty
    data = json.loads(path.read_text())
    if (data.get("fingerprint"), data.get("compiler_version")) != (fingerprint, compiler_version):
        print(f"{path}: measured for another graph or compiler; measuring anew")
        return empty
    entries = {key: Entry(**{**e, "config": from_json(e["config"])}) for key, e in data["entries"].items()}
    return Table(graph, fingerprint, compiler_version, entries, data.get("measuring_seconds", 0.0),
                 data.get("verified", {}))


def save_table(path: Path, table: Table) -> None:
    """Write the table atomically (a kill leaves the previous version)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(table)
    data["entries"] = {key: {**asdict(e), "config": json.loads(key)} for key, e in table.entries.items()}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=None, sort_keys=True) + "\n")
    os.replace(tmp, path)


def bench_space(full: SearchSpace) -> SearchSpace:
    """The benchmark's space: the flags and values of BENCH_FLAGS, checked against `full`."""
    params = []
    for name, values in BENCH_FLAGS.items():
        known = {p.name: p for p in full.params}.get(name)
        if known is None or any(v not in known.values for v in values):
            raise ValueError(f"{name}: not in the tuner's graph space with values {values}")
        params.append(Param(name, values))
    return SearchSpace(tuple(params))


def sample_configs(space: SearchSpace, graph: str, extra: int, exhaustive: bool) -> list[CompilerConfig]:
    """Every config of `space` when `exhaustive`; otherwise every one-flag config, `extra`
    random ones of about two flags, and a few dense ones."""
    if exhaustive:
        return list(ExhaustiveStrategy(space, 0).configs())
    rng = random.Random(f"bench_tuner:{graph}")
    configs = [{p.name: v} for p in space.params for v in p.values]
    configs += [random_config(space, rng) for _ in range(extra)]
    for _ in range(DENSE_SAMPLES):
        dense = {p.name: rng.choice((None,) + p.values) for p in space.params}
        configs.append({k: v for k, v in dense.items() if v is not None})
    unique: dict[str, CompilerConfig] = {}
    for config in configs:
        if config:
            unique.setdefault(config_key(config), config)
    return list(unique.values())


class Measurer:
    """The tuner's own search session on one graph: real compiles and timings, deduped."""

    def __init__(self, module: Any, table: Table, path: Path) -> None:
        self.table, self.path, self.settings = table, path, SEARCH_SETTINGS
        self.search = Search(module.proto, seed=0).__enter__()
        self.trials: list[Any] = []

    def measure(self, config: CompilerConfig) -> Entry:
        """Evaluate `config` for real, add it to the table and save the table."""
        started = time.perf_counter()
        trial = self.search.run(len(self.trials), config, self.trials, self.settings)
        elapsed = time.perf_counter() - started
        self.trials.append(trial)
        compile_seconds = trial.compile_seconds or 0.0
        entry = Entry(config, trial.outcome, trial.speedup, trial.numerics_ok, trial.program,
                      compile_seconds,
                      max(0.0, elapsed - compile_seconds) if trial.outcome == "measured" else 0.0)
        self.table.entries[config_key(config)] = entry
        self.table.measuring_seconds += elapsed
        save_table(self.path, self.table)
        return entry

    def close(self) -> None:
        """Stop the session's worker."""
        self.search.__exit__(None, None, None)


def measure_graph(graph: str, sample: list[CompilerConfig], cache: Path, live: bool,
                  exact: bool) -> tuple[Table, Table, Measurer | None, float]:
    """The graph's whole cached table and its view on `sample` (the whole table unless
    `exact`), measuring what the cache lacks and re-measuring the view's best config. Returns
    them, the session when `live` (for configs measured on demand during the replay), and the
    seconds spent measuring now."""
    from ingest import zoo
    from ingest.environment import current_environment
    from ingest.fingerprint import graph_fingerprint
    from ingest.hlo_module import from_lowered

    module = from_lowered(zoo.get(graph).lower(), source=f"zoo:{graph}")
    path = cache / f"{graph}.json"
    table = load_table(path, graph, graph_fingerprint(module), current_environment().compiler_version)
    missing = [c for c in sample if config_key(c) not in table.entries]
    started = time.perf_counter()
    measurer = Measurer(module, table, path) if missing or live else None
    for config in tqdm(missing, desc=f"measure {graph}", unit="config"):
        measurer.measure(config)
    view = table.view({config_key(c) for c in sample} if exact else None)
    best = view.best_key()
    if best is not None and best not in table.verified:
        table.verified[best] = verify(module, table.entries[best].config)
        save_table(path, table)
    spent = time.perf_counter() - started
    if measurer is not None and not live:
        measurer.close()
        measurer = None
    return table, view, measurer, spent


def verify(module: Any, config: CompilerConfig) -> list[float]:
    """Re-measure `config` in a fresh worker as the tuner verifies a winner: [speedup, low, high]."""
    from tuner.evaluate import evaluate

    result = evaluate(module, config, settings=VERIFY_SETTINGS, seed=1)
    return [result.speedup or 0.0, result.ci_low or 0.0, result.ci_high or 0.0]


class Surrogate:
    """Replays a graph's measurements: the measured value of a config, or of its nearest
    measured config (or a fresh measurement with `live`)."""

    def __init__(self, table: Table, space: SearchSpace, measurer: Measurer | None) -> None:
        self.table, self.space, self.measurer = table, space, measurer
        self.nearest: dict[str, tuple[Entry, int]] = {}

    def lookup(self, config: CompilerConfig) -> tuple[Entry, int]:
        """The entry that stands for `config` and its distance (flags set differently)."""
        key = config_key(config)
        if key in self.table.entries:
            return self.table.entries[key], 0
        if self.measurer is not None:
            self.table.entries[key] = self.measurer.measure(config)
            return self.table.entries[key], 0
        if key not in self.nearest:
            self.nearest[key] = min(
                ((entry, self._distance(config, entry.config)) for entry in self.table.entries.values()),
                key=lambda pair: (pair[1], _tie_break(key, config_key(pair[0].config))))
        return self.nearest[key]

    def _distance(self, a: CompilerConfig, b: CompilerConfig) -> int:
        return sum(a.get(p.name) != b.get(p.name) for p in self.space.params)


def _tie_break(query: str, candidate: str) -> bytes:
    return hashlib.blake2b(f"{query}|{candidate}".encode(), digest_size=8).digest()


@dataclass
class Run:
    """One search replayed: what each evaluation found and what it cost."""

    strategy: str
    seed: int
    budget: int
    speedups: list[float] = field(default_factory=list)  # per evaluation; 0 for a failure
    distances: list[int] = field(default_factory=list)  # to the measured config that stood in
    wasted: int = 0  # evaluations spent on a config already tried (Optuna)
    deduped: int = 0  # evaluations whose program was the default's or timed earlier in the run
    overhead_seconds: float = 0.0  # the strategy's own time over the run
    search_seconds: float = 0.0  # compiles and first timings a real search would have spent
    best_config: CompilerConfig = field(default_factory=dict)  # the best found ({}: the default)

    def best_within(self, evaluations: int) -> float:
        """The best speedup within the first `evaluations` (the default's 1.0 included)."""
        return max([1.0] + self.speedups[:evaluations])

    def evaluations_to(self, target: float) -> int | None:
        """How many evaluations until a speedup of at least `target`; None if never."""
        return next((i + 1 for i, s in enumerate(self.speedups) if s >= target), None)


class _Replay:
    """Bookkeeping shared by every strategy's replayed run."""

    def __init__(self, run: Run, surrogate: Surrogate) -> None:
        self.run, self.surrogate = run, surrogate
        self.programs_timed: set[str] = set()
        self.program_seconds = surrogate.table.program_seconds()

    def evaluate(self, config: CompilerConfig) -> float:
        """The replayed fitness of `config`, recorded in the run."""
        entry, distance = self.surrogate.lookup(config)
        if entry.outcome == "measured":  # with --live, a program timed just now
            self.program_seconds.setdefault(entry.program, entry.measure_seconds)
        speedup = 0.0 if entry.fitness == FAILED else entry.speedup
        if speedup > self.run.best_within(len(self.run.speedups)):
            self.run.best_config = dict(config)
        self.run.distances.append(distance)
        self.run.speedups.append(speedup)
        self.run.search_seconds += entry.compile_seconds
        if entry.outcome == "identical" or entry.program in self.programs_timed:
            self.run.deduped += 1
        elif entry.program:
            self.programs_timed.add(entry.program)
            self.run.search_seconds += self.program_seconds.get(entry.program, 0.0)
        return entry.fitness

    def wasted(self, fitness: float) -> float:
        """A repeated config: the budget is spent, nothing new is learned."""
        self.run.wasted += 1
        self.run.distances.append(0)
        self.run.speedups.append(0.0 if fitness == FAILED else math.exp(fitness))
        return fitness


def run_ours(name: str, space: SearchSpace, surrogate: Surrogate, budget: int, seed: int,
             prior: list[TrialRecord]) -> Run:
    """One search by one of the tuner's strategies, as `tuner.tune` drives it."""
    label = "model+prior" if prior else name
    run = Run(label, seed, budget)
    replay = _Replay(run, surrogate)
    strategy = STRATEGIES[name](space, budget, seed, prior)
    history = [TrialRecord({}, 0.0)]
    for _ in range(budget):
        started = time.perf_counter()
        config = propose(strategy, history)
        run.overhead_seconds += time.perf_counter() - started
        if config is None:
            break
        history.append(TrialRecord(config, replay.evaluate(config)))
    return run


def run_optuna(name: str, space: SearchSpace, surrogate: Surrogate, budget: int, seed: int) -> Run:
    """One search by Optuna's TPE or random sampler through ask/tell; every flag is a
    categorical parameter with "default" as one of its choices."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = (optuna.samplers.TPESampler(seed=seed) if name == "optuna-tpe"
               else optuna.samplers.RandomSampler(seed=seed))
    labels = {p.name: {_label(v): v for v in p.values} for p in space.params}
    distributions = {name_: CategoricalDistribution(["default", *choices]) for name_, choices in labels.items()}
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.add_trial(optuna.trial.create_trial(  # the default, known for free as in our searches
        params={p.name: "default" for p in space.params}, distributions=distributions, value=0.0))
    run = Run(name, seed, budget)
    replay = _Replay(run, surrogate)
    tried: dict[str, float] = {config_key({}): 0.0}
    for _ in range(budget):
        started = time.perf_counter()
        trial = study.ask(distributions)
        run.overhead_seconds += time.perf_counter() - started
        config = {k: labels[k][v] for k, v in trial.params.items() if v != "default"}
        key = config_key(config)
        fitness = replay.wasted(tried[key]) if key in tried else replay.evaluate(config)
        tried[key] = fitness
        started = time.perf_counter()
        study.tell(trial, fitness)
        run.overhead_seconds += time.perf_counter() - started
    return run


def _label(value: object) -> str:
    """A categorical choice for a flag value (Optuna's choices must be scalars)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def strategy_runs(space: SearchSpace, surrogate: Surrogate, budget: int, seeds: int,
                  prior: list[TrialRecord]) -> Iterator[Callable[[], Run]]:
    """Every (strategy, seed) run of one budget, as thunks (for one progress bar)."""
    for name in ("random", "anneal", "evolution", "model"):
        for seed in range(seeds):
            yield lambda name=name, seed=seed: run_ours(name, space, surrogate, budget, seed, [])
    if prior:
        for seed in range(seeds):
            yield lambda seed=seed: run_ours("model", space, surrogate, budget, seed, prior)
    # Deterministic: one run (its order starts with the one-flag configs of the first flags).
    yield lambda: run_ours("exhaustive", space, surrogate, budget, 0, [])
    for name in OPTUNA:
        for seed in range(seeds):
            yield lambda name=name, seed=seed: run_optuna(name, space, surrogate, budget, seed)


def prior_from(tables: dict[str, Table], space: SearchSpace, graph: str, budget: int) -> list[TrialRecord]:
    """What the model strategy would know from earlier tasks on the other graphs: one
    evolution search of `budget` on each, replayed (leave this graph out)."""
    prior = []
    for other, table in tables.items():
        if other == graph:
            continue
        surrogate = Surrogate(table, space, None)
        strategy = STRATEGIES["evolution"](space, budget, 0)
        history = [TrialRecord({}, 0.0)]
        for _ in range(budget):
            config = propose(strategy, history)
            if config is None:
                break
            history.append(TrialRecord(config, surrogate.lookup(config)[0].fitness))
        prior += history[1:]
    return prior


def median_seed(seeds: list[Run], budget: int) -> Run:
    """The run whose best speedup within `budget` is the median of the seeds' (the lower one)."""
    ordered = sorted(seeds, key=lambda r: (r.best_within(budget), r.seed))
    return ordered[(len(ordered) - 1) // 2]


def verify_found(graph: str, table: Table, path: Path, runs: list[Run], budget: int) -> None:
    """Re-measure, as the tuner verifies a winner, the config each strategy's median seed found
    best within `budget` (cached in the table)."""
    from ingest import zoo
    from ingest.hlo_module import from_lowered

    keys = {config_key(median_seed([r for r in runs if r.strategy == s], budget).best_config)
            for s in dict.fromkeys(r.strategy for r in runs)}
    missing = sorted(k for k in keys if k not in table.verified and k != config_key({}))
    module = from_lowered(zoo.get(graph).lower(), source=f"zoo:{graph}") if missing else None
    for key in tqdm(missing, desc=f"verify {graph}", unit="config"):
        table.verified[key] = verify(module, from_json(json.loads(key)))
        save_table(path, table)
    table.verified.setdefault(config_key({}), [1.0, 1.0, 1.0])  # the default, by definition


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(graph: str, table: Table, runs: dict[int, list[Run]], budgets: list[int]) -> list[dict[str, Any]]:
    """One row per strategy: medians over seeds, and ratios against Optuna TPE."""
    top = max(budgets)
    best_known = table.best()
    target = math.exp(REACH * math.log(best_known)) if best_known > 1.0 else None
    rows = []
    for strategy in dict.fromkeys(r.strategy for r in runs[top]):
        row: dict[str, Any] = {"graph": graph, "strategy": strategy, "best_known": best_known,
                               "best_config": table.best_key(),
                               "best_verified": table.verified.get(table.best_key() or "")}
        for budget in budgets:
            seeds = [r for r in runs[budget] if r.strategy == strategy]
            row[f"best@{budget}"] = _median([r.best_within(budget) for r in seeds])
        seeds = [r for r in runs[top] if r.strategy == strategy]
        reached = [r.evaluations_to(target) if target else None for r in seeds]
        # Median with "never" as infinity: it is "never" when half the seeds never got there.
        ordered = sorted(math.inf if n is None else n for n in reached)
        row["evals_to_95"] = _median(ordered) if target else None
        row["reached_95"] = sum(n is not None for n in reached)
        row["seeds"] = len(seeds)
        row["overhead_ms"] = 1000 * _median([r.overhead_seconds / max(len(r.speedups), 1) for r in seeds])
        row["search_minutes"] = _median([r.search_seconds / 60 for r in seeds])
        row["wasted"] = _median([r.wasted for r in seeds])
        row["dedupe"] = _median([r.deduped / max(len(r.speedups), 1) for r in seeds])
        row["evals_per_hour"] = _median([3600 * len(r.speedups) / r.search_seconds
                                         for r in seeds if r.search_seconds > 0])
        row["median_config"] = config_key(median_seed(seeds, top).best_config)
        row["verified"] = table.verified.get(row["median_config"])
        distances = [d for r in seeds for d in r.distances]
        row["exact"] = sum(d == 0 for d in distances) / max(len(distances), 1)
        row["mean_distance"] = statistics.fmean(distances) if distances else 0.0
        rows.append(row)
    tpe = next(r for r in rows if r["strategy"] == "optuna-tpe")
    for row in rows:
        for budget in budgets:
            row[f"vs_tpe@{budget}"] = row[f"best@{budget}"] / tpe[f"best@{budget}"]
        row["evals_vs_tpe"] = (row["evals_to_95"] / tpe["evals_to_95"]
                               if row["evals_to_95"] and tpe["evals_to_95"]
                               and math.isfinite(row["evals_to_95"]) and math.isfinite(tpe["evals_to_95"])
                               else None)
    return rows


def print_rows(rows: list[dict[str, Any]], budgets: list[int], seeds: int, live: bool,
               exhaustive: int | None) -> None:
    """The table, per graph."""
    source = ("live measurements" if live else
              f"replayed measurements (all {exhaustive} configs of the space measured)" if exhaustive
              else "replayed measurements (a sample of the space measured)")
    print(f"\nStrategies vs Optuna on {source}; medians over {seeds} seeds "
          f"(exhaustive: 1 run, deterministic).")
    print(f"evals to 95%: evaluations until 95% of the best known gain (log speedup); "
          f"'>{max(budgets)}' = not in half the seeds. wasted: Optuna's repeated configs.")
    print("exact: share of proposals that were measured configs (the rest replay the nearest "
          "measured config, mean distance in flags).")
    header = (f"{'strategy':<14}" + "".join(f"{'best@' + str(b):>9}" for b in budgets)
              + "".join(f"{'vs TPE@' + str(b):>10}" for b in budgets)
              + f"{'verified':>9}{'evals 95%':>10}{'vs TPE':>8}{'ms/prop':>9}{'search min':>11}"
              f"{'evals/h':>8}{'dedupe':>7}{'wasted':>7}{'exact':>7}{'dist':>6}")
    for graph in dict.fromkeys(r["graph"] for r in rows):
        group = [r for r in rows if r["graph"] == graph]
        verified = group[0]["best_verified"]
        again = (f"; re-measured {verified[0]:.3f}x [{verified[1]:.3f}, {verified[2]:.3f}]"
                 if verified else "")
        print(f"\n{graph}: best known speedup {group[0]['best_known']:.3f}x{again} "
              f"with {group[0]['best_config']}")
        print(header)
        for r in group:
            evals = r["evals_to_95"]
            evals_text = "-" if evals is None else (f">{max(budgets)}" if math.isinf(evals) else f"{evals:.0f}")
            print(f"{r['strategy']:<14}"
                  + "".join(f"{r[f'best@{b}']:>8.3f}x" for b in budgets)
                  + "".join(f"{r[f'vs_tpe@{b}']:>10.3f}" for b in budgets)
                  + f"{_verified(r['verified']):>9}"
                  + f"{evals_text:>10}{_fmt(r['evals_vs_tpe']):>8}{r['overhead_ms']:>9.2f}"
                  f"{r['search_minutes']:>11.1f}{r['evals_per_hour']:>8.0f}{r['dedupe']:>7.0%}"
                  f"{r['wasted']:>7.0f}{r['exact']:>7.0%}{r['mean_distance']:>6.1f}")


def overall(rows: list[dict[str, Any]], budgets: list[int]) -> list[dict[str, Any]]:
    """Per strategy over all graphs: geometric mean of the best speedups, its ratio to Optuna
    TPE's, and on how many graphs the median seed reached 95% of the best known gain."""
    summary = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        group = [r for r in rows if r["strategy"] == strategy]
        row: dict[str, Any] = {"strategy": strategy, "graphs": len(group)}
        for budget in budgets:
            row[f"best@{budget}"] = math.exp(statistics.fmean(math.log(r[f"best@{budget}"]) for r in group))
        row["reached_95"] = sum(r["evals_to_95"] is not None and math.isfinite(r["evals_to_95"]) for r in group)
        row["overhead_ms"] = _median([r["overhead_ms"] for r in group])
        verified = [r["verified"][0] for r in group if r["verified"]]
        row["verified"] = (math.exp(statistics.fmean(map(math.log, verified)))
                           if len(verified) == len(group) else None)
        row["evals_per_hour"] = _median([r["evals_per_hour"] for r in group])
        row["dedupe"] = _median([r["dedupe"] for r in group])
        summary.append(row)
    tpe = next(r for r in summary if r["strategy"] == "optuna-tpe")
    for row in summary:
        for budget in budgets:
            row[f"vs_tpe@{budget}"] = row[f"best@{budget}"] / tpe[f"best@{budget}"]
    return summary


def print_overall(summary: list[dict[str, Any]], budgets: list[int]) -> None:
    """The summary over all graphs."""
    print(f"\nall {summary[0]['graphs']} graphs: geometric mean of the median best speedup and of "
          f"its verified re-measurement; graphs where the median seed reached 95% of the best gain "
          f"within {max(budgets)}; medians of evaluations per hour and of the share deduped")
    print(f"{'strategy':<14}" + "".join(f"{'best@' + str(b):>9}" for b in budgets)
          + "".join(f"{'vs TPE@' + str(b):>10}" for b in budgets)
          + f"{'verified':>9}{'reached':>9}{'ms/prop':>9}{'evals/h':>8}{'dedupe':>7}")
    for r in summary:
        verified = f"{r['verified']:.3f}x" if r["verified"] else "-"
        print(f"{r['strategy']:<14}" + "".join(f"{r[f'best@{b}']:>8.3f}x" for b in budgets)
              + "".join(f"{r[f'vs_tpe@{b}']:>10.3f}" for b in budgets)
              + f"{verified:>9}{r['reached_95']:>7}/{r['graphs']}{r['overhead_ms']:>9.2f}"
              f"{r['evals_per_hour']:>8.0f}{r['dedupe']:>7.0%}")


def _finite(data: Any) -> Any:
    """`data` with infinite floats ("never reached") as null: JSON has no infinity."""
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_finite(v) for v in data]
    return None if isinstance(data, float) and not math.isfinite(data) else data


def _verified(value: list[float] | None) -> str:
    return f"{value[0]:.3f}x" if value else "-"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(DEFAULT_GRAPHS), help="zoo workloads")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--space", choices=["bench", "graph"], default="bench",
                        help="bench: the 120 configs of BENCH_FLAGS, all measured (exact replay); "
                        "graph: the tuner's whole graph space, a sample measured (nearest replay)")
    parser.add_argument("--budgets", help="evaluation budgets, comma-separated "
                        "(default 8,16,32 for bench, 16,40 for graph)")
    parser.add_argument("--sample", type=int, default=40,
                        help="graph space: random two-flag configs measured per graph, besides the "
                        "one-flag ones")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fleet-fdo" / "bench_tuner")
    parser.add_argument("--live", action="store_true",
                        help="measure configs that are not in the table instead of replaying the nearest")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    exact = args.space == "bench"
    budgets = sorted(int(b) for b in (args.budgets or ("8,16,32" if exact else "16,40")).split(","))
    graphs = [g.strip() for g in args.graphs.split(",") if g.strip()]
    space = graph_space("cpu", accepted_flags("cpu"))
    if exact:
        space = bench_space(space)
    whole, tables, measurers = {}, {}, {}
    measured_now = 0.0
    for graph in graphs:
        sample = sample_configs(space, graph, args.sample, exact)
        whole[graph], tables[graph], measurers[graph], spent = measure_graph(
            graph, sample, args.cache, args.live, exact)
        measured_now += spent
    rows = []
    started = time.perf_counter()
    for graph in graphs:
        surrogate = Surrogate(tables[graph], space, measurers[graph])
        prior = prior_from(tables, space, graph, max(budgets))
        runs: dict[int, list[Run]] = {}
        for budget in budgets:
            thunks = list(strategy_runs(space, surrogate, budget, args.seeds, prior))
            runs[budget] = [thunk() for thunk in tqdm(thunks, desc=f"replay {graph} B={budget}", unit="run")]
        verify_found(graph, whole[graph], args.cache / f"{graph}.json", runs[max(budgets)], max(budgets))
        rows += summarize(graph, tables[graph], runs, budgets)
        if measurers[graph] is not None:
            measurers[graph].close()
    replay_seconds = time.perf_counter() - started
    timing = {
        "measuring_seconds_now": measured_now,
        "measuring_seconds_total": sum(t.measuring_seconds for t in whole.values()),
        "replay_seconds": replay_seconds,
        "measured_configs": {g: len(t.entries) for g, t in whole.items()},
        "timed_programs": {g: len(t.program_seconds()) for g, t in whole.items()},
        "space_configs": space.size(),
    }
    summary = overall(rows, budgets)
    if args.json:
        payload = {"rows": rows, "overall": summary, "timing": timing, "live": args.live,
                   "space": args.space}
        print(json.dumps(_finite(payload)))
        return
    print_rows(rows, budgets, args.seeds, args.live, space.size() if exact else None)
    print_overall(summary, budgets)
    print(f"\nmeasuring: {timing['measuring_seconds_now']:.0f} s now (cache {args.cache}); "
          f"{timing['measuring_seconds_total'] / 60:.1f} min in all for "
          + ", ".join(f"{g} {n} configs / {timing['timed_programs'][g]} programs timed"
                      for g, n in timing["measured_configs"].items())
          + f"; replay {replay_seconds:.0f} s")


if __name__ == "__main__":
    main()
