"""An offline URL scheme for homes: `fdotest://<local path>`, a Beam file system registered by
importing this module, as gs:// or s3:// are, so every stage's tests can run on a URL home."""

from __future__ import annotations

from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem


class UrlFileSystem(LocalFileSystem):
    """A Beam file system of our own for `fdotest://<local path>` URLs, found by its scheme as
    Beam finds gs:// or s3://, kept on the local disk (the remote ones need a network), and
    noting the paths that go through it."""

    used: list[str] = []

    @classmethod
    def scheme(cls) -> str:
        return "fdotest"

    def _local(self, path: str) -> str:
        UrlFileSystem.used.append(path)
        return path.removeprefix("fdotest://")

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def _list(self, prefix):
        for meta in super()._list(self._local(prefix)):
            yield FileMetadata(f"fdotest://{meta.path}", meta.size_in_bytes, meta.last_updated_in_seconds)

    def metadata(self, path):
        meta = super().metadata(self._local(path))
        if not path.startswith("fdotest://"):  # Beam's own calls, on the local path (delete)
            return meta
        return FileMetadata(f"fdotest://{meta.path}", meta.size_in_bytes, meta.last_updated_in_seconds)

    def create(self, path, *args, **kwargs):
        return super().create(self._local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(self._local(path), *args, **kwargs)

    def rename(self, sources, destinations):
        super().rename([self._local(p) for p in sources], [self._local(p) for p in destinations])

    def exists(self, path):
        return super().exists(self._local(path))

    def delete(self, paths):
        super().delete([self._local(p) for p in paths])


def url_of(path) -> str:
    """The `fdotest://` URL of local `path`."""
    return f"fdotest://{path}"
