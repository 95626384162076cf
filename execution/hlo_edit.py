"""Small edits of XLA's module proto (`hlo.proto`) shared by the rewrites that build a
module to compile: the flattening of tuple parameters (`execution.tuple_parameters`) and the op
cut (`tuner.op_cut`)."""

from __future__ import annotations

from typing import Any

from hlo.proto import ProgramShapeProto


def unique_name(name: str, taken: set[str], tag: str) -> str:
    """`name`, or `name.<tag>N` for the first N that no instruction in `taken` has; taken now."""
    candidate, n = name, 0
    while candidate in taken:
        n += 1
        candidate = f"{name}.{tag}{n}"
    taken.add(candidate)
    return candidate


def set_entry(module: Any, entry: Any) -> None:
    """Append `entry` as the module's entry computation, with its program shape."""
    parameters = sorted((i for i in entry.instructions if i.opcode == "parameter"),
                        key=lambda i: i.parameter_number)
    root = next(i for i in entry.instructions if i.id == entry.root_id)
    shape = ProgramShapeProto(parameters=[p.shape for p in parameters], result=root.shape,
                              parameter_names=[p.name for p in parameters])
    entry.program_shape = shape.SerializeToString()
    module.computations.add().CopyFrom(entry)
    module.host_program_shape.CopyFrom(shape)
    module.entry_computation_id = entry.id
    module.entry_computation_name = entry.name


def fresh_id(view: Any) -> int:
    """An instruction and computation id above every one the module uses."""
    return 1 + max([c.id for c in view.computations]
                   + [i.id for c in view.computations for i in c.instructions])
