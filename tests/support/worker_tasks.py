"""Jobs for the worker tests: ones that misbehave, and probes of the worker's process (they run
inside a worker process)."""

import os
import time
from typing import Any


def crash() -> None:
    os.abort()


def hang() -> None:
    time.sleep(3600)


def allocate(gib: int) -> int:
    return len(bytearray(gib * 1024**3))


def echo(value: int) -> int:
    return value


def cores_and_machine_code(module_proto: bytes) -> tuple[list[int], tuple[bytes, ...]]:
    """The cores this worker runs on, and the machine code XLA compiles `module_proto` to here."""
    from execution.compile import compile_module, object_code

    return sorted(os.sched_getaffinity(0)), object_code(compile_module(module_proto, {}).executable)


def device_view() -> dict[str, object]:
    """What this worker's JAX runs on, the GPU variables it was given, and its memory limit."""
    import resource

    import jax

    return {"platform": jax.default_backend(), "devices": len(jax.devices()),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "data_limit": resource.getrlimit(resource.RLIMIT_DATA)[0]}


def device_count() -> int:
    """How many devices JAX sees in the worker."""
    import jax

    return len(jax.devices())


def optimized_texts(module_proto: bytes, partitioning: Any) -> tuple[str, str]:
    """The optimized module's text, compiled whole as `partitioning` partitions it, and
    compiled for one device."""
    from execution.compile import compile_module
    from hlo.module import HloModule

    def text(compiled: Any) -> str:
        return HloModule(compiled.optimized_proto, "", "").to_text()

    return (text(compile_module(module_proto, {}, partitioning=partitioning)),
            text(compile_module(module_proto, {})))
