"""Deterministic random inputs for an HLO module's parameters, valid where they index.

An integer parameter that flows into the indices of a gather, scatter, dynamic-slice or
dynamic-update-slice gets values inside the range those indices may take, so embedding look-ups,
segment sums and KV-cache updates do real work instead of hitting clamped or dropped indices.
Floats are drawn from [0.1, 1): positive, so optimizer states under a square root or a log stay
finite, as they are in real runs.

A seed names one set of inputs; `draw` names others of the same seed, for checking a result
again on more inputs (`execution.numerics.recheck`). `perturbed` moves a set of inputs by a last
bit, to see how far a program's outputs move with it (`execution.numerics`' sensitivity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hlo.module import HloModule, xla_hlo
from hlo.proto import GatherDimsProto, ScatterDimsProto, ShapeProto

# Ops through which an index value keeps being an index (including JAX's negative-index wrap
# and the calls JAX wraps helpers in: a call's result is taken to carry its operands' indices).
_INDEX_PRESERVING = frozenset(
    {
        "convert", "reshape", "bitcast", "broadcast", "slice", "concatenate", "transpose", "copy",
        "select", "clamp", "add", "subtract", "maximum", "minimum", "tuple", "get-tuple-element",
        "dynamic-slice", "pad", "reverse", "bitcast-convert", "call", "fusion",
    }
)
# The random stream of `perturbed`, apart from every parameter's (`make_inputs`: [seed, number]).
_PERTURB_STREAM = 2**31
# Integer inputs that index nothing: small positive values (a step count of 0 would divide by 0).
_DEFAULT_INT_RANGE = (1, 9)


@dataclass(frozen=True)
class ParameterSpec:
    """One entry parameter: its number, shape, dtype and (for integers) value range."""

    number: int
    shape: tuple[int, ...]
    dtype: np.dtype
    low: int
    high: int  # exclusive


def parameter_specs(module: HloModule) -> list[ParameterSpec]:
    """The entry computation's parameters, with index ranges found by data-flow analysis."""
    program_shape = xla_hlo().XlaComputation(module.proto).program_shape()
    bounds = _index_bounds(module)
    specs = []
    for number, shape in enumerate(program_shape.parameter_shapes()):
        if shape.is_tuple():
            raise ValueError(f"{module.source}: parameter {number} is a tuple; flatten it first "
                             "(execution.session.measurable_module)")
        dtype = np.dtype(shape.numpy_dtype())
        low, high = _DEFAULT_INT_RANGE
        if number in bounds:
            low, high = 0, max(1, bounds[number])
        specs.append(ParameterSpec(number, tuple(shape.dimensions()), dtype, low, high))
    return specs


def make_inputs(specs: list[ParameterSpec], seed: int = 0, draw: int = 0) -> list[np.ndarray]:
    """Arrays for `specs`, the same for the same seed and draw on every machine; draw 0 is the
    seed's own set of inputs, each other draw another set."""
    return [_make_array(spec, np.random.Generator(np.random.PCG64(
        [seed, spec.number] if draw == 0 else [seed, spec.number, draw])))
        for spec in specs]


def perturbed(arrays: list[np.ndarray], seed: int, probe: int = 0) -> list[np.ndarray]:
    """`arrays` with every float value moved by its dtype's epsilon, relative, up or down at
    random (the same for the same seed and probe): at least one unit in the last place, at most
    two. Integers and booleans (indices, counts, masks) stay as they are."""
    import ml_dtypes

    rng = np.random.Generator(np.random.PCG64([seed, _PERTURB_STREAM, probe]))
    moved = []
    for array in arrays:
        array = np.asarray(array)
        if array.dtype.kind in "biu" or array.size == 0:
            moved.append(array)
            continue
        wide = np.complex128 if array.dtype.kind == "c" else np.float64
        eps = float(ml_dtypes.finfo(array.dtype).eps)
        signs = rng.choice(np.array([-1.0, 1.0]), size=array.shape)
        moved.append((array.astype(wide) * (1.0 + eps * signs)).astype(array.dtype))
    return moved


def _make_array(spec: ParameterSpec, rng: np.random.Generator) -> np.ndarray:
    kind = spec.dtype.kind
    if kind == "b":
        return rng.integers(0, 2, size=spec.shape).astype(spec.dtype)
    if kind in "iu":
        info = np.iinfo(spec.dtype)
        high = min(spec.high, int(info.max) + 1)
        return rng.integers(spec.low, high, size=spec.shape).astype(spec.dtype)
    if kind == "c":
        real = rng.uniform(0.1, 1.0, size=spec.shape)
        imag = rng.uniform(0.1, 1.0, size=spec.shape)
        return (real + 1j * imag).astype(spec.dtype)
    # floats, including ml_dtypes' bfloat16 and float8 types (numpy kind "V" or "f")
    return rng.uniform(0.1, 1.0, size=spec.shape).astype(spec.dtype)


def _dims(shape_bytes: bytes) -> list[int]:
    return list(ShapeProto.FromString(shape_bytes).dimensions)


def _sink_bound(instruction: Any, operand_index: int, shapes: dict[int, bytes]) -> int | None:
    """The exclusive upper bound of valid values for operand `operand_index`, if it indexes."""
    opcode = instruction.opcode
    operands = list(instruction.operand_ids)
    if opcode == "gather" and operand_index == 1:
        dims = _dims(shapes[operands[0]])
        sizes = list(instruction.gather_slice_sizes)
        mapped = GatherDimsProto.FromString(instruction.gather_dimension_numbers).start_index_map
        bounds = [dims[d] - (sizes[d] if d < len(sizes) else 1) + 1 for d in mapped]
        return min(bounds) if bounds else None
    if opcode == "scatter" and operand_index == (len(operands) - 1) // 2:
        dims = _dims(shapes[operands[0]])
        mapped = ScatterDimsProto.FromString(
            instruction.scatter_dimension_numbers
        ).scatter_dims_to_operand_dims
        bounds = [dims[d] for d in mapped]
        return min(bounds) if bounds else None
    if opcode == "dynamic-slice" and operand_index >= 1:
        dim = operand_index - 1
        return _dims(shapes[operands[0]])[dim] - instruction.dynamic_slice_sizes[dim] + 1
    if opcode == "dynamic-update-slice" and operand_index >= 2:
        dim = operand_index - 2
        return _dims(shapes[operands[0]])[dim] - _dims(shapes[operands[1]])[dim] + 1
    return None


def _index_bounds(module: HloModule) -> dict[int, int]:
    """For each entry parameter that reaches index operands: the tightest bound among them."""
    view = module.view()
    computations = {c.id: c for c in view.computations}
    entry = computations[view.entry_computation_id]
    bounds: dict[int, int] = {}
    for parameter in entry.instructions:
        if parameter.opcode != "parameter":
            continue
        bound = _reachable_bound(computations, entry.id, parameter.id)
        if bound is not None:
            bounds[parameter.parameter_number] = bound
    return bounds


def _reachable_bound(computations: dict[int, Any], start_computation: int, start: int) -> int | None:
    users: dict[int, dict[int, list[tuple[Any, int]]]] = {}
    for computation in computations.values():
        table: dict[int, list[tuple[Any, int]]] = {}
        for instruction in computation.instructions:
            for index, operand in enumerate(instruction.operand_ids):
                table.setdefault(operand, []).append((instruction, index))
        users[computation.id] = table
    shapes = {i.id: i.shape for c in computations.values() for i in c.instructions}
    best: int | None = None
    stack = [(start_computation, start)]
    seen: set[tuple[int, int]] = set()
    while stack:
        computation_id, value = stack.pop()
        if (computation_id, value) in seen:
            continue
        seen.add((computation_id, value))
        for user, index in users[computation_id].get(value, []):
            bound = _sink_bound(user, index, shapes)
            if bound is not None:
                best = bound if best is None else min(best, bound)
            if user.opcode in _INDEX_PRESERVING:
                stack.append((computation_id, user.id))
            stack.extend(_into_called(computations, user, index))
    return best


def _into_called(computations: dict[int, Any], user: Any, index: int) -> list[tuple[int, int]]:
    """Where operand `index` of `user` appears inside the computations it calls."""
    targets = []
    called = list(user.called_computation_ids)
    for position, computation_id in enumerate(called):
        if user.opcode == "while":
            parameter_number = 0
        elif user.opcode == "conditional":
            if index != position + 1:
                continue
            parameter_number = 0
        else:
            parameter_number = index
        for instruction in computations[computation_id].instructions:
            if instruction.opcode == "parameter" and instruction.parameter_number == parameter_number:
                targets.append((computation_id, instruction.id))
    return targets
