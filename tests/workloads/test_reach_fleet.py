"""The reach fleet (`FleetMode.REACH`): every workload at three shapes, popularity by family,
its shapes by fixed weights; deterministic by seed, its other draws the default fleet's."""

from __future__ import annotations

import dataclasses
import datetime
import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from hlo.environment import Environment
from workloads import zoo
from workloads.simulator import fleet
from workloads.simulator.catalog import REACH_SCALES, build_catalog

HERE = Environment("cpu", "cpu:test", 1, "jaxlib-test")
FAMILIES = len(zoo.all_workloads())  # the reach fleet's: every zoo workload
SHAPES = len(REACH_SCALES)
# Each graph's family in catalog order: a workload's shapes together (build_catalog's order).
FAMILY = np.repeat(np.arange(FAMILIES), SHAPES)
N_GRAPHS = len(FAMILY)


def _reach(jobs: int, seed: int, family: np.ndarray = FAMILY) -> fleet.Jobs:
    spec = fleet.FleetSpec(jobs=jobs, seed=seed, mode=fleet.FleetMode.REACH)
    return fleet.make_jobs(spec, len(family), family)


def _counts(jobs: fleet.Jobs, slot: int = 0) -> np.ndarray:
    """(families, shapes): how many jobs run each graph in `slot`."""
    graphs = jobs.graphs[:, slot]
    return np.bincount(graphs[graphs >= 0], minlength=N_GRAPHS).reshape(FAMILIES, SHAPES)


@pytest.mark.xla
def test_the_zoo_takes_every_reach_scale():
    """Every workload lowers at every reach scale, each scale its own program (the GNN's nodes
    and edges scaled, the others' batch)."""
    for workload in zoo.all_workloads():
        programs = set()
        for scale in REACH_SCALES:
            variant = zoo.variant(workload.name, scale)
            assert variant.family == workload.family and variant.size == workload.size
            assert variant.name == (workload.name if scale == 1 else f"{workload.name}-x{scale}")
            programs.add(variant.lower().as_text())
        assert len(programs) == len(REACH_SCALES), workload.name


def test_the_reach_fleet_runs_every_shape_of_every_family():
    jobs = _reach(200_000, seed=1)
    for slot in range(3):  # main, eval, serving: each drawn the same way
        assert (_counts(jobs, slot) > 0).all()


def test_popularity_is_by_family_and_chip_time_follows_it():
    spec = fleet.FleetSpec(jobs=200_000, seed=2, mode=fleet.FleetMode.REACH)
    jobs = fleet.make_jobs(spec, N_GRAPHS, FAMILY)
    counts = _counts(jobs)
    by_family = counts.sum(axis=1)
    # Families' job counts follow the Zipf popularity over families, not over graphs.
    np.testing.assert_allclose(np.sort(by_family)[::-1] / by_family.sum(),
                               fleet._zipf(FAMILIES, spec.zipf_exponent), atol=0.01)
    # A family's three shapes take its jobs together: the top family's least picked shape
    # beats the main shape of every family past the fifth.
    order = np.argsort(-by_family)
    assert counts[order[0]].min() > counts[order[5:]].max()
    # The chip-time of a family's shapes together follows the family ranking.
    rows = fleet.simulate_day(jobs, spec, 11, np.full(N_GRAPHS, 0.01), HERE)
    chip_seconds = np.bincount(rows.graph, jobs.chips[rows.job] * rows.seconds, N_GRAPHS)
    chip_by_family = chip_seconds.reshape(FAMILIES, SHAPES).sum(axis=1)
    assert np.argmax(chip_by_family) == order[0]
    assert spearmanr(by_family, chip_by_family).statistic > 0.9
    np.testing.assert_allclose(np.sort(chip_by_family)[::-1][:4] / chip_by_family.sum(),
                               fleet._zipf(FAMILIES, spec.zipf_exponent)[:4], atol=0.03)


def test_a_familys_shapes_are_picked_by_the_weights_in_an_order_of_its_own():
    jobs = _reach(400_000, seed=3)
    counts = _counts(jobs)
    top = np.argsort(-counts.sum(axis=1))[:6]  # families with jobs enough to weigh their shapes
    shares = np.sort(counts[top], axis=1)[:, ::-1] / counts[top].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(shares, np.tile(fleet.SHAPE_WEIGHTS, (6, 1)), atol=0.02)
    # The main shape is not always the same scale: each family ranks its shapes on its own.
    main = np.argmax(counts, axis=1)
    assert len(set(main.tolist())) == SHAPES
    # The eval and serving programs pick their shapes the same way as the main program.
    for slot in (1, 2):
        other = _counts(jobs, slot)
        np.testing.assert_array_equal(np.argmax(other[top], axis=1), main[top])


def test_the_reach_fleet_is_deterministic_by_seed_and_keeps_the_default_fleets_other_draws():
    a, b = _reach(50_000, seed=4), _reach(50_000, seed=4)
    for field in dataclasses.fields(fleet.Jobs):
        np.testing.assert_array_equal(getattr(a, field.name), getattr(b, field.name))
    assert not np.array_equal(a.graphs, _reach(50_000, seed=5).graphs)
    # The same jobs as the default fleet of the same seed and catalog size, but for their programs.
    default = fleet.make_jobs(fleet.FleetSpec(jobs=50_000, seed=4), N_GRAPHS)
    for field in dataclasses.fields(fleet.Jobs):
        if field.name != "graphs":
            np.testing.assert_array_equal(getattr(a, field.name), getattr(default, field.name))
    np.testing.assert_array_equal(a.graphs >= 0, default.graphs >= 0)  # which slots run a program
    assert not np.array_equal(a.graphs, default.graphs)


def test_families_are_any_grouping_of_the_catalog_and_may_have_fewer_shapes():
    # Two families interleaved in the catalog, the second with two shapes only.
    family = np.array(["b", "a", "b", "a", "a"])
    jobs = _reach(100_000, seed=6, family=family)
    graphs = jobs.graphs[:, 0]
    assert set(graphs.tolist()) == {0, 1, 2, 3, 4}
    b = np.bincount(graphs, minlength=5)[[0, 2]]
    weights = np.array(fleet.SHAPE_WEIGHTS[:2]) / sum(fleet.SHAPE_WEIGHTS[:2])
    np.testing.assert_allclose(np.sort(b)[::-1] / b.sum(), weights, atol=0.01)
    with pytest.raises(ValueError, match="family"):
        fleet.make_jobs(fleet.FleetSpec(jobs=10, mode=fleet.FleetMode.REACH), 5)
    with pytest.raises(ValueError, match="shapes"):
        _reach(10, seed=0, family=np.zeros(4, dtype=int))


@pytest.mark.slow
@pytest.mark.xla
def test_fdo_simulate_runs_the_reach_fleet_on_a_real_catalog(tmp_path, capsys):
    from pipelines.cli import main

    home = tmp_path / "home"
    names = ["mlp-s", "gnn-s"]
    code = main(["--home", str(home), "simulate", "--fleet", "reach", "--workloads", ",".join(names),
                 "--days", "1", "--jobs", "3000", "--start", "2026-03-01", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["mode"], report["graphs"], report["families"]) == ("reach", 6, 2)
    assert report["graph_runs"] > 0 and not report["quarantined"]
    assert report["top_family_shares"]["top1"] > report["top_graph_shares"]["top1"]
    catalog = build_catalog(home / "simulator" / "catalog", names, REACH_SCALES)
    assert [(g.workload, g.scale) for g in catalog] == [(n, s) for n in names for s in REACH_SCALES]
    assert len({g.fingerprint for g in catalog}) == 6  # each shape its own graph
    # Its drops are named apart from a default fleet's of the same seed and size.
    [drop] = (home / "fleet" / "profiles" / str(datetime.date(2026, 3, 1))).glob("*.graph_runs.parquet")
    assert drop.name.startswith("fleet-reach-s0-j3000-")
