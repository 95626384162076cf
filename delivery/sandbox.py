"""A tuned config is compiled in a sandboxed worker before the hook compiles it in the job.

A flag's value can be inside its declared domain and still abort XLA (a CHECK failure is a
SIGABRT: no fallback inside the job can catch it) or hang its compile. Whatever wrote the store
entry, the tuner, the validator, an import or someone with write access to the store's files,
the hook trusts it only once this machine has compiled that very module with that very config
in a `execution.worker` process (memory limit, timeout) and seen it succeed. The verdict is
kept under `<home>/hook/checked/` (a file per key and config), so a machine pays for a check
once per entry, not once per job: one worker start and one compile, a second or two.

A compile of a multi-process job spans devices of other processes, which no worker of this
process can reach (the job's device assignment names them by their global ids). Its check
(`CompileJob.spans_processes`, taken once, by the process that decides for the job:
delivery.multiprocess) compiles the same program whole in one worker given as many devices of its own
(execution.worker `devices=N`), the job's device assignment laid onto them in its shape
(replicas x partitions): the same SPMD partitioning and collectives, XLA's in-process
collectives where the job has gloo's or NCCL's. On a CPU that is always possible (N host
devices). On a GPU node the worker gets the first N GPUs this process sees: a compile that spans
more GPUs than that (a job over several nodes, or one whose launcher shows each process one
GPU) cannot be compiled whole here and is refused, the reason saying how many devices the
sandbox had; checking it would take XLA's compile for a GPU topology without its devices, which
the hook does not do.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from execution.flags import CompilerConfig, to_json
from execution.worker import Worker, WorkerFailure

CHECKED_DIR = Path("hook") / "checked"
CHECK_TIMEOUT = 120.0  # seconds: a compile that takes longer in the sandbox is not risked


@dataclass(frozen=True)
class CompileJob:
    """What a check compiles: the job's StableHLO, its compile options with the config applied
    (serialized jaxlib CompileOptions) and how many devices the compile is for."""

    stablehlo: bytes
    options: bytes
    devices: int
    spans_processes: bool = False  # its devices are several processes': compiled whole on a worker's own


class SandboxCheck:
    """The compile checks of one job: a worker started on the first check, kept for the next
    (one for the job's own devices, and one per device count for compiles across processes)."""

    def __init__(self, home: Path) -> None:
        self.directory = Path(home) / CHECKED_DIR
        self._lock = threading.Lock()
        self._workers: dict[int | None, Worker] = {}

    def verdict(self, key: str, config: CompilerConfig, job: Callable[[], CompileJob]) -> str | None:
        """None when `config` compiles the module in a sandbox; else why not. `job()` gives what
        to compile, asked only when this machine has no verdict yet: a success is remembered on
        disk, and a remembered one costs a file check."""
        mark = self.directory / mark_name(key, config)
        if mark.exists():
            return None
        compile_job = job()
        # A job's own compile may span its GPUs: the worker sees what the job sees.
        devices = compile_job.devices if compile_job.spans_processes else None
        with self._lock:
            worker = self._workers.get(devices)
            if worker is None:
                worker = self._workers[devices] = Worker(devices=devices)
            try:
                worker.call(compile_check, timeout=CHECK_TIMEOUT, stablehlo=compile_job.stablehlo,
                            options=compile_job.options, device_count=compile_job.devices,
                            own_devices=compile_job.spans_processes)
            except WorkerFailure as failure:
                return f"the tuned compile failed in a sandbox ({failure.kind}): {failure.reason}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:
            pass  # an unwritable home costs a check per job, nothing else
        return None

    def close(self) -> None:
        """Stop the workers, if any were started."""
        with self._lock:
            for worker in self._workers.values():
                worker.close()
            self._workers.clear()


def mark_name(key: str, config: CompilerConfig) -> str:
    """The file under CHECKED_DIR that says this machine compiled `config` for `key`."""
    text = json.dumps(to_json(config), sort_keys=True)
    return hashlib.blake2b(f"{key}/{text}".encode(), digest_size=16).hexdigest()


def compile_check(stablehlo: bytes, options: bytes, device_count: int,
                  own_devices: bool = False) -> dict[str, Any]:
    """In the worker: compile the module with the serialized options on this many devices
    (an exception, a crash or a timeout is the worker's to report). `own_devices`: the options'
    device assignment names another process's devices; it is laid onto this worker's first
    `device_count` devices, in its shape."""
    import jax
    import numpy as np
    from jax._src.lib import _jax, xla_client

    devices = jax.devices()[:device_count]
    if len(devices) < device_count:
        raise RuntimeError(f"the sandbox has {len(devices)} devices, the compile wants {device_count}")
    compile_options = xla_client.CompileOptions.ParseFromString(options)
    if own_devices:
        assignment = compile_options.device_assignment
        shape = ((assignment.replica_count(), assignment.computation_count()) if assignment is not None
                 else (1, device_count))
        compile_options.device_assignment = xla_client.DeviceAssignment.create(
            np.array([device.id for device in devices]).reshape(shape))
    devices[0].client.compile_and_load(stablehlo, _jax.DeviceList(tuple(devices)), compile_options)
    return {"ok": True}
