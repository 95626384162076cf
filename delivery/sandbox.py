"""A tuned config is compiled in a sandboxed worker before the hook compiles it in the job.

A flag's value can be inside its declared domain and still abort XLA (a CHECK failure is a
SIGABRT: no fallback inside the job can catch it) or hang its compile. Whatever wrote the store
entry, the tuner, the validator, an import or someone with write access to the store's files,
the hook trusts it only once this machine has compiled that very module with that very config
in a `execution.worker` process (memory limit, timeout) and seen it succeed. The verdict is
kept under `<home>/hook/checked/` (a file per key and config), so a machine pays for a check
once per entry, not once per job: one worker start and one compile, a second or two.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable

from execution.flags import CompilerConfig, to_json
from execution.worker import Worker, WorkerFailure

CHECKED_DIR = Path("hook") / "checked"
CHECK_TIMEOUT = 120.0  # seconds: a compile that takes longer in the sandbox is not risked


class SandboxCheck:
    """The compile checks of one job: a worker started on the first check, kept for the next."""

    def __init__(self, home: Path) -> None:
        self.directory = Path(home) / CHECKED_DIR
        self._lock = threading.Lock()
        self._worker: Worker | None = None

    def verdict(self, key: str, config: CompilerConfig,
                job: Callable[[], tuple[bytes, bytes, int]]) -> str | None:
        """None when `config` compiles the module in a sandbox; else why not. `job()` gives what
        to compile (the StableHLO, the job's serialized compile options tuned, the device
        count), asked only when this machine has no verdict yet: a success is remembered on
        disk, and a remembered one costs a file check."""
        mark = self.directory / mark_name(key, config)
        if mark.exists():
            return None
        stablehlo, options, device_count = job()
        with self._lock:
            if self._worker is None:
                self._worker = Worker(devices=None)  # a job's compile may span its GPUs
            try:
                self._worker.call(compile_check, timeout=CHECK_TIMEOUT,
                                  stablehlo=stablehlo, options=options, device_count=device_count)
            except WorkerFailure as failure:
                return f"the tuned compile failed in a sandbox ({failure.kind}): {failure.reason}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            mark.touch()
        except OSError:
            pass  # an unwritable home costs a check per job, nothing else
        return None

    def close(self) -> None:
        """Stop the worker, if one was started."""
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None


def mark_name(key: str, config: CompilerConfig) -> str:
    """The file under CHECKED_DIR that says this machine compiled `config` for `key`."""
    text = json.dumps(to_json(config), sort_keys=True)
    return hashlib.blake2b(f"{key}/{text}".encode(), digest_size=16).hexdigest()


def compile_check(stablehlo: bytes, options: bytes, device_count: int) -> dict[str, Any]:
    """In the worker: compile the module with the serialized options on this many devices
    (an exception, a crash or a timeout is the worker's to report)."""
    import jax
    from jax._src.lib import _jax, xla_client

    devices = jax.devices()[:device_count]
    if len(devices) < device_count:
        raise RuntimeError(f"the sandbox has {len(devices)} devices, the compile wants {device_count}")
    devices[0].client.compile_and_load(stablehlo, _jax.DeviceList(tuple(devices)),
                                       xla_client.CompileOptions.ParseFromString(options))
    return {"ok": True}
