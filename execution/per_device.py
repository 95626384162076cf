"""The per-device program of a sharded module, for measuring it on one device (XTAT's and
CATWILD's single-chip approach, used where the measuring machine has fewer devices than the job).

XLA's SPMD partitioner turns a module sharded over N devices into the one program every device
runs, with per-device shapes and collectives (all-reduce, all-gather, reduce-scatter,
all-to-all, collective-permute) where devices exchange data. `partitioned_module` runs the
partitioner as the job's compile does, in a worker with N host devices (a CPU process: the
partitioner's output does not depend on the backend's devices, and host devices cost nothing),
and takes the module after the `spmd-partitioning` pass from XLA's own dump of that compile.
`local_stand_ins` then replaces each collective by a local op of the same shape: all-reduce,
all-to-all and collective-permute by their operand (a copy, or a tuple of the operands), an
all-gather by its operand concatenated as many times as the group has members, a reduce-scatter
by the first slice of its operand; and drops the shardings. What remains is the devices' own
compute, which compiles and runs on one device.

What it leaves out is the communication itself and what the compiler does around it (async
collectives, their overlap with compute, combining thresholds): a config that changes those is
not seen here. How far a per-device speedup is from the whole program's is measured, not assumed
(benchmarks/bench_sharded.py, docs/sharded.md), and the tuner asks more of a per-device win
(`PER_DEVICE_ERROR`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from google.protobuf.descriptor_pb2 import FieldDescriptorProto as _F

from hlo.environment import Partitioning
from hlo.module import HloModule, from_text
from hlo.proto import ShapeProto, build_messages
from vocabulary.measure import MeasureMode

# How far a per-device speedup may overstate the whole program's: the 90th percentile of the
# overstatement over every single move of the zoo's sharded workloads (0.112, 47 moves of three
# workloads; benchmarks/bench_sharded.py, docs/sharded.md#figures). A per-device win must clear
# it to be delivered, so that the whole program loses nothing 9 times in 10.
PER_DEVICE_ERROR = 0.11
# The pass after which XLA's dump holds the per-device program (xla/service/spmd).
PARTITIONER_PASS = "spmd-partitioning"
_TUPLE = 13  # xla.PrimitiveType.TUPLE
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# The instruction fields the rewrite reads or writes, declared apart from hlo.proto's schema
# (declaring them there would change what fingerprints hash). A replaced instruction is built
# anew from these, so a collective's own fields (replica groups, channel, device list) go.
_SCHEMA = build_messages("fdo_per_device", {
    "SliceDimensions": [("start", 1, _F.TYPE_INT64, _OPT, None),
                        ("limit", 2, _F.TYPE_INT64, _OPT, None),
                        ("stride", 3, _F.TYPE_INT64, _OPT, None)],
    "Instruction": [
        ("name", 1, _F.TYPE_STRING, _OPT, None),
        ("opcode", 2, _F.TYPE_STRING, _OPT, None),
        ("shape", 3, _F.TYPE_BYTES, _OPT, None),
        ("metadata", 7, _F.TYPE_BYTES, _OPT, None),
        ("dimensions", 14, _F.TYPE_INT64, _REP, None),
        ("slice_dimensions", 17, _F.TYPE_MESSAGE, _REP, ".fdo_per_device.SliceDimensions"),
        ("id", 35, _F.TYPE_INT64, _OPT, None),
        ("operand_ids", 36, _F.TYPE_INT64, _REP, None),
        ("control_predecessor_ids", 37, _F.TYPE_INT64, _REP, None),
        ("sharding", 40, _F.TYPE_BYTES, _OPT, None),
    ],
    "Computation": [("name", 1, _F.TYPE_STRING, _OPT, None),
                    ("instructions", 2, _F.TYPE_MESSAGE, _REP, ".fdo_per_device.Instruction")],
    "StringMapEntry": [("key", 1, _F.TYPE_STRING, _OPT, None),
                       ("value", 2, _F.TYPE_STRING, _OPT, None)],
    "FrontendAttributes": [("map", 1, _F.TYPE_MESSAGE, _REP, ".fdo_per_device.StringMapEntry")],
    "Module": [("computations", 3, _F.TYPE_MESSAGE, _REP, ".fdo_per_device.Computation"),
               ("frontend_attributes", 19, _F.TYPE_MESSAGE, _OPT,
                ".fdo_per_device.FrontendAttributes")],
})
_ModuleProto, _InstructionProto = _SCHEMA["Module"], _SCHEMA["Instruction"]

_SAME_SHAPE = frozenset({"all-reduce", "all-to-all", "collective-permute"})
COLLECTIVES = _SAME_SHAPE | {"all-gather", "reduce-scatter", "collective-broadcast"}
_SHARDY_PREFIX = "xla.sdy."  # the Shardy partitioner's module attributes (meshes, ...)


class PerDeviceError(ValueError):
    """The module has no per-device program this module can build; the message says why."""


def partitioned_module(module_proto: bytes, partitioning: Partitioning) -> HloModule:
    """The module as XLA's SPMD partitioner leaves it for `partitioning`: each device's program
    with its collectives. Compiles the module for the partitioning's devices (this process
    must have them: a worker given `devices=partitioning.devices`), dumping the pass's output.
    PerDeviceError when XLA does not compile it or dumps no partitioned module."""
    from jax._src.lib import _jax

    from execution.sharded import base_options, devices_for

    options = base_options(partitioning)
    with tempfile.TemporaryDirectory(prefix="fdo-partition-") as directory:
        options.env_option_overrides = list(options.env_option_overrides) + [
            ("xla_dump_to", directory), ("xla_dump_hlo_pass_re", PARTITIONER_PASS)]
        devices = devices_for(partitioning)
        try:
            devices[0].client.compile_and_load(_jax.mlir.hlo_to_stablehlo(module_proto),
                                               _jax.DeviceList(tuple(devices)), options)
        except Exception as exc:  # jaxlib's runtime errors, version dependent
            raise PerDeviceError(f"the sharded module does not compile: {exc}") from exc
        dumps = sorted(Path(directory).glob(f"*.after_{PARTITIONER_PASS}.*.txt"))
        if not dumps:
            raise PerDeviceError(f"XLA dumped no module after {PARTITIONER_PASS}")
        return from_text(dumps[-1].read_text(), source=f"per-device of {partitioning.devices}")


def local_stand_ins(module: HloModule) -> HloModule:
    """`module` (a partitioned one) with every collective replaced by a local op of its shape
    and every sharding dropped (see the module docstring); PerDeviceError for a collective of a
    form it cannot stand in for."""
    view = _ModuleProto.FromString(module.proto)
    shapes = {i.id: i.shape for c in view.computations for i in c.instructions}
    for computation in view.computations:
        for index, instruction in enumerate(computation.instructions):
            if instruction.opcode in COLLECTIVES:
                computation.instructions[index].CopyFrom(_stand_in(instruction, shapes))
            elif instruction.sharding:
                instruction.ClearField("sharding")
    kept = [e for e in view.frontend_attributes.map if not e.key.startswith(_SHARDY_PREFIX)]
    view.frontend_attributes.ClearField("map")
    view.frontend_attributes.map.extend(kept)
    return HloModule(view.SerializeToString(), module.name, f"{module.source} (local stand-ins)")


def per_device_module(module_proto: bytes, partitioning: Partitioning) -> bytes:
    """The per-device program of a sharded module, with local stand-ins for its collectives,
    serialized: compiles and runs on one device. A worker's job: it needs the partitioning's
    devices (see `partitioned_module`)."""
    return local_stand_ins(partitioned_module(module_proto, partitioning)).proto


def _stand_in(instruction: Any, shapes: dict[int, bytes]) -> Any:
    """A local op with `instruction`'s name, id, shape and operands in place of a collective."""
    shape = ShapeProto.FromString(instruction.shape)
    operands = list(instruction.operand_ids)
    replacement = _InstructionProto(name=instruction.name, shape=instruction.shape,
                                    metadata=instruction.metadata, id=instruction.id,
                                    control_predecessor_ids=instruction.control_predecessor_ids)
    opcode = instruction.opcode
    if shape.element_type == _TUPLE:
        if opcode not in _SAME_SHAPE or len(operands) != len(shape.tuple_shapes):
            raise PerDeviceError(f"{instruction.name}: a tuple-shaped {opcode} has no local "
                                 "stand-in here")
        replacement.opcode = "tuple"
        replacement.operand_ids.extend(operands)
        return replacement
    if len(operands) != 1 and opcode != "collective-permute":
        raise PerDeviceError(f"{instruction.name}: a {opcode} of {len(operands)} operands has "
                             "no local stand-in here")
    operand = operands[0]
    dims = list(shape.dimensions)
    operand_dims = list(ShapeProto.FromString(shapes[operand]).dimensions)
    if opcode in _SAME_SHAPE or opcode == "collective-broadcast" or dims == operand_dims:
        replacement.opcode = "copy"
        replacement.operand_ids.append(operand)
        return replacement
    axis = _changed_axis(instruction.name, dims, operand_dims)
    if opcode == "all-gather":
        replacement.opcode = "concatenate"
        replacement.operand_ids.extend([operand] * (dims[axis] // operand_dims[axis]))
        replacement.dimensions.append(axis)
        return replacement
    replacement.opcode = "slice"  # reduce-scatter: the first of the group's pieces
    replacement.operand_ids.append(operand)
    for size in dims:
        replacement.slice_dimensions.add(start=0, limit=size, stride=1)
    return replacement


def _changed_axis(name: str, dims: list[int], operand_dims: list[int]) -> int:
    """The one axis along which a gather or scatter changes its operand's size by a whole
    factor; PerDeviceError if the shapes say otherwise."""
    changed = [a for a, (d, o) in enumerate(zip(dims, operand_dims)) if d != o]
    if len(dims) != len(operand_dims) or len(changed) != 1:
        raise PerDeviceError(f"{name}: result {dims} and operand {operand_dims} differ in more "
                             "than one axis")
    axis = changed[0]
    big, small = max(dims[axis], operand_dims[axis]), min(dims[axis], operand_dims[axis])
    if small == 0 or big % small:
        raise PerDeviceError(f"{name}: axis {axis} goes from {operand_dims[axis]} to "
                             f"{dims[axis]}, not by a whole factor")
    return axis


def gain_bar(band: float, mode: MeasureMode) -> float:
    """The noise band a gain measured in `mode` must clear, for a measurement whose own is
    `band`: per device, PER_DEVICE_ERROR too (the whole program may gain that much less)."""
    return band if mode is MeasureMode.WHOLE else max(band, PER_DEVICE_ERROR)
