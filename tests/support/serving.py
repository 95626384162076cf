"""Test helpers for real processes: the `fdo` command, and `fdo serve` on a free loopback port with a client."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

START_SECONDS = 60  # a loaded machine imports FastAPI, Plotly and the stages slowly


def fdo(home: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `fdo --home HOME ARGS...` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def store_of_another_job(home: Path, config: dict) -> None:
    """Make `home` and publish a store whose one entry (`config`) is no job's key: a job's
    look-ups there find a store and miss."""
    home.mkdir(parents=True, exist_ok=True)
    unrelated = {"fingerprint": "0" * 32, "env_key": "0" * 32, "kind": "graph", "config": config,
                 "speedup": 1.1}
    (home / "unrelated.jsonl").write_text(json.dumps(unrelated) + "\n")
    result = fdo(home, "store", "import", str(home / "unrelated.jsonl"))
    assert result.returncode == 0, result.stderr


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now and that this process has not handed
    out before: jobs started together must not share one (gRPC, which JAX's distributed service
    runs on, binds with SO_REUSEPORT, so two coordinators could both listen on it)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


@contextlib.contextmanager
def running_server(home: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`fdo --home HOME serve` on a free port until the block ends; yields its base URL."""
    with serving_process(home, env) as (base, _):
        yield base


@contextlib.contextmanager
def serving_process(home: Path | str, env: dict[str, str] | None = None,
                    preload: str | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`fdo --home HOME serve` on a free port until the block ends; yields its base URL and
    its process. `preload`: a module the server imports first (a URL scheme of the tests')."""
    port = free_port()
    log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on it
    launch = ["-m", "pipelines.cli"] if preload is None else [
        "-c", f"import {preload}, runpy; runpy.run_module('pipelines.cli', run_name='__main__')"]
    process = subprocess.Popen([sys.executable, *launch, "--home", str(home), "serve",
                                "--port", str(port)], env={**os.environ, **(env or {})},
                               stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"fdo serve exited with {process.returncode}: {log.read().decode()}")
            try:
                urllib.request.urlopen(f"{base}/v1/health", timeout=1)
                break
            except urllib.error.HTTPError:  # it answers, if only that its store is unusable (503)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fdo serve did not answer on {base} in {START_SECONDS} s") from None
                time.sleep(0.1)
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # stuck (a write that never ends): no server left behind
            process.kill()
            process.wait(timeout=10)
        log.close()


def call(url: str, body: bytes | None = None, token: str | None = None,
         headers: dict | None = None, timeout: float = 30) -> tuple[int, dict | list | bytes, dict]:
    """GET `url` (POST with `body`, JSON unless `headers` say otherwise): status, JSON (or the
    raw bytes) and headers."""
    sent = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, headers={**sent, **(headers or {})},
                                     method="POST" if body is not None else "GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = response.read()
            status, head = response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        data, status, head = error.read(), error.code, dict(error.headers)
    try:
        return status, json.loads(data), head
    except (json.JSONDecodeError, UnicodeDecodeError):
        return status, data, head
