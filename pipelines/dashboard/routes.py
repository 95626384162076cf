"""The dashboards' FastAPI router: the pages (`/`, `/tuner`, `/graphs`, `/graphs/{fingerprint}`,
`/entries/{key}`), JSON rows under `/api/`, Plotly's script.

`fdo serve` mounts it onto the config service's app (delivery.service.app.create_app), whose
handler turns ServiceError into the service's JSON errors. Every page and endpoint takes the
filters of filters.py as query parameters (`from`, `to`, `days`, `team`, `device_kind`,
`compiler_version`, and on the endpoints `graph` and `entry`); a bad one is a 400 naming it, and so is a
filter that an endpoint's data cannot be narrowed by (queries.NOT_NARROWED).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Callable

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse, Response

from delivery.service.errors import ServiceError
from pipelines.dashboard import queries
from pipelines.dashboard.filters import FilterError, Filters, check_fingerprint, parse_filters
from pipelines.dashboard.layout import ENTRY, GRAPH, GRAPHS, OVERVIEW, TUNER, Page
from pipelines.dashboard.page import FILTER_LABELS, PageData, render
from pipelines.dashboard.queries import NOT_NARROWED, QUERIES, SUMMARY_INPUTS
from pipelines.dashboard.queries import Query as RowsQuery
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from storage.home import Home
from storage.store_schema import StoreError
from storage.warehouse import SchemaError
from vocabulary.tuning import Kind

PLOTLY_PATH = "/static/plotly.min.js"
DATA_ERRORS = (SchemaError, StoreError)  # unreadable data: named in the answer, never a crash


def filter_parameters(
        from_: str | None = Query(None, alias="from", description="first day, YYYY-MM-DD"),
        to: str | None = Query(None, description="last day, YYYY-MM-DD (default: today)"),
        days: str | None = Query(None, description="the window's length in days, ending at `to`"),
        team: str | None = Query(None, description="one team (exact)"),
        device_kind: str | None = Query(None, description="one device kind (exact)"),
        compiler_version: str | None = Query(None, description="one compiler version (exact)"),
        graph: str | None = Query(None, description="one graph fingerprint (32 hex digits)"),
        entry: str | None = Query(None, description="one store entry's key (32 hex digits)")) -> Filters:
    """The filters of a request; ServiceError 400 naming a bad parameter."""
    try:
        return parse_filters(from_, to, days, team, device_kind, compiler_version, graph, entry)
    except FilterError as exc:
        raise ServiceError(400, "bad_request", str(exc)) from None


def dashboard_router(home: Home) -> APIRouter:
    """The dashboards over the data root `home`."""
    router = APIRouter()
    _add_pages(router, home)
    _add_endpoints(router, home)

    @router.get(PLOTLY_PATH, include_in_schema=False)
    def plotly_js() -> Response:
        return Response(_plotly_js(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    return router


def _add_pages(router: APIRouter, home: Home) -> None:
    """The HTML pages: the overview, the tuner, the graphs, a graph's and a store entry's."""

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def overview(filters: Filters = Depends(filter_parameters)) -> HTMLResponse:
        return _render(home, OVERVIEW, "/", "Overview", _resolve(home, _unnarrowed(filters)))

    @router.get("/tuner", response_class=HTMLResponse, include_in_schema=False)
    def tuner(filters: Filters = Depends(filter_parameters)) -> HTMLResponse:
        return _render(home, TUNER, "/tuner", "Tuner", _resolve(home, _unnarrowed(filters)))

    @router.get("/graphs", response_class=HTMLResponse, include_in_schema=False)
    def graph_index(filters: Filters = Depends(filter_parameters)) -> HTMLResponse:
        return _render(home, GRAPHS, "/graphs", "Graphs", _resolve(home, _unnarrowed(filters)))

    @router.get("/graphs/{fingerprint}", response_class=HTMLResponse, include_in_schema=False)
    def graph(fingerprint: str, filters: Filters = Depends(filter_parameters)) -> HTMLResponse:
        chosen = _path_key("fingerprint", fingerprint, "fingerprint")
        scope = _resolve(home, replace(filters, graph=chosen, entry=None))
        rows, errors = _run(home, scope, GRAPH.endpoints())
        names = [r["module_name"] for r in rows["symbols"]]
        if not errors and not names and not rows["hits"]:
            window = scope.filters.window
            raise ServiceError(404, "not_found", f"graph {chosen}: no symbols, and no runs from {window.first} "
                                                 f"to {window.last} under these filters")
        heading = f"{names[0] if names else Kind.GRAPH} · {chosen}"
        return HTMLResponse(render(PageData(GRAPH, f"/graphs/{chosen}", heading, home, scope, rows, errors, None,
                                            PLOTLY_PATH)))

    @router.get("/entries/{key}", response_class=HTMLResponse, include_in_schema=False)
    def entry(key: str, filters: Filters = Depends(filter_parameters)) -> HTMLResponse:
        chosen = _path_key("key", key, "store key")
        scope = _resolve(home, replace(filters, graph=None, entry=chosen))
        rows, errors = _run(home, scope, ENTRY.endpoints())
        found = rows["realized"] + rows["staleness"] + rows["decisions"]
        if not errors and not found:
            window = scope.filters.window
            raise ServiceError(404, "not_found", f"store entry {chosen}: not live, and no runs or validator "
                                                 f"decisions from {window.first} to {window.last} under these filters")
        named = next((row for row in found if row.get("name")), None)
        heading = f"{named['name'] if named else 'store entry'} · {chosen}"
        return HTMLResponse(render(PageData(ENTRY, f"/entries/{chosen}", heading, home, scope, rows, errors, None,
                                            PLOTLY_PATH)))


def _add_endpoints(router: APIRouter, home: Home) -> None:
    """The JSON endpoints: `/api` (their index), `/api/summary`, and one per query."""

    @router.get("/api")
    def index() -> list[Row]:
        """The endpoints, each with what its rows are."""
        return [{"endpoint": f"/api/{name}", "rows": _first_paragraph(query.__doc__)}
                for name, query in [("summary", queries.summary), *QUERIES.items()]]

    @router.get("/api/summary")
    def summary(filters: Filters = Depends(filter_parameters)) -> list[Row]:
        """The headline figures, as one row (the tuned coverage is fleet-wide)."""
        _refuse("summary", frozenset({"graph"}), filters)
        scope = _resolve(home, filters)
        return [queries.summary({name: _rows(QUERIES[name], home, scope) for name in SUMMARY_INPUTS})]

    for name, query in QUERIES.items():
        router.add_api_route(f"/api/{name}", _endpoint(name, query, home), methods=["GET"], name=name,
                             summary=_first_paragraph(query.__doc__))


def _render(home: Home, page: Page, path: str, heading: str, scope: Scope) -> HTMLResponse:
    rows, errors = _run(home, scope, page.endpoints())
    summary = queries.summary(rows) if page.tiles else None
    return HTMLResponse(render(PageData(page, path, heading, home, scope, rows, errors, summary, PLOTLY_PATH)))


def _unnarrowed(filters: Filters) -> Filters:
    """`filters` less a graph and an entry: for the pages over every graph."""
    return replace(filters, graph=None, entry=None)


def _path_key(name: str, text: str, what: str) -> str:
    """A fingerprint or store key from the URL's path; ServiceError 400 naming a bad one."""
    try:
        return check_fingerprint(name, text, what)
    except FilterError as exc:
        raise ServiceError(400, "bad_request", str(exc)) from None


def _run(home: Home, scope: Scope, endpoints: list[str]) -> tuple[dict[str, list[Row]], dict[str, str]]:
    """Each endpoint's rows; an unreadable table leaves its endpoint empty, with the reason."""
    rows: dict[str, list[Row]] = {}
    errors: dict[str, str] = {}
    for name in endpoints:
        try:
            rows[name] = QUERIES[name](home, scope)
        except DATA_ERRORS as exc:
            rows[name], errors[name] = [], str(exc)
    return rows, errors


def _resolve(home: Home, filters: Filters) -> Scope:
    try:
        return Scope.resolve(home, filters)
    except DATA_ERRORS as exc:
        raise ServiceError(500, "bad_data", str(exc)) from None


def _endpoint(name: str, query: RowsQuery, home: Home) -> Callable[..., list[Row]]:
    def endpoint(filters: Filters = Depends(filter_parameters)) -> list[Row]:
        _refuse(name, NOT_NARROWED.get(name, frozenset()), filters)
        return _rows(query, home, _resolve(home, filters))

    return endpoint


def _refuse(name: str, not_narrowed: frozenset[str], filters: Filters) -> None:
    """ServiceError 400 when `filters` name a filter that endpoint `name` cannot apply."""
    refused = sorted(not_narrowed & filters.given())
    if refused:
        raise ServiceError(400, "bad_request", f"{refused[0]}: /api/{name} cannot be narrowed by "
                                               f"{FILTER_LABELS[refused[0]]} (its data has no such column)")


def _rows(query: RowsQuery, home: Home, scope: Scope) -> list[Row]:
    try:
        return query(home, scope)
    except DATA_ERRORS as exc:
        raise ServiceError(500, "bad_data", str(exc)) from None


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").split("\n\n")[0].split())


@functools.cache
def _plotly_js() -> bytes:
    """plotly.js as the plotly package ships it (no CDN: the dashboards work offline)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode()
