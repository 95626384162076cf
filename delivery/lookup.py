"""Where the compiler hook finds tuned configs: the embedded snapshot or the remote service.

Both answer `lookup(key)` with a `Found` (the entry and the store version that served it) or
None, and raise `StoreUnavailable` when the store cannot answer (missing, corrupt, unreachable,
slow); the hook then compiles with the defaults. Neither ever raises anything else.

Each `Found` carries its version's policies as they apply to the entry (delivery.hook): the
effective holdout share, the entry's own, else its version's (the manifest's; the default for a
version or a service answer from before shares), and the teams whose jobs take its relaxed-
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
from typing import Any, Protocol

from delivery.store import Manifest, Store, check_relaxed_numerics_teams, relaxed_speedup_ok
from storage.store import DEFAULT_HOLDOUT_SHARE, check_holdout_share

MAX_RESPONSE_BYTES = 1 << 20
_ENTRY_FIELDS = {"key": str, "fingerprint": str, "env_key": str, "kind": str, "config": dict,
                 "speedup": float}


class StoreUnavailable(Exception):
    """The store could not answer; the message says why."""


@dataclass(frozen=True)
class Found:
    """A live entry for a key and the store version that holds it. The entry is a row of the
    store (delivery.store.ENTRIES) whichever source answered: its configs the JSON text."""

    version: int
    entry: dict[str, Any]
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
        self._loaded: tuple[Manifest, dict[str, dict[str, Any]]] | None = None
        self._failure: str | None = None

    def lookup(self, key: str) -> Found | None:
        """The entry for `key` in the snapshot."""
        manifest, entries = self._snapshot()
        entry = entries.get(key)
        if entry is None or _expired(entry):
            return None
        share = manifest.holdout_share if entry.get("holdout_share") is None else entry["holdout_share"]
        return Found(manifest.version, entry, share, tuple(manifest.relaxed_numerics_teams))

    def _snapshot(self) -> tuple[Manifest, dict[str, dict[str, Any]]]:
        with self._lock:
            if self._loaded is None and self._failure is None:
                try:
                    self._loaded = self._read()
                except Exception as exc:  # corrupt files raise many kinds: all mean "unusable"
                    self._failure = f"embedded store {self.home / 'store'}: {exc}"
            if self._failure is not None:
                raise StoreUnavailable(self._failure)
            assert self._loaded is not None
            return self._loaded

    def _read(self) -> tuple[Manifest, dict[str, dict[str, Any]]]:
        store = Store(self.home)
        version = self.pinned if self.pinned is not None else store.current()
        if version is None:
            raise StoreUnavailable(f"no store published under {self.home}")
        rows = store.entries(version).to_pylist()
        return store.manifest(version), {row["key"]: row for row in rows}


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
        if found.entry["key"] != key or _expired(found.entry):
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
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    entry = data.get("entry") if isinstance(data, dict) else None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(entry, dict) or not isinstance(version, int) or isinstance(version, bool):
        return None
    for name, type_ in _ENTRY_FIELDS.items():
        value = entry.get(name)
        if type_ is float and isinstance(value, int) and not isinstance(value, bool):
            value = entry[name] = float(value)
        if not isinstance(value, type_):
            return None
    # The service sends the configs as objects; the store's text of them, as the store writes it.
    entry["config"] = json.dumps(entry["config"], sort_keys=True)
    relaxed = entry.get("relaxed_config")
    if relaxed is not None:
        if not isinstance(relaxed, dict) or not relaxed_speedup_ok(entry.get("relaxed_speedup")):
            return None
        entry["relaxed_config"] = json.dumps(relaxed, sort_keys=True)
    # Checked as XLA's protos by the hook; here only its type (text, or none).
    if not isinstance(entry.get("autotune_results"), (str, type(None))):
        return None
    # The service serves the version's policies on the entry: the effective share and the
    # version's teams; one from before them serves none. The teams are no column of the entry.
    share, teams = entry.get("holdout_share"), entry.pop("relaxed_numerics_teams", None)
    try:
        share = check_holdout_share(DEFAULT_HOLDOUT_SHARE if share is None else share, "holdout_share")
        teams = check_relaxed_numerics_teams([] if teams is None else teams, "relaxed_numerics_teams")
    except ValueError:  # StoreError too
        return None
    if entry.get("expires_at") is not None:
        try:
            expires = datetime.datetime.fromisoformat(entry["expires_at"])
        except (TypeError, ValueError):
            return None
        entry["expires_at"] = expires if expires.tzinfo else expires.replace(tzinfo=datetime.UTC)
    return Found(version, entry, share, tuple(teams))


def _expired(entry: dict[str, Any]) -> bool:
    expires = entry.get("expires_at")
    return expires is not None and expires <= datetime.datetime.now(datetime.UTC)
