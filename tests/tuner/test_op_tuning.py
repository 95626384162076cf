"""Op-level tuning: kernels cut out of real zoo graphs, an exhaustive op search, and the fold of
op winners into a graph-level config measured on the whole graph."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pytest

from delivery.deliver import accepted_as_entries
from execution.compile import compile_module, compiler_defaults
from execution.flags import is_default
from execution.inputs import make_inputs, parameter_specs
from execution.measure import MeasureSettings
from hlo.fingerprint import fingerprint_module, graph_fingerprint
from hlo.module import HloModule, from_lowered, load_file
from ingest.profiles import ingest_profiles
from ingest.symbols import ingest_symbols
from ingest.tables import GRAPHS, OP_RUNS, OPS
from ranking.tables import CANDIDATES
from storage.warehouse import Warehouse
from tuner.candidates import tunable_op_candidates
from tuner.fold import STRATEGY, OpVote, fold_config, fold_graph, fold_variants, graph_votes
from tuner.op_cut import cut_op, cut_ops
from tuner.space import accepted_flags, op_space
from tuner.strategies import ExhaustiveStrategy
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.task import tune
from tuner.tune import TuneSettings
from vocabulary.tuning import Kind
from workloads import zoo
from workloads.zoo.dump import dump_workload

QUICK = TuneSettings(budget_evals=200, strategy="exhaustive",
                     search=MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=60, max_seconds=1.0),
                     compare=MeasureSettings(min_pairs=10, batch_pairs=10, max_seconds=1.0,
                                             stop_when_no_gain=False),
                     verify=MeasureSettings(min_pairs=20, batch_pairs=20, max_pairs=200, max_seconds=3.0),
                     verify_workers=1)
FOLD = TuneSettings(search=QUICK.search, verify=QUICK.verify, verify_workers=1)


def _optimized(name: str) -> HloModule:
    """The optimized module XLA builds for a zoo workload."""
    compiled = compile_module(from_lowered(zoo.get(name).lower()).proto, {})
    return HloModule(compiled.optimized_proto, name, f"zoo:{name}:optimized")


@pytest.mark.parametrize("name", ["cnn-s", "rnn-s"])  # rnn-s: kernels inside a while body
@pytest.mark.xla
def test_every_kernel_of_a_zoo_module_cuts_compiles_and_runs(name):
    from jax._src.lib import hlo

    optimized = _optimized(name)
    ops = fingerprint_module(optimized).ops
    cuts = cut_ops(optimized)
    assert [c.name for c in cuts] == [op.name for op in ops]
    runnable_fingerprints: dict[str, set[str]] = {}
    for op, cut in zip(ops, cuts):
        # The kernel form re-fingerprints as exactly the op ingestion found.
        assert [o.fingerprint for o in fingerprint_module(cut.kernel).ops] == [op.fingerprint]
        assert cut.fingerprint == op.fingerprint and cut.kind == op.kind
        result = hlo.XlaComputation(cut.kernel.proto).program_shape().result_shape()
        expected = [tuple(s.dimensions()) for s in (result.tuple_shapes() if result.is_tuple() else [result])]
        executable = compile_module(cut.module.proto, {}).executable
        arguments = [jax.device_put(a) for a in make_inputs(parameter_specs(cut.module), 0)]
        outputs = executable.execute(arguments)
        assert [tuple(o.shape) for o in outputs] == expected, cut.label
        assert all(np.isfinite(np.asarray(o, dtype=np.float64)).all() for o in outputs
                   if np.issubdtype(o.dtype, np.floating)), cut.label
        runnable_fingerprints.setdefault(op.fingerprint, set()).add(graph_fingerprint(cut.module))
    # The runnable cut is a function of the op: one runnable module per op fingerprint.
    assert all(len(found) == 1 for found in runnable_fingerprints.values())
    assert {c.op_class for c in cuts} >= {"dot", "reduce", "eltwise"}
    one = cuts[len(cuts) // 2]
    assert cut_op(optimized, one.name) == one


@pytest.mark.xla
def test_op_space_is_small_allowlisted_and_relative_to_the_default():
    defaults = compiler_defaults()
    accepted = accepted_flags("cpu")
    for op_class in ("convolution", "dot", "reduce", "eltwise", "other"):
        space = op_space(op_class, accepted, defaults)
        assert {p.name for p in space.params if not p.name.startswith("placement:")} <= accepted
        assert 1 < space.size() <= 200  # searched whole: the default op budget
        for param in space.params:
            assert not any(is_default(param.name, v, defaults) for v in param.values)
    # A convolution's routing is the placement of INDIVIDUAL_CONVOLUTION alone, to any backend
    # but its default one.
    [placement] = [p for p in op_space("convolution", accepted, defaults).params
                   if p.name.startswith("placement:")]
    assert placement.name == "placement:INDIVIDUAL_CONVOLUTION"
    assert "xla" in placement.values and "ynn" not in placement.values
    # A backend extra option, set per executable like the rest; only dots have it.
    assert "xla_llvm_dot_tiling_factor" in {p.name for p in op_space("dot", accepted, defaults).params}
    assert "xla_llvm_dot_tiling_factor" not in {p.name for p in op_space("reduce", accepted, defaults).params}


CONV, DOT = "placement:INDIVIDUAL_CONVOLUTION", "placement:INDIVIDUAL_DOT"


def test_fold_config_elects_by_chip_time():
    conv_to_xla = OpVote("a", "convolution", {CONV: "xla"}, 5.0, "t1")
    conv_default = OpVote("b", "convolution", {}, 3.0, "t2")
    dot_to_xnn = OpVote("c", "dot", {DOT: "xnn", "xla_cpu_prefer_vector_width": 512}, 1.0, "t3")
    eltwise = OpVote("d", "eltwise", {}, 10.0, "t4")
    folded = fold_config([conv_to_xla, conv_default, dot_to_xnn, eltwise])
    # Conv placement: 5 chip-seconds against 3; dots: only one op voted; vector width: 18 against 1.
    assert folded == {CONV: "xla", DOT: "xnn"}
    heavier_default = OpVote("b", "convolution", {}, 6.0, "t2")
    assert fold_config([conv_to_xla, heavier_default]) == {}
    assert fold_config([]) == {}
    # Without profiles (no chip-time known) the verified op gain decides.
    unprofiled = [OpVote(v.fingerprint, v.op_class, v.config, 0.0, v.task_id) for v in (conv_to_xla, conv_default)]
    assert fold_config(unprofiled) == {CONV: "xla"}


def test_a_fold_measures_every_accepted_change_whatever_the_vote():
    conv_to_xla = OpVote("a", "convolution", {CONV: "xla"}, 5.0, "t1")
    dot_to_xnn = OpVote("c", "dot", {DOT: "xnn", "xla_cpu_prefer_vector_width": 512}, 1.0, "t3")
    heavier_default = OpVote("b", "convolution", {}, 6.0, "t2")
    # The vote elects the default for convolutions, yet the conv change is measured: together
    # with the others, alone (most chip-time first), then the elected config.
    assert fold_variants([conv_to_xla, heavier_default, dot_to_xnn]) == [
        {CONV: "xla", DOT: "xnn", "xla_cpu_prefer_vector_width": 512},
        {CONV: "xla"}, {DOT: "xnn"}, {"xla_cpu_prefer_vector_width": 512}]
    # The elected config ({DOT: "xnn"}) was among them already: measured once.
    # One accepted change: it alone, once.
    assert fold_variants([conv_to_xla, heavier_default]) == [{CONV: "xla"}]
    assert fold_variants([heavier_default]) == []


def _profile(home: Path, dump: Path) -> None:
    """Run the dumped program under JAX's profiler and ingest the trace (real `op_runs`)."""
    module = load_file(next(dump.glob("*before_optimizations.txt")))
    executable = compile_module(module.proto, {}).executable
    arguments = [jax.device_put(a) for a in make_inputs(parameter_specs(module), 0)]
    jax.block_until_ready(executable.execute(arguments))
    with jax.profiler.trace(str(home / "trace")):
        for _ in range(3):
            jax.block_until_ready(executable.execute(arguments))
    assert ingest_profiles([home / "trace"], home).op_runs > 0


@pytest.fixture(scope="module")
def tuned_home(tmp_path_factory):
    """A real CNN ingested and profiled; its costliest convolution that XLA routed to a library
    (where routing knobs act) ranked first, then tuned."""
    home = tmp_path_factory.mktemp("op-home")
    dump = dump_workload(zoo.variant("cnn-m", 4), home / "dumps")
    ingest_symbols([dump], home)
    _profile(home, dump)
    warehouse = Warehouse(home)
    graph = warehouse.read(GRAPHS).to_pylist()[0]
    seconds = {r["op_fingerprint"]: r["chip_seconds"] for r in warehouse.read(OP_RUNS).to_pylist()}
    convolutions = [o["fingerprint"] for o in warehouse.read(OPS).to_pylist()
                    if o["kind"] == "fusion:ynn_fusion" and o["fingerprint"] in seconds]
    fingerprint = max(convolutions, key=seconds.__getitem__)
    candidate = {"dt": datetime.date.today(), "kind": "op", "fingerprint": fingerprint,
                 "env_key": graph["env_key"], "graph_fingerprint": graph["fingerprint"],
                 "chip_seconds": seconds[fingerprint], "share": 1.0, "rank": 1}
    warehouse.append(CANDIDATES, pa.Table.from_pylist([candidate], CANDIDATES.schema), "test")
    found = tunable_op_candidates(home, 1)
    assert not found.skipped and len(found.tunable) == 1
    op, env_key = found.tunable[0].subject, found.tunable[0].env_key
    assert op.fingerprint == fingerprint and env_key == graph["env_key"]
    return home, graph, op, tune(Kind.OP, op, home, QUICK, env_key=env_key)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_op_search_on_a_real_convolution_covers_its_space(tuned_home):
    home, graph, cut, result = tuned_home
    assert cut.op_class == "convolution"
    space = op_space("convolution", accepted_flags("cpu"), compiler_defaults())
    assert result.kind == "op" and result.fingerprint == cut.fingerprint
    # The search covers the space; a race of close finalists and pruning may follow it.
    searched = [t for t in result.trials if t.phase == "search"]
    assert result.strategy == "exhaustive" and len(searched) == space.size() - 1
    every = {json.dumps(c, sort_keys=True) for c in ExhaustiveStrategy(space, 200).configs()}
    assert {json.dumps(t.config, sort_keys=True) for t in searched} == every
    assert result.measured >= 1 and all(t.outcome != "failed" for t in result.trials)
    # At least the default: a change is kept only if its fresh interval clears the noise band.
    assert result.accepted == (result.speedup is not None and result.speedup.low > 1.01
                               and bool(result.numerics_ok))
    if not result.accepted:
        assert result.status == "no significant gain"
    trials = Warehouse(home).read(TRIALS).to_pylist()
    assert {(t["kind"], t["fingerprint"]) for t in trials} == {("op", cut.fingerprint)}
    # Every trial against the default (the race's and pruning's comparisons stay in the task).
    assert len(trials) == sum(t.baseline is None for t in result.trials)
    rows = Warehouse(home).read(TUNING_RESULTS).to_pylist()
    assert [(r["kind"], r["fingerprint"], r["accepted"]) for r in rows] == [
        ("op", cut.fingerprint, result.accepted)]
    # Tuning it again is the finished task: nothing is searched or landed twice.
    assert tune(Kind.OP, cut, home, QUICK, env_key=graph["env_key"]).task_id == result.task_id
    assert Warehouse(home).read(TRIALS).num_rows == len(trials)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_fold_measures_the_op_winner_on_the_whole_graph(tuned_home):
    home, graph, cut, op_result = tuned_home
    [vote] = graph_votes(home, graph["fingerprint"], graph["env_key"])
    assert (vote.fingerprint, vote.op_class) == (cut.fingerprint, "convolution")
    assert vote.weight > 0  # its chip-time in this graph, from the ingested profile
    folded = fold_graph(home, graph["fingerprint"], graph["env_key"], FOLD)
    if not op_result.accepted:  # nothing won, nothing to fold (rare: this op runs ~2x off YNNPACK)
        assert folded is None
        return
    assert folded.kind == "graph" and folded.strategy == STRATEGY
    assert folded.fingerprint == graph["fingerprint"] and folded.sources == [op_result.task_id]
    # Every accepted change, together and alone, evaluated on the whole graph (a change that
    # does not alter this graph's machine code is the default's program: identical, not timed).
    variants = fold_variants([vote])
    assert [t.config for t in folded.trials] == variants
    assert folded.phases[0].configs == len(variants) >= folded.phases[0].evaluations
    assert all(t.outcome in ("measured", "duplicate", "identical") and t.speedup.estimate
               for t in folded.trials)
    assert folded.trials[0].outcome != "identical"  # the op's win changes the graph's code
    assert folded.config in variants + [{}]
    assert folded.accepted == (folded.speedup is not None and folded.speedup.low > 1.01
                               and bool(folded.numerics_ok))
    graph_rows = [r for r in Warehouse(home).read(TUNING_RESULTS).to_pylist() if r["kind"] == "graph"]
    assert [(r["strategy"], r["fingerprint"], r["accepted"]) for r in graph_rows] == [
        (STRATEGY, graph["fingerprint"], folded.accepted)]
    # Delivery publishes graph results only: the fold if accepted, never the op's own row.
    entries = accepted_as_entries(Warehouse(home).read(TUNING_RESULTS)).to_pylist()
    assert [e["fingerprint"] for e in entries] == ([graph["fingerprint"]] if folded.accepted else [])
    # Folding again is the same task and lands nothing new.
    again = fold_graph(home, graph["fingerprint"], graph["env_key"], FOLD)
    assert again.task_id == folded.task_id
    assert Warehouse(home).read(TUNING_RESULTS).num_rows == 2


@pytest.mark.subprocess
def test_cli_tune_op_takes_ops_from_the_ranking_only(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(tmp_path),
                             "tune", "--kind", "op", "some.hlo"], capture_output=True, text=True)
    assert result.returncode == 2 and "fdo rank" in result.stderr
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(tmp_path),
                             "tune", "--kind", "op"], capture_output=True, text=True)
    assert result.returncode == 1 and "no ranked op candidates" in result.stderr
