"""Sandboxed worker processes for compiles and runs.

XLA can segfault, abort, run out of memory or hang on an odd config. Each job therefore runs in
a worker subprocess with a memory limit and a wall-clock timeout; whatever happens there comes
back as a `WorkerFailure` with its kind (`vocabulary.failures.Fault`) and reason and never takes the caller down. A
dead or timed-out worker is replaced; a live one is reused, because starting JAX costs seconds.

The memory limit is on the data segment (RLIMIT_DATA: the private writable memory the process
maps, which every allocation of a job is), not on the address space: a CUDA process reserves
host address space of about twice its GPU's memory when it starts, memory it never writes, so no
useful address-space limit lets a GPU worker start.

On a GPU machine each worker owns one GPU (`CUDA_VISIBLE_DEVICES`: the first its caller sees)
and takes its memory as it needs it rather than the three quarters JAX preallocates: compile
workers and the measuring worker share that GPU (execution.cores: they take turns). A worker
that measures a sharded program whole is given N devices instead (`devices=N`: the first N GPUs
its caller sees, or on a CPU N host devices, XLA's `--xla_force_host_platform_device_count`),
and one given `devices=None` sees what its caller sees.

A job is a module-level function, passed as itself (`worker.call(session.prepare, ...)`): the
worker imports it by its module and qualified name, so only its arguments and result cross the
pipe.

A worker can run under another Python interpreter than its caller (a toolchain: an interpreter
with another jaxlib, see validator.toolchains); it imports this project's code from the same
directory as its caller, so only the compiler differs. Workers run with JAX's 64-bit types on,
so a module's f64 and s64 parameters get inputs of their own types.
"""

from __future__ import annotations

import importlib
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Mapping, TypeVar

from execution.cores import parse_cores, pin, start_backend_on
from hlo.environment import HOST_DEVICES_FLAG
from vocabulary.failures import Fault

T = TypeVar("T")
DEFAULT_MEMORY_LIMIT = 8 * 1024**3
# What a worker's limit grows by for each device it is given past the first: XLA's CPU client
# starts threads per host device, and each thread's stack (8 MiB, reserved, mostly unwritten)
# counts in the data segment, so a limit that suits one device kills a worker of a thousand
# (pthread_create fails; measured in docs/sharded.md).
PER_DEVICE_ALLOWANCE = 16 * 1024**2
DEFAULT_TIMEOUT = 300.0
# JAX's 64-bit types on: with JAX's default, `jax.device_put` makes an f64 or s64 input f32 or
# s32, and XLA refuses it for an f64 or s64 parameter. A worker's jobs make every array from an
# explicit dtype (the module's parameter types), so nothing there leans on the 32-bit default.
# Every worker takes GPU memory as it needs it (a CPU backend ignores the variable).
_ENVIRONMENT = {"JAX_ENABLE_X64": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}



class WorkerFailure(RuntimeError):
    """A job failed in its worker: an exception, a crash, out of memory, or a timeout."""

    def __init__(self, kind: Fault, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason

    @property
    def died(self) -> bool:
        """Whether the worker died with the job (a crash, out of memory, a timeout): the job may
        pass in a fresh worker; an ERROR would raise again."""
        return self.kind.died


def _serve(connection: Any, memory_limit: int, cores: frozenset[int] | None,
           backend_cores: frozenset[int] | None) -> None:
    """The worker's loop: run jobs (module, qualified name, keyword arguments) until the parent
    closes the pipe."""
    if backend_cores:
        start_backend_on(backend_cores)
    pin(cores)  # before any job imports JAX, which sizes its thread pool by the cores it may use
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, memory_limit))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a worker stops
    while True:
        try:
            module_name, qualified_name, kwargs = connection.recv()
        except EOFError:
            return
        try:
            function: Any = importlib.import_module(module_name)
            for name in qualified_name.split("."):
                function = getattr(function, name)
            connection.send(("ok", function(**kwargs)))
        except MemoryError:
            connection.send((Fault.OOM, "out of memory in the worker"))
        except Exception as exc:  # every failure goes back to the caller as data
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            connection.send((Fault.ERROR, detail))


class Worker:
    """One sandboxed subprocess, started on first use and replaced when it dies.

    The worker is a fresh `python -m execution.worker`, not a multiprocessing child: that would
    re-import the caller's `__main__`, and the caller may be any user program (the hook).
    """

    def __init__(self, memory_limit: int = DEFAULT_MEMORY_LIMIT, python: str | None = None,
                 cores: frozenset[int] | None = None,
                 backend_cores: frozenset[int] | None = None, devices: int | None = 1,
                 platform: str | None = None) -> None:
        extra = PER_DEVICE_ALLOWANCE * max((devices or 1) - 1, 0)
        self._memory_limit = memory_limit + extra if memory_limit > 0 else memory_limit
        self._python = python or sys.executable  # the interpreter (and so the jaxlib) it runs
        self._cores = cores  # the cores it is pinned to (None: those of its caller)
        self._backend_cores = backend_cores  # the cores its JAX backend starts on (see cores)
        self._devices = devices  # see the module docstring
        # JAX's platform for the worker (JAX_PLATFORMS), where it must not be the caller's: a
        # sharded module's partitioning runs on host devices whatever the machine's accelerator.
        self._platform = {"JAX_PLATFORMS": platform} if platform else {}
        self._running: _Running | None = None

    def call(self, function: Callable[..., T], timeout: float = DEFAULT_TIMEOUT,
             **kwargs: Any) -> T:
        """Run `function(**kwargs)` in the worker; its result, or WorkerFailure. `function` is
        a module-level function of an importable module (the worker imports it there)."""
        module_name, qualified_name = _importable(function)
        running = self._ensure_started()
        running.connection.send((module_name, qualified_name, kwargs))
        if not running.connection.poll(timeout):
            self._kill()
            raise WorkerFailure(Fault.TIMEOUT, f"{module_name}.{qualified_name} ran past {timeout:.0f} s")
        try:
            status, payload = running.connection.recv()
        except (EOFError, ConnectionResetError):
            raise WorkerFailure(Fault.CRASH, self._death_reason(running.process)) from None
        if status != "ok":
            raise WorkerFailure(Fault(status), payload)
        return payload

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker (it exits when its pipe closes)."""
        if self._running is not None:
            self._running.connection.close()
            try:
                self._running.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
            self._running = None

    def _ensure_started(self) -> _Running:
        """The worker's process and pipe, a fresh process where none runs."""
        if self._running is not None and self._running.process.poll() is None:
            return self._running
        parent, child = socket.socketpair()
        try:
            process = subprocess.Popen(
                [self._python, "-m", "execution.worker", str(child.fileno()),
                 str(self._memory_limit), _core_list(self._cores),
                 _core_list(self._backend_cores)],
                pass_fds=(child.fileno(),),
                env={**os.environ, **_ENVIRONMENT, **device_variables(os.environ, self._devices),
                     **self._platform,
                     "PYTHONPATH": project_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
            )
        except OSError as exc:
            parent.close()
            raise WorkerFailure(Fault.ERROR,
                                f"cannot start a worker with {self._python}: {exc}") from None
        finally:
            child.close()
        self._running = _Running(process, Connection(parent.detach()))
        return self._running

    def _death_reason(self, process: subprocess.Popen[bytes]) -> str:
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill()
            return "worker stopped answering"
        self._running = None
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (out of memory or an abort)" if name == "SIGABRT" else ""
            return f"worker killed by {name}{hint}"
        return f"worker exited with status {code}"

    def _kill(self) -> None:
        if self._running is not None:
            self._running.process.kill()
            self._running.process.wait()
            self._running = None


@dataclass(frozen=True)
class _Running:
    """A worker's process and the pipe to it, from its start until it stops."""

    process: subprocess.Popen[bytes]
    connection: Connection


def _importable(function: Callable[..., Any]) -> tuple[str, str]:
    """The module and qualified name a worker imports `function` by; TypeError when it has
    none (a lambda, a nested function, or one of a script run as `__main__`)."""
    module_name = getattr(function, "__module__", None)
    qualified_name = getattr(function, "__qualname__", "")
    if not module_name or module_name == "__main__" or "<" in qualified_name:
        raise TypeError(f"a worker job is a module-level function of an importable module, "
                        f"not {function!r}")
    return module_name, qualified_name


def device_variables(environ: Mapping[str, str], devices: int | None) -> dict[str, str]:
    """The variables that give a worker of a caller with environment `environ` `devices`
    devices: the first that many GPUs its caller sees (CUDA's numbering, or the caller's own
    list; none where the caller sees none), and as many host devices on a CPU (XLA_FLAGS with
    its other flags kept); None: nothing changed, the worker sees what its caller does."""
    if devices is None:
        return {}
    if devices < 1:
        raise ValueError(f"a worker needs at least one device, not {devices}")
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [d.strip() for d in visible.split(",")] if visible is not None else [str(d) for d in range(devices)]
    flags = [word for word in environ.get("XLA_FLAGS", "").split()
             if not word.startswith(f"--{HOST_DEVICES_FLAG}=")]
    if devices > 1:
        flags.append(f"--{HOST_DEVICES_FLAG}={devices}")
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus[:devices]), "XLA_FLAGS": " ".join(flags)}



def _core_list(cores: frozenset[int] | None) -> str:
    return ",".join(map(str, sorted(cores or ())))


def project_root() -> str:
    """The directory holding the project's packages, so the worker imports the same code."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WorkerPool:
    """A fixed number of workers handed out one job at a time."""

    def __init__(self, size: int = 1, memory_limit: int = DEFAULT_MEMORY_LIMIT,
                 cores: frozenset[int] | None = None,
                 backend_cores: frozenset[int] | None = None, devices: int | None = 1) -> None:
        self._idle = [Worker(memory_limit, cores=cores, backend_cores=backend_cores,
                             devices=devices) for _ in range(size)]
        self._all = list(self._idle)
        self._available = threading.Semaphore(size)
        self._lock = threading.Lock()

    @contextmanager
    def worker(self) -> Iterator[Worker]:
        """Borrow an idle worker for the duration of the block."""
        self._available.acquire()
        with self._lock:
            worker = self._idle.pop()
        try:
            yield worker
        finally:
            with self._lock:
                self._idle.append(worker)
            self._available.release()

    def close(self) -> None:
        """Stop every worker."""
        for worker in self._all:
            worker.close()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), int(sys.argv[2]),
           *(parse_cores(text) if text else None for text in sys.argv[3:5]))
