"""Where the compiler hook finds tuned configs: the embedded snapshot or the remote service.

Both answer `lookup(key)` with a `Found` (the entry, a `storage.store_schema.StoreEntry`, and the
store version that served it) or None, and raise `StoreUnavailable` when the store cannot
answer (corrupt, unreachable, slow, or an answer that is no entry), `NoStore` (a kind of it)
when a home has never published a store version; the hook then compiles with the defaults.
Neither ever raises anything else.

Each `Found` carries its version's policies as they apply to the entry (delivery.compile_decision):
the effective holdout share, the entry's own, else its version's (the manifest's; the default for
a version or a service answer from before shares), and the teams whose jobs take its relaxed-
numerics config (none for a version or a service answer from before them).

- `EmbeddedStore` reads one version (pinned, or the live one at first use) once per process.
- `RemoteStore` asks `GET /v1/configs/{key}` with a short deadline (connect and every read
  together), caches answers (hits and
  misses) for a while, and after a failure stops asking for a while, so a slow or dead service
  costs one timeout per back-off period, not one per compile.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from storage.store_reader import StoreReader
from storage.store_schema import DEFAULT_HOLDOUT_SHARE, Manifest, StoreEntry, check_relaxed_numerics_teams

MAX_RESPONSE_BYTES = 1 << 20


class StoreUnavailable(Exception):
    """The store could not answer; the message says why."""


class NoStore(StoreUnavailable):
    """The home has no store version published yet (a fresh home): nothing is wrong, nothing
    is tuned."""


@dataclass(frozen=True)
class Found:
    """A live entry for a key and the store version that holds it, whichever source answered
    (from a service, its holdout share is the effective one, as below)."""

    version: int
    entry: StoreEntry
    holdout_share: float = DEFAULT_HOLDOUT_SHARE  # the entry's, else its version's
    relaxed_numerics_teams: tuple[str, ...] = ()  # its version's (Manifest.relaxed_numerics_teams)


class ConfigSource(Protocol):
    """What the hook looks keys up in."""

    def lookup(self, key: str) -> Found | None:
        """The entry for `key`, None when there is none; StoreUnavailable when unknown."""
        ...


class EmbeddedStore:
    """The store directory of a home, one version read once."""

    def __init__(self, home: Path, version: int | None = None) -> None:
        self.home, self.pinned = Path(home), version
        self._lock = threading.Lock()
        self._loaded: tuple[Manifest, dict[str, StoreEntry]] | None = None
        self._failure: StoreUnavailable | None = None

    def lookup(self, key: str) -> Found | None:
        """The entry for `key` in the snapshot."""
        manifest, entries = self._snapshot()
        entry = entries.get(key)
        if entry is None or entry.expired(_now()):
            return None
        share = manifest.holdout_share if entry.holdout_share is None else entry.holdout_share
        return Found(manifest.version, entry, share, tuple(manifest.relaxed_numerics_teams))

    def _snapshot(self) -> tuple[Manifest, dict[str, StoreEntry]]:
        with self._lock:
            if self._loaded is None and self._failure is None:
                try:
                    self._loaded = self._read()
                except NoStore as exc:
                    self._failure = exc
                except Exception as exc:  # corrupt files raise many kinds: all mean "unusable"
                    self._failure = StoreUnavailable(f"embedded store {self.home / 'store'}: {exc}")
            if self._failure is not None:  # a fresh one each time: one raised again grows its traceback
                raise type(self._failure)(*self._failure.args)
            assert self._loaded is not None
            return self._loaded

    def _read(self) -> tuple[Manifest, dict[str, StoreEntry]]:
        store = StoreReader(self.home)
        version = self.pinned if self.pinned is not None else store.current()
        if version is None:
            raise NoStore(f"no store published under {self.home}")
        entries = store.records(version)
        return store.manifest(version), {entry.key: entry for entry in entries}


class RemoteStore:
    """The config service at `url`."""

    def __init__(self, url: str, timeout: float = 0.25, cache_seconds: float = 600.0,
                 backoff_seconds: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"store URL {url!r}: must start with http:// or https://")
        self.url = url.rstrip("/")
        self.timeout, self.cache_seconds, self.backoff_seconds = timeout, cache_seconds, backoff_seconds
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Found | None]] = {}
        self._down_until = 0.0
        self._down_reason = ""
        parts = urllib.parse.urlsplit(self.url)
        self._https, self._netloc, self._path = parts.scheme == "https", parts.netloc, parts.path
        self._connections = threading.local()  # one kept-alive connection per thread

    def lookup(self, key: str) -> Found | None:
        """The service's answer for `key`, from the local cache when fresh."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] > now:
                return cached[1]
            if self._down_until > now:
                raise StoreUnavailable(f"{self._down_reason} (not retried for "
                                       f"{self._down_until - now:.0f} s)")
        try:
            found = self._ask(key)
        except StoreUnavailable as exc:
            with self._lock:
                self._down_until, self._down_reason = time.monotonic() + self.backoff_seconds, str(exc)
            raise
        with self._lock:
            self._cache[key] = (time.monotonic() + self.cache_seconds, found)
        return found

    def _ask(self, key: str) -> Found | None:
        try:
            status, body = self._get(f"{self._path}/v1/configs/{key}")
        except (http.client.HTTPException, OSError) as exc:
            self._connections.connection = None
            reason = "timed out" if isinstance(exc, TimeoutError) else exc
            raise StoreUnavailable(f"store service {self.url}: {reason}") from None
        if status == 404:
            return None
        if status != 200:
            raise StoreUnavailable(f"store service {self.url}: HTTP {status}")
        if len(body) > MAX_RESPONSE_BYTES:
            raise StoreUnavailable(f"store service {self.url}: answer over {MAX_RESPONSE_BYTES} bytes")
        found = _parse_answer(body)
        if found is None:
            raise StoreUnavailable(f"store service {self.url}: malformed answer for {key}")
        if found.entry.key != key or found.entry.expired(_now()):
            return None
        return found


    def _get(self, path: str) -> tuple[int, bytes]:
        """One request, answered whole within `timeout` or TimeoutError: the socket's own
        timeout bounds each read, not their sum, and a server that drips a byte at a time
        would hold a compile forever; a timer shuts the socket at the deadline instead."""
        connection = getattr(self._connections, "connection", None)
        if connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = self._connections.connection = kind(self._netloc, timeout=self.timeout)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read(MAX_RESPONSE_BYTES + 1)
        except (http.client.HTTPException, OSError):
            if expired.is_set():
                raise TimeoutError(f"no whole answer within {self.timeout} s") from None
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            raise TimeoutError(f"no whole answer within {self.timeout} s")
        if response.will_close or len(body) > MAX_RESPONSE_BYTES:
            connection.close()
            self._connections.connection = None
        return response.status, body


def _parse_answer(body: bytes) -> Found | None:
    """The service's answer for a key (api.Lookup: the entry's JSON form, StoreEntry.to_json,
    with its version's policies on it); None where it is no such answer: not JSON, no version,
    an entry that is no StoreEntry (a field of the wrong type, a relaxed config without its
    speedup), a refused holdout share or team list."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    served = data.get("entry") if isinstance(data, dict) else None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(served, dict) or not isinstance(version, int) or isinstance(version, bool):
        return None
    # The service serves the version's policies on the entry: the effective share and the
    # version's teams; one from before them serves none. The teams are no field of the entry.
    teams = served.get("relaxed_numerics_teams")
    try:
        entry = StoreEntry.from_json(served)
        share = DEFAULT_HOLDOUT_SHARE if entry.holdout_share is None else entry.holdout_share
        teams = check_relaxed_numerics_teams([] if teams is None else teams, "relaxed_numerics_teams")
    except ValueError:  # StoreError too
        return None
    return Found(version, entry, share, tuple(teams))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
