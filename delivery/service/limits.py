"""The limits on request bodies, and the middleware that holds every request to them."""

from __future__ import annotations

from typing import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from delivery.imports import MAX_IMPORT_BYTES
from delivery.metrics import ServiceMetrics
from delivery.service.errors import ServiceError, error_response

IMPORT_PATH = "/v1/import"
MAX_BODY_BYTES = MAX_IMPORT_BYTES  # an import
MAX_JSON_BYTES = 1 << 20  # any other body: 1000 keys take 35 kB


def body_limit(path: str) -> int:
    """The most bytes a request to `path` may carry."""
    return MAX_BODY_BYTES if path == IMPORT_PATH else MAX_JSON_BYTES


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
            await error_response(refusal)(scope, _no_body, send)
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


def _too_large(limit: int) -> ServiceError:
    return ServiceError(413, "too_large", f"request bodies here are limited to {limit} bytes",
                        {"Connection": "close"})


async def _no_body() -> Message:
    return {"type": "http.disconnect"}
