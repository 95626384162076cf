"""The content-addressed blob store: HLO text, zstd-compressed, written once per fingerprint."""

from __future__ import annotations

from pathlib import Path

import zstandard

from storage.home import Home
from storage.home_factory import open_home

_LEVEL = 9


class BlobError(ValueError):
    """A stored blob that cannot be read back (corrupt or truncated); the message names it."""


class BlobStore:
    """`<home>/blobs/hlo/<2 hex>/<fingerprint>.hlo.zst`; blob names are paths relative to `blobs/`."""

    def __init__(self, home: Home | str | Path) -> None:
        self.home = open_home(home)
        self.root = self.home.location("blobs")

    @staticmethod
    def name(fingerprint: str) -> str:
        """The blob name of a module's HLO text."""
        return f"hlo/{fingerprint[:2]}/{fingerprint}.hlo.zst"

    def put_text(self, fingerprint: str, text: str) -> str:
        """Store `text` under `fingerprint` unless it is already there; returns the blob name."""
        name = self.name(fingerprint)
        if not self.exists(name):
            self.home.atomic_write(self._location(name),
                                   zstandard.ZstdCompressor(level=_LEVEL).compress(text.encode()))
        return name

    def get_text(self, name: str) -> str:
        """The text stored under blob `name`; BlobError when it does not decompress to text."""
        try:
            return zstandard.ZstdDecompressor().decompress(self.home.read_bytes(self._location(name))).decode()
        except (zstandard.ZstdError, UnicodeDecodeError) as exc:
            raise BlobError(f"blob {name} is corrupt: {exc}") from None

    def exists(self, name: str) -> bool:
        """Whether blob `name` is stored."""
        return self.home.exists(self._location(name))

    def _location(self, name: str):
        return self.home.location("blobs", *name.split("/"))
