"""The service's reads, which need no credential: health, metrics, a look-up by store key, a
batch look-up (all answered from the live snapshot, on the event loop) and the download of a
whole store version."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from delivery.metrics import ServiceMetrics
from delivery.service.bodies import BatchLookup, BatchRequest, ErrorAnswer, Health, Lookup
from delivery.service.errors import ERROR_RESPONSES, ServiceError, error_response
from delivery.service.snapshot import LiveSnapshot, Snapshot
from storage.store_reader import StoreReader
from storage.store_schema import StoreError

_HEX = set("0123456789abcdef")


def reads_router(live: LiveSnapshot, store: StoreReader, metrics: ServiceMetrics) -> APIRouter:
    """The read endpoints: look-ups answered from `live`, downloads read from `store`, every
    look-up counted in `metrics`."""
    router = APIRouter(responses=ERROR_RESPONSES)

    @router.get("/v1/health", response_model=Health, responses={503: {"model": Health}})
    async def health() -> JSONResponse:
        """What the service serves; 503 when it has no good snapshot to serve."""
        snapshot = live.snapshot
        status = "unavailable" if snapshot.unavailable else "degraded" if snapshot.problem else "ok"
        return JSONResponse({"status": status, "version": snapshot.version, "entries": len(snapshot.entries),
                             "store": f"degraded: {snapshot.problem}" if snapshot.problem else "ok"},
                            503 if snapshot.unavailable else 200)

    @router.get("/metrics", response_class=Response,
                responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def prometheus_metrics(request: Request) -> Response:
        """The service's metrics, in Prometheus' text format (OpenMetrics when asked for)."""
        data, content_type = metrics.exposition(request.headers.get("accept"))
        return Response(data, headers={"Content-Type": content_type})

    # The hot path of every hooked compile: async (no thread hand-off), memory only, the
    # entry's JSON rendered in advance, and a miss answered without the exception handler.
    @router.get("/v1/configs/{key}", response_model=Lookup, responses={404: {"model": ErrorAnswer}})
    async def lookup(key: str) -> Response:
        """The live entry for a store key (32 lowercase hex digits)."""
        with metrics.latency["key"].time():
            _check_key(key)
            snapshot = _serving(live.snapshot)
            entry = snapshot.entries.get(key)
            if entry is None or snapshot.version is None:  # a snapshot of no version has no entries
                metrics.misses["key"].inc()
                where = "the store is empty" if snapshot.version is None else f"version {snapshot.version}"
                return error_response(ServiceError(404, "not_found", f"no entry for key {key} ({where})"))
            metrics.hits["key"].inc()
            return Response(b'{"version":%d,"entry":%s}' % (snapshot.version, entry), media_type="application/json")

    @router.post("/v1/configs:batch", response_model=BatchLookup)
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

    _add_download(router, store)
    return router


def _add_download(router: APIRouter, store: StoreReader) -> None:
    """The download of a whole store version, read from `store`, added to `router`."""

    @router.get("/v1/snapshots/{version}", response_class=Response,
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


def _serving(snapshot: Snapshot) -> Snapshot:
    if snapshot.unavailable:
        raise ServiceError(503, "store_unavailable", f"no good store version to serve: {snapshot.problem}")
    return snapshot


def _check_key(key: str) -> None:
    if not (len(key) == 32 and set(key) <= _HEX):
        raise ServiceError(400, "bad_key", "a store key is 32 lowercase hex digits")
