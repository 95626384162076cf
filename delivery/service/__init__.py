"""`fdo serve`: the config service, a FastAPI app on uvicorn.

Reads (no credential): health, a look-up by store key, a batch look-up, and the download of a
whole snapshot with an ETag (its checksum). Writes (bearer token required): import,
invalidate, rollback and deliver, each publishing a new store version. Prometheus metrics at
`/metrics` (delivery.metrics); the API's schema at `/openapi.json`, its docs at `/docs`
(Swagger UI) and `/redoc`, their scripts served by the service itself (fastapi-offline), so
the pages work with no other host reachable. Request and answer bodies are pydantic models
(bodies); a config is a JSON object in both.

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
snapshot goes on being served and `/v1/health` says `"status": "degraded"` with the reason in
`"store"`, still 200; with no good snapshot at all, look-ups and health answer 503.

Every input is validated and size-limited: bodies are counted as they stream in, chunked or
not, and refused with 413 once past the limit, before the rest is read (FastAPI's own
`max_body_size` answers a declared length over the limit in plain text, past the app's error
handlers). Every error, the framework's own (404, 405, 422, 500) included, is JSON:
{"error": {"code": ..., "message": ...}}.

The modules: app (create_app, which composes the rest), bodies (the request and answer bodies
as pydantic models), reads (the look-ups, health, metrics
and snapshot downloads: a router), writes (the credentialed writes: a router, and what the
writer process runs for each), errors (ServiceError and the app's exception handlers),
snapshot (what look-ups are answered from, and how it is rendered again), processes (the
worker processes), limits (the body-size middleware). The dashboards are a router of their own
(pipelines.dashboard.routes), mounted by `fdo serve`: delivery/ imports nothing of pipelines/.
"""
