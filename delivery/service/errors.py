"""The service's errors: ServiceError, its one JSON shape ({"error": {"code", "message"}}), and
the exception handlers that give every error the app meets, the framework's own included, that
shape, counted in the service's metrics."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from delivery.imports import describe
from delivery.metrics import ServiceMetrics
from delivery.service.bodies import ErrorAnswer
from storage.store_schema import StoreError

Handler = Callable[[Request, Any], Awaitable[JSONResponse]]
# Every operation's OpenAPI answers: any of them may answer an error, in the one shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {"default": {"model": ErrorAnswer, "description": "an error"}}


class ServiceError(HTTPException):
    """An error the service answers with, as JSON. An HTTPException, so that FastAPI passes it
    on unchanged when it comes out of reading a body (BodyLimit's 413)."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status, message, dict(headers) if headers else None)
        self.status, self.code, self.message = status, code, message

    def __reduce__(self) -> tuple[Any, ...]:  # raised in worker processes too: it must pickle
        return ServiceError, (self.status, self.code, self.message, self.headers)


def error_response(error: ServiceError) -> JSONResponse:
    """`error` in the service's one shape, with its status and headers (not counted)."""
    return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status,
                        headers=error.headers)


def exception_handlers(metrics: ServiceMetrics) -> dict[int | type[Exception], Handler]:
    """The app's exception handlers, by the exception they answer: each answers in the one
    shape and counts the error in `metrics`."""

    def answer(error: ServiceError) -> JSONResponse:
        metrics.error(error.status, error.code)
        return error_response(error)

    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return answer(exc)

    async def store_error(_: Request, exc: StoreError) -> JSONResponse:
        return answer(ServiceError(400, "store", str(exc)))

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code, message = {
            404: ("not_found", f"no endpoint {request.url.path}"),
            405: ("method_not_allowed", f"{request.method} is not allowed on {request.url.path}"),
        }.get(exc.status_code, (f"http_{exc.status_code}", str(exc.detail)))
        return answer(ServiceError(exc.status_code, code, message, exc.headers))

    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(ServiceError(422, "invalid", describe(exc.errors())))

    # Starlette installs it on the outermost middleware: the server still logs the traceback.
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        return answer(ServiceError(500, "internal", f"internal error ({type(exc).__name__}); "
                                                    "the service's log has the details"))

    return {ServiceError: service_error, StoreError: store_error, HTTPException: http_error,
            RequestValidationError: validation_error, Exception: internal_error}
