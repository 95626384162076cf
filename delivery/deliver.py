"""`fdo deliver`: fold accepted tuning results into the next store version, as a Beam job.

Per store key, the best verified result wins: accepted (numerics ok, and the fresh interval's
lower bound above the noise band), highest lower bound first. The Beam pipeline reads
`tuning_results` as Arrow tables, keeps the accepted rows and combines them to the best per key
(vectorized, as ranking does); its output is staged as one Parquet file, and the driver then
publishes it over the live entries with the store's optimistic update: the entry of the same key
is replaced, every other entry carries over. A result is delivered once (its task id, the
entry's `source`, in no version yet), so an entry the validator has since invalidated, re-keyed
or let expire, or that a rollback removed, is not brought back by its old result. Nothing new,
no new version.

An entry carries its result's opt-in config that relaxes numerics (`relaxed_config`,
`relaxed_speedup`: `tuner.tune.RelaxedOption`), which the hook applies only for jobs that opted
in; a result landed before tuning_results had them (version 3) reads as having none. A result
whose strict config was not accepted delivers nothing, its opt-in neither.

Only graph-kind results become entries: a compiler config applies to a whole compile, so an op
result reaches users folded into the graph-level configs of the graphs that hold the op
(`tuner.fold`, results with strategy 'fold-ops'), which are graph results like any other.
"""

from __future__ import annotations

import datetime
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delivery.store import DEFAULT_TTL, Store, merge_entries
from hlo.environment import store_key
from ranking.beam_io import ReadTables, Source, partition_files, pipeline_options, plan_reads
from storage.home import Home, temporary_name
from storage.homes import atomic_write, open_home
from storage.store import ENTRIES, conform_entries
from tuner.tables import TUNING_RESULTS

NOISE_BAND = 0.01
_COLUMNS = ["task_id", "kind", "fingerprint", "env_key", "config", "speedup", "ci_low", "ci_high",
            "numerics_ok", "compiler_version", "accepted", "relaxed_config", "relaxed_speedup"]


class BestPerKey(beam.CombineFn):
    """The entry with the highest interval lower bound per store key, over tables of entries."""

    def create_accumulator(self) -> pa.Table:
        return ENTRIES.empty_table()

    def add_input(self, best: pa.Table, entries: pa.Table) -> pa.Table:
        return best_per_key(pa.concat_tables([best, entries]))

    def merge_accumulators(self, accumulators: Iterable[pa.Table]) -> pa.Table:
        return best_per_key(pa.concat_tables(list(accumulators)))

    def extract_output(self, best: pa.Table) -> pa.Table:
        return best


def best_per_key(entries: pa.Table) -> pa.Table:
    """One row per key: the highest ci_low (ties: the later task id), in key order."""
    if entries.num_rows == 0:
        return entries
    ordered = entries.sort_by([("key", "ascending"), ("ci_low", "descending"), ("source", "descending")])
    keys = ordered.column("key")
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1)).combine_chunks()
    return ordered.filter(pa.concat_arrays([pa.array([True]), first]))


def accepted_as_entries(results: pa.Table, ttl: datetime.timedelta = DEFAULT_TTL) -> pa.Table:
    """The accepted rows of a `tuning_results` table (with `dt`) as store entries, each with
    its opt-in config (null where the result has none)."""
    keep = pc.and_(pc.and_(pc.equal(results.column("kind"), "graph"), results.column("accepted")),
                   pc.and_(pc.fill_null(results.column("numerics_ok"), False),
                           pc.greater(pc.fill_null(results.column("ci_low"), 0.0), 1 + NOISE_BAND)))
    rows = results.filter(keep)
    measured = pc.cast(rows.column("dt").cast(pa.timestamp("s")), pa.timestamp("us", tz="UTC"))
    keys = [store_key(f, e) for f, e in zip(rows.column("fingerprint").to_pylist(),
                                           rows.column("env_key").to_pylist())]
    return pa.table({
        "key": pa.array(keys, pa.string()), "fingerprint": rows.column("fingerprint"),
        "env_key": rows.column("env_key"), "kind": rows.column("kind"),
        "speedup": rows.column("speedup"),
        "expires_at": pc.add(measured, pa.scalar(ttl, pa.duration("us"))),
        "provenance": pa.repeat(pa.scalar("tuner"), rows.num_rows),
        "config": rows.column("config"), "ci_low": rows.column("ci_low"),
        "ci_high": rows.column("ci_high"), "compiler_version": rows.column("compiler_version"),
        "measured_at": measured, "source": rows.column("task_id"),
        # The version's holdout share.
        "holdout_share": pa.nulls(rows.num_rows, pa.float64()),
        "relaxed_config": rows.column("relaxed_config"),
        "relaxed_speedup": rows.column("relaxed_speedup"),
        "autotune_results": pa.nulls(rows.num_rows, pa.string()),  # the tuner's are graph flags
    }).cast(ENTRIES)


def build_deliver_pipeline(pipeline: beam.Pipeline, files: list[str], staged: str) -> None:
    """Add to `pipeline`: read `files` of tuning_results, best accepted entry per key, staged
    as Parquet at `staged`."""
    # With the columns' schema, a file landed before the opt-in's columns (tuning_results
    # version 3) reads with them null.
    results = Source("tuning_results", files, _COLUMNS, lambda t: accepted_as_entries(_plain(t)),
                     empty=pa.schema([TUNING_RESULTS.schema.field(c) for c in _COLUMNS]))
    (pipeline
     | "Read tuning_results" >> ReadTables(plan_reads([results]))
     | "Tables" >> beam.Values()
     | "Best per key" >> beam.CombineGlobally(BestPerKey())
     | "Stage" >> beam.Map(_stage, staged))


def deliver(home: Home, beam_args: Iterable[str] = ()) -> int | None:
    """Publish the accepted results not yet live in `home`; returns the new version (None:
    no change). The pipeline stages them under `<home>/delivery`, which its workers see."""
    home = open_home(home)
    files = partition_files(home, TUNING_RESULTS, None, None)
    if not files:
        return None
    staged = home.location("delivery", temporary_name("accepted.parquet"))
    try:
        with beam.Pipeline(options=pipeline_options(beam_args)) as pipeline:
            build_deliver_pipeline(pipeline, files, str(staged))
        with home.open(staged) as source:
            new = conform_entries(pq.read_table(source))
    finally:
        home.delete([staged])
    store = Store(home)
    published = pa.array(sorted(store.sources()), pa.string())
    new = new.filter(pc.invert(pc.is_in(new.column("source"), value_set=published)))
    if new.num_rows == 0:
        return None
    return store.update(lambda live: merge_entries(live, new), "deliver")


def _plain(table: pa.Table) -> pa.Table:
    """The reader hands strings as dictionary arrays; entries hold plain strings."""
    return pa.table({name: (column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column)
                     for name, column in zip(table.column_names, table.columns)})


def _stage(entries: pa.Table, path: str) -> None:
    atomic_write(path, lambda handle: pq.write_table(entries, handle), durable=False)
