"""The hook's memo of graph fingerprints, on disk under `$FDO_HOME/cache/fingerprints/`.

Converting StableHLO to HLO to fingerprint it costs a few percent of a compile; a fleet compiles
the same programs over and over, so a module's fingerprint is remembered per (jaxlib version,
module bytecode), and an optimized module's per (that digest, environment, what the compile was
given beside it). A repeat costs a serialization and a hash: only the first compile of a program
on a machine pays the conversion. A memo that cannot be written or read only costs a conversion.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from delivery.jax_objects import optimized_proto
from hlo.fingerprint import DOMAIN as FINGERPRINT_DOMAIN
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule, from_proto_bytes, from_stablehlo
from storage.home_factory import atomic_write

MEMO_DIR = Path("cache") / "fingerprints"
MEMO_SCHEME = b"/entry-layouts-default"  # what from_stablehlo does before fingerprinting
_HEX = set("0123456789abcdef")


class FingerprintMemo:
    """Graph fingerprints by digest of the StableHLO that JAX hands the compiler."""

    def __init__(self, directory: Path) -> None:
        import jaxlib

        self.directory = directory
        # A new jaxlib may convert differently, a new fingerprint scheme hashes differently.
        self._salt = f"jaxlib-{jaxlib.__version__}\n".encode() + FINGERPRINT_DOMAIN + MEMO_SCHEME
        self._known: dict[str, str] = {}

    def fingerprint(self, computation: Any) -> tuple[str, str, HloModule | None]:
        """(digest, graph fingerprint) of the module, and the converted module when it had to
        convert."""
        from jax._src.interpreters import mlir

        bytecode = mlir.module_to_bytecode(computation)
        digest = hashlib.blake2b(self._salt + bytecode, digest_size=16).hexdigest()
        known = self._recall(digest)
        if known is not None:
            return digest, known, None
        module = from_stablehlo(bytecode)
        fingerprint = graph_fingerprint(module)
        self._remember(digest, fingerprint)
        return digest, fingerprint, module

    def optimized(self, digest: str, env_key: str, config: str | None, executable: Any) -> str | None:
        """The fingerprint of the optimized module a compile of `digest` in `env_key` produced,
        with `config` (its JSON text, and its autotune results' text where it had them:
        `Plan.compiled_with`) or, None, with the job's own options (a holdout)."""
        compiled_with = "defaults" if config is None else config  # a config's text is an object
        key = hashlib.blake2b(f"{digest}/{env_key}/{compiled_with}".encode(), digest_size=16).hexdigest()
        known = self._recall(key)
        if known is not None:
            return known
        optimized = optimized_proto(executable)
        fingerprint = _fingerprint_proto(optimized) if optimized is not None else None
        if fingerprint is not None:
            self._remember(key, fingerprint)
        return fingerprint

    def _recall(self, digest: str) -> str | None:
        known = self._known.get(digest) or self._read(digest)
        if known is not None:
            self._known[digest] = known
        return known

    def _remember(self, digest: str, fingerprint: str) -> None:
        self._known[digest] = fingerprint
        self._write(digest, fingerprint)

    def _path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest

    def _read(self, digest: str) -> str | None:
        try:
            text = self._path(digest).read_text()
        except OSError:
            return None
        return text if len(text) == 32 and set(text) <= _HEX else None

    def _write(self, digest: str, fingerprint: str) -> None:
        path = self._path(digest)
        try:
            atomic_write(path, fingerprint, durable=False)
        except OSError:
            pass  # a memo that cannot be written only costs the next process a conversion


def _fingerprint_proto(proto: bytes) -> str | None:
    try:
        return graph_fingerprint(from_proto_bytes(proto, "jax:optimized"))
    except Exception:  # a module the fingerprinter cannot read: the hit still counts
        return None
