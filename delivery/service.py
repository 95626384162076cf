"""`fdo serve`: the config service, a FastAPI app on uvicorn.

Reads (no credential): health, metrics, a look-up by store key, a batch look-up, and the
download of a whole snapshot with an ETag (its checksum). Writes (bearer token required):
import, invalidate, rollback and deliver, each publishing a new store version.

Look-ups never wait on a write. They are answered on the event loop from an immutable
in-memory snapshot of the live version (each entry's JSON, rendered once), which is replaced
whole, by one reference swap, once a new one is ready. The work that can block or hold the
interpreter runs in worker processes (anyio's process pool), so that it takes neither the event
loop nor its GIL: the writes (the store's flock, fsync, Beam, the allowlist check of every
entry) in one writer process, one write at a time, and the rendering of a new snapshot in a
reader process, after each write through this service and whenever a watcher, polling every
WATCH_SECONDS, finds CURRENT or the live version's files changed (a version published by
anyone else). When the store on disk is unusable (a corrupt CURRENT, a live version deleted or
failing its checksum), the last good snapshot goes on being served and `/v1/health` says
`"status": "degraded"` with the reason in `"store"`, still 200; with no good snapshot at all,
look-ups and health answer 503.

Every input is validated and size-limited: bodies are counted as they stream in, chunked or
not, and refused with 413 once past the limit, before the rest is read. Every error, the
framework's own (404, 405, 422, 500) included, is JSON: {"error": {"code": ..., "message": ...}}.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

import anyio
import anyio.to_process
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from delivery.store import Store, StoreError, merge_entries, read_import

MAX_BATCH_KEYS = 1000
MAX_BODY_BYTES = 16 << 20  # an import
MAX_JSON_BYTES = 1 << 20  # any other body: 1000 keys take 35 kB
WATCH_SECONDS = 0.5
WORKER_NICE = 19  # background work: beside the server, a worker gets the CPU the server leaves
_HEX = set("0123456789abcdef")
T = TypeVar("T")


class ServiceError(Exception):
    """An error the service answers with, as JSON."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Snapshot:
    """What look-ups are answered from: one version's entries, never changed once made."""

    version: int | None  # None: nothing published, or nothing loaded yet
    entries: Mapping[str, bytes] = field(default_factory=dict)  # key -> the entry's JSON
    problem: str | None = None  # why the store on disk is not what this holds

    @property
    def unavailable(self) -> bool:
        """The store is unusable and there is no good snapshot to fall back on."""
        return self.version is None and self.problem is not None


class Processes:
    """Functions run in worker processes, one at a time, at a lower CPU priority (WORKER_NICE):
    the interpreter serving look-ups never holds its GIL for them, nor waits on what they wait
    on, and on a busy machine the scheduler runs it first."""

    def __init__(self) -> None:
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker process (picklable: module-level, plain arguments)."""
        if self._limiter is None:  # made on the event loop, which anyio needs running
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_process.run_sync(_lowly, function, args, limiter=self._limiter)


class LiveSnapshot:
    """The live version's snapshot, rendered again in a reader process when the files that
    make it change; a rendering that fails keeps the last good snapshot, with the reason."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.snapshot = Snapshot(None)
        self._seen: object = object()  # the files' state at the last rendering: none yet
        self._reader = Processes()
        self._refreshing: anyio.Lock | None = None

    async def load(self) -> None:
        """The first rendering, in a thread: nothing is served yet, no process needed."""
        self._seen = _disk_state(self.home / "store")
        await self._render(anyio.to_thread.run_sync(_render, self.home))

    async def refresh(self) -> None:
        """Render the live version again if CURRENT or its files changed since the last time."""
        if self._refreshing is None:  # made on the event loop, which anyio needs running
            self._refreshing = anyio.Lock()
        async with self._refreshing:
            state = await anyio.to_thread.run_sync(_disk_state, self.home / "store")
            if state != self._seen:
                self._seen = state
                await self._render(self._reader.run(_render, self.home))

    async def watch(self, every: float) -> None:
        """Refresh every `every` seconds, until cancelled."""
        while True:
            await anyio.sleep(every)
            await self.refresh()

    async def _render(self, rendering: Awaitable[tuple[int | None, dict[str, bytes]]]) -> None:
        try:
            version, entries = await rendering
        # Damaged files raise many kinds (StoreError, OSError, Arrow's): all mean "keep the last".
        except Exception as exc:
            self.snapshot = replace(self.snapshot, problem=str(exc))
        else:
            self.snapshot = Snapshot(version, entries)


class BodyTooLarge(Exception):
    """A request body went past its limit while streaming in."""


class BodyLimit:
    """Pure ASGI middleware: a body over `limit_for(path)` bytes gets 413, from its declared
    length before any of it is read, or, chunked, as soon as the bytes received pass the limit;
    the connection is then closed, so the rest is never read either."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int], counters: Counter[str]) -> None:
        self.app, self.limit_for, self.counters = app, limit_for, counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._refuse(scope, send, limit)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:  # too late for a 413: let the server cut the connection
                raise
            await self._refuse(scope, send, limit)

    async def _refuse(self, scope: Scope, send: Send, limit: int) -> None:
        self.counters["errors_too_large"] += 1
        response = _error(413, "too_large", f"request bodies here are limited to {limit} bytes",
                          {"Connection": "close"})
        await response(scope, _no_body, send)


def create_app(home: Path, token: str | None) -> FastAPI:
    """The service over the store in `home`; writes need `token` (none given: writes refused)."""
    store = Store(home)
    live = LiveSnapshot(home)
    writer = Processes()
    counters: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await live.load()
        async with anyio.create_task_group() as background:
            background.start_soon(live.watch, WATCH_SECONDS)
            yield
            background.cancel_scope.cancel()

    app = FastAPI(title="fleet-fdo config service", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit_for=_body_limit, counters=counters)

    async def write(work: Callable[..., T], *args: Any) -> T:
        """`work(home, *args)` in the writer process, then the snapshot rendered again: a write
        is answered once look-ups see what it published."""
        result = await writer.run(work, home, *args)
        await live.refresh()
        return result

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        counters[f"errors_{exc.code}"] += 1
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(StoreError)
    async def store_error(_: Request, exc: StoreError) -> JSONResponse:
        counters["errors_store"] += 1
        return _error(400, "store", str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code, message = {
            404: ("not_found", f"no endpoint {request.url.path}"),
            405: ("method_not_allowed", f"{request.method} is not allowed on {request.url.path}"),
        }.get(exc.status_code, (f"http_{exc.status_code}", str(exc.detail)))
        counters[f"errors_{code}"] += 1
        return _error(exc.status_code, code, message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        counters["errors_invalid"] += 1
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _error(422, "invalid", problems)

    # Installed on the outermost middleware: the server still logs the traceback.
    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        counters["errors_internal"] += 1
        return _error(500, "internal", f"internal error ({type(exc).__name__}); the service's log has the details")

    @app.get("/v1/health")
    async def health() -> JSONResponse:
        snapshot = live.snapshot
        status = "unavailable" if snapshot.unavailable else "degraded" if snapshot.problem else "ok"
        return JSONResponse({"status": status, "version": snapshot.version, "entries": len(snapshot.entries),
                             "store": f"degraded: {snapshot.problem}" if snapshot.problem else "ok"},
                            503 if snapshot.unavailable else 200)

    @app.get("/v1/metrics")
    async def metrics() -> dict[str, Any]:
        return dict(counters)

    # The hot path of every hooked compile: async (no thread hand-off), memory only, the
    # entry's JSON rendered in advance, and a miss answered without the exception handler.
    @app.get("/v1/configs/{key}")
    async def lookup(key: str) -> Response:
        _check_key(key)
        snapshot = _serving(live.snapshot)
        counters["lookups"] += 1
        entry = snapshot.entries.get(key)
        if entry is None:
            counters["misses"] += 1
            return _error(404, "not_found", f"no entry for key {key} in version {snapshot.version}")
        counters["hits"] += 1
        return Response(b'{"version":%d,"entry":%s}' % (snapshot.version, entry), media_type="application/json")

    @app.post("/v1/configs:batch")
    async def batch(request: Request) -> Response:
        keys = _keys(await _json_body(request), 0)
        snapshot = _serving(live.snapshot)
        counters["lookups"] += len(keys)
        found = b",".join(b"%s:%s" % (json.dumps(k).encode(), snapshot.entries.get(k, b"null")) for k in keys)
        return Response(b'{"version":%s,"entries":{%s}}' % (json.dumps(snapshot.version).encode(), found),
                        media_type="application/json")

    @app.get("/v1/snapshots/{version}")
    def download(version: int, request: Request) -> Response:  # a thread: it reads a file
        if version not in {m.version for m in store.versions()}:
            raise ServiceError(404, "not_found", f"no store version {version}")
        try:
            manifest, data = store.read_version(version)
        except StoreError as exc:
            raise ServiceError(500, "store_damaged", str(exc)) from None
        etag = f'"{manifest.checksum}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        return Response(data, media_type="application/vnd.apache.parquet", headers={"ETag": etag})

    @app.post("/v1/import")
    async def import_entries(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        return await write(_import, await request.body())

    @app.post("/v1/invalidate")
    async def invalidate(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        return {"version": await write(_invalidate, _keys(await _json_body(request), 1))}

    @app.post("/v1/rollback")
    async def rollback(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        body = await _json_body(request)
        version = body.get("version") if isinstance(body, dict) else None
        if not isinstance(version, int) or isinstance(version, bool):
            raise ServiceError(400, "bad_request", "send {\"version\": N}")
        return {"version": await write(_rollback, version)}

    @app.post("/v1/deliver")
    async def deliver_results(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        return {"version": await write(_deliver)}

    return app


# What the worker processes run: module-level functions of plain arguments, so they pickle.

def _lowly(function: Callable[..., T], args: tuple[Any, ...]) -> T:
    """`function(*args)` at WORKER_NICE (set, not added: a worker runs many functions)."""
    os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)
    return function(*args)


def _render(home: Path) -> tuple[int | None, dict[str, bytes]]:
    """The live version and the JSON of each of its entries by key."""
    store = Store(home)
    version = store.current()
    rows = store.entries(version).to_pylist() if version is not None else []
    return version, {row["key"]: json.dumps(_json_ready(row), separators=(",", ":")).encode() for row in rows}


def _import(home: Path, body: bytes) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as upload:
        upload.write(body)
        upload.flush()
        new = read_import(Path(upload.name))
    version = Store(home).update(lambda entries: merge_entries(entries, new), "import via service")
    return {"version": version, "imported": new.num_rows}


def _invalidate(home: Path, keys: list[str]) -> int | None:
    drop = pa.array(keys, pa.string())
    return Store(home).update(
        lambda entries: entries.filter(pc.invert(pc.is_in(entries.column("key"), value_set=drop))),
        "invalidate via service")


def _rollback(home: Path, version: int) -> int:
    return Store(home).rollback(version)


def _deliver(home: Path) -> int | None:
    from delivery.deliver import deliver  # Beam: imported by the worker, never by the server

    return deliver(home)


def _body_limit(path: str) -> int:
    return MAX_BODY_BYTES if path == "/v1/import" else MAX_JSON_BYTES


def _serving(snapshot: Snapshot) -> Snapshot:
    if snapshot.unavailable:
        raise ServiceError(503, "store_unavailable", f"no good store version to serve: {snapshot.problem}")
    return snapshot


def _disk_state(root: Path) -> tuple[Any, ...]:
    """What a reload depends on, cheaply: CURRENT's bytes and the live version's files' stat."""
    try:
        current = (root / "CURRENT").read_bytes()
    except FileNotFoundError:
        return ()
    except OSError as exc:  # unreadable: a state of its own, which the rendering will name
        return (exc.strerror,)
    live = root / f"v{current.decode(errors='replace').strip()}"
    return (current, *(_stat(live / name) for name in ("manifest.json", "entries.parquet")))


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def _error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


def _authorize(request: Request, token: str | None) -> None:
    given = request.headers.get("authorization", "")
    if token is None:
        raise ServiceError(403, "writes_disabled", "this service was started without a write token")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise ServiceError(401, "unauthorized", "writes need 'Authorization: Bearer <token>'")


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ServiceError(400, "bad_request", "the body is not JSON") from None


def _keys(body: Any, least: int) -> list[str]:
    """The checked store keys of a {"keys": [...]} body, `least` to MAX_BATCH_KEYS of them."""
    keys = body.get("keys") if isinstance(body, dict) else None
    if not isinstance(keys, list) or not least <= len(keys) <= MAX_BATCH_KEYS:
        raise ServiceError(400, "bad_request", f"send {{\"keys\": [...]}} with {least} to {MAX_BATCH_KEYS} keys")
    for key in keys:
        _check_key(key)
    return keys


def _check_key(key: Any) -> None:
    if not (isinstance(key, str) and len(key) == 32 and set(key) <= _HEX):
        raise ServiceError(400, "bad_key", "a store key is 32 lowercase hex digits")


def _json_ready(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
