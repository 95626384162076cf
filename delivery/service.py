"""`fdo serve`: the config service, a FastAPI app on uvicorn.

Reads (no credential): health, metrics, a look-up by store key, a batch look-up, and the
download of a whole snapshot with an ETag (its checksum). Writes (bearer token required):
import, invalidate, rollback and deliver, each publishing a new store version. Every input is
validated and size-limited, and every error is JSON: {"error": {"code": ..., "message": ...}}.
The live snapshot is cached in memory and reloaded when CURRENT changes.
"""

from __future__ import annotations

import hmac
import json
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from delivery.store import Store, StoreError, merge_entries, read_import

MAX_BATCH_KEYS = 1000
MAX_BODY_BYTES = 16 << 20
_HEX = set("0123456789abcdef")


class ServiceError(Exception):
    """An error the service answers with, as JSON."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _Snapshot:
    """The live version's entries by key, reloaded when the live version changes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.version: int | None = None
        self.by_key: dict[str, dict[str, Any]] = {}

    def get(self) -> tuple[int | None, dict[str, dict[str, Any]]]:
        version = self.store.current()
        with self.lock:
            if version != self.version:
                rows = self.store.entries(version).to_pylist() if version is not None else []
                self.by_key = {r["key"]: _json_ready(r) for r in rows}
                self.version = version
            return self.version, self.by_key


def create_app(home: Path, token: str | None) -> FastAPI:
    """The service over the store in `home`; writes need `token` (none given: writes refused)."""
    store = Store(home)
    snapshot = _Snapshot(store)
    counters: Counter[str] = Counter()
    app = FastAPI(title="fleet-fdo config service")

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        counters[f"errors_{exc.code}"] += 1
        return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status)

    @app.exception_handler(StoreError)
    async def store_error(_: Request, exc: StoreError) -> JSONResponse:
        counters["errors_store"] += 1
        return JSONResponse({"error": {"code": "store", "message": str(exc)}}, status_code=400)

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        version, entries = snapshot.get()
        return {"status": "ok", "version": version, "entries": len(entries)}

    @app.get("/v1/metrics")
    def metrics() -> dict[str, Any]:
        return dict(counters)

    # The hot path of every hooked compile: async (no thread hand-off) and a miss answered
    # directly rather than through the exception handler.
    @app.get("/v1/configs/{key}")
    async def lookup(key: str) -> Any:
        _check_key(key)
        version, entries = snapshot.get()
        counters["lookups"] += 1
        if key not in entries:
            counters["misses"] += 1
            return JSONResponse({"error": {"code": "not_found", "message":
                                           f"no entry for key {key} in version {version}"}}, 404)
        counters["hits"] += 1
        return {"version": version, "entry": entries[key]}

    @app.post("/v1/configs:batch")
    async def batch(request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list) or len(keys) > MAX_BATCH_KEYS:
            raise ServiceError(400, "bad_request", f"send {{\"keys\": [...]}} with at most {MAX_BATCH_KEYS} keys")
        for key in keys:
            _check_key(key)
        version, entries = snapshot.get()
        counters["lookups"] += len(keys)
        return {"version": version, "entries": {k: entries.get(k) for k in keys}}

    @app.get("/v1/snapshots/{version}")
    def download(version: int, request: Request) -> Response:
        manifests = {m.version: m for m in store.versions()}
        if version not in manifests:
            raise ServiceError(404, "not_found", f"no store version {version}")
        etag = f'"{manifests[version].checksum}"'
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers={"ETag": etag})
        data = (store.root / f"v{version}" / "entries.parquet").read_bytes()
        return Response(data, media_type="application/vnd.apache.parquet", headers={"ETag": etag})

    @app.post("/v1/import")
    async def import_entries(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        body = await _body(request)
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as upload:
            upload.write(body)
            upload.flush()
            new = read_import(Path(upload.name))
        version = store.update(lambda live: merge_entries(live, new), "import via service")
        return {"version": version, "imported": new.num_rows}

    @app.post("/v1/invalidate")
    async def invalidate(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        body = await _json_body(request)
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list) or not keys or len(keys) > MAX_BATCH_KEYS:
            raise ServiceError(400, "bad_request", "send {\"keys\": [...]} with 1 to 1000 keys")
        for key in keys:
            _check_key(key)
        drop = pa.array(keys, pa.string())
        version = store.update(lambda live: live.filter(pc.invert(pc.is_in(live.column("key"), value_set=drop))),
                               "invalidate via service")
        return {"version": version}

    @app.post("/v1/rollback")
    async def rollback(request: Request) -> dict[str, Any]:
        _authorize(request, token)
        body = await _json_body(request)
        version = body.get("version") if isinstance(body, dict) else None
        if not isinstance(version, int) or isinstance(version, bool):
            raise ServiceError(400, "bad_request", "send {\"version\": N}")
        return {"version": store.rollback(version)}

    @app.post("/v1/deliver")
    async def deliver_results(request: Request) -> dict[str, Any]:
        from delivery.deliver import deliver

        _authorize(request, token)
        return {"version": deliver(home)}

    return app


def _authorize(request: Request, token: str | None) -> None:
    given = request.headers.get("authorization", "")
    if token is None:
        raise ServiceError(403, "writes_disabled", "this service was started without a write token")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise ServiceError(401, "unauthorized", "writes need 'Authorization: Bearer <token>'")


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise ServiceError(413, "too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ServiceError(413, "too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    return body


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await _body(request))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ServiceError(400, "bad_request", "the body is not JSON") from None


def _check_key(key: Any) -> None:
    if not (isinstance(key, str) and len(key) == 32 and set(key) <= _HEX):
        raise ServiceError(400, "bad_key", "a store key is 32 lowercase hex digits")


def _json_ready(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
