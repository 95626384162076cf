"""The same rows sent again, in any drop and any order, are counted once: by the input's digest,
by each row's content, and (property-tested against a reference) per copy of a row."""

from __future__ import annotations

import datetime
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingest.rowids import SeenRows
from ingest.tables import GRAPH_RUNS
from storage.warehouse import Warehouse
from tests.support.drop_rows import drop_row, ingest_report, write_jsonl
from tests.support.serving import fdo


@pytest.mark.subprocess
def test_rows_sent_again_in_any_drop_are_counted_once(tmp_path):
    rng = np.random.default_rng(3)
    rows = [drop_row(int(i), seconds=float(s)) for i, s in zip(rng.integers(1, 400, 1000), rng.uniform(0, 3600, 1000))]
    rows[1] = dict(rows[0])  # one job reporting the same graph twice: both are rows of the drop
    first = tmp_path / "first"
    first.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), first / "monday.graph_runs.parquet")
    home = tmp_path / "home"
    report = ingest_report(fdo(home, "ingest", "profiles", str(first), "--json"))
    assert (report["graph_runs"], report["duplicates"]) == (1000, 0)
    totals = _chip_seconds_by_graph(home)

    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(first / "monday.graph_runs.parquet", again / "monday-resent.graph_runs.parquet")
    new = [drop_row(1000 + i) for i in range(10)]
    shuffled = rows + new
    random.Random(0).shuffle(shuffled)
    write_jsonl(again / "monday-and-more.graph_runs.jsonl", shuffled)
    report = ingest_report(fdo(home, "ingest", "profiles", str(again), "--json"))
    assert (report["inputs"], report["skipped"]) == (2, 1)  # the same bytes: known by its digest
    assert (report["graph_runs"], report["duplicates"]) == (10, 1000)  # the same rows: by content
    assert Warehouse(home).read(GRAPH_RUNS).num_rows == 1010
    assert ingest_report(fdo(home, "ingest", "profiles", str(first), str(again), "--json"))["graph_runs"] == 0
    with_new = _chip_seconds_by_graph(home)
    for row in new:
        totals[row["fingerprint"]] = totals.get(row["fingerprint"], 0.0) + row["chips"] * row["seconds"]
    assert with_new == pytest.approx(totals, rel=1e-12)


# Six graph_runs rows over two days, each told by its chip_seconds.
_UNIVERSE = [dict(drop_row(i % 3, dt=datetime.date(2026, 11, 10 + i % 2)), chip_seconds=float(i), opted_out=False,
                  compiler_version=None, config_key=None, config_version=None, expected_speedup=None)
             for i in range(6)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.lists(st.integers(0, len(_UNIVERSE) - 1), max_size=6), max_size=3),
                          st.booleans(), st.booleans()), min_size=1, max_size=5))
# A row taken with a held partition's rows (so its id is known) is held for the next input too.
@example(inputs=[([[0]], False, False), ([[0, 1]], False, False), ([[1]], False, False)])
def test_an_input_lands_only_the_copies_of_a_row_the_warehouse_lacks(tmp_path, inputs):
    """Against a reference: an input of batches of rows, some failing half-way, some read by a
    fresh run (from what the warehouse holds), lands each row's n-th copy only where fewer than
    n are held."""
    home = Path(tempfile.mkdtemp(dir=tmp_path))
    warehouse = Warehouse(home)
    seen = SeenRows(warehouse, GRAPH_RUNS)
    held: Counter = Counter()
    for n, (batches, fails, fresh_run) in enumerate(inputs):
        if fresh_run:
            seen = SeenRows(warehouse, GRAPH_RUNS)
        landed, expected, copies = [], [], Counter()
        try:
            with seen.input() as admit:
                for batch in batches:
                    for i in batch:
                        copies[i] += 1
                        if copies[i] > held[i]:
                            expected.append(i)
                    landed.append(admit(_universe_rows(batch)))
                if fails:
                    raise OSError("the input broke off")
                warehouse.append(GRAPH_RUNS, pa.concat_tables([_universe_rows([]), *landed]), f"input-{n}")
        except OSError:
            continue
        assert sorted(pa.concat_tables([_universe_rows([]), *landed]).column("chip_seconds").to_pylist()) == \
            sorted(_UNIVERSE[i]["chip_seconds"] for i in expected)
        held = held | copies


def _universe_rows(indices: list[int]) -> pa.Table:
    rows = [{k: v for k, v in _UNIVERSE[i].items() if k != "seconds"} for i in indices]
    return pa.Table.from_pylist(rows, GRAPH_RUNS.schema)


def _chip_seconds_by_graph(home: Path) -> dict[str, float]:
    runs = Warehouse(home).read(GRAPH_RUNS).group_by("fingerprint").aggregate([("chip_seconds", "sum")])
    return dict(zip(runs.column("fingerprint").to_pylist(), runs.column("chip_seconds_sum").to_pylist()))
