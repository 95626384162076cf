"""What ingestion is handed: the files under the paths it is given, and what can go wrong with one.

An operator hands over whatever a fleet left: files without read permission, directories that
cannot be listed, names of 240 characters or in no encoding, truncated or corrupt files. Each
such input is that input's problem alone: ingestion quarantines it with the reason and goes on.
`INPUT_ERRORS` are the exceptions that mean "this input is bad"; anything else is a bug, or a
home that cannot be written, and stops the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from vocabulary.errors import first_line

# OSError: unreadable, vanished, a name the file system refuses. ValueError: every parser's
# "not what it claims to be" (HloLoadError, TraceError, DropError, SchemaError, UnicodeError).
INPUT_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, pa.ArrowException)


@dataclass(frozen=True)
class Unlisted:
    """A directory under an input path that could not be listed, and why."""

    path: Path
    reason: str


def walk(roots: Iterable[Path]) -> tuple[list[tuple[Path, Path]], list[Unlisted]]:
    """((root, file) for every file under `roots`, in a stable order; the directories that could
    not be listed). A root that is not a directory is listed as given, even if it is missing."""
    found: list[tuple[Path, Path]] = []
    unlisted: list[Unlisted] = []

    def refused(error: OSError) -> None:  # os.walk's report of a directory it cannot list
        unlisted.append(Unlisted(Path(error.filename), f"{error.filename}: cannot list: {error.strerror}"))

    for root in roots:
        if not root.is_dir():
            found.append((root, root))
            continue
        files = []
        for directory, subdirectories, names in os.walk(root, onerror=refused):
            subdirectories.sort()  # so that unlistable directories are told in a stable order
            files += [Path(directory) / name for name in names
                      if (Path(directory) / name).is_file()]
        found += [(root, path) for path in sorted(files)]
    return found, unlisted


def reason(path: Path | str, exc: BaseException) -> str:
    """One line saying why input `path` was refused, naming it once."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path}: cannot read: {exc.strerror}"
    message = first_line(exc)
    return message if str(path) in message else f"{path}: {message}"
