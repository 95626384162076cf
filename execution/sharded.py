"""Programs that span devices, compiled and run whole: the job's partitioning on N local devices.

A job that shards a module (SPMD partitioning over a mesh) compiles it for R replicas x P
partitions (`hlo.environment.Partitioning`); measured on one device the same module builds
another program, with whole arrays and no collective. Here it is compiled as the job compiles
it, for the first R x P devices of the process (a worker given them: `Worker(devices=N)`), and
run across all of them: each input is made whole from its seed (`execution.inputs`) and placed
with the sharding the executable gives its parameter, each output is gathered whole, so the
numeric check compares every element on every device, and a timing waits for every device.

A module for one device of one process (`partitioning` None, or one that spans one device) takes
the plain path: one device, `execute`, as it always has.

Where the measuring machine has fewer devices than the job, the module is measured per device
instead (`execution.per_device`): its partitioned per-device program on one device. Which mode
measures a graph is a `Placement`, chosen once per graph (`choose_placement`) and recorded with
every result, trial and decision made from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hlo.environment import Partitioning
from hlo.module import HloModule, xla_hlo
from vocabulary.measure import MeasureMode


class DeviceShortage(RuntimeError):
    """The process has fewer devices than the program spans."""


@dataclass(frozen=True)
class Placement:
    """How one graph is measured: the mode, and the job's partitioning (None: one device of one
    process, always measured whole)."""

    mode: MeasureMode = MeasureMode.WHOLE
    partitioning: Partitioning | None = None

    @property
    def compiled_for(self) -> Partitioning | None:
        """The partitioning the measured program is compiled with: the job's, whole; none, per
        device (the per-device program is one device's)."""
        return self.partitioning if self.mode is MeasureMode.WHOLE else None

    @property
    def devices(self) -> int:
        """The devices one measured run spans."""
        return spans(self.compiled_for)

    def describe(self) -> str:
        """E.g. "whole on 4 devices", "per device of 8"."""
        if self.mode is MeasureMode.PER_DEVICE:
            return f"per device of {spans(self.partitioning)}"
        return f"whole on {self.devices} device{'s' if self.devices > 1 else ''}"


# How many host devices a CPU worker may be given to measure a program whole: a CPU job's
# devices are host devices too, so whole is the job's own program; past this the machine's few
# cores would serialize them, and the per-device program stands in. $FDO_MAX_HOST_DEVICES sets it.
MAX_HOST_DEVICES = 8
MAX_HOST_DEVICES_VARIABLE = "FDO_MAX_HOST_DEVICES"
# The most devices a program may span to be measured at all here: its per-device program is
# partitioned in a CPU worker with that many host devices, and XLA's CPU client refuses a compile
# over 4096 of them ("Multiprocess computations aren't implemented on the CPU backend"; 2048
# partition, docs/sharded.md).
MAX_PARTITION_DEVICES = 2048


def whole_capacity(platform: str) -> int:
    """The most devices a program of `platform` can be measured whole on here: on a CPU, host
    devices up to MAX_HOST_DEVICES (or $FDO_MAX_HOST_DEVICES); elsewhere the devices of this
    process's platform. ValueError naming the variable when it is not a positive integer."""
    if platform == "cpu":
        text = os.environ.get(MAX_HOST_DEVICES_VARIABLE, "").strip()
        if not text:
            return MAX_HOST_DEVICES
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{MAX_HOST_DEVICES_VARIABLE}={text!r}: must be a positive integer")
        return int(text)
    import jax

    return len([d for d in jax.devices() if d.platform == platform])


def choose_placement(partitioning: Partitioning | None, capacity: int,
                     asked: MeasureMode | None = None) -> Placement:
    """How to measure a graph compiled with `partitioning` on a machine that can run `capacity`
    devices whole: whole where they suffice, else per device; `asked` forces a mode (ValueError
    when whole is asked and the devices do not suffice). A graph of one device is measured
    whole, whatever was asked: its per-device program is itself."""
    needed = spans(partitioning)
    if needed == 1:
        return Placement(MeasureMode.WHOLE, partitioning)
    if asked is MeasureMode.WHOLE and needed > capacity:
        raise ValueError(f"measuring whole needs {needed} devices; this machine offers {capacity}")
    mode = asked or (MeasureMode.WHOLE if needed <= capacity else MeasureMode.PER_DEVICE)
    return Placement(mode, partitioning)


def spans(partitioning: Partitioning | None) -> int:
    """How many devices one execution of a program compiled with `partitioning` spans."""
    return 1 if partitioning is None else partitioning.devices


def devices_for(partitioning: Partitioning | None) -> list[Any]:
    """The process's first devices, as many as the program spans; DeviceShortage when it has
    fewer (a worker measuring it whole is given them: `Worker(devices=...)`)."""
    import jax

    devices = jax.devices()
    wanted = spans(partitioning)
    if len(devices) < wanted:
        raise DeviceShortage(f"the program spans {wanted} devices; this process has "
                             f"{len(devices)} ({devices[0].platform})")
    return devices[:wanted]


def base_options(partitioning: Partitioning | None) -> Any:
    """JAX's compile options for the program's partitioning: its replicas and partitions on the
    first devices, SPMD (and Shardy where the job used it) as the job had them."""
    from jax._src import compiler

    if spans(partitioning) == 1:
        return compiler.get_compile_options(num_replicas=1, num_partitions=1)
    assert partitioning is not None
    ids = np.array([d.id for d in devices_for(partitioning)]).reshape(partitioning.device_assignment)
    options = compiler.get_compile_options(num_replicas=partitioning.replicas,
                                           num_partitions=partitioning.partitions,
                                           device_assignment=ids)
    build = options.executable_build_options
    build.use_spmd_partitioning = partitioning.spmd or partitioning.partitions > 1
    if hasattr(build, "use_shardy_partitioner"):
        build.use_shardy_partitioner = partitioning.shardy
    return options


def global_output_shapes(module: HloModule) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The (shape, dtype) of each of the module's outputs as the job sees them: whole arrays,
    one per leaf of its result."""
    result = xla_hlo().XlaComputation(module.proto).program_shape().result_shape()
    leaves = result.tuple_shapes() if result.is_tuple() else [result]
    return [(tuple(leaf.dimensions()), np.dtype(leaf.numpy_dtype())) for leaf in leaves]


class Placed:
    """A module's inputs placed for one executable: on the first device, or across the
    executable's devices with the sharding it gives each parameter."""

    def __init__(self, executable: Any, inputs: Sequence[np.ndarray],
                 partitioning: Partitioning | None,
                 outputs: list[tuple[tuple[int, ...], np.dtype]] | None = None) -> None:
        import jax

        self.executable = executable
        self.devices = devices_for(partitioning)
        self.sharded = len(self.devices) > 1
        if not self.sharded:
            self.arguments = [jax.device_put(a, self.devices[0]) for a in inputs]
            return
        if outputs is None:
            raise ValueError("a sharded program's outputs need their global shapes")
        from jax._src.sharding_impls import GSPMDSharding

        shardings = executable.get_parameter_shardings()
        if len(shardings) != len(inputs):
            raise ValueError(f"the executable has {len(shardings)} parameters, the module "
                             f"{len(inputs)}")
        devices = tuple(self.devices)
        self.arguments = [jax.device_put(a, GSPMDSharding(devices, s))
                          for a, s in zip(inputs, shardings)]
        self._outputs = [(shape, GSPMDSharding(devices, s))
                         for (shape, _), s in zip(outputs, executable.get_output_shardings())]

    def run(self) -> list[np.ndarray]:
        """One run's outputs, whole, as numpy arrays (a sharded output gathered from every
        device). XLA's failures surface here, when the outputs are read."""
        import jax

        if not self.sharded:
            return [np.asarray(output) for output in self.executable.execute(self.arguments)]
        pieces = self.executable.execute_sharded(self.arguments).disassemble_into_single_device_arrays()
        return [np.asarray(jax.make_array_from_single_device_arrays(shape, sharding, shards))
                for (shape, sharding), shards in zip(self._outputs, pieces)]

    def wait(self, repeats: int) -> None:
        """Run `repeats` times, each run waited for on every device."""
        for _ in range(repeats):
            if self.sharded:
                for shards in self.executable.execute_sharded(
                        self.arguments).disassemble_into_single_device_arrays():
                    for shard in shards:
                        shard.block_until_ready()
            else:
                for output in self.executable.execute(self.arguments):
                    output.block_until_ready()
