"""The simulated fleet's profile drops: a day's runs (`fleet.DayRows`) as the `graph_runs` and
`op_runs` drops a real fleet's profilers hand over, in chunks, with no Python object per row."""

from __future__ import annotations

import datetime
from typing import Iterator

import numpy as np
import pyarrow as pa

from workloads.simulator.fleet import (
    EPOCH,
    MAX_PROFILED_PROCESSES,
    ROW_CHUNK,
    TEAMS,
    DayRows,
    FleetSpec,
    Hits,
    Jobs,
)


def graph_run_batches(rows: DayRows, hits: Hits, jobs: Jobs, day: int, fingerprints: list[str],
                      epoch: datetime.date = EPOCH) -> Iterator[pa.Table]:
    """The day's rows (`day` days after `epoch`) in the graph_runs drop format, in chunks: a
    row per profiled process of each run, each with its share of the job's chips, the run's
    seconds and executions (a job's processes step together) and its hit metadata (one
    decision per job)."""
    dt = epoch + datetime.timedelta(days=day)
    env_keys = [e.key() for e in rows.environments]
    for start in range(0, len(rows.job), ROW_CHUNK // MAX_PROFILED_PROCESSES):
        runs = np.arange(start, min(start + ROW_CHUNK // MAX_PROFILED_PROCESSES, len(rows.job)))
        part = np.repeat(runs, rows.processes[runs])
        job, env = rows.job[part], rows.env[part]
        yield pa.table({
            "dt": pa.array(np.full(len(job), dt), pa.date32()),
            "job_id": _job_ids(job),
            "team": _labels(jobs.team[job], list(TEAMS)),
            "fingerprint": _labels(rows.graph[part], fingerprints),
            "env_key": _labels(env, env_keys),
            "device_kind": _labels(env, [e.device_kind for e in rows.environments]),
            "compiler_version": _labels(env, [e.compiler_version for e in rows.environments]),
            "chips": pa.array(jobs.chips[job] // rows.processes[part], pa.int64()),
            "executions": pa.array(rows.executions[part], pa.int64()),
            "seconds": pa.array(rows.seconds[part], pa.float64()),
            "opted_out": pa.array(jobs.opted_out[job], pa.bool_()),
            "config_key": pa.array(hits.key[part], pa.string()),
            "config_version": pa.array(hits.version[part], pa.int64()),
            "expected_speedup": pa.array(hits.speedup[part], pa.float64(), from_pandas=True),
            "holdout": pa.array(hits.holdout[part], pa.bool_()),
        })


def op_run_batches(rows: DayRows, jobs: Jobs, spec: FleetSpec, day: int, fingerprints: list[str],
                   op_fingerprints: list[tuple[str, ...]], op_shares: list[tuple[float, ...]]
                   ) -> Iterator[pa.Table]:
    """Op-level rows for the sampled job-days, each op's time scaled by 1 / op_sample: one
    process's profile of the run, counting all of the job's chips."""
    rng = np.random.default_rng([spec.seed, 3, day])
    sampled = np.flatnonzero(rng.random(len(rows.job)) < spec.op_sample)
    env_keys = [e.key() for e in rows.environments]
    dt = spec.epoch + datetime.timedelta(days=day)
    all_ops = sorted({fp for ops in op_fingerprints for fp in ops})
    op_index = {fp: i for i, fp in enumerate(all_ops)}
    counts_of = np.array([len(ops) for ops in op_fingerprints])
    width = max(1, int(counts_of.max(initial=0)))
    op_matrix = np.zeros((len(fingerprints), width), dtype=np.int64)
    share_matrix = np.zeros((len(fingerprints), width))
    for graph_index, (ops, shares) in enumerate(zip(op_fingerprints, op_shares)):
        op_matrix[graph_index, :len(ops)] = [op_index[fp] for fp in ops]
        share_matrix[graph_index, :len(shares)] = shares
    for start in range(0, len(sampled), ROW_CHUNK // width):
        part = sampled[start:start + ROW_CHUNK // width]
        counts = counts_of[rows.graph[part]]
        row = np.repeat(part, counts)
        position = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
        g = rows.graph[row]
        ops, shares = op_matrix[g, position], share_matrix[g, position]
        chip_seconds = jobs.chips[rows.job[row]] * rows.seconds[row] * shares / spec.op_sample
        yield pa.table({
            "dt": pa.array(np.full(len(row), dt), pa.date32()),
            "job_id": _job_ids(rows.job[row]),
            "team": _labels(jobs.team[rows.job[row]], list(TEAMS)),
            "op_fingerprint": _labels(ops, all_ops),
            "graph_fingerprint": _labels(g, fingerprints),
            "env_key": _labels(rows.env[row], env_keys),
            "chip_seconds": pa.array(chip_seconds, pa.float64()),
            "opted_out": pa.array(jobs.opted_out[rows.job[row]], pa.bool_()),
        })


def _labels(indices: np.ndarray, names: list[str]) -> pa.Array:
    """Strings by index, built as a dictionary array (no Python object per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()),
                                          pa.array(names, pa.string())).cast(pa.string())


def _job_ids(job: np.ndarray) -> pa.Array:
    """`job_id` of each index, vectorized."""
    import pyarrow.compute as pc

    digits = pc.utf8_lpad(pa.array(job, pa.int64()).cast(pa.string()), 7, "0")
    return pc.binary_join_element_wise("job-", digits, "")
