"""Beam combiners that sum pyarrow Tables, vectorized, for the ranking and savings pipelines.

Each input table is reduced with Arrow's hash aggregation where it is read; the combiners are
lifted, so only each worker's partial sums leave it, coded as Arrow IPC streams rather than
pickles.
"""

from __future__ import annotations

from typing import Iterable

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import Coder, TupleCoder


class ArrowTablesCoder(Coder):
    """A list of pyarrow Tables of one schema as one Arrow IPC stream: compact (a slice
    carries only its own rows, where a pickle carries its parent's buffers) and fast."""

    def encode(self, tables: list[pa.Table]) -> bytes:
        if not tables:
            return b""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tables[0].schema) as writer:
            for table in tables:
                writer.write_table(table)
        return sink.getvalue().to_pybytes()

    def decode(self, encoded: bytes) -> list[pa.Table]:
        return [pa.ipc.open_stream(encoded).read_all()] if encoded else []

    def is_deterministic(self) -> bool:
        return False


class ArrowSum(beam.CombineFn):
    """Sum `values` grouped by `keys` over a PCollection of pyarrow Tables, vectorized.

    Each input table is reduced with Arrow's hash aggregation; accumulators are small tables
    of partial sums that merge the same way. Partial sums keep string keys dictionary-encoded
    (merging hashes small integers, not strings); the output has `schema` (keys then values),
    which also types it when there was no input at all. With no `values` it yields the
    distinct keys.
    """

    def __init__(self, keys: list[str], values: list[str], schema: pa.Schema) -> None:
        self.keys, self.values, self.schema = keys, values, schema
        self.partial = pa.schema([
            field.with_type(pa.dictionary(pa.int32(), field.type)) if pa.types.is_string(field.type)
            else field for field in schema])

    def create_accumulator(self) -> list[pa.Table]:
        return []

    def add_input(self, accumulator: list[pa.Table], table: pa.Table) -> list[pa.Table]:
        # A partial sum already (reduced where it was read) joins as it is; compaction merges.
        accumulator.append(table if table.schema.equals(self.partial) else self.reduce(table))
        if len(accumulator) >= 16:
            accumulator[:] = self.compact(accumulator)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[pa.Table]]) -> list[pa.Table]:
        return self.compact([t for accumulator in accumulators for t in accumulator])

    def compact(self, accumulator: list[pa.Table]) -> list[pa.Table]:
        return [self.reduce(pa.concat_tables(accumulator))] if len(accumulator) > 1 else accumulator

    def extract_output(self, accumulator: list[pa.Table]) -> pa.Table:
        if not accumulator:
            return self.schema.empty_table()
        return self.reduce(pa.concat_tables(accumulator)).cast(self.schema)

    def get_accumulator_coder(self) -> Coder:
        return ArrowTablesCoder()

    def reduce(self, table: pa.Table) -> pa.Table:
        """`table` summed by the keys, as a partial sum: apply it where a table is read too,
        so that only partial sums travel between workers."""
        # Chunks read or merged apart have their own dictionaries: one dictionary per column.
        summed = table.unify_dictionaries().group_by(self.keys, use_threads=False).aggregate(
            [(name, "sum") for name in self.values])
        return summed.rename_columns([c.removesuffix("_sum") for c in summed.column_names]
                                     ).select(self.schema.names).cast(self.partial)


class TaggedSums(beam.CombineFn):
    """Several ArrowSums in one combine: inputs are (tag, table), the output maps each tag to
    its sum, so tables of different shapes that belong together (a kind's costs and its
    symbols) meet in one step without another shuffle."""

    def __init__(self, sums: dict[str, ArrowSum]) -> None:
        self.tags = sorted(sums)
        self.sums = [sums[tag] for tag in self.tags]

    def create_accumulator(self) -> tuple[list[pa.Table], ...]:
        return tuple(fn.create_accumulator() for fn in self.sums)

    def add_input(self, accumulator, tagged: tuple[str, pa.Table]):
        tag, table = tagged
        index = self.tags.index(tag)
        self.sums[index].add_input(accumulator[index], table)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            for mine, theirs in zip(merged, accumulator):
                mine.extend(theirs)
        return self.compact(merged)

    def compact(self, accumulator):
        return tuple(fn.compact(part) for fn, part in zip(self.sums, accumulator))

    def extract_output(self, accumulator) -> dict[str, pa.Table]:
        return {tag: fn.extract_output(part) for tag, fn, part in zip(self.tags, self.sums, accumulator)}

    def get_accumulator_coder(self) -> Coder:
        return TupleCoder([fn.get_accumulator_coder() for fn in self.sums])
