"""`fdo serve`: the config service, a FastAPI app on uvicorn.

Reads (no credential): health, a look-up by store key, a batch look-up, and the download of a
whole snapshot with an ETag (its checksum). Writes (bearer token required): import,
invalidate, rollback and deliver, each publishing a new store version. Prometheus metrics at
`/metrics` (delivery.metrics); the API's schema at `/openapi.json`, its docs at `/docs`
(Swagger UI) and `/redoc`, their scripts served by the service itself (fastapi-offline), so
the pages work with no other host reachable. Request and answer bodies are pydantic models
(delivery.api); a config is a JSON object in both.

Look-ups never wait on a write. They are answered on the event loop from an immutable
in-memory snapshot of the live version (each entry's JSON, rendered once), which is replaced
whole, by one reference swap, once a new one is ready. The work that can block or hold the
interpreter runs in worker processes (anyio's process pool), so that it takes neither the event
loop nor its GIL: the writes (the store's lock, fsync, Beam, parsing an import and the
allowlist check of every entry) in one writer process, one write at a time, and the rendering
of a new snapshot in a reader process, after each write through this service and whenever a
watcher, polling every WATCH_SECONDS (URL_WATCH_SECONDS on a URL home), finds CURRENT or the
live version's files changed (a version published by anyone else). When the store on disk is
unusable (a corrupt CURRENT, a live version deleted or failing its checksum), the last good
snapshot goes on being served and
`/v1/health` says `"status": "degraded"` with the reason in `"store"`, still 200; with no good
snapshot at all, look-ups and health answer 503.

Every input is validated and size-limited: bodies are counted as they stream in, chunked or
not, and refused with 413 once past the limit, before the rest is read (FastAPI's own
`max_body_size` answers a declared length over the limit in plain text, past the app's error
handlers). Every error, the framework's own (404, 405, 422, 500) included, is JSON:
{"error": {"code": ..., "message": ...}}.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, TypeVar

import anyio
import anyio.to_process
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from delivery.api import (BatchLookup, BatchRequest, ErrorAnswer, Health, Imported, ImportRequest,
                          InvalidateRequest, Lookup, Published, RollbackRequest, inline_schema)
from delivery.imports import MAX_IMPORT_BYTES, describe, entry_rows, publish_import
from delivery.metrics import ServiceMetrics
from delivery.store_writer import Store, StoreError
from storage.home import Home
from storage.store_schema import entries_of

MAX_BODY_BYTES = MAX_IMPORT_BYTES  # an import
MAX_JSON_BYTES = 1 << 20  # any other body: 1000 keys take 35 kB
WATCH_SECONDS = 0.5  # a local home: each poll is a few stat calls
# A URL home: each poll is about four requests to the object store (CURRENT's metadata and
# bytes, the live files' metadata); at 0.5 s that was 8 requests a second, day and night.
URL_WATCH_SECONDS = 5.0
WORKER_NICE = 19  # background work: beside the server, a worker gets the CPU the server leaves
IMPORT_SOURCE = "import via service"
_HEX = set("0123456789abcdef")
T = TypeVar("T")


class ServiceError(HTTPException):
    """An error the service answers with, as JSON. An HTTPException, so that FastAPI passes it
    on unchanged when it comes out of reading a body (BodyLimit's 413)."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status, message, dict(headers) if headers else None)
        self.status, self.code, self.message = status, code, message

    def __reduce__(self) -> tuple[Any, ...]:  # raised in worker processes too: it must pickle
        return ServiceError, (self.status, self.code, self.message, self.headers)


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

    def __init__(self, home: Home) -> None:
        self.home = home
        self.snapshot = Snapshot(None)
        self._seen: object = object()  # the files' state at the last rendering: none yet
        self._reader = Processes()
        self._refreshing: anyio.Lock | None = None

    async def load(self) -> None:
        """The first rendering, in a thread: nothing is served yet, no process needed."""
        self._seen = _disk_state(self.home)
        await self._render(anyio.to_thread.run_sync(_render, self.home))

    async def refresh(self) -> None:
        """Render the live version again if CURRENT or its files changed since the last time."""
        if self._refreshing is None:  # made on the event loop, which anyio needs running
            self._refreshing = anyio.Lock()
        async with self._refreshing:
            state = await anyio.to_thread.run_sync(_disk_state, self.home)
            if state != self._seen:
                self._seen = state
                await self._render(self._reader.run(_render, self.home))

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


class BodyLimit:
    """Pure ASGI middleware: a body over `limit_for(path)` bytes gets 413, from its declared
    length before any of it is read, or, chunked, as soon as the bytes received pass the limit
    (a ServiceError out of `receive`, which the app answers); the answer closes the connection,
    so the rest is never read either."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int], metrics: ServiceMetrics) -> None:
        self.app, self.limit_for, self.metrics = app, limit_for, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            refusal = _too_large(limit)
            self.metrics.error(refusal.status, refusal.code)
            await _error(refusal)(scope, _no_body, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise _too_large(limit)
            return message

        await self.app(scope, counted, send)


def create_app(home: Home, token: str | None) -> FastAPI:
    """The service over the store in `home` (local or URL); writes need `token` (none given:
    writes refused)."""
    store = Store(home)
    live = LiveSnapshot(home)
    writer = Processes()
    metrics = ServiceMetrics(lambda: live.snapshot)
    bearer = HTTPBearer(auto_error=False, description="the service's write token (FDO_TOKEN or --token-file)")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await live.load()
        async with anyio.create_task_group() as background:
            background.start_soon(live.watch, WATCH_SECONDS if home.is_local else URL_WATCH_SECONDS)
            yield
            background.cancel_scope.cancel()

    # FastAPIOffline: FastAPI with /docs and /redoc on Swagger UI's and ReDoc's scripts from
    # the package, served by this app (FastAPI's own pages load them from a CDN).
    app = FastAPIOffline(title="fleet-fdo config service", lifespan=lifespan,
                         description="Tuned XLA configs by store key, and the writes that publish "
                                     "new store versions. Every error is `{\"error\": {\"code\", "
                                     "\"message\"}}`.",
                         responses={"default": {"model": ErrorAnswer, "description": "an error"}})
    app.add_middleware(BodyLimit, limit_for=_body_limit, metrics=metrics)

    def answer(error: ServiceError) -> JSONResponse:
        metrics.error(error.status, error.code)
        return _error(error)

    async def authorized(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        """Writes need the token, compared in constant time."""
        if token is None:
            raise ServiceError(403, "writes_disabled", "this service was started without a write token")
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise ServiceError(401, "unauthorized", "writes need 'Authorization: Bearer <token>'",
                               {"WWW-Authenticate": "Bearer"})

    async def write(work: Callable[..., T], *args: Any) -> T:
        """`work(home, *args)` in the writer process, then the snapshot rendered again: a write
        is answered once look-ups see what it published."""
        result = await writer.run(work, home, *args)
        await live.refresh()
        return result

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return answer(exc)

    @app.exception_handler(StoreError)
    async def store_error(_: Request, exc: StoreError) -> JSONResponse:
        return answer(ServiceError(400, "store", str(exc)))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code, message = {
            404: ("not_found", f"no endpoint {request.url.path}"),
            405: ("method_not_allowed", f"{request.method} is not allowed on {request.url.path}"),
        }.get(exc.status_code, (f"http_{exc.status_code}", str(exc.detail)))
        return answer(ServiceError(exc.status_code, code, message, exc.headers))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(ServiceError(422, "invalid", describe(exc.errors())))

    # Installed on the outermost middleware: the server still logs the traceback.
    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        return answer(ServiceError(500, "internal", f"internal error ({type(exc).__name__}); "
                                                    "the service's log has the details"))

    @app.get("/v1/health", response_model=Health, responses={503: {"model": Health}})
    async def health() -> JSONResponse:
        """What the service serves; 503 when it has no good snapshot to serve."""
        snapshot = live.snapshot
        status = "unavailable" if snapshot.unavailable else "degraded" if snapshot.problem else "ok"
        return JSONResponse({"status": status, "version": snapshot.version, "entries": len(snapshot.entries),
                             "store": f"degraded: {snapshot.problem}" if snapshot.problem else "ok"},
                            503 if snapshot.unavailable else 200)

    @app.get("/metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def prometheus_metrics(request: Request) -> Response:
        """The service's metrics, in Prometheus' text format (OpenMetrics when asked for)."""
        data, content_type = metrics.exposition(request.headers.get("accept"))
        return Response(data, headers={"Content-Type": content_type})

    # The hot path of every hooked compile: async (no thread hand-off), memory only, the
    # entry's JSON rendered in advance, and a miss answered without the exception handler.
    @app.get("/v1/configs/{key}", response_model=Lookup, responses={404: {"model": ErrorAnswer}})
    async def lookup(key: str) -> Response:
        """The live entry for a store key (32 lowercase hex digits)."""
        with metrics.latency["key"].time():
            _check_key(key)
            snapshot = _serving(live.snapshot)
            entry = snapshot.entries.get(key)
            if entry is None:
                metrics.misses["key"].inc()
                where = "the store is empty" if snapshot.version is None else f"version {snapshot.version}"
                return _error(ServiceError(404, "not_found", f"no entry for key {key} ({where})"))
            metrics.hits["key"].inc()
            return Response(b'{"version":%d,"entry":%s}' % (snapshot.version, entry), media_type="application/json")

    @app.post("/v1/configs:batch", response_model=BatchLookup)
    async def batch(request: BatchRequest) -> Response:
        """The live entries for up to 1000 keys, null where there is none."""
        with metrics.latency["batch"].time():
            snapshot = _serving(live.snapshot)
            found = [(key, snapshot.entries.get(key)) for key in request.keys]
            hits = sum(entry is not None for _, entry in found)
            metrics.hits["batch"].inc(hits)
            metrics.misses["batch"].inc(len(found) - hits)
            body = b",".join(b'"%s":%s' % (key.encode(), entry or b"null") for key, entry in found)
            return Response(b'{"version":%s,"entries":{%s}}' % (b"null" if snapshot.version is None
                                                                 else b"%d" % snapshot.version, body),
                            media_type="application/json")

    @app.get("/v1/snapshots/{version}", response_class=Response,
             responses={200: {"content": {"application/vnd.apache.parquet": {}}, "description": "entries.parquet"},
                        304: {"description": "the ETag given in If-None-Match is the version's"}})
    def download(version: int, request: Request) -> Response:  # a thread: it reads a file
        """A whole store version's entries as Parquet, its checksum as the ETag."""
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

    # The body is parsed and checked in the writer process, not here: a 16 MiB import would
    # hold the event loop, and every look-up with it. The schema is declared for OpenAPI only.
    @app.post("/v1/import", response_model=Imported, dependencies=[Depends(authorized)],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": inline_schema(ImportRequest)}}}})
    async def import_entries(request: Request) -> dict[str, Any]:
        """Publish owner-validated configs (ImportRequest), replacing the entries of their keys."""
        return await write(_import, await request.body())

    @app.post("/v1/invalidate", response_model=Published, dependencies=[Depends(authorized)])
    async def invalidate(request: InvalidateRequest) -> dict[str, Any]:
        """Publish the live entries less those of these keys."""
        return {"version": await write(_invalidate, request.keys)}

    @app.post("/v1/rollback", response_model=Published, dependencies=[Depends(authorized)])
    async def rollback(request: RollbackRequest) -> dict[str, Any]:
        """Publish an older version's entries as the next version."""
        return {"version": await write(_rollback, request.version)}

    @app.post("/v1/deliver", response_model=Published, dependencies=[Depends(authorized)])
    async def deliver_results() -> dict[str, Any]:
        """Publish the accepted tuning results not delivered yet (Beam)."""
        return {"version": await write(_deliver)}

    return app


# What the worker processes run: module-level functions of plain arguments, so they pickle.

def _lowly(function: Callable[..., T], args: tuple[Any, ...]) -> T:
    """`function(*args)` at WORKER_NICE (set, not added: a worker runs many functions)."""
    os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)
    return function(*args)


def _render(home: Home) -> Rendering:
    """The live version, when it was published, and the JSON of each of its entries by key."""
    store = Store(home)
    version = store.current()
    if version is None:
        return None, None, {}
    entries = entries_of(store.entries(version))
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


def _import(home: Home, body: bytes) -> dict[str, Any]:
    """Parse and check an ImportRequest and publish its entries."""
    try:
        request = ImportRequest.model_validate_json(body)
    except ValidationError as exc:
        raise ServiceError(422, "invalid", describe(exc.errors(), ("body",))) from None
    new = entry_rows(request.entries, IMPORT_SOURCE)
    return {"version": publish_import(home, new, IMPORT_SOURCE), "imported": new.num_rows}


def _invalidate(home: Home, keys: list[str]) -> int | None:
    drop = pa.array(keys, pa.string())
    return Store(home).update(
        lambda entries: entries.filter(pc.invert(pc.is_in(entries.column("key"), value_set=drop))),
        "invalidate via service")


def _rollback(home: Home, version: int) -> int:
    return Store(home).rollback(version)


def _deliver(home: Home) -> int | None:
    from delivery.deliver import deliver  # Beam: imported by the worker, never by the server

    return deliver(home)


def _body_limit(path: str) -> int:
    return MAX_BODY_BYTES if path == "/v1/import" else MAX_JSON_BYTES


def _serving(snapshot: Snapshot) -> Snapshot:
    if snapshot.unavailable:
        raise ServiceError(503, "store_unavailable", f"no good store version to serve: {snapshot.problem}")
    return snapshot


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


def _too_large(limit: int) -> ServiceError:
    return ServiceError(413, "too_large", f"request bodies here are limited to {limit} bytes",
                        {"Connection": "close"})


def _error(error: ServiceError) -> JSONResponse:
    return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status,
                        headers=error.headers)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


def _check_key(key: Any) -> None:
    if not (isinstance(key, str) and len(key) == 32 and set(key) <= _HEX):
        raise ServiceError(400, "bad_key", "a store key is 32 lowercase hex digits")
