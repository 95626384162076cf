"""Real processes the tests drive: the `fdo` command and the config service on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator


def fdo(home: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `fdo --home HOME ARGS...` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(home: Path, token: str | None = None) -> Iterator[str]:
    """`fdo serve` on a free loopback port; yields its base URL once it answers."""
    port = free_port()
    env = {**os.environ, **({"FDO_TOKEN": token} if token else {})}
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--home", str(home),
                                "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                urllib.request.urlopen(f"{base}/v1/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)
