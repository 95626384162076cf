"""One compile's per-fusion autotune directory: results delivered to XLA:GPU, and what it did.

XLA:GPU autotunes each GEMM and convolution fusion at compile time. With
`xla_gpu_per_fusion_autotune_cache_dir` set it first looks for a result file in that directory,
named by the fusion's key (`FusionResult.cache_file_name`), and writes one for each fusion it
had to autotune itself. A result made offline (an exhaustive search, once) reaches a job's
compile as such a file.

`Delivery` is one compile's directory: created under a directory its caller owns (the hook's
under its home; a worker's `process_directory`), never a path from the data; the files written;
what XLA took and wrote read back (`Uptake`), and, where asked, XLA's dump of the compile's
results (`AutotuneOutcome`: how XLA keys them now, what an offline tuning made); removed
afterwards, whatever happened. An offline tuning is a delivery of no results (`results.NO_RESULTS`) to a
compile with XLA's exhaustive tiling search (`EXHAUSTIVE_FLAG`).

JAX's persistent compilation cache keys an executable on its compile options, and a jaxlib of
0.10 hashes the per-fusion directory's path with them: a directory made for one compile would
make every such compile a miss, and leave a cache entry behind each time. So where the
persistent cache is on (`execution.autotune.jax_cache`), a delivery is `kept`: one directory per
set of results (`results-<digest>`, the same path for every compile of them, kept between
compiles).

What could not be checked without a GPU (docs/gpu.md): that the installed XLA:GPU reads this
directory in the legacy per-fusion format (jaxlib 0.11.2 also has a newer cache format behind
`xla_gpu_use_new_autotune_cache_format`), and that `cache_file_name` matches its names; the
GPU check compares them with the files XLA itself writes.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from execution.autotune.results import (
    CACHE_FILE_SUFFIX,
    MAX_RESULTS,
    AutotuneResults,
    Keying,
    ResultsError,
    parse_results,
    read_result_file,
)

CACHE_DIR_OPTION = "xla_gpu_per_fusion_autotune_cache_dir"
# Where XLA writes every autotune result of a compile (text, for a name ending in .txt), and the
# flag that makes its autotuner search every tiling: the tuner's own, never a config's (a path
# option is refused there: execution.flags.check_name).
DUMP_OPTION = "xla_gpu_dump_autotune_results_to"
DUMP_FILE = "xla-autotune-dump.txt"
EXHAUSTIVE_FLAG = "xla_gpu_exhaustive_tiling_search"
STALE_SECONDS = 24 * 3600  # a delivery directory this old was left by a process that died
KEPT_STALE_SECONDS = 7 * 24 * 3600  # a kept directory no compile used for this long goes
_DIRECTORY_PREFIX = "fusions-"
_KEPT_PREFIX = "results-"


@dataclass(frozen=True)
class Uptake:
    """What one compile did with the results delivered to it: how many were `delivered`, how
    many XLA read (`taken`; None where the file system keeps no access times), and how many
    fusions it autotuned itself (`autotuned`: the result files it wrote beside them)."""

    delivered: int
    taken: int | None
    autotuned: int

    def describe(self) -> str:
        """One line for a hit record."""
        taken = "unknown (no access times here)" if self.taken is None else str(self.taken)
        return (f"autotune results: {self.delivered} delivered, {taken} taken, "
                f"{self.autotuned} fusions autotuned by XLA")


@dataclass(frozen=True)
class AutotuneOutcome:
    """What one compile did in its per-fusion directory (`Delivery.outcome`): the `uptake` of
    the results delivered; XLA's dump of every result of the compile, keyed as XLA keys them
    now (`dumped`; None where it dumped none, as XLA:CPU, and `dump_error` where the dump was
    refused); how many of the files XLA wrote read as xla.AutotuneResult (`readable`; fewer than
    `uptake.autotuned`: XLA writes another format than the one delivered, `unreadable_sample`
    shows the start of one); how many of the dumped fusions' files bear the name
    `cache_file_name` gives them (`named`: all of them, or the delivered names miss XLA's)."""

    uptake: Uptake
    dumped: AutotuneResults | None
    readable: int
    named: int
    dump_error: str | None = None
    unreadable_sample: str | None = None

    def keying(self) -> Keying | None:
        """How XLA keys its results now (its dump's); None without a dump."""
        return self.dumped.keying() if self.dumped is not None else None


@functools.lru_cache(maxsize=None)
def process_directory() -> Path:
    """A directory of this process's own (a private `mkdtemp`, removed when the process exits)
    for the deliveries of the compiles it runs: a worker's, never a path from the data."""
    path = Path(tempfile.mkdtemp(prefix="fdo-autotune-"))
    atexit.register(shutil.rmtree, path, True)
    return path


class Delivery:
    """One compile's per-fusion cache directory, filled with `results`, as a context manager.

    Entering creates a fresh directory under `parent` (a directory of the caller's own: the
    directory never comes from the results) and writes each result where XLA looks for it; each
    file's access time is set to the epoch, so a read by XLA shows (`uptake`); it also removes
    any sibling directory a process that died left more than STALE_SECONDS ago. With `dump`, XLA
    is also told to dump the compile's results into the directory (`outcome` reads them). Exiting
    removes the directory, whether or not the compile succeeded. Each delivery has its own
    directory: threads and processes never share one. OSError when `parent` cannot be written.

    `kept` (for JAX's persistent cache, see the module's docstring): the directory is instead
    `parent/results-<digest>`, the same for every delivery of these results, in every process;
    entering creates it or takes it as it is (rewriting any delivered file that is missing or
    differs, atomically) and marks it used; exiting leaves it, with the results XLA wrote for the
    fusions it autotuned itself (a later compile of them reads those too). Kept directories no
    compile used for KEPT_STALE_SECONDS are swept. What `uptake` counts is then this compile's:
    the files XLA wrote since entering; a delivered file read by another compile meanwhile
    counts as taken.
    """

    def __init__(self, results: AutotuneResults, parent: Path, dump: bool = False, kept: bool = False) -> None:
        if dump and kept:
            raise ValueError("a kept directory is shared between compiles: it takes no dump of one")
        self.results = results
        self.parent = Path(parent)
        self.dump = dump
        self.kept = kept
        self.directory: Path | None = None
        self._names: frozenset[str] = frozenset()
        self._before: frozenset[str] = frozenset()
        self._atime_observable = False

    def __enter__(self) -> "Delivery":
        self.parent.mkdir(parents=True, exist_ok=True)
        _sweep(self.parent)
        if self.kept:
            self.directory = self.parent / f"{_KEPT_PREFIX}{self.results.digest()}"
            self.directory.mkdir(exist_ok=True)
            os.utime(self.directory)  # in use: the sweep leaves it
        else:
            self.directory = Path(tempfile.mkdtemp(prefix=_DIRECTORY_PREFIX, dir=self.parent))
        try:
            names = set()
            for fusion in self.results.fusions:
                path = self.directory / fusion.cache_file_name()
                _write_result(path, fusion.cache_file_text(), replace_only_if_differs=self.kept)
                _clear_access_time(path)
                names.add(path.name)
            self._names = frozenset(names)
            self._before = frozenset(p.name for p in self.directory.iterdir())
            self._atime_observable = _access_times_kept(self.directory)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.directory is not None and not self.kept:
            shutil.rmtree(self.directory, ignore_errors=True)

    def options(self, compile_options: Any) -> Any:
        """A copy of jaxlib CompileOptions `compile_options` that points XLA at this directory,
        for the one executable built with it (in place of any directory its debug options name,
        JAX's persistent cache's: XLA applies the overrides over them)."""
        directory = self._entered()
        tuned = copy.deepcopy(compile_options)
        ours = [(CACHE_DIR_OPTION, str(directory))]
        if self.dump:
            ours.append((DUMP_OPTION, str(directory / DUMP_FILE)))
        tuned.env_option_overrides = list(tuned.env_option_overrides) + ours
        return tuned

    def uptake(self) -> Uptake:
        """What the compile that used this directory did with it (call before exiting)."""
        directory = self._entered()
        written = self._xla_files()
        taken: int | None = None
        if self._atime_observable:
            taken = sum(1 for name in self._names if (directory / name).exists()
                        and (directory / name).stat().st_atime_ns > 0)
        return Uptake(len(self._names), taken, len(written))

    def written_by_xla(self) -> list[Message]:
        """The results XLA wrote into the directory (fusions it autotuned itself), parsed."""
        return [read_result_file(path) for path in self._xla_files()]

    def outcome(self) -> AutotuneOutcome:
        """The `uptake`, XLA's dump (with `dump`) and a census of the files XLA wrote (call
        before exiting)."""
        written = self._xla_files()
        readable, sample = 0, None
        for path in written:
            try:
                read_result_file(path)
                readable += 1
            except ResultsError:
                sample = sample or path.read_text(errors="replace")[:400]
        dumped, error = None, None
        dump = self._entered() / DUMP_FILE
        if self.dump and dump.exists():
            text = dump.read_text(errors="replace")
            try:  # XLA's dump of a whole compile: as many fusions as it holds
                dumped = parse_results(text, max_results=max(MAX_RESULTS, len(text)))
            except ResultsError as exc:
                error = str(exc)
        names = {path.name for path in written}
        named = sum(f.cache_file_name() in names for f in dumped.fusions) if dumped else 0
        return AutotuneOutcome(self.uptake(), dumped, readable, named, error, sample)

    def _xla_files(self) -> list[Path]:
        """The result files XLA wrote into the directory since entering, by name."""
        return [path for path in sorted(self._entered().iterdir())
                if path.name not in self._names and path.name not in self._before
                and path.name.endswith(CACHE_FILE_SUFFIX)]

    def _entered(self) -> Path:
        """The directory, once entered; AssertionError before (a caller's mistake)."""
        assert self.directory is not None, "enter the delivery first"
        return self.directory


def job_sets_cache_dir(compile_options: Any) -> bool:
    """Whether jaxlib CompileOptions `compile_options` name a per-fusion cache directory as an
    override of the job's own (`compiler_options` of its jit): as every option the job set
    itself, it stays the job's, and no results are delivered to that compile. The directory
    that the debug options name (JAX's persistent cache sets one there, as does `XLA_FLAGS`)
    is the job's for its other compiles: a delivery's override takes its place for one."""
    return any(name == CACHE_DIR_OPTION for name, _ in compile_options.env_option_overrides)


def job_cache_dir(compile_options: Any) -> str:
    """The per-fusion cache directory the debug options of `compile_options` name ("" for
    none): JAX's persistent cache's, or `XLA_FLAGS`'."""
    return getattr(compile_options.executable_build_options.debug_options, CACHE_DIR_OPTION, "")


def _write_result(path: Path, text: str, replace_only_if_differs: bool) -> None:
    """Write result file `path`; in a kept directory (`replace_only_if_differs`) only where it
    is missing or differs, through a private file and a rename (a compile in another process
    may be reading it)."""
    if not replace_only_if_differs:
        path.write_text(text)
        return
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text() == text:
            return
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    staging.write_text(text)
    staging.replace(path)


def _clear_access_time(path: Path) -> None:
    os.utime(path, ns=(0, path.stat().st_mtime_ns))


def _access_times_kept(directory: Path) -> bool:
    """Whether a read in `directory` updates a file's access time (not so on noatime mounts)."""
    probe = directory / f".atime-probe.{os.getpid()}.{threading.get_ident()}"  # deliveries may share it
    probe.write_bytes(b"x")
    _clear_access_time(probe)
    probe.read_bytes()
    kept = probe.stat().st_atime_ns > 0
    probe.unlink()
    return kept


def _sweep(parent: Path) -> None:
    """Remove delivery directories under `parent` older than STALE_SECONDS (their compile's
    process was killed before it could remove them), and kept ones no compile used for
    KEPT_STALE_SECONDS (a compile that needs one again writes it again, at the same path)."""
    now = time.time()
    for prefix, age in ((_DIRECTORY_PREFIX, STALE_SECONDS), (_KEPT_PREFIX, KEPT_STALE_SECONDS)):
        for path in parent.glob(f"{prefix}*"):
            with contextlib.suppress(OSError):
                if path.is_dir() and path.stat().st_mtime < now - age:
                    shutil.rmtree(path, ignore_errors=True)
