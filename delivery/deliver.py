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

An entry carries where its result's config came from (`origin`, `transferred_from`: a search,
a transfer from a sibling's verified config, or a key measured alike; `tuner.transfer`), and
its opt-in config that relaxes numerics (`relaxed_config`,
`relaxed_speedup`: `tuner.result.RelaxedOption`), which the hook applies only for jobs that opted
in; a result landed before tuning_results had them (version 3) reads as having none. A result
whose strict config was not accepted delivers nothing, its opt-in neither.

Graph-kind and kernels-kind results become entries (both of kind 'graph': each applies to a
whole compile of its graph); an op result reaches users folded into the graph-level configs of
the graphs that hold the op (`tuner.fold`, results with strategy 'fold-ops'), which are graph
results like any other. A kernels result (`tuner.kernels`) carries XLA:GPU autotune results
with config {}; the entry carries them (`autotune_results`), and competes for its key with the
graph's flags like any other result: one entry per key, the higher lower bound. A result whose
autotune results the gate refuses (`delivery.store_writer.check_autotune_results`) delivers nothing,
and says why on the log.
"""

from __future__ import annotations

import datetime
import logging
from typing import Iterable

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from delivery.store_writer import DEFAULT_TTL, Store, StoreError, check_autotune_results, merge_entries
from hlo.environment import store_key
from storage.beam_io import ReadTables, Source, StageTable, partition_files, plan_reads
from storage.beam_runner import pipeline_options
from storage.home import Home, temporary_name
from storage.home_factory import open_home
from storage.store_schema import ENTRIES, conform_entries
from tuner.tables import TUNING_RESULTS
from vocabulary.store import Provenance
from vocabulary.tuning import Kind, Origin

log = logging.getLogger("fleet_fdo.deliver")

NOISE_BAND = 0.01
_COLUMNS = ["task_id", "kind", "fingerprint", "env_key", "config", "speedup", "ci_low", "ci_high",
            "numerics_ok", "compiler_version", "accepted", "relaxed_config", "relaxed_speedup",
            "autotune_results", "origin", "transferred_from"]
_DELIVERED_KINDS = pa.array([Kind.GRAPH, Kind.KERNELS], pa.string())  # the kinds that become entries


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
    """The accepted graph and kernels rows of a `tuning_results` table (with `dt`) as store
    entries of kind 'graph', each with its opt-in config and its autotune results (null where
    the result has none); a row whose autotune results are refused is left out, and logged."""
    keep = pc.and_(pc.and_(pc.is_in(results.column("kind"), value_set=_DELIVERED_KINDS),
                           results.column("accepted")),
                   pc.and_(pc.fill_null(results.column("numerics_ok"), False),
                           pc.greater(pc.fill_null(results.column("ci_low"), 0.0), 1 + NOISE_BAND)))
    rows = results.filter(keep)
    rows = rows.filter(pa.array([_results_ok(task, text) for task, text in zip(
        rows.column("task_id").to_pylist(), rows.column("autotune_results").to_pylist())], pa.bool_()))
    measured = pc.cast(rows.column("dt").cast(pa.timestamp("s")), pa.timestamp("us", tz="UTC"))
    keys = [store_key(f, e) for f, e in zip(rows.column("fingerprint").to_pylist(),
                                           rows.column("env_key").to_pylist())]
    return pa.table({
        "key": pa.array(keys, pa.string()), "fingerprint": rows.column("fingerprint"),
        "env_key": rows.column("env_key"), "kind": pa.repeat(pa.scalar(Kind.GRAPH.value), rows.num_rows),
        "speedup": rows.column("speedup"),
        "expires_at": pc.add(measured, pa.scalar(ttl, pa.duration("us"))),
        "provenance": pa.repeat(pa.scalar(Provenance.TUNER.value), rows.num_rows),
        "config": rows.column("config"), "ci_low": rows.column("ci_low"),
        "ci_high": rows.column("ci_high"), "compiler_version": rows.column("compiler_version"),
        "measured_at": measured, "source": rows.column("task_id"),
        # The version's holdout share.
        "holdout_share": pa.nulls(rows.num_rows, pa.float64()),
        "relaxed_config": rows.column("relaxed_config"),
        "relaxed_speedup": rows.column("relaxed_speedup"),
        "autotune_results": rows.column("autotune_results"),
        # A result landed before origins were recorded (tuning_results version 6) was a search's.
        "origin": pc.fill_null(rows.column("origin").cast(pa.string()), Origin.SEARCH.value),
        "transferred_from": rows.column("transferred_from"),
    }).cast(ENTRIES)


def _results_ok(task_id: str, text: str | None) -> bool:
    """Whether a result's autotune results (None: it has none) pass the store's gate; logs
    the refusal, naming the task, where not."""
    if text is None:
        return True
    try:
        check_autotune_results(text, f"tuning result {task_id}")
    except StoreError as exc:
        log.warning("deliver: %s; not delivered", exc)
        return False
    return True


class BestEntryPerKey(beam.PTransform):
    """The best accepted result per store key as a store entry, from tables of tuning_results
    rows (with `dt`, strings plain or dictionary-encoded, as `ReadTables` reads them): one
    table of entries (`accepted_as_entries`, then `best_per_key`), in key order."""

    def expand(self, results):
        return (results
                | "Accepted entries" >> beam.Map(lambda rows: accepted_as_entries(_plain(rows)))
                | "Best per key" >> beam.CombineGlobally(BestPerKey()))


def build_deliver_pipeline(pipeline: beam.Pipeline, files: list[str], staged: str) -> None:
    """Add to `pipeline`: read `files` of tuning_results, `BestEntryPerKey`, staged as Parquet
    at `staged`."""
    # A file landed before the opt-in's columns (tuning_results version 3) reads with them null.
    (pipeline
     | "Read tuning_results" >> ReadTables(plan_reads([Source(TUNING_RESULTS, files, _COLUMNS)]))
     | "Tables" >> beam.Values()
     | "Best per key" >> BestEntryPerKey()
     | "Stage" >> StageTable(staged))


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
