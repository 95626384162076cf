"""The optional parts of the install: pyproject.toml's extras, and the check a command makes.

`pip install fleet-fdo` is the compiler hook's install: what a training job needs to look up,
apply and record tuned configs. The loop's stages come with the extras: `pipeline` (ingest,
ranking and savings on Beam, tuning, deliver, the validator), `service` (the config
service, its dashboards and the scheduler, which run the pipeline's stages too) and `cluster`
(tuning and validation as tasks on a Ray cluster: `--cluster`, `fdo cluster`). A command
that needs an extra says so with `needs`, and fails with one line naming the extra to install
before it starts, rather than with a traceback halfway through.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Callable, ParamSpec

# The modules each extra's distributions provide, as this project imports them (an import
# name is not a distribution name: apache_beam is apache-beam). tests/project/test_packaging.py checks
# that these match pyproject.toml's extras.
PIPELINE_MODULES = ("apache_beam", "duckdb", "tqdm", "zstandard")
EXTRAS: dict[str, tuple[str, ...]] = {
    "pipeline": PIPELINE_MODULES,
    "service": (*PIPELINE_MODULES, "fastapi", "anyio", "uvicorn", "prometheus_client",
                "fastapi_offline", "apscheduler", "sqlalchemy", "plotly"),
    "cluster": (*PIPELINE_MODULES, "ray"),
}

P = ParamSpec("P")


class MissingExtra(Exception):
    """A command needs an extra that is not installed."""


def require(extra: str) -> None:
    """MissingExtra, naming the extra and how to install it, unless all its modules are here."""
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtra(f"needs the {extra} extra (missing: {', '.join(missing)}): "
                           f"pip install 'fleet-fdo[{extra}]'")


def needs(extra: str) -> Callable[[Callable[P, int]], Callable[P, int]]:
    """Decorate a command that needs `extra`: the check runs before the command does."""
    def decorate(command: Callable[P, int]) -> Callable[P, int]:
        @functools.wraps(command)
        def checked(*args: P.args, **kwargs: P.kwargs) -> int:
            require(extra)
            return command(*args, **kwargs)
        return checked
    return decorate
