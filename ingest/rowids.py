"""Fact rows identified by their content, so that a row sent twice is counted once.

A profile row says how long one job ran one graph (or op) on one day: the same row in a re-sent
drop, or inside another drop, is the same fact. A row's id is a 128-bit hash of all its columns
(`dt` included, so ids never meet across partitions), and a row lands only if the warehouse does
not hold it yet. Identical rows are counted, not collapsed: an input adds its n-th copy of a row
only where the warehouse holds fewer than n, so two kernels of one trace that took the very same
time both land, and the same input (or any input holding those rows) adds nothing after.

Ids are computed when needed, never stored: the warehouse keeps its schema, and the rows a
partition already holds are hashed when a run first sends it rows (see SeenRows). The state is
16 bytes and a count per distinct row (sorted numpy arrays): a quarter of a GB for a day of ten
million rows.

The hash runs on Arrow's buffers: each column gives two 64-bit lanes per row (a number's bits,
or a 128-bit BLAKE2b of each distinct string, computed once per distinct value), folded into
two running lanes with different 64-bit mixers (SplitMix64's and MurmurHash3's finalizers),
and last the row's null mask (a null is not a zero).
It is meant against accidents, not adversaries: a producer that crafts colliding rows could
make one row hide another.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.warehouse import PARTITION, TableSchema, Warehouse

_MIXERS = ((np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), 30, 27, 31),
           (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53), 33, 33, 33))
_SEEDS = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0x632BE59BD9B4E019))


def row_ids(rows: pa.Table) -> np.ndarray:
    """A 128-bit id per row from all of its columns, in the table's order: an (n, 2) uint64
    array."""
    lanes = [np.full(rows.num_rows, seed, np.uint64) for seed in _SEEDS]
    nulls = np.zeros(rows.num_rows, np.uint64)  # bit i: column i is null (a null is not a 0)
    with np.errstate(over="ignore"):
        for i, name in enumerate(rows.column_names):
            column = rows.column(name)
            if column.null_count:
                nulls |= pc.is_null(column).to_numpy(zero_copy_only=False).astype(np.uint64) << np.uint64(i % 64)
            for lane, value, mixer in zip(lanes, _column_lanes(column), _MIXERS):
                lane ^= value
                lane[:] = _mix(lane, mixer)
        for lane, mixer in zip(lanes, _MIXERS):
            lane ^= nulls
            lane[:] = _mix(lane, mixer)
    return np.stack(lanes, axis=1)


def _column_lanes(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit lanes of each value of `column` (0 for a null)."""
    type_ = column.type
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_binary(type_):
        encoded = pc.dictionary_encode(column).combine_chunks()
        digests = np.frombuffer(b"".join(
            hashlib.blake2b(v.encode() if isinstance(v, str) else v, digest_size=16).digest()
            for v in encoded.dictionary.to_pylist()), np.uint64).reshape(-1, 2)
        digests = np.concatenate([digests, np.zeros((1, 2), np.uint64)])  # the row of a null
        picked = digests[pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy()]
        return picked[:, 0].copy(), picked[:, 1].copy()
    if pa.types.is_floating(type_):
        # -0.0 and 0.0 are one value: adding 0.0 turns the first into the second.
        numbers = pc.fill_null(pc.add(pc.cast(column, pa.float64()), 0.0), 0.0)
        bits = numbers.to_numpy().view(np.uint64)
    elif pa.types.is_boolean(type_) or pa.types.is_integer(type_) or pa.types.is_temporal(type_):
        as_int = column if pa.types.is_integer(type_) else _as_integers(column)
        bits = pc.fill_null(pc.cast(as_int, pa.int64()), 0).to_numpy().view(np.uint64)
    else:
        raise TypeError(f"row ids of a {type_} column are not defined")
    return bits, bits


def _as_integers(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_boolean(column.type):
        return pc.cast(column, pa.int8())
    storage = {4: pa.int32(), 8: pa.int64()}[column.type.bit_width // 8]
    return pa.chunked_array([chunk.view(storage) for chunk in column.chunks], storage)


def _mix(lane: np.ndarray, mixer: tuple) -> np.ndarray:
    multiply_1, multiply_2, shift_1, shift_2, shift_3 = mixer
    lane = (lane ^ (lane >> np.uint64(shift_1))) * multiply_1
    lane = (lane ^ (lane >> np.uint64(shift_2))) * multiply_2
    return lane ^ (lane >> np.uint64(shift_3))


def _sorted(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the stable order that sorts `ids`, where each run of equal ids starts in that order)."""
    if not len(ids):
        return np.empty(0, np.intp), np.empty(0, bool)
    # Sorting by the upper lane alone is much faster, and enough unless two different ids
    # share it (a 2^-64 chance per pair); then by both lanes.
    order = np.argsort(ids[:, 0], kind="stable")
    ordered = ids[order]
    same_upper = ordered[1:, 0] == ordered[:-1, 0]
    if (same_upper & (ordered[1:, 1] != ordered[:-1, 1])).any():
        order = np.lexsort((ids[:, 1], ids[:, 0]))
        ordered = ids[order]
    return order, np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]


class _Counts:
    """A multiset of row ids: distinct ids sorted, and how often each occurs."""

    def __init__(self, ids: np.ndarray | None = None, counts: np.ndarray | None = None) -> None:
        self.ids = np.empty((0, 2), np.uint64) if ids is None else ids
        self.counts = np.empty(0, np.int64) if counts is None else counts
        self.upper = np.ascontiguousarray(self.ids[:, 0])

    @classmethod
    def of(cls, ids: np.ndarray, counts: np.ndarray,
           combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> "_Counts":
        """The multiset of `ids` with these counts; an id's counts are combined by `combine`
        (a ufunc's reduceat)."""
        order, starts = _sorted(ids)
        where = np.flatnonzero(starts)
        return cls(ids[order][where], combine(counts[order], where) if len(ids) else counts)

    def get(self, ids: np.ndarray) -> np.ndarray:
        """How many times each of `ids` occurs (0 for one that does not); fastest with `ids`
        sorted."""
        found = np.zeros(len(ids), np.int64)
        if not len(self.ids) or not len(ids):
            return found
        first = np.searchsorted(self.upper, ids[:, 0], side="left")
        last = np.searchsorted(self.upper, ids[:, 0], side="right")
        # Nearly always one stored id has the upper lane; look at the rare others one by one.
        single = np.flatnonzero(last - first == 1)
        at = first[single]
        match = self.ids[at, 1] == ids[single, 1]
        found[single[match]] = self.counts[at[match]]
        for i in np.flatnonzero(last - first > 1):
            hit = np.flatnonzero(self.ids[first[i]:last[i], 1] == ids[i, 1])
            found[i] = self.counts[first[i] + hit[0]] if len(hit) else 0
        return found

    def merged(self, other: "_Counts", combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> "_Counts":
        """Both multisets in one, the counts of an id in both combined by `combine`."""
        if not len(other.ids):
            return self
        if not len(self.ids):
            return other
        # Two sorted runs: the stable sort merges them in linear time.
        return _Counts.of(np.concatenate([self.ids, other.ids]),
                          np.concatenate([self.counts, other.counts]), combine)


class SeenRows:
    """The rows a fact table holds, by id, for deciding which new rows land.

    `with seen.input() as admit:` covers one input: `admit(batch)` returns the rows of the batch
    the warehouse does not hold yet (counting the input's earlier batches). The input must have
    written what it admitted by the end of the block; if the block fails, nothing counts.

    Most batches go to partitions that hold nothing yet (a new day's first drop): there every
    row lands (an n-th copy lands where fewer than n are held), so no id is computed. Such a
    partition is read back from the warehouse, and hashed, if a later input of the run goes to
    it. Counts merge by maximum, so reading a partition again never counts a row twice.
    """

    def __init__(self, warehouse: Warehouse, table: TableSchema) -> None:
        self.warehouse, self.table = warehouse, table
        self._held = _Counts()
        self._pending: list[np.ndarray] = []  # ids to count into _held, each a multiset
        self._loaded: set[str] = set()  # partitions whose rows _held (with _pending) counts
        self._nonempty: set[str] = set()  # the loaded partitions that hold rows

    @contextlib.contextmanager
    def input(self) -> Iterator[Callable[[pa.Table], pa.Table]]:
        """Admit the batches of one input (see the class)."""
        mine: list[np.ndarray] = []  # ids of the input's rows in partitions that hold rows
        earlier = _Counts()  # of mine[:counted]
        counted = 0
        unhashed: set[str] = set()  # partitions that took rows without their ids
        hashed: set[str] = set()

        def admit(batch: pa.Table) -> pa.Table:
            nonlocal earlier, counted
            batch = self.table.conform(batch)
            dts = set(_dt_texts(batch))
            self._load(dts - self._loaded)
            if not dts & self._nonempty:
                unhashed.update(dts)
                return batch
            ids = row_ids(batch)
            earlier = earlier.merged(_count(mine[counted:]), np.add.reduceat)
            counted = len(mine)
            mine.append(ids)
            hashed.update(dts)
            return batch.filter(pa.array(_unheld(ids, earlier, self._counted())))

        yield admit
        if mine:
            self._pending.append(np.concatenate(mine))
        self._nonempty |= hashed
        self._loaded -= unhashed  # read back, with this input's rows, when next needed

    def _counted(self) -> _Counts:
        """What is held, with the pending ids counted in."""
        for ids in self._pending:
            self._held = self._held.merged(_count([ids]), np.maximum.reduceat)
        self._pending.clear()
        return self._held

    def _load(self, dts: set[str]) -> None:
        """Hold what partitions `dts` hold now."""
        if not dts:
            return
        stored = self.warehouse.read(self.table, filter_dt=dts.__contains__)
        self._loaded |= dts
        if stored.num_rows:
            self._pending.append(row_ids(stored))
            self._nonempty |= set(_dt_texts(stored))


def _dt_texts(rows: pa.Table) -> list[str]:
    return [dt.isoformat() for dt in pc.unique(rows.column(PARTITION)).to_pylist()]


def _count(parts: list[np.ndarray]) -> _Counts:
    ids = np.concatenate(parts) if parts else np.empty((0, 2), np.uint64)
    return _Counts.of(ids, np.ones(len(ids), np.int64), np.add.reduceat)


def _unheld(ids: np.ndarray, earlier: _Counts, held: _Counts) -> np.ndarray:
    """Which rows of a batch land: those whose place among the input's copies of the row (its
    `earlier` batches' first) is beyond how many copies are `held`."""
    order, starts = _sorted(ids)
    ordered = ids[order]  # sorted: the look-ups run fastest on sorted ids
    position = np.arange(len(ids))
    run_start = np.maximum.accumulate(np.where(starts, position, 0)) if len(ids) else position
    nth = earlier.get(ordered) + position - run_start + 1
    keep = np.empty(len(ids), bool)
    keep[order] = nth > held.get(ordered)
    return keep
