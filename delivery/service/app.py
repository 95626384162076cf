"""The config service's app: the reads, the writes and the error handlers composed over one
live snapshot of the store (the package's docstring tells the design)."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import anyio
from fastapi import APIRouter, FastAPI
from fastapi_offline import FastAPIOffline

from delivery.metrics import ServiceMetrics
from delivery.service.errors import ERROR_RESPONSES, exception_handlers
from delivery.service.limits import BodyLimit, body_limit
from delivery.service.reads import reads_router
from delivery.service.snapshot import LiveSnapshot
from delivery.service.writes import writes_router
from storage.home import Home
from storage.store_reader import StoreReader

WATCH_SECONDS = 0.5  # a local home: each poll is a few stat calls
# A URL home: each poll is about four requests to the object store (CURRENT's metadata and
# bytes, the live files' metadata); at 0.5 s that was 8 requests a second, day and night.
URL_WATCH_SECONDS = 5.0


def create_app(home: Home, token: str | None) -> FastAPI:
    """The service over the store in `home` (local or URL); writes need `token` (none given:
    writes refused)."""
    live = LiveSnapshot(home)
    metrics = ServiceMetrics(lambda: live.snapshot)

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
                         responses=ERROR_RESPONSES, exception_handlers=exception_handlers(metrics))
    app.add_middleware(BodyLimit, limit_for=body_limit, metrics=metrics)
    _add_routes(app, reads_router(live, StoreReader(home), metrics))
    _add_routes(app, writes_router(home, live, token))
    return app


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """`router`'s routes made the app's own, as if declared on it. Not `include_router`: FastAPI
    (0.165) keeps an included router as a lazily resolved branch that each request walks, a
    measurable share of a look-up's time, and look-ups are the hot path of every hooked compile.
    The routers carry no prefix, dependencies or tags of their own to be applied."""
    app.router.routes.extend(router.routes)
