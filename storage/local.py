"""A home on a local directory: renames are atomic, files and directories are fsynced, locks
are flocks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path
from typing import IO, Iterator

from storage.home import Home, LockHeld, Pending, temporary_name, writer_gone


class LocalHome(Home):
    """The home in a local directory (see `storage.home.Home` for the guarantees)."""

    def __init__(self, root: str | Path) -> None:
        self.path = Path(root)
        self.root = str(self.path)

    @property
    def is_local(self) -> bool:
        """Always: a local home."""
        return True

    def __fspath__(self) -> str:
        """A local home is a path: `Path(home)` and `open` take it."""
        return self.root

    def local(self, what: str) -> Path:
        """The home's directory."""
        return self.path

    def location(self, *parts: str) -> Path:
        """`parts` under the home, as a Path."""
        return self.path.joinpath(*parts)

    def reach(self, options: object = None) -> None:
        """Nothing to check: a local home that is not there yet is made by its first write."""

    def exists(self, location: Path | str) -> bool:
        """Whether `location` exists."""
        return Path(location).exists()

    def glob(self, pattern: str) -> list[Path]:
        """The paths matching `pattern` under the home, sorted."""
        return sorted(self.path.glob(pattern))

    def children(self, location: Path | str) -> list[tuple[str, bool]]:
        """The names in directory `location`, each with whether it is a directory."""
        try:
            return sorted((path.name, path.is_dir()) for path in Path(location).iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    @contextlib.contextmanager
    def open(self, location: Path | str) -> Iterator[str]:
        """The path itself: pyarrow maps local files on its own."""
        yield str(location)

    def signature(self, location: Path | str) -> tuple[int, int, int] | None:
        """(inode, mtime in ns, size): a rename over the file changes the inode."""
        try:
            found = os.stat(location)
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns, found.st_size

    def read_bytes(self, location: Path | str) -> bytes:
        """The file's content."""
        return Path(location).read_bytes()

    def create(self, location: Path | str, durable: bool = True) -> Pending:
        """A temporary beside `location`, renamed over it by `commit`."""
        return _LocalPending(Path(location), durable)

    @contextlib.contextmanager
    def staged_directory(self, location: Path | str, durable: bool = True) -> Iterator[Path]:
        """A directory beside `location`, renamed to it (fsynced, when `durable`) at the end; a
        directory already at `location` is removed just before."""
        final = Path(location)
        staging = final.with_name(temporary_name(final.name))
        shutil.rmtree(staging, ignore_errors=True)  # this thread's, from a killed process
        staging.mkdir(parents=True)
        try:
            yield staging
            if durable:
                for path in staging.rglob("*"):
                    fsync_path(path)
                fsync_path(staging)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if durable:
            fsync_path(final.parent)

    def delete(self, locations: list[Path | str]) -> None:
        """Unlink what exists of `locations`."""
        for location in locations:
            Path(location).unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, location: Path | str, what: str = "", wait: bool = True,
             error: type[LockHeld] = LockHeld) -> Iterator[None]:
        """flock the file `location` (made as needed; it holds the holder's pid)."""
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                handle.seek(0)
                raise error(f"another {what} holds {path} (pid {handle.read().strip() or '?'})") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def remove_temporaries(self, pattern: str) -> int:
        """Remove the temporaries matching `pattern` whose writer is gone."""
        removed = 0
        for path in self.path.glob(pattern):
            if writer_gone(path.name):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed += 1
        return removed


class _LocalPending(Pending):
    def __init__(self, final: Path, durable: bool) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        self.final, self.durable = final, durable
        self.tmp = final.with_name(temporary_name(final.name))
        self.handle: IO[bytes] = open(self.tmp, "wb")

    def commit(self) -> None:
        try:
            self.handle.flush()
            if self.durable:
                os.fsync(self.handle.fileno())
            self.handle.close()
            os.replace(self.tmp, self.final)
        except BaseException:
            self.discard()
            raise
        if self.durable:
            fsync_path(self.final.parent)

    def discard(self) -> None:
        self.handle.close()
        self.tmp.unlink(missing_ok=True)


def fsync_path(path: Path) -> None:
    """Flush a file or a directory (its names) to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
