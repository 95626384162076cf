"""The dashboards' FastAPI router: the page at `/`, JSON rows under `/api/`, Plotly's script.

`fdo serve` mounts it onto the config service's app (delivery.service.create_app), whose
handler turns ServiceError into the service's JSON errors. Every endpoint takes the window as
`from` and `to` (YYYY-MM-DD) or `days` (ending at `to`, default today); the default is the last
DEFAULT_DAYS days.
"""

from __future__ import annotations

import datetime
import functools
from pathlib import Path
from typing import Callable

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from delivery.service import ServiceError
from delivery.store import StoreError
from ingest.warehouse import SchemaError
from pipelines.dashboard import queries
from pipelines.dashboard.page import PageData, render
from pipelines.dashboard.queries import QUERIES, Row, Window

DEFAULT_DAYS = 30
MAX_DAYS = 366
PLOTLY_PATH = "/static/plotly.min.js"
DATA_ERRORS = (SchemaError, StoreError)  # unreadable data: named in the answer, never a crash


def dashboard_router(home: Path) -> APIRouter:
    """The dashboards over the data root `home`."""
    router = APIRouter()

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(from_: str | None = Query(None, alias="from"), to: str | None = None,
             days: int | None = None) -> HTMLResponse:
        window = parse_window(from_, to, days)
        rows: dict[str, list[Row]] = {}
        errors: dict[str, str] = {}
        for name, query in QUERIES.items():
            try:
                rows[name] = query(home, window)
            except DATA_ERRORS as exc:
                rows[name], errors[name] = [], str(exc)
        data = PageData(home=home, window=window, rows=rows, errors=errors, summary=queries.summary(rows),
                        plotly_path=PLOTLY_PATH)
        return HTMLResponse(render(data))

    @router.get("/api")
    def index() -> list[Row]:
        """The endpoints, each with what its rows are."""
        return [{"endpoint": f"/api/{name}", "rows": _first_paragraph(query.__doc__)}
                for name, query in [("summary", queries.summary), *QUERIES.items()]]

    @router.get("/api/summary")
    def summary(from_: str | None = Query(None, alias="from"), to: str | None = None,
                days: int | None = None) -> list[Row]:
        """The headline figures of the window, as one row."""
        window = parse_window(from_, to, days)
        return [queries.summary({name: _rows(query, home, window) for name, query in QUERIES.items()})]

    for name, query in QUERIES.items():
        router.add_api_route(f"/api/{name}", _endpoint(query, home), methods=["GET"], name=name,
                             summary=_first_paragraph(query.__doc__))

    @router.get(PLOTLY_PATH, include_in_schema=False)
    def plotly_js() -> Response:
        return Response(_plotly_js(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    return router


def parse_window(first: str | None, last: str | None, days: int | None) -> Window:
    """The window that `from`, `to` and `days` ask for; ServiceError 400 naming a bad one."""
    end = _date("to", last) if last else datetime.date.today()
    if first and days is not None:
        raise ServiceError(400, "bad_request", "give either 'from' or 'days', not both")
    if days is not None and not 1 <= days <= MAX_DAYS:
        raise ServiceError(400, "bad_request", f"days must be 1 to {MAX_DAYS}, not {days}")
    window = Window(_date("from", first), end) if first else Window.last_days(days or DEFAULT_DAYS, end)
    if window.first > window.last:
        raise ServiceError(400, "bad_request", f"from ({window.first}) is after to ({window.last})")
    if (window.last - window.first).days >= MAX_DAYS:
        raise ServiceError(400, "bad_request", f"the window is limited to {MAX_DAYS} days")
    return window


def _endpoint(query: Callable[[Path, Window], list[Row]], home: Path) -> Callable[..., list[Row]]:
    def endpoint(from_: str | None = Query(None, alias="from"), to: str | None = None,
                 days: int | None = None) -> list[Row]:
        return _rows(query, home, parse_window(from_, to, days))

    return endpoint


def _rows(query: Callable[[Path, Window], list[Row]], home: Path, window: Window) -> list[Row]:
    try:
        return query(home, window)
    except DATA_ERRORS as exc:
        raise ServiceError(500, "bad_data", str(exc)) from None


def _date(name: str, text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise ServiceError(400, "bad_request", f"{name}: {text!r} is not a date (YYYY-MM-DD)") from None


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").split("\n\n")[0].split())


@functools.cache
def _plotly_js() -> bytes:
    """plotly.js as the plotly package ships it (no CDN: the dashboards work offline)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode()
