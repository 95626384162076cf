"""The service's writes, each publishing a new store version and each needing the service's
bearer token: import, invalidate, rollback and deliver. Each runs in the writer process, one
at a time, and is answered once look-ups see what it published."""

from __future__ import annotations

import hmac
from typing import Any, Callable, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from delivery.imports import describe, entry_rows, publish_import
from delivery.service.bodies import (
    Imported,
    ImportRequest,
    InvalidateRequest,
    Published,
    RollbackRequest,
    inline_schema,
)
from delivery.service.errors import ERROR_RESPONSES, ServiceError
from delivery.service.limits import IMPORT_PATH
from delivery.service.processes import Processes
from delivery.service.snapshot import LiveSnapshot
from delivery.store_writer import Store
from storage.home import Home

IMPORT_SOURCE = "import via service"
T = TypeVar("T")


def writes_router(home: Home, live: LiveSnapshot, token: str | None) -> APIRouter:
    """The write endpoints over the store in `home`, authorized by `token` (None: every write
    refused), each refreshing `live` before it answers."""
    router = APIRouter(responses=ERROR_RESPONSES)
    writer = Processes()
    bearer = HTTPBearer(auto_error=False, description="the service's write token (FDO_TOKEN or --token-file)")

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

    # The body is parsed and checked in the writer process, not here: a 16 MiB import would
    # hold the event loop, and every look-up with it. The schema is declared for OpenAPI only.
    @router.post(IMPORT_PATH, response_model=Imported, dependencies=[Depends(authorized)],
                 openapi_extra={"requestBody": {"required": True, "content": {
                     "application/json": {"schema": inline_schema(ImportRequest)}}}})
    async def import_entries(request: Request) -> dict[str, Any]:
        """Publish owner-validated configs (ImportRequest), replacing the entries of their keys."""
        return await write(_import, await request.body())

    @router.post("/v1/invalidate", response_model=Published, dependencies=[Depends(authorized)])
    async def invalidate(request: InvalidateRequest) -> dict[str, Any]:
        """Publish the live entries less those of these keys."""
        return {"version": await write(_invalidate, request.keys)}

    @router.post("/v1/rollback", response_model=Published, dependencies=[Depends(authorized)])
    async def rollback(request: RollbackRequest) -> dict[str, Any]:
        """Publish an older version's entries as the next version."""
        return {"version": await write(_rollback, request.version)}

    @router.post("/v1/deliver", response_model=Published, dependencies=[Depends(authorized)])
    async def deliver_results() -> dict[str, Any]:
        """Publish the accepted tuning results not delivered yet (Beam)."""
        return {"version": await write(_deliver)}

    return router


# What the writer process runs: module-level functions of plain arguments, so they pickle.

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
