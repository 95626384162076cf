"""Family fingerprints: one family for a program at every shape, another for another program;
presentation never changes a family, structure does; ingestion lands it, and graphs that
landed before the column get theirs from their blob."""

from __future__ import annotations

import datetime
import glob
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo.bulk_hasher import bulk_fingerprint
from hlo.environment import Environment
from hlo.family import FamilyBulkHasher, FamilyHasher, abstracted_module, family_fingerprint
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule, from_lowered, from_text, load_file
from hlo.proto import ModuleProto, ShapeProto
from hlo.reference_hasher import fingerprint_with, reference_fingerprint
from ingest.families import graph_families
from ingest.symbols import ingest_symbols
from ingest.tables import GRAPHS
from storage.blobs import BlobStore
from storage.warehouse import TableSchema, Warehouse
from tests.support.hlo_gen import mutations, presentations, random_graph, random_module_text, to_text
from workloads import zoo
from workloads.zoo.dump import dump_workload

# two_tower-s: at scale 1 its batch (128) equals a layer's width, and JAX shares one broadcast
# constant between the two, which other scales keep apart.
WORKLOADS = ("mlp-s", "cnn-s", "transformer-s", "nbody-s", "gnn-s", "two_tower-s")
SCALES = (1, 2, 4)
ENVIRONMENT = Environment("cpu", "cpu:test", 1, "jaxlib-test")


def family(text: str) -> str:
    return family_fingerprint(from_text(text))


@pytest.fixture(scope="module")
def zoo_modules() -> dict[str, list[HloModule]]:
    """Each workload of WORKLOADS at each of SCALES, as JAX lowers it."""
    return {name: [from_lowered(zoo.variant(name, scale).lower()) for scale in SCALES]
            for name in WORKLOADS}


@pytest.mark.xla
def test_every_scale_of_a_workload_has_one_family_and_workloads_have_their_own(zoo_modules) -> None:
    families = {}
    for name, modules in zoo_modules.items():
        assert len({graph_fingerprint(m) for m in modules}) == len(SCALES), name
        (families[name],) = {family_fingerprint(m) for m in modules}
    assert len(set(families.values())) == len(WORKLOADS)
    # A family is not a graph fingerprint, not even of the abstracted module.
    module = zoo_modules["mlp-s"][0]
    assert families["mlp-s"] not in {graph_fingerprint(module), graph_fingerprint(abstracted_module(module))}


# xla.HloInstructionProto's fields a family keeps: size-free attributes and the identities.
ALLOWED = {1, 2, 3, 9, 11, 13, 14, 16, 18, 19, 23, 24, 25, 28, 30, 31, 33, 35, 36, 37, 38, 48, 51, 60, 63,
           67, 69, 70, 72, 77, 85, 89, 91}


def _field_numbers(message) -> set[int]:
    return {d.number for d, _ in message.ListFields()} | {f.field_number for f in UnknownFieldSet(message)}


@pytest.mark.xla
def test_the_abstracted_module_holds_no_size(zoo_modules) -> None:
    module = zoo_modules["cnn-s"][0]
    (convolution, *_) = [i for c in module.view().computations for i in c.instructions if i.opcode == "convolution"]
    assert {15, 50} <= _field_numbers(convolution)  # window, feature group count
    view = ModuleProto.FromString(abstracted_module(module).proto)
    assert _field_numbers(view) == {1, 2, 3, 6}  # name, entry name, computations, entry id
    assert all(_field_numbers(c) <= {1, 2, 5, 6, 7} for c in view.computations)  # no program shape
    instructions = [i for c in view.computations for i in c.instructions]
    assert {i.opcode for i in instructions} >= {"convolution", "constant", "dot", "reduce"}
    assert all(_field_numbers(i) <= ALLOWED for i in instructions)

    def sizes(shape) -> list[int]:
        assert _field_numbers(shape) <= {2, 3, 4}  # element type, dimensions, tuple shapes
        return [*shape.dimensions, *(d for element in shape.tuple_shapes for d in sizes(element))]

    shapes = [ShapeProto.FromString(i.shape) for i in instructions]
    assert {d for s in shapes for d in sizes(s)} == {0}
    assert max(len(s.dimensions) for s in shapes) == 4  # the rank stays


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(2, 30))
def test_presentation_and_sizes_never_change_a_family(seed: int, size: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng, size)
    reference = family(to_text(graph))
    assert [family(text) for text in presentations(graph, rng)] == [reference] * 2
    changed = {what: (family(to_text(base)), family(to_text(mutated)))
               for what, base, mutated in mutations(graph, rng)}
    for what in ("constant value", "shape"):
        assert changed[what] == (reference, reference), what
    before, after = changed["layout"]  # of square shapes: a family of its own, relaid or not
    assert before == after
    assert len(set(changed["dtype"])) == 2


@pytest.mark.xla
def test_a_dump_and_jax_own_text_have_one_family(tmp_path) -> None:
    lowered = zoo.get("transformer-s").lower()
    lowered.compile(compiler_options={"xla_dump_to": str(tmp_path)})
    dumped = load_file(glob.glob(str(tmp_path / "*before_optimizations.txt"))[0])
    from_jax = from_lowered(lowered)
    assert family_fingerprint(dumped) == family_fingerprint(from_jax)
    assert family_fingerprint(from_text(lowered.as_text(dialect="hlo"))) == family_fingerprint(from_jax)


_BASE = """HloModule m

ENTRY main {{
  p = {dtype}[{n},16]{{1,0}} parameter(0)
  q = {dtype}[{n},16]{{1,0}} parameter(1)
  c = {dtype}[] constant({value})
  b = {dtype}[{n},16]{{1,0}} broadcast(c), dimensions={{}}
  a = {dtype}[{n},16]{{1,0}} {opcode}(p, b)
  s = {dtype}[{half},16]{{1,0}} slice(a), slice={{[0:{half}], [0:16]}}
  t = {dtype}[{half},16]{{1,0}} slice(q), slice={{[{half}:{n}], [0:16]}}
  ROOT r = {dtype}[{half},16]{{1,0}} {last}
}}
"""


def _module(**changes: object) -> str:
    fields: dict[str, object] = {"dtype": "f32", "n": 8, "half": 4, "value": 1, "opcode": "add",
                                 "last": "subtract(s, t)"}
    return _BASE.format(**{**fields, **changes})


def test_structure_changes_a_family_sizes_and_values_do_not() -> None:
    base = family(_module())
    same = {"batch": _module(n=64, half=32), "constant": _module(value=3),
            "slice bound": _module(half=2)}
    for what, text in same.items():
        assert family(text) == base, what
        assert graph_fingerprint(from_text(text)) != graph_fingerprint(from_text(_module())), what
    other = {"opcode": _module(opcode="multiply"), "dtype": _module(dtype="bf16"),
             "extra op": _module().replace("ROOT r", "r").replace("\n}", "\n  ROOT u = f32[4,16]{1,0} negate(r)\n}"),
             "operand order": _module(last="subtract(t, s)")}
    families = {what: family(text) for what, text in other.items()}
    assert base not in families.values()
    assert len(set(families.values())) == len(other)
    negate = "HloModule n\n\nENTRY main {{\n  p = f32[{0}] parameter(0)\n  ROOT n = f32[{0}] negate(p)\n}}\n"
    assert family(negate.format("8,16")) == family(negate.format("2,3")) != family(negate.format("8,16,1"))


def test_bulk_and_reference_family_hashers_agree() -> None:
    abstracted = abstracted_module(from_text(random_module_text(random.Random(3), 5000)))
    reference = fingerprint_with(abstracted, False, ModuleProto, FamilyHasher)
    assert bulk_fingerprint(abstracted, False, FamilyBulkHasher) == reference
    # The family's hasher differs from the fingerprint's only where a computation repeats an
    # instruction (the random module's constants and broadcasts do).
    assert reference.fingerprint != reference_fingerprint(abstracted, with_ops=False).fingerprint


@pytest.fixture(scope="module")
def mlp_dumps(tmp_path_factory) -> list[Path]:
    """XLA dumps of mlp-s at scales 1 and 2, each with an environment file."""
    out = tmp_path_factory.mktemp("dumps")
    dumps = [dump_workload(zoo.variant("mlp-s", scale), out) for scale in (1, 2)]
    for dump in dumps:
        (dump / "fdo-environment.json").write_text(json.dumps(ENVIRONMENT.to_json()))
    return dumps


@pytest.mark.xla
def test_ingestion_lands_the_family(tmp_path, mlp_dumps) -> None:
    assert ingest_symbols(mlp_dumps, tmp_path).graphs_changed == 2
    graphs = Warehouse(tmp_path).read(GRAPHS).to_pylist()
    (expected,) = {family_fingerprint(load_file(next(d.glob("*before_optimizations.txt")))) for d in mlp_dumps}
    assert len({g["fingerprint"] for g in graphs}) == 2
    assert [g["family"] for g in graphs] == [expected, expected]
    assert graph_families(tmp_path) == {(g["fingerprint"], g["env_key"]): expected for g in graphs}


@pytest.mark.xla
def test_graphs_of_version_2_read_and_get_their_family_from_the_blob(tmp_path, mlp_dumps) -> None:
    version_2 = TableSchema(GRAPHS.name, 2, pa.schema([f for f in GRAPHS.schema if f.name != "family"]))
    seen = datetime.datetime(2026, 6, 1, 12, tzinfo=datetime.UTC)
    blobs = BlobStore(tmp_path)
    modules = [load_file(next(d.glob("*before_optimizations.txt"))) for d in mlp_dumps]
    fingerprints = [graph_fingerprint(m) for m in modules] + ["0" * 32]
    stored = [blobs.put_text(f, m.to_text()) for f, m in zip(fingerprints, modules)] + [blobs.name("0" * 32)]
    rows = [{"dt": seen.date(), "fingerprint": fingerprint, "env_key": ENVIRONMENT.key(), "module_name": "old",
             "n_instructions": 3, "hlo_blob": blob, "optimized_blob": None, "optimized_fingerprint": None,
             "platform": "cpu", "device_kind": "cpu:test", "device_count": 1, "compiler_version": "jaxlib-test",
             "first_seen": seen, "last_seen": seen, "partitioning": None}
            for fingerprint, blob in zip(fingerprints, stored)]  # the last one's blob is lost
    Warehouse(tmp_path).append(version_2, pa.Table.from_pylist(rows, version_2.schema), "old")
    assert Warehouse(tmp_path).read(GRAPHS).column("family").to_pylist() == [None] * 3
    expected = family_fingerprint(modules[0])
    keys = [(f, ENVIRONMENT.key()) for f in fingerprints]
    assert graph_families(tmp_path) == {keys[0]: expected, keys[1]: expected}
    # The scale-1 module ingested again: its row gets the family, the others keep theirs null.
    assert ingest_symbols([mlp_dumps[0]], tmp_path).graphs_changed == 1
    families = {(g["fingerprint"], g["env_key"]): g["family"] for g in Warehouse(tmp_path).read(GRAPHS).to_pylist()}
    assert families == {keys[0]: expected, keys[1]: None, keys[2]: None}
    assert graph_families(tmp_path) == {keys[0]: expected, keys[1]: expected}
