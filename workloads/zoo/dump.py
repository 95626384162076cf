"""Compile zoo workloads with XLA's own dumper, one directory per workload."""

from __future__ import annotations

from pathlib import Path

from console.progress import progress_bar
from storage.home_factory import open_home
from workloads.zoo import Workload, all_workloads, get


def _has_dump(d: Path) -> bool:
    return any(d.glob("*.before_optimizations.txt"))


def dump_workload(wl: Workload, out_dir: Path) -> Path:
    """Compile ``wl`` with ``xla_dump_to`` and atomically publish ``out_dir/<name>``.

    XLA writes into a fresh temporary sibling directory, which replaces any old
    dump only once complete, so a killed run never leaves a half-written dir.
    The dump option is passed per compile, so helper modules jax compiles
    elsewhere in the process never land in the workload's directory.
    """
    final = out_dir / wl.name
    with open_home(out_dir).staged_directory(final, durable=False) as tmp:
        wl.lower().compile(compiler_options={"xla_dump_to": str(tmp)})
        if not _has_dump(tmp):
            raise RuntimeError(f"XLA wrote no before_optimizations dump for {wl.name} into {tmp}")
    return final


def dump_workloads(out_dir: Path, names: list[str] | None = None, progress: bool = False) -> list[Path]:
    """Dump the named workloads (all by default) under ``out_dir``; return their dirs.

    Always recompiles, also where a dump already exists, replacing it atomically.
    """
    workloads = all_workloads() if names is None else [get(n) for n in names]
    bar = progress_bar(workloads, desc="dump", unit="workload", enabled=progress)
    return [dump_workload(wl, Path(out_dir)) for wl in bar]
