"""A home at a URL on any file system Beam serves (gs://, s3://, hdfs://, azfs:// with Beam's
extras for them installed, or a scheme registered as a Beam `FileSystem`)."""

from __future__ import annotations

import contextlib
import importlib
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from storage.home import Home, LockHeld, Pending, temporary_name, writer_gone

_RAW = CompressionTypes.UNCOMPRESSED  # bytes as they are: nothing guessed from names
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class UrlHome(Home):
    """The home at a URL (see `storage.home.Home` for the guarantees)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def __getstate__(self) -> dict[str, Any]:
        # Beam finds a file system among the imported subclasses of its FileSystem: a process
        # that unpickles this home imports the module of the one that serves its scheme.
        try:
            serves = type(FileSystems.get_filesystem(self.root)).__module__
        except ValueError:  # no file system for the scheme here either: reach() names it
            serves = None
        return {"root": self.root, "serves": serves}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["serves"]:
            importlib.import_module(state["serves"])
        self.root = state["root"]

    @property
    def is_local(self) -> bool:
        """Never: files are reached through Beam."""
        return False

    def local(self, what: str) -> Path:
        """Never: ValueError naming `what`, which needs a local home."""
        raise ValueError(f"{what} needs a local home, not {self.root}")

    def location(self, *parts: str) -> str:
        """`parts` joined under the home's URL."""
        return FileSystems.join(self.root, *parts) if parts else self.root

    def reach(self, options: Any = None) -> None:
        """Set Beam's file systems up from `options` (s3:// takes its region and keys from
        them) and check that the home answers: ValueError naming it when it does not (no file
        system for its scheme, its Beam extra not installed, no access)."""
        if options is not None:
            FileSystems.set_options(options)
        try:
            FileSystems.exists(self.root)
        except (OSError, ValueError) as exc:  # Beam's BeamIOError is an OSError
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            raise ValueError(f"home {self.root}: {lines[0]}") from None

    def exists(self, location: str) -> bool:
        """Whether `location` exists."""
        return FileSystems.exists(str(location))

    def glob(self, pattern: str) -> list[str]:
        """The URLs of the files matching `pattern` under the home, sorted."""
        found = FileSystems.match([self.location(pattern)])[0].metadata_list
        return sorted(match.path for match in found)

    def children(self, location: str) -> list[tuple[str, bool]]:
        """The names under `location`, from the objects below it."""
        prefix = str(location).rstrip("/") + "/"
        found: dict[str, bool] = {}
        for match in FileSystems.match([prefix + "**"])[0].metadata_list:
            name, _, rest = match.path[len(prefix):].partition("/")
            found[name] = found.get(name, False) or bool(rest)
        return sorted(found.items())

    @contextlib.contextmanager
    def open(self, location: str) -> Iterator[IO[bytes]]:
        """The file opened through Beam."""
        with FileSystems.open(str(location), compression_type=_RAW) as handle:
            yield handle

    def signature(self, location: str) -> tuple[int, float] | None:
        """(size, last updated) from the object's metadata."""
        try:
            found = FileSystems.match([str(location)])[0].metadata_list
        except OSError:  # Beam's BeamIOError: nothing matched, or no access
            return None
        return (found[0].size_in_bytes, found[0].last_updated_in_seconds) if found else None

    def read_bytes(self, location: str) -> bytes:
        """The file's content."""
        with self.open(location) as handle:
            return handle.read()

    def create(self, location: str, durable: bool = True) -> Pending:
        """A temporary object beside `location`, renamed over it by `commit` (an object is
        durable once its store acknowledges it: `durable` asks nothing more)."""
        return _UrlPending(str(location))

    @contextlib.contextmanager
    def staged_directory(self, location: str, durable: bool = True) -> Iterator[Path]:
        """A local temporary directory, its files written under `location` one by one, each
        atomically, at the end."""
        with tempfile.TemporaryDirectory(prefix=".staged-") as staging:
            yield Path(staging)
            for path in sorted(Path(staging).rglob("*")):
                if path.is_file():
                    relative = path.relative_to(staging).parts
                    self.atomic_write(FileSystems.join(str(location), *relative), path.read_bytes())

    def delete(self, locations: list[str]) -> None:
        """Delete what exists of `locations`."""
        there = [str(location) for location in locations if FileSystems.exists(str(location))]
        if there:
            FileSystems.delete(there)

    @contextlib.contextmanager
    def lock(self, location: str, what: str = "", wait: bool = True,
             error: type[LockHeld] = LockHeld) -> Iterator[None]:
        """A lock among this process's threads only: object stores have none to offer."""
        with _LOCKS_GUARD:
            held = _LOCKS.setdefault(str(location), threading.Lock())
        if not held.acquire(blocking=wait):
            raise error(f"another {what} holds {location} (in this process)")
        try:
            yield
        finally:
            held.release()

    def remove_temporaries(self, pattern: str) -> int:
        """Delete the temporaries matching `pattern` whose writer (on this host) is gone."""
        gone = [path for path in self.glob(pattern) if writer_gone(FileSystems.split(path)[1])]
        self.delete(gone)
        return len(gone)


class _UrlPending(Pending):
    def __init__(self, final: str) -> None:
        head, name = FileSystems.split(final)
        self.final = final
        self.tmp = FileSystems.join(head, temporary_name(name))
        self.handle: IO[bytes] = FileSystems.create(self.tmp, compression_type=_RAW)

    def commit(self) -> None:
        try:
            self.handle.close()
            FileSystems.rename([self.tmp], [self.final])
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.handle.close()
        if FileSystems.exists(self.tmp):
            FileSystems.delete([self.tmp])
