"""A fleet of jobs that behaves like CATWILD's, deterministic by seed, generated vectorized.

- Jobs belong to teams, have a size class from XS (1 chip) to XXL (2048-4096 chips), run on
  one of several device kinds, and run every day (services, long training runs) or on some
  days; many are short or tiny (minutes a day).
- A job spans devices and processes as its device kind's hosts hold them (`DEVICE_KINDS`: 4
  TPUs or 8 GPUs a host): a job of more chips than a host has runs one process per host, its
  programs partitioned over all of its chips (the environment's `Partitioning`: SPMD over a
  data x model mesh, its processes and their local devices). "here" jobs run this machine's
  environment, one device a process: a job of N chips is N replicas of one program.
- Profiles are per process: each of a job's processes hands over its own row of each graph it
  ran, counting its share of the job's chips, so the rows of a job add up to its chips x
  seconds once. Of a job of more than MAX_PROFILED_PROCESSES processes, that many do (a fleet
  samples its profilers), each for an equal share. Op-level rows are one process's, scaled to
  the job's chips.
- Each job runs a main program and maybe an eval or serving program, picked by a Zipf-like
  popularity over the catalog, so a few graphs dominate fleet chip-time.
- The reach fleet (`FleetMode.REACH`; what it is for: `run`'s docstring) is a long tail of
  models, each run at several shapes: each of a job's programs is a family (the workload a
  graph is a shape of) drawn by the Zipf popularity over families, then one of that family's
  shapes by fixed weights (`SHAPE_WEIGHTS`, its shapes ranked in an order of its own). These
  draws have a stream of their own: the reach fleet's other draws are the default fleet's,
  and the default fleet draws as it always did.
- About `opt_out_share` of chip-time belongs to jobs that opted out of tuning.
- The compiler has a release every `release_every_days` days (counted from a fixed epoch,
  `FleetSpec.epoch`, so day-by-day runs agree); each job adopts a release after its own lag of
  0-6 days. Jobs on the "here" device kind run this machine's environment instead, its
  compiler included, so the tuner and the validator can measure what they run.
- Jobs differ: each runs its graphs at its own pace (a per-job factor on seconds per
  execution), as jobs on different hosts and input pipelines do.
- Jobs whose graph has a tuned config (a `TunedLookup` answers) record the hit metadata. A
  deterministic share of jobs per key (the hook's rule, `ingest.hits.holdout_arm`) is the
  entry's holdout arm and runs the defaults; the others run faster by the entry's true effect
  (`true_speedup`), which is not the speedup the tuner expected: the fleet's truth, kept per
  row in `Hits` so benchmarks can score what the loop infers from the rows.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Callable

import numpy as np

from hlo.environment import Environment, Partitioning
from ingest.hits import holdout_arm
from storage.store_schema import DEFAULT_HOLDOUT_SHARE

EPOCH = datetime.date(2026, 1, 1)
TEAMS = ("llm-pretrain", "llm-serving", "ads", "search", "recsys", "vision", "speech",
         "translate", "maps", "robotics", "science", "infra")
# (name, chips choices, probability of a job being in this class)
SIZE_CLASSES = (
    ("XS", (1,), 0.50),
    ("S", (4, 8), 0.25),
    ("M", (16, 32, 64), 0.14),
    ("L", (128, 256), 0.07),
    ("XL", (512, 1024), 0.03),
    ("XXL", (2048, 4096), 0.01),
)
# (platform, device kind, share of jobs, devices a process holds). Two kinds are this machine's
# CPU, so configs tuned here apply to part of the fleet: "here" jobs run exactly this machine's
# environment (its device count and its compiler, the one the tuner and the validator measure
# with), so their configs are re-measured for real; "local" jobs run at their own size (4 host
# devices a process) and follow the simulated releases.
DEVICE_KINDS = (("cpu", "here", 0.15, 1), ("cpu", "local", 0.1, 4), ("tpu", "TPU v5 lite", 0.35, 4),
                ("tpu", "TPU v5p", 0.2, 4), ("gpu", "NVIDIA H100 80GB HBM3", 0.2, 8))
HERE_KIND = next(i for i, kind in enumerate(DEVICE_KINDS) if kind[1] == "here")
# The most processes of one job that hand over profile rows.
MAX_PROFILED_PROCESSES = 8
LAG_DAYS = 7
DAY_SECONDS = 86_400.0
ROW_CHUNK = 1 << 20
# The reach fleet's weights of a family's shapes, by rank: its main shape, then the others.
SHAPE_WEIGHTS = (0.5, 0.3, 0.2)


class FleetMode(StrEnum):
    """How a fleet's jobs pick their programs."""

    DEFAULT = "default"  # each graph its own rank in one Zipf popularity over the catalog
    REACH = "reach"  # a Zipf popularity over families, then a family's shape by SHAPE_WEIGHTS


@dataclass(frozen=True)
class FleetSpec:
    """The knobs of a simulated fleet."""

    jobs: int
    seed: int = 0
    release_every_days: int = 4
    opt_out_share: float = 0.2
    zipf_exponent: float = 1.2
    op_sample: float = 1.0  # share of job-days profiled at op level (op time scaled up by 1/it)
    # The sigma of each job's lognormal pace factor on seconds per execution.
    job_sigma: float = 0.05
    # An entry's true effect is its expected speedup times a per-entry lognormal factor of this
    # sigma: the tuning machine measures close to what the fleet gets, not exactly it...
    effect_sigma: float = 0.02
    # ...except for these (config key, true speedup) pairs: injected regressions, configs that
    # won where they were tuned and slow the fleet down.
    regressions: tuple[tuple[str, float], ...] = ()
    # The date of the fleet's day 0: its releases and each day's draws count days from it, so
    # the same days after the same epoch are the same fleet whatever their dates.
    epoch: datetime.date = EPOCH
    mode: FleetMode = FleetMode.DEFAULT


@dataclass(frozen=True)
class Hit:
    """A tuned config that a job's compile found in the store."""

    config_key: str
    config_version: int
    speedup: float  # the expected one, as the store entry says
    holdout_share: float = DEFAULT_HOLDOUT_SHARE  # of jobs that run the defaults for this key


# (graph fingerprint, env_key) -> the tuned config applied to it, if any
TunedLookup = Callable[[str, str], Hit | None]


@dataclass(frozen=True)
class Jobs:
    """The job population: one entry per job, as arrays."""

    team: np.ndarray  # index into TEAMS
    size_class: np.ndarray  # index into SIZE_CLASSES
    chips: np.ndarray
    kind: np.ndarray  # index into DEVICE_KINDS
    long_running: np.ndarray  # runs every day (services, long training runs)
    duty: np.ndarray  # for the others: the chance it runs on a given day
    hours: np.ndarray  # hours a day the job runs when it runs
    graphs: np.ndarray  # (jobs, 3) catalog indices, -1 for none
    graph_split: np.ndarray  # (jobs, 3) share of the job's time per graph
    opted_out: np.ndarray
    lag: np.ndarray  # (jobs,) base adoption lag in days
    pace: np.ndarray  # factor on seconds per execution: how much slower than the catalog's


def make_jobs(spec: FleetSpec, n_graphs: int, family: np.ndarray | None = None) -> Jobs:
    """The fleet's jobs, a pure function of the spec (so day-by-day runs see the same fleet).
    `family` labels each graph with its family (the graphs of one label are one program's
    shapes); the reach fleet (`spec.mode`) needs it, the default fleet ignores it.

    Drawn with float32 uniforms and inverse CDFs in compact types: a large fleet has tens of
    millions of jobs.
    """
    rng = np.random.default_rng([spec.seed, 1])
    n = spec.jobs

    def uniform(*shape: int) -> np.ndarray:
        return rng.random(shape or (n,), dtype=np.float32)

    team = _draw(uniform(), _zipf(len(TEAMS), 1.0))
    size_class = _draw(uniform(), np.array([c[2] for c in SIZE_CLASSES]))
    widest = max(len(c[1]) for c in SIZE_CLASSES)
    chips_table = np.array([list(c[1]) + [c[1][-1]] * (widest - len(c[1])) for c in SIZE_CLASSES])
    choice_count = np.array([len(c[1]) for c in SIZE_CLASSES])
    pick = (uniform() * choice_count[size_class]).astype(np.int64)
    chips = chips_table[size_class, pick].astype(np.int32)
    kind = _draw(uniform(), np.array([k[2] for k in DEVICE_KINDS]))
    long_running = uniform() < 0.3 + 0.1 * size_class  # big jobs tend to be long-lived
    duty = np.where(long_running, np.float32(1), 0.1 + 0.5 * uniform()).astype(np.float32)
    tiny = (size_class == 0) & (uniform() < 0.5)
    hours = np.where(long_running, 12 + 12 * uniform(), 0.5 + 7.5 * uniform())
    hours = np.where(tiny, 1 / 60 + 0.28 * uniform(), hours).astype(np.float32)
    popularity = rng.permutation(n_graphs).astype(np.int16)  # which graph has which rank
    if spec.mode is FleetMode.REACH:
        if family is None or len(family) != n_graphs:
            raise ValueError(f"the reach fleet needs each of its {n_graphs} graphs' family")
        # The uniforms that pick a graph in the default fleet pick a family here: every other
        # draw of the main stream stays the default fleet's.
        graphs = _by_family(spec, family, uniform(n, 3))
    else:
        graphs = popularity[_draw(uniform(n, 3), _zipf(n_graphs, spec.zipf_exponent))]
    graphs[:, 1] = np.where(uniform() < 0.5, graphs[:, 1], -1)
    graphs[:, 2] = np.where(uniform() < 0.2, graphs[:, 2], -1)
    split = np.where(graphs >= 0, np.array([0.8, 0.15, 0.05], dtype=np.float32), np.float32(0))
    split /= split.sum(axis=1, keepdims=True)
    opted_out = _opt_outs(rng, chips * hours * duty, spec.opt_out_share)
    lag = rng.integers(0, LAG_DAYS, size=n, dtype=np.int8)
    # A stream of its own, so the knob changes no other draw.
    pace = np.exp(np.random.default_rng([spec.seed, 4]).normal(0.0, spec.job_sigma, n)).astype(np.float32)
    return Jobs(team, size_class, chips, kind, long_running, duty, hours, graphs, split,
                opted_out, lag, pace)


def _by_family(spec: FleetSpec, family: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Graphs picked by family: a family per uniform by the Zipf popularity over families
    (ranked by a permutation of the seed's), then one of its shapes by SHAPE_WEIGHTS (cut to the
    shapes it has), its shapes ranked in a random order of its own. Its own draws come from a
    stream of their own (`[seed, 6]`), so the reach fleet changes no other draw."""
    rng = np.random.default_rng([spec.seed, 6])
    names, members = np.unique(family, return_inverse=True)
    members = members.reshape(-1)
    counts = np.bincount(members, minlength=len(names))
    width = int(counts.max())
    if width > len(SHAPE_WEIGHTS):
        raise ValueError(f"a family has {width} shapes; SHAPE_WEIGHTS weighs {len(SHAPE_WEIGHTS)}")
    # shapes[f, r]: the graph of family f at shape rank r (-1 past its count), ranks shuffled.
    shapes = np.full((len(names), width), -1, dtype=np.int16)
    for f in range(len(names)):
        graphs = np.flatnonzero(members == f)
        shapes[f, :len(graphs)] = graphs[rng.permutation(len(graphs))]
    popularity = rng.permutation(len(names)).astype(np.int16)  # which family has which rank
    chosen = popularity[_draw(uniforms, _zipf(len(names), spec.zipf_exponent))]
    # Each family's shape CDF over its ranks, the weights cut to its count.
    weights = np.where(np.arange(width) < counts[:, None], np.array(SHAPE_WEIGHTS[:width]), 0.0)
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1).astype(np.float32)
    cdf[np.arange(width) >= counts[:, None] - 1] = 1.0  # never past a family's last shape
    pick = rng.random(uniforms.shape, dtype=np.float32)
    rank = np.zeros(uniforms.shape, dtype=np.int16)
    for r in range(width - 1):  # a column at a time: memory of one draw per slot
        rank += pick >= cdf[chosen, r]
    return shapes[chosen, rank]


def _draw(uniforms: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Indices drawn with probability proportional to `weights`, by inverse CDF."""
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return np.searchsorted(cdf, uniforms, side="right").clip(0, len(weights) - 1).astype(np.int16)


def release_days(day: int, every: int) -> list[int]:
    """The compiler releases out by `day` that a job may still run (the last few)."""
    latest = day - day % every
    return [r for r in range(latest - every * (LAG_DAYS // every + 2), latest + 1, every) if r >= 0]


def compiler_version(base: str, release_day: int, epoch: datetime.date = EPOCH) -> str:
    """The version name of the release on `release_day` (days since `epoch`)."""
    date = epoch + datetime.timedelta(days=release_day)
    return f"{base}+{date.strftime('%Y%m%d')}"


def partitioning(chips: int, per_process: int) -> Partitioning | None:
    """How a job of `chips` chips, `per_process` a process, partitions its programs: SPMD over
    all of its chips, on a (data, model) mesh whose model axis spans a process's devices; None
    for one chip."""
    if chips == 1:
        return None
    local = min(chips, per_process)
    return Partitioning(partitions=chips, spmd=True, shardy=True,
                        mesh=(("data", chips // local), ("model", local)),
                        processes=-(-chips // per_process), local_devices=local)


def profiled_processes(jobs: Jobs, job: np.ndarray, here: Environment) -> np.ndarray:
    """How many processes of each job in `job` hand over profile rows: its processes (one per
    `here.device_count` devices for "here" jobs, per its kind's host otherwise), at most
    MAX_PROFILED_PROCESSES. Chips and hosts are powers of two, so each counts an equal share."""
    per_process = np.array([k[3] for k in DEVICE_KINDS], dtype=np.int64)
    per_process[HERE_KIND] = here.device_count
    chips = jobs.chips[job].astype(np.int64)
    processes = -(-chips // per_process[jobs.kind[job]])
    return np.minimum(processes, MAX_PROFILED_PROCESSES)


@dataclass(frozen=True)
class DayRows:
    """One simulated day of graph runs, as arrays (one entry per job and graph: a run, which
    each of the job's profiled processes hands over as a row of its own)."""

    job: np.ndarray
    graph: np.ndarray
    env: np.ndarray  # index into `environments`
    seconds: np.ndarray  # wall seconds in this graph (after any tuned config's true effect)
    executions: np.ndarray
    environments: list[Environment]
    processes: np.ndarray  # the job's profiled processes (`profiled_processes`)


def simulate_day(jobs: Jobs, spec: FleetSpec, day: int, step_seconds: np.ndarray,
                 here: Environment) -> DayRows:
    """The graph runs of every job alive on `day`; `here` is this machine's environment: the
    "here" jobs run in it (a job of N chips is N processes like this one, N / its device count
    where it has several), and the releases are named after its compiler."""
    rng = np.random.default_rng([spec.seed, 2, day])
    alive = np.flatnonzero(jobs.long_running | (rng.random(len(jobs.duty)) < jobs.duty))
    slots = jobs.graphs[alive] >= 0
    job = np.repeat(alive, slots.sum(axis=1))
    graph = jobs.graphs[alive][slots]
    split = jobs.graph_split[alive][slots]
    daily = jobs.hours[job] * 3600.0 * rng.uniform(0.7, 1.0, size=len(job))
    seconds = np.minimum(daily * split, DAY_SECONDS)
    releases = release_days(day, spec.release_every_days)
    release = np.full(len(job), releases[0])
    for release_day in releases:  # the newest release each job has adopted by now
        release = np.where(release_day + _lag(jobs.lag[job], release_day) <= day, release_day, release)
    # One integer per (device kind, chips, release): np.unique over it is a plain sort.
    kind = jobs.kind[job].astype(np.int64)
    code = np.where(kind == HERE_KIND, kind << 40, (kind << 40) | (jobs.chips[job].astype(np.int64) << 20)
                    | (release - releases[0]))
    combos, env = np.unique(code, return_inverse=True)
    environments = []
    for combo in combos.tolist():
        platform, kind_name, _, per_process = DEVICE_KINDS[combo >> 40]
        if kind_name == "here":
            environments.append(here)
            continue
        chips = (combo >> 20) & 0xFFFFF
        environments.append(Environment(
            platform=platform, device_kind=here.device_kind if kind_name == "local" else kind_name,
            device_count=chips,
            compiler_version=compiler_version(here.compiler_version, releases[0] + (combo & 0xFFFFF), spec.epoch),
            partitioning=partitioning(chips, per_process)))
    executions = np.maximum(1, (seconds / (step_seconds[graph] * jobs.pace[job])).astype(np.int64))
    return DayRows(job, graph, env.reshape(-1), seconds, executions, environments,
                   profiled_processes(jobs, job, here))


@dataclass(frozen=True)
class Hits:
    """Per row of a DayRows: the store entry its compile found (key, version, expected speedup;
    None / NaN: none), its arm (`holdout` True: ran the defaults, False: ran the config, None:
    no entry) and the entry's true effect (NaN: none), which the rows' consumers never see."""

    key: np.ndarray
    version: np.ndarray
    speedup: np.ndarray
    holdout: np.ndarray
    true_speedup: np.ndarray

    def tuned(self) -> np.ndarray:
        """Which rows ran a tuned config."""
        return self.holdout == False  # noqa: E712 (elementwise over objects, None stays out)

    def held_out(self) -> np.ndarray:
        """Which rows ran the defaults as an entry's holdout arm."""
        return self.holdout == True  # noqa: E712


def true_speedup(spec: FleetSpec, hit: Hit) -> float:
    """The speedup the fleet really gets from `hit`'s entry: the injected one when its key is
    in `spec.regressions`, else the expected speedup times a lognormal factor (sigma
    `spec.effect_sigma`) drawn from the seed and the key, so every day and run agree."""
    regressed = dict(spec.regressions)
    if hit.config_key in regressed:
        return regressed[hit.config_key]
    digest = hashlib.blake2b(hit.config_key.encode(), digest_size=8).digest()
    rng = np.random.default_rng([spec.seed, 5, int.from_bytes(digest, "big")])
    return hit.speedup * float(np.exp(rng.normal(0.0, spec.effect_sigma)))


def apply_hits(rows: DayRows, fingerprints: list[str], tuned: TunedLookup | None,
               spec: FleetSpec) -> tuple[DayRows, Hits]:
    """The day's rows with each hit's tuned arm sped up by the entry's true effect and its
    holdout arm at default speed, and the hit metadata per row. A job does the same executions
    either way; one slowed past the end of the day does the share that fits in it."""
    n = len(rows.job)
    hits = Hits(np.full(n, None, dtype=object), np.full(n, None, dtype=object), np.full(n, np.nan),
                np.full(n, None, dtype=object), np.full(n, np.nan))
    if tuned is None or n == 0:
        return rows, hits
    env_keys = [e.key() for e in rows.environments]
    pairs, inverse = graph_env_pairs(rows)
    for index, (g, e) in enumerate(pairs):
        hit = tuned(fingerprints[g], env_keys[e])
        if hit is not None:
            members = np.flatnonzero(inverse == index)
            hits.key[members], hits.version[members] = hit.config_key, hit.config_version
            hits.speedup[members] = hit.speedup
            hits.holdout[members] = _holdout_arms(rows.job[members], hit)
            hits.true_speedup[members] = true_speedup(spec, hit)
    seconds = rows.seconds / np.where(hits.tuned(), hits.true_speedup, 1.0)
    fits = np.minimum(1.0, DAY_SECONDS / seconds)
    executions = np.maximum(1, (rows.executions * fits).astype(np.int64))
    return dataclasses.replace(rows, seconds=seconds * fits, executions=executions), hits


def _holdout_arms(job: np.ndarray, hit: Hit) -> list[bool]:
    """Per row, whether its job is in the holdout arm of `hit`'s key (one hash per job)."""
    unique, inverse = np.unique(job, return_inverse=True)
    arms = np.array([holdout_arm(job_id(j), hit.config_key, hit.holdout_share) for j in unique.tolist()])
    return arms[inverse.reshape(-1)].tolist()


@dataclass(frozen=True)
class Truth:
    """What the store's entries really did for the fleet on one day, in chip-seconds: what a
    perfect realized-savings estimate finds, and what the holdout arm cost."""

    saved: float  # tuned runs' chip-seconds x (true speedup - 1)
    forgone: float  # holdout runs' chip-seconds x (true speedup - 1): savings the holdout gave up
    effects: dict[str, float]  # config key -> its true speedup, for the keys hit that day


def day_truth(rows: DayRows, hits: Hits, jobs: Jobs) -> Truth:
    """The truth of a day's rows after `apply_hits`."""
    gain = jobs.chips[rows.job] * rows.seconds * (np.nan_to_num(hits.true_speedup, nan=1.0) - 1.0)
    hit = ~np.isnan(hits.true_speedup)
    return Truth(saved=float(gain[hits.tuned()].sum()), forgone=float(gain[hits.held_out()].sum()),
                 effects=dict(zip(hits.key[hit].tolist(), hits.true_speedup[hit].tolist())))


def graph_env_pairs(rows: DayRows) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The distinct (graph, environment) pairs of the day, and each row's pair index."""
    n_env = max(len(rows.environments), 1)
    codes, inverse = np.unique(rows.graph.astype(np.int64) * n_env + rows.env, return_inverse=True)
    return [(int(c) // n_env, int(c) % n_env) for c in codes], inverse.reshape(-1)






def _lag(base_lag: np.ndarray, release_day: int) -> np.ndarray:
    """Each job's adoption lag for one release: its own base lag, shuffled per release."""
    salt = int.from_bytes(hashlib.blake2b(str(release_day).encode(), digest_size=2).digest(), "big")
    return (base_lag.astype(np.int16) + salt % LAG_DAYS) % LAG_DAYS


def _opt_outs(rng: np.random.Generator, expected: np.ndarray, share: float) -> np.ndarray:
    """Mark jobs, in random order, until they hold `share` of the expected chip-time."""
    order = rng.permutation(len(expected))
    cumulative = np.cumsum(expected[order]) / max(expected.sum(), 1e-9)
    opted = np.zeros(len(expected), dtype=bool)
    opted[order[: int(np.searchsorted(cumulative, share)) + 1]] = True
    return opted


def _zipf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()




def job_id(job: int) -> str:
    """The id a job's rows carry (the hook's holdout rule hashes it)."""
    return f"job-{job:07d}"

