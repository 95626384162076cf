"""Cut one kernel out of an optimized HLO module, as a module that compiles and runs on its own.

A kernel is what `hlo.fingerprint` calls an op: a fusion with its fused computation, or an
unfused compute instruction (a convolution, a dot, a scatter, ...) of an optimized module. Two
modules come out of a cut, both built by editing XLA's own module proto (`hlo.proto`):

- the kernel form: one parameter per operand of the kernel (same shapes and layouts), the kernel
  instruction itself as the root, and every computation it calls. Its only kernel is the cut
  one, so `fingerprint_module(cut.kernel).ops` is exactly that op with the ranked op
  fingerprint: the cut is keyed by construction, and that is checked at cut time.
- the runnable form, what the tuner compiles: the kernel form with every fusion inlined (the
  fused computation's instructions take the place of the fusion instruction), all shapes at
  the default layout and bitcasts written as reshapes. An optimized module does not compile
  again as it is: XLA's CPU emitter wants the backend config of its own fusion passes, and the
  StableHLO bridge keeps no layouts but the entry's, so a layout-changing bitcast or copy inside
  a fusion would be misread. At the default layout every bitcast is a reshape of the same
  elements, and a copy that only changed the layout becomes a plain copy (the transpose that
  fed it does the data movement instead).

XLA optimizes the runnable form again, so it may fuse it differently and route it to another
library (a YNNPACK fusion comes back as a plain dot or convolution that the library routing
flags send to YNNPACK, XNNPACK, oneDNN or XLA's own emitter): that is exactly what the op-level
knobs act on. The runnable form is built from nothing but what the op fingerprint hashes
(operand shapes, the kernel's attributes, the called computations; names and ids aside), so
equal op fingerprints give runnable forms with equal graph fingerprints (tested on zoo modules).

Finding the cut of a ranked op candidate is deterministic: the `ops` table names the kernel
instruction (`name`) in the optimized graph it was seen in (`hlo_blob`); see
`tuner.candidates.tunable_op_candidates`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from execution.hlo_edit import fresh_id, set_entry, unique_name
from hlo.fingerprint import OpFingerprint, fingerprint_module
from hlo.layout import default_layout
from hlo.module import HloModule
from hlo.proto import ComputationProto, ModuleProto, ShapeProto

# Opcodes that make a kernel a member of an op class (see tuner.space.OP_KNOBS), strongest first.
_CLASS_OPCODES = (
    ("convolution", frozenset({"convolution"})),
    ("dot", frozenset({"dot"})),
    ("reduce", frozenset({"reduce", "reduce-window"})),
    ("other", frozenset({"scatter", "gather", "sort", "custom-call", "fft", "rng",
                         "rng-bit-generator", "triangular-solve", "cholesky", "while",
                         "conditional", "call", "all-reduce", "all-gather", "reduce-scatter"})),
)


class OpCutError(ValueError):
    """A kernel that cannot be cut; the message names the module, the kernel and the problem."""


@dataclass(frozen=True)
class OpCut:
    """One kernel of an optimized module, cut out."""

    name: str  # the kernel instruction's name in the optimized module
    kind: str  # as `hlo.fingerprint` reports it (e.g. "fusion:kLoop", "convolution")
    op_class: str  # convolution | dot | reduce | eltwise | other: which knobs act on it
    fingerprint: str  # the op fingerprint
    kernel: HloModule  # parameters + the kernel instruction, as in the optimized module
    module: HloModule  # the runnable form the tuner compiles

    @property
    def label(self) -> str:
        """A short human-readable name."""
        return f"{self.name} ({self.kind}) {self.fingerprint[:8]}"


def cut_op(optimized: HloModule, name: str) -> OpCut:
    """Cut the kernel called `name` out of the optimized module `optimized`."""
    found = cut_ops(optimized, [name])
    if not found:
        raise OpCutError(f"{optimized.source}: no kernel named {name!r} in module {optimized.name!r}")
    return found[0]


def cut_ops(optimized: HloModule, names: Iterable[str] | None = None) -> list[OpCut]:
    """The kernels of the optimized module (those called `names`, or all), cut out, in the
    order ingestion lists them."""
    view = optimized.view()
    wanted = None if names is None else set(names)
    return [_cut(optimized, view, op) for op in fingerprint_module(optimized, with_ops=True).ops
            if wanted is None or op.name in wanted]


def _cut(optimized: HloModule, view: Any, op: OpFingerprint) -> OpCut:
    kernel = _kernel_module(optimized, view, op.name)
    found = fingerprint_module(kernel, with_ops=True).ops
    if [o.fingerprint for o in found] != [op.fingerprint]:
        raise OpCutError(f"{optimized.source}: the cut of {op.name!r} does not fingerprint as "
                         "the kernel it was cut from")
    module = runnable_module(kernel)
    return OpCut(op.name, op.kind, op_class(module), op.fingerprint, kernel, module)


def _kernel_module(optimized: HloModule, view: Any, name: str) -> HloModule:
    """The kernel form: a parameter per operand, the kernel `name` as root, its callees."""
    by_id = {c.id: c for c in view.computations}
    owner, instruction = _find(view, name, optimized.source)
    shapes = {i.id: i.shape for i in owner.instructions}
    entry = ComputationProto(name=f"cut.{_identifier(name)}", id=fresh_id(view))
    next_id = entry.id + 1
    parameter_ids = []
    for number, operand in enumerate(instruction.operand_ids):
        if ShapeProto.FromString(shapes[operand]).tuple_shapes:
            raise OpCutError(f"{optimized.source}: kernel {name!r} takes a tuple as operand "
                             f"{number}; tuple parameters are not supported")
        entry.instructions.add(name=f"p{number}", opcode="parameter", shape=shapes[operand],
                               parameter_number=number, id=next_id)
        parameter_ids.append(next_id)
        next_id += 1
    root = entry.instructions.add()
    root.CopyFrom(instruction)
    root.id = next_id
    del root.operand_ids[:]
    root.operand_ids.extend(parameter_ids)
    del root.control_predecessor_ids[:]
    entry.root_id = root.id
    module = ModuleProto(name=f"cut_{_identifier(name)}", id=view.id)
    for computation_id in _reachable(by_id, instruction.called_computation_ids):
        module.computations.add().CopyFrom(by_id[computation_id])
    set_entry(module, entry)
    return HloModule(module.SerializeToString(), module.name, f"{optimized.source}#{name}")


def runnable_module(kernel: HloModule) -> HloModule:
    """The runnable form of a kernel form: fusions inlined, default layouts, bitcasts as
    reshapes (see the module docstring)."""
    view = kernel.view()
    by_id = {c.id: c for c in view.computations}
    entry = by_id[view.entry_computation_id]
    inliner = _Inliner(by_id, fresh_id(view))
    flat = ComputationProto(name=entry.name, id=entry.id)
    root_id = inliner.inline(entry, {}, flat)
    flat.root_id = root_id
    module = ModuleProto(name=view.name, id=view.id)
    for computation_id in _reachable(by_id, [c for i in flat.instructions
                                             for c in i.called_computation_ids]):
        module.computations.add().CopyFrom(by_id[computation_id])
    for computation in list(module.computations) + [flat]:
        for instruction in computation.instructions:
            instruction.shape = default_layout(instruction.shape)
            instruction.ClearField("metadata")  # it points into a stack-frame table left behind
            if instruction.opcode == "bitcast":
                instruction.opcode = "reshape"
    set_entry(module, flat)
    return HloModule(module.SerializeToString(), module.name, kernel.source)


def op_class(module: HloModule) -> str:
    """The op class of a runnable cut: the strongest class any of its instructions belongs to
    (convolution, dot, reduce, other), else eltwise."""
    opcodes = {i.opcode for c in module.view().computations for i in c.instructions}
    return next((name for name, members in _CLASS_OPCODES if opcodes & members), "eltwise")


class _Inliner:
    """Copies a computation's instructions into another, replacing fusions by their bodies."""

    def __init__(self, by_id: dict[int, Any], first_id: int) -> None:
        self.by_id, self.next_id = by_id, first_id
        self.names: set[str] = set()

    def inline(self, source: Any, parameters: dict[int, int], target: Any) -> int:
        """Copy `source` into `target`, its parameters bound to `parameters` (parameter number
        -> instruction id in `target`; unbound ones are copied). Returns the root's new id."""
        new_ids: dict[int, int] = {}
        for instruction in _post_order(source):
            operands = [new_ids[o] for o in instruction.operand_ids]
            if instruction.opcode == "parameter" and instruction.parameter_number in parameters:
                new_ids[instruction.id] = parameters[instruction.parameter_number]
            elif instruction.opcode == "fusion":
                body = self.by_id[instruction.called_computation_ids[0]]
                new_ids[instruction.id] = self.inline(body, dict(enumerate(operands)), target)
            else:
                copy = target.instructions.add()
                copy.CopyFrom(instruction)
                copy.id = self.next_id
                copy.name = unique_name(instruction.name, self.names, "i")
                del copy.operand_ids[:]
                copy.operand_ids.extend(operands)
                del copy.control_predecessor_ids[:]
                new_ids[instruction.id] = copy.id
                self.next_id += 1
        return new_ids[source.root_id]


def _post_order(computation: Any) -> list[Any]:
    """The instructions with every operand before its users (XLA writes them so; not relied on)."""
    by_id = {i.id: i for i in computation.instructions}
    done: set[int] = set()
    order: list[Any] = []
    for start in computation.instructions:
        stack = [(start.id, False)]
        while stack:
            instruction_id, expanded = stack.pop()
            if instruction_id in done:
                continue
            if expanded:
                done.add(instruction_id)
                order.append(by_id[instruction_id])
                continue
            stack.append((instruction_id, True))
            stack.extend((o, False) for o in reversed(by_id[instruction_id].operand_ids) if o not in done)
    return order


def _find(view: Any, name: str, source: str) -> tuple[Any, Any]:
    for computation in view.computations:
        if computation.is_fusion_computation:
            continue
        for instruction in computation.instructions:
            if instruction.name == name:
                return computation, instruction
    raise OpCutError(f"{source}: no instruction named {name!r} outside fused computations")


def _reachable(by_id: dict[int, Any], roots: Iterable[int]) -> list[int]:
    """The computations `roots` call, transitively, callees before callers, each once."""
    order: list[int] = []
    seen: set[int] = set()

    def visit(computation_id: int) -> None:
        if computation_id in seen:
            return
        seen.add(computation_id)
        for instruction in by_id[computation_id].instructions:
            for called in instruction.called_computation_ids:
                visit(called)
        order.append(computation_id)

    for root in roots:
        visit(root)
    return order


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
