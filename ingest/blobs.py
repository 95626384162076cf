"""The content-addressed blob store: HLO text, zstd-compressed, written once per fingerprint."""

from __future__ import annotations

import os
from pathlib import Path

import zstandard

_LEVEL = 9


class BlobStore:
    """`<home>/blobs/hlo/<2 hex>/<fingerprint>.hlo.zst`; blob names are paths relative to `blobs/`."""

    def __init__(self, home: Path | str) -> None:
        self.root = Path(home) / "blobs"

    @staticmethod
    def name(fingerprint: str) -> str:
        """The blob name of a module's HLO text."""
        return f"hlo/{fingerprint[:2]}/{fingerprint}.hlo.zst"

    def put_text(self, fingerprint: str, text: str) -> str:
        """Store `text` under `fingerprint` unless it is already there; returns the blob name."""
        name = self.name(fingerprint)
        path = self.root / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_bytes(zstandard.ZstdCompressor(level=_LEVEL).compress(text.encode()))
            os.replace(tmp, path)
        return name

    def get_text(self, name: str) -> str:
        """The text stored under blob `name`."""
        return zstandard.ZstdDecompressor().decompress((self.root / name).read_bytes()).decode()

    def exists(self, name: str) -> bool:
        """Whether blob `name` is stored."""
        return (self.root / name).exists()
