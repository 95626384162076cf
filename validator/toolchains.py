"""Toolchains: the compilers the validator can measure with.

A toolchain is a Python interpreter with a given jaxlib (the compiler version of an environment,
`jaxlib-<version>`). The validator's sandboxed workers run under the toolchain being validated
(`execution.worker.Worker(python=...)`) and import this project's code from the caller's directory,
so only the compiler differs. The default toolchain is the running interpreter.

Registered toolchains live in `<home>/toolchains/<name>.json` (written atomically), on a local
or a URL home alike; the interpreter a record names is a path on the machine that registered it.
What a toolchain runs is probed, not trusted: `probe` runs the interpreter once and reads its
jaxlib version and environment, and the validator probes again before every run.

`build_venv` makes a toolchain from a pinned jax/jaxlib release: a venv whose only own packages
are jax and jaxlib, sharing the running interpreter's site-packages (numpy, scipy, ml_dtypes,
protobuf, ...) through a `.pth` file placed after its own, so one download of about 90 MB gives
a second compiler. `standalone=True` installs every dependency into the venv instead. A venv
must be on a local disk: `venv_dir` keeps it beside the registry on a local home, and in the
local cache ($FDO_CACHE, default ~/.cache/fleet-fdo) for a URL home.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from execution.worker import project_root
from hlo.environment import Environment, environment_from_json
from storage.home import Home, writer_gone
from storage.home_factory import open_home

DEFAULT_NAME = "default"  # the running interpreter; never registered
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PROBE = ("import json, jaxlib\nfrom hlo.environment import current_environment\n"
          "print(json.dumps({'jaxlib': jaxlib.__version__, "
          "'environment': current_environment().to_json()}))\n")
_PROBE_TIMEOUT = 180.0
# Marks of pip failing to reach the package index, as opposed to a bad version or a broken build.
_NETWORK_MARKS = ("Max retries exceeded", "NewConnectionError", "Temporary failure in name resolution",
                  "Network is unreachable", "ProxyError", "ConnectTimeout", "Connection refused",
                  "Name or service not known", "ReadTimeoutError")


class ToolchainError(ValueError):
    """A toolchain that cannot be used; the message names it and says why."""


class RegistryUnreachable(ToolchainError):
    """pip could not reach the package index to build a toolchain."""


@dataclass(frozen=True)
class Toolchain:
    """A registered (or the running) interpreter and what it compiles with."""

    name: str
    python: str
    jaxlib: str
    environment: dict[str, Any]
    added_at: str

    @property
    def compiler_version(self) -> str:
        """The environment's compiler version, `jaxlib-<version>`."""
        return self.environment["compiler_version"]

    def env(self) -> Environment:
        """The environment this toolchain compiles for on this machine."""
        return environment_from_json(self.environment)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, with the environment's key."""
        return {**asdict(self), "compiler_version": self.compiler_version, "env_key": self.env().key()}


def probe(python: str, name: str = DEFAULT_NAME) -> Toolchain:
    """Run `python` once and read its jaxlib version and environment; ToolchainError if it
    cannot run, has no jaxlib, or cannot import this project."""
    if name == DEFAULT_NAME and python == sys.executable:
        import jaxlib

        from hlo.environment import current_environment

        return Toolchain(name, python, jaxlib.__version__, current_environment().to_json(), _now())
    path = shutil.which(python) or python
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ToolchainError(f"toolchain {name}: {python} is not an executable file")
    env = {**os.environ, "PYTHONPATH": project_root() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        done = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True, env=env,
                              timeout=_PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"toolchain {name}: cannot run {path}: {exc}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ToolchainError(f"toolchain {name}: {path} cannot run jaxlib and this project: {detail}")
    data = json.loads(lines[-1])
    return Toolchain(name, path, data["jaxlib"], data["environment"], _now())


class Registry:
    """The toolchains registered under `<home>/toolchains`."""

    def __init__(self, home: Home) -> None:
        self.home = open_home(home)

    def add(self, name: str, python: str) -> Toolchain:
        """Probe `python` and register it as `name` (replacing a toolchain of that name)."""
        _check_name(name)
        toolchain = probe(python, name)
        self.home.atomic_write(self._record(name), json.dumps(asdict(toolchain), indent=1) + "\n")
        return toolchain

    def remove(self, name: str) -> None:
        """Forget toolchain `name` (its interpreter is left alone)."""
        record = self._record(name)
        if not self.home.exists(record):
            raise ToolchainError(f"toolchain {name}: not registered")
        self.home.delete([record])

    def list(self) -> list[Toolchain]:
        """The registered toolchains, by name."""
        return [self._read(record) for record in self.home.glob("toolchains/*.json")]

    def get(self, name: str | None) -> Toolchain:
        """Toolchain `name` as it is now (probed again); the running interpreter for None or
        'default'. ToolchainError if unknown or no longer usable."""
        if name in (None, DEFAULT_NAME):
            return probe(sys.executable)
        record = self._record(name)
        if not self.home.exists(record):
            known = ", ".join(t.name for t in self.list()) or "none registered"
            raise ToolchainError(f"toolchain {name}: not registered ({known}; see fdo toolchain add)")
        return probe(self._read(record).python, name)

    def _record(self, name: str) -> Any:
        return self.home.location("toolchains", f"{name}.json")

    def _read(self, record: Any) -> Toolchain:
        return Toolchain(**json.loads(self.home.read_bytes(record)))


def venv_dir(home: Home, name: str) -> Path:
    """Where `fdo toolchain create` installs toolchain `name`'s venv, on a local disk: beside
    the registry on a local home (`<home>/toolchains/venvs/<name>`); for a URL home in the
    local cache (`cache_dir()/toolchains/venvs/<digest of the home's URL>/<name>`)."""
    if home.is_local:
        return home.location("toolchains", "venvs", name)
    return cache_dir() / "toolchains" / "venvs" / _digest(home.root) / name


def cached_venv_dir(jax_version: str) -> Path:
    """Where tests and benchmarks keep a venv of `jax_version` between runs: under `cache_dir()`,
    named by the Python version and by the interpreter whose site-packages it shares."""
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_dir() / "toolchains" / f"jax-{jax_version}-{python}-{_digest(str(Path(sys.prefix).resolve()))}"


def cache_dir() -> Path:
    """This machine's cache of fleet-fdo: $FDO_CACHE, default ~/.cache/fleet-fdo."""
    return Path(os.environ.get("FDO_CACHE") or Path.home() / ".cache" / "fleet-fdo")


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


def build_venv(dest: Path, jax_version: str, standalone: bool = False) -> str:
    """A venv at `dest` with jax and jaxlib `jax_version`; returns its interpreter. An existing
    venv there that runs that version is reused. RegistryUnreachable if pip cannot reach the
    index, ToolchainError for any other failure."""
    python = str(dest / "bin" / "python")
    if dest.exists():
        try:
            if probe(python, dest.name).jaxlib == jax_version:
                return python
        except ToolchainError:
            pass  # a broken or moved base: build it again
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for abandoned in dest.parent.glob(f".{dest.name}.tmp-*"):  # left by a build that was killed
        if writer_gone(abandoned.name):
            shutil.rmtree(abandoned, ignore_errors=True)
    with open_home(dest.parent).staged_directory(dest, durable=False) as staging:
        _install(staging, jax_version, standalone)
    found = probe(python, dest.name).jaxlib
    if found != jax_version:
        raise ToolchainError(f"{dest}: built for jaxlib {jax_version} but it runs {found}")
    return python


def _install(venv: Path, jax_version: str, standalone: bool) -> None:
    """A venv at `venv` with jax and jaxlib `jax_version` (see the module docstring)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "create the venv")
    site = Path(_run([str(venv / "bin" / "python"), "-c",
                      "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "find its site-packages"))
    packages = [f"jax=={jax_version}", f"jaxlib=={jax_version}"]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--target", str(site)]
    if standalone:
        command += [*packages, "protobuf>=5.26,<8"]
    else:
        command += ["--no-deps", *packages]
        # After the venv's own site-packages on sys.path: its jax and jaxlib win.
        base = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        (site / "_fdo_shared_site_packages.pth").write_text("".join(f"{p}\n" for p in base))
    _run(command, f"install jax/jaxlib {jax_version}")


def _run(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        output = done.stderr + done.stdout
        lines = output.strip().splitlines() or [f"exit status {done.returncode}"]
        errors = [line for line in lines if line.startswith("ERROR:")] or lines
        error = RegistryUnreachable if any(m in output for m in _NETWORK_MARKS) else ToolchainError
        raise error(f"cannot {what}: {errors[-1]}")
    return done.stdout.strip()


def _check_name(name: str) -> None:
    if name == DEFAULT_NAME or not _NAME.fullmatch(name):
        raise ToolchainError(f"toolchain name {name!r}: use letters, digits, '.', '_' or '-' "
                             f"(and not {DEFAULT_NAME!r}, the running interpreter)")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()
