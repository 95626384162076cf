"""JAX's plugin entry point for fleet-fdo: with `FDO_HOOK=1`, the compiler hook is on.

JAX imports every module advertised under the `jax_plugins` entry-point group when it starts
its backends, before the first compile, and calls its `initialize()`. This one registers no
backend; it only installs the hook (delivery.hook) when the environment asks for it.
"""

from __future__ import annotations

import logging
import os


def initialize() -> None:
    """Install the hook if FDO_HOOK is set; a bad setting is a warning, never a failed job."""
    if os.environ.get("FDO_HOOK", "") in ("", "0", "false"):
        return
    from delivery.hook import install

    try:
        install()
    except ValueError as exc:
        logging.getLogger("fleet_fdo.hook").warning("fleet-fdo hook not installed: %s", exc)
