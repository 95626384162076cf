"""The tasks `pipelines.stages.tune_candidates` runs (`tune_tasks`): each candidate placed and
routed as its kind's registry entry says (`tuner.kinds.KindSpec.whole_graph`), with its
allotment's budget where it has one. No task runs here."""

from __future__ import annotations

import pytest

from execution.sharded import Placement
from hlo.environment import Partitioning
from pipelines.stages import tune_tasks
from tuner.allot import Allotment, Basis, Worth
from tuner.candidates import Candidate, Sharded
from tuner.target import Subject
from tuner.tune import TuneSettings
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind

FOUR = Partitioning(replicas=1, partitions=4, spmd=True)
SHARDED_ENV = "e" * 32
SHARDED = {SHARDED_ENV: Sharded(FOUR, "cpu/test-cpu/jaxlib-new")}
# The records only carry the module here: no task compiles it.
GRAPH = Candidate("#1 g", Subject(None, "g" * 32, "g"), SHARDED_ENV)
OP = Candidate("#1 op", Subject(None, "o" * 32, "op", "dot"), SHARDED_ENV)


@pytest.mark.slow  # the tasks' placement asks jaxlib for this machine's environment
def test_a_whole_graph_is_placed_as_its_environment_partitions_it_and_an_ops_kernel_is_not(tmp_path):
    for kind in (Kind.GRAPH, Kind.KERNELS):
        (whole,) = tune_tasks(kind, tmp_path, [GRAPH], TuneSettings(), sharded=SHARDED)
        assert whole.placement == Placement(MeasureMode.WHOLE, FOUR)  # 4 host devices fit here
        assert whole.machine == SHARDED[SHARDED_ENV].machine  # any node of the machine kind
        (per_device,) = tune_tasks(kind, tmp_path, [GRAPH], TuneSettings(),
                                   measure_mode=MeasureMode.PER_DEVICE, sharded=SHARDED)
        assert per_device.placement == Placement(MeasureMode.PER_DEVICE, FOUR)
    # An op's kernel, cut out of a graph of the sharded environment, runs on one device of it.
    for asked in (None, MeasureMode.PER_DEVICE):
        (op,) = tune_tasks(Kind.OP, tmp_path, [OP], TuneSettings(), measure_mode=asked, sharded=SHARDED)
        assert (op.placement, op.machine, op.env_key, op.op_class) == (Placement(), None, SHARDED_ENV, "dot")


@pytest.mark.slow  # as above
def test_each_task_gets_its_allotments_evaluations_and_carries_it(tmp_path):
    worth = Worth("g" * 32, SHARDED_ENV, 3600.0, 1.1, Basis.PRIOR, 0)
    allotment = Allotment(worth, 0.75, 18, 24)
    tasks = tune_tasks(Kind.GRAPH, tmp_path, [GRAPH, GRAPH], TuneSettings(budget_evals=12),
                       allotments=[allotment, Allotment(worth, 0.25, 8, 24)])
    assert [t.settings.budget_evals for t in tasks] == [18, 8]
    assert tasks[0].settings.allotment == allotment and tasks[0].label == "#1 g"
    assert [t.settings.budget_evals for t in tune_tasks(Kind.GRAPH, tmp_path, [GRAPH],
                                                        TuneSettings(budget_evals=12))] == [12]
    with pytest.raises(ValueError):  # one allotment per candidate
        tune_tasks(Kind.GRAPH, tmp_path, [GRAPH], TuneSettings(), allotments=[allotment, allotment])
