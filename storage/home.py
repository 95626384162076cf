"""The data root of every stage: a `Home`, on a local path or on any URL scheme Beam serves.

One interface, two implementations (`storage.local.LocalHome`, `storage.url.UrlHome`), chosen
by `storage.home_factory.open_home(root)`. Stages name files by their place under the home
(`"warehouse"`, `"store/CURRENT"`) and never build paths themselves; `location(...)` gives the
full name, a `Path` on a local home and a URL string on a URL home.

Guarantees, for every implementation:
- Atomic writes. `create`, `atomic_write` and `staged_directory` write a temporary beside the
  final name and commit it with one rename: a reader sees the old file or the whole new one,
  never part of one, and a killed writer leaves at most a temporary named
  `.<name>.tmp-<pid>-<thread>`, which `remove_temporaries` clears once that process is gone.
  On a local home the file and its directory are fsynced (unless the caller says the write
  need not be `durable`: a cache), so a committed write survives a power cut too; on an object
  store the object is shown only when the write completes (write-then-commit), and is durable
  when the store acknowledges it. A staged directory lands whole on a local home; on an object
  store file by file, so readers find it through a name written last (the store's CURRENT).
- One lock. `lock(name)` serializes its holders. On a local home it is an `flock` on the file
  `name`, which the OS releases when its holder dies (no stale lock after a crash), held across
  processes on one host (and across hosts where the file system honours flock). On a URL home
  object stores offer no lock: it serializes the threads of this process only, and writers on
  several machines must be kept apart by whoever schedules them (one nightly run per home).
  Every write being whole-or-nothing and idempotent, a race loses no data a rerun cannot redo.
- One read path. `open` gives a file pyarrow reads (the local path itself, or the file
  opened through Beam), `read_bytes` the whole file; `glob` lists files in a stable order and
  never lists temporaries whose names do not match the pattern.
Thread safety: a Home holds no state beyond its root; it is picklable, so Beam workers and
worker processes get it (a URL home brings the module of its scheme's file system along).
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
from pathlib import Path
from typing import IO, Any, Callable, Iterator

TMP_MARK = ".tmp-"


class LockHeld(RuntimeError):
    """Another process holds the lock; the message names it and its pid."""


class Pending(abc.ABC):
    """A file being written: `handle` takes the bytes, `commit` shows them whole under the final
    name, `discard` drops them. Exactly one of the two ends it."""

    handle: IO[bytes]

    @abc.abstractmethod
    def commit(self) -> None:
        """Close the temporary and rename it to the final name (durably, on a local home)."""

    @abc.abstractmethod
    def discard(self) -> None:
        """Close and delete the temporary; the final name keeps what it held."""


class Home(abc.ABC):
    """The data root: warehouse tables, blobs, the config store, journals, runs."""

    root: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    def __str__(self) -> str:
        return self.root

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    @property
    @abc.abstractmethod
    def is_local(self) -> bool:
        """Whether the home is a local directory (a `Path` is to be had for every location)."""

    @abc.abstractmethod
    def local(self, what: str) -> Path:
        """The home's directory, for `what` (a stage) that runs on a local home only;
        ValueError naming both on a URL home."""

    @abc.abstractmethod
    def location(self, *parts: str) -> Any:
        """The full name of `parts` under the home: a Path on a local home, a URL string otherwise."""

    @abc.abstractmethod
    def reach(self, options: Any = None) -> None:
        """Check that the home answers (Beam pipeline options, if given, set its file systems
        up first); ValueError naming the home when it does not."""

    @abc.abstractmethod
    def exists(self, location: Any) -> bool:
        """Whether `location` (a file or a directory) exists."""

    @abc.abstractmethod
    def glob(self, pattern: str) -> list[Any]:
        """The files matching `pattern` (relative to the home, `*` within one name), sorted."""

    @abc.abstractmethod
    def children(self, location: Any) -> list[tuple[str, bool]]:
        """(name, whether it is a directory) of what is directly under `location`, sorted;
        empty when nothing is (an object store's directories are the prefixes of its objects)."""

    @abc.abstractmethod
    def open(self, location: Any) -> contextlib.AbstractContextManager[Any]:
        """The file at `location` as pyarrow reads it, for the block: its local path, or a
        binary file object opened through Beam."""

    @abc.abstractmethod
    def signature(self, location: Any) -> tuple | None:
        """What changes when the file at `location` is replaced, read without reading the file
        (its size and modification time, and its inode on a local home); None when there is none."""

    @abc.abstractmethod
    def read_bytes(self, location: Any) -> bytes:
        """The whole content of the file at `location`."""

    @abc.abstractmethod
    def create(self, location: Any, durable: bool = True) -> Pending:
        """Start writing the file at `location` (its directories are made as needed)."""

    @abc.abstractmethod
    def staged_directory(self, location: Any, durable: bool = True) -> contextlib.AbstractContextManager[Path]:
        """A local directory for the block to fill, moved to `location` when the block ends
        (replacing a directory there), dropped when it raises."""

    @abc.abstractmethod
    def delete(self, locations: list[Any]) -> None:
        """Delete the files at `locations` that exist."""

    @abc.abstractmethod
    def lock(self, location: Any, what: str = "", wait: bool = True,
             error: type[LockHeld] = LockHeld) -> contextlib.AbstractContextManager[None]:
        """Hold the lock named by `location` for the block. `wait=False` raises `error` at once,
        naming `what` and the pid that holds it, instead of waiting."""

    @abc.abstractmethod
    def remove_temporaries(self, pattern: str) -> int:
        """Delete the temporaries (files and staged directories) matching `pattern` (relative
        to the home) whose writer is no longer alive; returns how many."""

    def atomic_write(self, location: Any, data: bytes | str | Callable[[IO[bytes]], None],
                     durable: bool = True) -> None:
        """Replace the file at `location` whole: with `data`, or with what `data(handle)` writes."""
        with self.writing(location, durable) as handle:
            if callable(data):
                data(handle)
            else:
                handle.write(data.encode() if isinstance(data, str) else data)

    @contextlib.contextmanager
    def writing(self, location: Any, durable: bool = True) -> Iterator[IO[bytes]]:
        """A handle for the block whose bytes replace the file at `location` when the block
        ends, or are dropped when it raises."""
        pending = self.create(location, durable)
        try:
            yield pending.handle
        except BaseException:
            pending.discard()
            raise
        pending.commit()


def temporary_name(name: str) -> str:
    """The name the temporary of `name` takes beside it while this thread writes it."""
    return f".{name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}"


def writer_gone(name: str) -> bool:
    """Whether the writer of temporary `name` (`.<name>.tmp-<pid>[-<thread>]`) is gone (or
    unknown)."""
    pid = name.rsplit(TMP_MARK, 1)[-1].split("-", 1)[0]
    return not (pid.isdigit() and process_alive(int(pid)))


def process_alive(pid: int) -> bool:
    """Whether a process of this pid runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
