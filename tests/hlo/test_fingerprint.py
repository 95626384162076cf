"""Fingerprint properties: invariant under presentation, sensitive to structure."""

from __future__ import annotations

import glob
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hlo.bulk_hasher import Unsupported, bulk_fingerprint
from hlo.fingerprint import fingerprint_module, graph_fingerprint
from hlo.module import HloLoadError, HloModule, from_lowered, from_proto_bytes, from_stablehlo, from_text, load_file
from hlo.reference_hasher import reference_fingerprint
from tests.support.hlo_gen import mutations, presentations, random_graph, random_module_text, to_text
from workloads import zoo


def fp(text: str) -> str:
    return graph_fingerprint(from_text(text))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 30))
def test_invariant_under_names_order_and_metadata(seed: int, size: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng, size)
    reference = fp(to_text(graph))
    assert [fp(text) for text in presentations(graph, rng)] == [reference] * 2


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(2, 30))
def test_sensitive_to_every_structural_change(seed: int, size: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng, size)
    for what, base, mutated in mutations(graph, rng):
        assert fp(to_text(base)) != fp(to_text(mutated)), what


# Up to past 4096 instructions, where the bulk hasher counts ids and sorts digests with numpy.
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(20, 5000))
@example(seed=0, size=5000)
def test_bulk_and_reference_hashers_agree_on_large_random_modules(seed: int, size: int) -> None:
    module = from_text(random_module_text(random.Random(seed), size))
    reference = reference_fingerprint(module, with_ops=True)
    assert reference.ops  # fusions, reductions, custom calls: op fingerprints compared too
    assert bulk_fingerprint(module, with_ops=True) == reference
    assert fingerprint_module(module) == reference


def test_bulk_hasher_hands_operands_out_of_order_to_the_reference() -> None:
    module = from_text(random_module_text(random.Random(0), 300))
    view = module.view()
    entry = next(c for c in view.computations if c.id == view.entry_computation_id)
    reordered = list(reversed(entry.instructions))
    del entry.instructions[:]
    entry.instructions.extend(reordered)
    reversed_module = HloModule(view.SerializeToString(), module.name, "reversed")
    with pytest.raises(Unsupported):
        bulk_fingerprint(reversed_module)
    assert fingerprint_module(reversed_module) == reference_fingerprint(reversed_module)
    assert graph_fingerprint(reversed_module) == graph_fingerprint(module)


def test_reordered_computations_and_renamed_callees() -> None:
    body = """
{a} {{
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}}
{b} {{
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] maximum(p, q)
}}
"""
    entry = """
ENTRY main {{
  x = f32[8]{{0}} parameter(0)
  z = f32[] constant(0)
  r1 = f32[] reduce(x, z), dimensions={{0}}, to_apply={a}
  r2 = f32[] reduce(x, z), dimensions={{0}}, to_apply={b}
  ROOT t = (f32[], f32[]) tuple(r1, r2)
}}
"""
    one = "HloModule m\n" + body.format(a="sum", b="max") + entry.format(a="sum", b="max")
    two = "HloModule other\n" + body.format(a="mx", b="sm").replace("add", "TMP").replace(
        "maximum", "add").replace("TMP", "maximum") + entry.format(a="sm", b="mx")
    swapped = "HloModule m\n" + body.format(a="sum", b="max") + entry.format(a="max", b="sum")
    assert fp(one) == fp(two)
    assert fp(one) != fp(swapped)


def test_unused_parameters_in_any_order() -> None:
    text = "HloModule m\nENTRY e {{\n{}\n  ROOT r = f32[2]{{0}} add(a, a)\n}}\n"
    params = ["  a = f32[2]{0} parameter(0)", "  b = f32[3]{0} parameter(1)",
              "  c = s32[] parameter(2)"]
    assert fp(text.format("\n".join(params))) == fp(text.format("\n".join(reversed(params))))


@pytest.mark.parametrize("name", ["transformer-s", "rnn-s", "recommender-s", "attention_kv-s"])
@pytest.mark.xla
def test_dump_and_jax_agree_on_zoo_modules(name: str, tmp_path) -> None:
    lowered = zoo.get(name).lower()
    lowered.compile(compiler_options={"xla_dump_to": str(tmp_path)})
    dumped = load_file(glob.glob(str(tmp_path / "*before_optimizations.txt"))[0])
    from_jax = from_lowered(lowered)
    assert graph_fingerprint(dumped) == graph_fingerprint(from_jax)
    assert graph_fingerprint(from_stablehlo(lowered.compiler_ir("stablehlo"))) == graph_fingerprint(from_jax)
    assert graph_fingerprint(from_text(lowered.as_text(dialect="hlo"))) == graph_fingerprint(from_jax)


def test_zoo_fingerprints_are_distinct() -> None:
    fingerprints = {graph_fingerprint(from_lowered(w.lower())) for w in zoo.all_workloads()}
    assert len(fingerprints) == len(zoo.all_workloads())


@pytest.mark.xla
def test_small_constant_values_count_large_ones_hash_by_shape() -> None:
    def module(values: np.ndarray):
        return from_lowered(jax.jit(lambda x: x * values).lower(jnp.ones(values.shape[0])))

    small = np.arange(10, dtype=np.float32)
    assert graph_fingerprint(module(small)) != graph_fingerprint(module(small + 1))
    large = np.arange(11, dtype=np.float32)
    assert graph_fingerprint(module(large)) == graph_fingerprint(module(large + 1))


@pytest.mark.xla
def test_proto_forms_and_ops_of_optimized_module(tmp_path) -> None:
    lowered = zoo.get("cnn-s").lower()
    compiled = lowered.compile()
    optimized = compiled.runtime_executable().hlo_modules()[0]
    module = from_proto_bytes(optimized.as_serialized_hlo_module_proto())
    path = tmp_path / "cnn.pb"
    path.write_bytes(module.proto)
    assert graph_fingerprint(load_file(path)) == graph_fingerprint(module)
    result = fingerprint_module(module)
    assert result.ops and all(len(op.fingerprint) == 32 for op in result.ops)
    kinds = {op.kind for op in result.ops}
    assert any(kind.startswith("fusion:") for kind in kinds)
    assert graph_fingerprint(from_text(optimized.to_string())) == result.fingerprint


@pytest.mark.xla
def test_same_kernel_in_two_graphs_has_one_op_fingerprint() -> None:
    def optimized(fn, *args):
        executable = jax.jit(fn).lower(*args).compile().runtime_executable()
        return fingerprint_module(from_proto_bytes(executable.hlo_modules()[0].as_serialized_hlo_module_proto()))

    x = jnp.ones((64, 64))
    a = optimized(lambda x: jnp.tanh(x) * 2.0, x)
    b = optimized(lambda x, y: (jnp.tanh(x) * 2.0, y + 1), x, jnp.ones(3))
    assert {op.fingerprint for op in a.ops} & {op.fingerprint for op in b.ops}
    assert a.fingerprint != b.fingerprint


@pytest.mark.parametrize("content,problem", [
    (b"HloModule broken\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0\n", "not a parsable HLO module"),
    (b"\x00\x01garbage", "neither HLO text nor a serialized"),
    (b"", "empty file"),
])
def test_bad_inputs_are_named_errors(tmp_path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.hlo"
    path.write_bytes(content)
    with pytest.raises(HloLoadError, match=problem) as info:
        load_file(path)
    assert str(path) in str(info.value)


def test_size_limit(tmp_path) -> None:
    path = tmp_path / "big.hlo"
    path.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n")
    with pytest.raises(HloLoadError, match="input limit"):
        load_file(path, max_bytes=10)
