"""What look-ups are answered from: an immutable snapshot of the live store version, rendered
again in a reader process when the files that make it change."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Mapping

import anyio
import anyio.to_thread

from delivery.service.processes import Processes
from storage.home import Home
from storage.store_reader import StoreReader


@dataclass(frozen=True)
class Snapshot:
    """What look-ups are answered from: one version's entries, never changed once made."""

    version: int | None  # None: nothing published, or nothing loaded yet
    published: datetime.datetime | None = None  # when the version was published
    entries: Mapping[str, bytes] = field(default_factory=dict)  # key -> the entry's JSON
    problem: str | None = None  # why the store on disk is not what this holds

    @property
    def unavailable(self) -> bool:
        """The store is unusable and there is no good snapshot to fall back on."""
        return self.version is None and self.problem is not None


Rendering = tuple[int | None, datetime.datetime | None, dict[str, bytes]]


class LiveSnapshot:
    """The live version's snapshot, rendered again in a reader process when the files that
    make it change; a rendering that fails keeps the last good snapshot, with the reason."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.snapshot = Snapshot(None)
        self._seen: object = object()  # the files' state at the last rendering: none yet
        self._reader = Processes()
        self._refreshing: anyio.Lock | None = None

    async def load(self) -> None:
        """The first rendering, in a thread: nothing is served yet, no process needed."""
        self._seen = _disk_state(self.home)
        await self._render(anyio.to_thread.run_sync(render, self.home))

    async def refresh(self) -> None:
        """Render the live version again if CURRENT or its files changed since the last time."""
        if self._refreshing is None:  # made on the event loop, which anyio needs running
            self._refreshing = anyio.Lock()
        async with self._refreshing:
            state = await anyio.to_thread.run_sync(_disk_state, self.home)
            if state != self._seen:
                self._seen = state
                await self._render(self._reader.run(render, self.home))

    async def watch(self, every: float) -> None:
        """Refresh every `every` seconds, until cancelled."""
        while True:
            await anyio.sleep(every)
            await self.refresh()

    async def _render(self, rendering: Awaitable[Rendering]) -> None:
        try:
            version, published, entries = await rendering
        # Damaged files raise many kinds (StoreError, OSError, Arrow's): all mean "keep the last".
        except Exception as exc:
            self.snapshot = replace(self.snapshot, problem=str(exc))
        else:
            self.snapshot = Snapshot(version, published, entries)


def render(home: Home) -> Rendering:
    """The live version, when it was published, and the JSON of each of its entries by key
    (run in the reader process: module-level, so that it pickles)."""
    store = StoreReader(home)
    version = store.current()
    if version is None:
        return None, None, {}
    entries = store.records(version)
    manifest = store.manifest(version)
    published = datetime.datetime.fromisoformat(manifest.created)
    # A served entry carries its version's policies as they apply to it (delivery.lookup.Found):
    # its effective holdout share and the version's relaxed-numerics teams; a client reads them
    # off the entry and never needs the version's manifest.
    return version, published, {
        entry.key: json.dumps({**replace(entry, holdout_share=manifest.holdout_share
                                         if entry.holdout_share is None else entry.holdout_share).to_json(),
                               "relaxed_numerics_teams": manifest.relaxed_numerics_teams},
                              separators=(",", ":")).encode()
        for entry in entries}


def _disk_state(home: Home) -> tuple[Any, ...]:
    """What a reload depends on, cheaply: CURRENT's bytes and the live version's files'
    signatures (a version directory replaced by a rollback or a repair changes them)."""
    current_file = home.location("store", "CURRENT")
    if home.signature(current_file) is None:
        return ()
    try:
        current = home.read_bytes(current_file)
    except OSError as exc:  # unreadable: a state of its own, which the rendering will name
        return (exc.strerror or str(exc),)
    live = f"v{current.decode(errors='replace').strip()}"
    return (current, *(home.signature(home.location("store", live, name))
                       for name in ("manifest.json", "entries.parquet")))
