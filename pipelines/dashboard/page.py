"""The dashboards' HTML: a page of cards (charts drawn by Plotly in the browser, and sortable
grids) under a header with the filters, as a form, and the links between pages.

Each chart card embeds its figure as JSON (or null: "No data yet", or the error that kept its
rows from being read) and links the JSON rows it was drawn from; a grid card lists its rows as an
HTML table. Every link keeps the filters (filters.py). Plotly's script is served by the same app
(routes.PLOTLY_PATH): the page loads nothing from any other host.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

import plotly.io as pio

from pipelines.dashboard.charts import Chart
from pipelines.dashboard.figures import level_text
from pipelines.dashboard.filters import PAGE_FILTERS, Filters, Window
from pipelines.dashboard.grids import MAX_ROWS, Column, Grid
from pipelines.dashboard.layout import Card, Page
from pipelines.dashboard.levels import REALIZED_LEVEL
from pipelines.dashboard.queries import NOT_NARROWED
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from storage.home import Home

WINDOW_CHOICES = (7, 30, 90)
FILTER_LABELS = {"team": "team", "device_kind": "device kind", "compiler_version": "compiler", "graph": "graph",
                 "entry": "store entry"}
NAV = (("overview", "/", "Overview"), ("tuner", "/tuner", "Tuner"), ("graphs", "/graphs", "Graphs"))


@dataclass(frozen=True)
class PageData:
    """What one rendering of a page shows."""

    page: Page
    path: str  # the page's own URL path: where the filter form goes
    heading: str
    home: Home
    scope: Scope
    rows: dict[str, list[Row]]  # by endpoint
    errors: dict[str, str]  # endpoint -> why its rows could not be read
    summary: Row | None  # the headline figures, on pages with tiles
    plotly_path: str

    @property
    def filters(self) -> Filters:
        """The filters the page shows its data under."""
        return self.scope.filters


def render(data: PageData) -> str:
    """The whole page."""
    sections = "\n".join(_section(title, cards, data) for title, cards in data.page.sections)
    tiles = f'<div class="tiles">{_tiles(data)}</div>' if data.summary is not None else ""
    return _PAGE.format(
        plotly=html.escape(data.plotly_path), style=_STYLE, script=_SCRIPT, title=html.escape(data.heading),
        home=html.escape(str(data.home)), span=_span(data.filters.window), nav=_nav(data),
        form=_form(data), tiles=tiles, sections=sections, page=data.page.id)


def graph_path(fingerprint: str, filters: Filters) -> str:
    """The URL of a graph's page under `filters` (less any other graph or entry)."""
    return f"/graphs/{fingerprint}?{filters.query(PAGE_FILTERS)}"


def entry_path(key: str, filters: Filters) -> str:
    """The URL of a store entry's page under `filters` (less any other graph or entry)."""
    return f"/entries/{key}?{filters.query(PAGE_FILTERS)}"


def _section(title: str, cards: tuple[Card, ...], data: PageData) -> str:
    body = "\n".join(_chart(card, data) if isinstance(card, Chart) else _grid(card, data) for card in cards)
    return f'<section><h2>{html.escape(title)}</h2><div class="grid">{body}</div></section>'


def _card_head(card: Card, data: PageData) -> str:
    """A card's title, its JSON link (the filters it can be narrowed by) and its note; a
    'fleet-wide' badge where filters were given that its data cannot be narrowed by."""
    ignored = NOT_NARROWED.get(card.endpoint, frozenset())
    json_link = f"/api/{card.endpoint}?{data.filters.query(ignored)}"
    unnarrowed = sorted(ignored & data.filters.given())
    narrowed_not = html.escape(", ".join(FILTER_LABELS[f] for f in unnarrowed))
    badge = (f'<span class="badge" title="not narrowed by {narrowed_not}">fleet-wide</span>' if unnarrowed else "")
    return f"""
  <header><h3>{html.escape(card.title)}{badge}</h3><a class="json" href="{html.escape(json_link)}">JSON</a></header>
  <p class="note">{html.escape(card.note)}</p>"""


def _empty(card: Card, error: str | None) -> str:
    return f"Could not read the data: {error}" if error else f"No data yet: {card.fills} fills this."


def _chart(chart: Chart, data: PageData) -> str:
    error = data.errors.get(chart.endpoint)
    rows = data.rows[chart.endpoint]
    figure = None if error else chart.build(rows, data.filters.window)
    # "<" escaped so that no string in the figure can close the script element.
    payload = "null" if figure is None else pio.to_json(figure, validate=False).replace("<", "\\u003c")
    links = ""
    if chart.graph_links is not None and figure is not None:
        items = " ".join(f'<a href="{html.escape(graph_path(fingerprint, data.filters))}">{html.escape(text)}</a>'
                         for fingerprint, text in chart.graph_links(rows))
        links = f'<nav class="graph-links">Graph pages: {items}</nav>'
    return f"""
<article class="card{' wide' if chart.wide else ''}">{_card_head(chart, data)}
  <div class="chart" id="chart-{chart.id}" data-chart="{chart.id}" data-endpoint="/api/{chart.endpoint}"
       data-state="{'error' if error else 'loading'}" data-empty="{html.escape(_empty(chart, error))}"></div>
  <script type="application/json" id="figure-{chart.id}">{payload}</script>{links}
</article>"""


def _grid(grid: Grid, data: PageData) -> str:
    error = data.errors.get(grid.endpoint)
    rows = [] if error else grid.pick(data.rows[grid.endpoint])
    if not rows:
        state = "error" if error else "empty"
        body = f'<div class="empty">{html.escape(_empty(grid, error))}</div>'
    else:
        state = "ready"
        head = "".join(f'<th{" data-numeric" if c.numeric else ""} title="sort">{html.escape(c.header)}</th>'
                       for c in grid.columns)
        body_rows = "\n".join("<tr>" + "".join(_cell(c, row, data.filters) for c in grid.columns) + "</tr>"
                              for row in rows[:MAX_ROWS])
        more = (f'<p class="note">The first {MAX_ROWS} of {len(rows)} rows; all are in the JSON.</p>'
                if len(rows) > MAX_ROWS else "")
        body = (f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body_rows}</tbody></table></div>{more}")
    return f"""
<article class="card{' wide' if grid.wide else ''}">{_card_head(grid, data)}
  <div class="rows" data-grid="{grid.id}" data-state="{state}" data-rows="{len(rows)}">{body}</div>
</article>"""


def _cell(column: Column, row: Row, filters: Filters) -> str:
    text = html.escape(column.text(row))
    if column.graph_link and row.get("kind", "graph") == "graph":
        text = f'<a href="{html.escape(graph_path(row["fingerprint"], filters))}">{text}</a>'
    elif column.entry_link:
        text = f'<a href="{html.escape(entry_path(row["key"], filters))}">{text}</a>'
    sort = column.sort(row) if column.sort else None
    attribute = "" if column.sort is None else f' data-sort="{"" if sort is None else html.escape(str(sort))}"'
    return f'<td{" class=num" if column.numeric else ""}{attribute}>{text}</td>'


def _nav(data: PageData) -> str:
    query = data.filters.query(PAGE_FILTERS)
    links = "".join(f'<a class="{"on" if page == data.page.id else ""}" href="{path}?{html.escape(query)}">'
                    f"{label}</a>" for page, path, label in NAV)
    return f'{links}<a href="/api">API</a>'


def _form(data: PageData) -> str:
    """The filters as a form (GET to the page itself), and the quick windows."""
    filters, scope = data.filters, data.scope
    selects = "".join(
        _select(name, f"any {label}", choices, getattr(filters, name))
        for name, label, choices in (("team", "team", scope.teams),
                                     ("device_kind", "device kind", scope.choices("device_kind")),
                                     ("compiler_version", "compiler", scope.choices("compiler_version"))))
    window = filters.window
    days = (window.last - window.first).days + 1
    quick = " ".join(
        f'<a class="{"on" if n == days else ""}" href="{html.escape(data.path)}?'
        f'{html.escape(replace(filters, window=Window.last_days(n, window.last)).query(PAGE_FILTERS))}">{n} d</a>'
        for n in WINDOW_CHOICES)
    clear = f"{data.path}?{replace(filters, team=None, device_kind=None, compiler_version=None).query(PAGE_FILTERS)}"
    return f"""
<form class="filters" method="get" action="{html.escape(data.path)}">
  <label>from <input type="date" name="from" value="{window.first}"></label>
  <label>to <input type="date" name="to" value="{window.last}"></label>
  {selects}
  <button type="submit">Apply</button>
  <a class="clear" href="{html.escape(clear)}">clear filters</a>
  <span class="quick">{quick}</span>
</form>"""


def _select(name: str, any_label: str, choices: list[str], chosen: str | None) -> str:
    values = choices if chosen is None or chosen in choices else [*choices, chosen]
    options = "".join(f'<option value="{html.escape(v)}"{" selected" if v == chosen else ""}>{html.escape(v)}</option>'
                      for v in values)
    return (f'<label>{html.escape(FILTER_LABELS[name])} <select name="{name}">'
            f'<option value="">{html.escape(any_label)}</option>{options}</select></label>')


def _tiles(data: PageData) -> str:
    def number(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    summary = data.summary or {}
    narrowed = bool(data.filters.given())
    live = summary.get("live_version")
    tuner = f"/tuner?{data.filters.query(PAGE_FILTERS)}"
    tiles = (
        ("Chip-hours saved", number(summary.get("total_chip_hours_saved"), ",.0f"), _booked_note(summary), None),
        ("Chip-hours realized", number(summary.get("realized_chip_hours"), ",.0f"), _realized_note(summary), None),
        ("Return on cost", "—" if summary.get("return_on_cost") is None else f"{summary['return_on_cost']:,.1f}×",
         f"realized chip-hours saved per chip-hour the loop spent ({number(summary.get('cost_chip_hours'), ',.1f')})",
         None),
        ("Graph hit rate", number(summary.get("hit_rate"), ".1%"),
         f"of graph chip-time ran tuned on {summary.get('hit_rate_dt') or '—'}", None),
        ("Tuned coverage", number(summary.get("tuned_share"), ".1%"),
         "of fleet graph chip-time at the last ranking" + (" (fleet-wide)" if narrowed else ""), None),
        ("Live store", "—" if live is None else f"v{live}", _count(summary.get("live_entries", 0), "entry", "entries"),
         None),
        ("Tuning tasks", f"{summary.get('tasks_accepted', 0)} / {summary.get('tasks', 0)}", "accepted / run", tuner),
        ("Validations", f"{summary.get('validations', 0)}", "store entries re-validated", None),
        ("Verified coverage", number(summary.get("verified_coverage"), ".1%"),
         "of the tunable chip-time runs a verified config after "
         + _count(summary.get("verified_coverage_nights", 0), "night", "nights"), None),
        ("Decided", number(summary.get("decided_coverage"), ".1%"),
         "of the tunable chip-time: a verified config, or its defaults verified best", None),
    )
    return "\n".join(
        f'<div class="tile"><div class="label">{html.escape(label)}</div>'
        f'<div class="value">{html.escape(value)}</div><div class="sub">'
        + (f'<a href="{html.escape(link)}">{html.escape(sub)}</a>' if link else html.escape(sub)) + "</div></div>"
        for label, value, sub, link in tiles)


def _booked_note(summary: Row) -> str:
    """What the booked total is made of: runtime and compile time saved."""
    return (f"booked in the window: {summary['chip_hours_saved']:,.0f} at run time, "
            f"{summary['compile_chip_hours_saved']:,.1f} at compile time")


def _realized_note(summary: Row) -> str:
    """The realized savings' interval and the booked savings of the same (decided) entries; the
    undecided entries counted apart."""
    undecided = f"; {summary['undecided_entries']} undecided" if summary.get("undecided_entries") else ""
    if summary.get("realized_low") is None:
        return "no entry's holdout is decided yet" + undecided
    return (f"[{summary['realized_low']:,.0f}, {summary['realized_high']:,.0f}], {level_text(REALIZED_LEVEL)}; "
            f"booked {summary['booked_decided_chip_hours']:,.0f} on "
            f"{_count(summary['decided_entries'], 'entry', 'entries')}{undecided}")


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _span(window: Window) -> str:
    days = (window.last - window.first).days + 1
    return f"{window.first:%b %d} – {window.last:%b %d, %Y} ({_count(days, 'day', 'days')})"


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · fleet-fdo dashboards</title>
<link rel="icon" href="data:,">
<style>{style}</style>
<script src="{plotly}"></script>
</head>
<body data-page="{page}">
<header class="top">
  <div><h1>fleet-fdo <span>{title}</span></h1>
  <div class="meta">{span} · data root <code>{home}</code></div></div>
  <nav class="pages">{nav}</nav>
</header>
{form}
<main>
{tiles}
{sections}
</main>
<script>{script}</script>
</body>
</html>
"""

_STYLE = """
:root { --ink: #1f2733; --muted: #667085; --line: #e4e7ec; --bg: #f5f7fa; --accent: #3566c8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
       font: 14px/1.45 Inter, 'Segoe UI', system-ui, -apple-system, 'Helvetica Neue', Arial, sans-serif; }
header.top { display: flex; justify-content: space-between; align-items: center; gap: 16px;
             padding: 14px 28px; background: #fff; border-bottom: 1px solid var(--line); }
h1 { margin: 0; font-size: 20px; font-weight: 650; letter-spacing: -0.01em; }
h1 span { color: var(--muted); font-weight: 450; }
.meta { color: var(--muted); font-size: 12.5px; margin-top: 2px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f0f2f5; padding: 1px 5px;
       border-radius: 4px; }
nav a { color: var(--muted); text-decoration: none; margin-left: 6px; padding: 4px 10px;
        border: 1px solid var(--line); border-radius: 6px; font-size: 12.5px; background: #fff; }
nav a.on, .quick a.on { color: #fff; background: var(--accent); border-color: var(--accent); }
form.filters { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; padding: 10px 28px;
               background: #fff; border-bottom: 1px solid var(--line); font-size: 12.5px; color: var(--muted); }
form.filters select, form.filters input { font: inherit; color: var(--ink); padding: 3px 6px; max-width: 260px;
                                          border: 1px solid var(--line); border-radius: 6px; background: #fff; }
form.filters button { font: inherit; color: #fff; background: var(--accent); border: 0; border-radius: 6px;
                      padding: 4px 14px; cursor: pointer; }
form.filters a.clear { color: var(--muted); }
.quick { margin-left: auto; }
.quick a { color: var(--muted); text-decoration: none; margin-left: 4px; padding: 3px 9px;
           border: 1px solid var(--line); border-radius: 6px; background: #fff; }
main { padding: 20px 28px 40px; max-width: 1480px; margin: 0 auto; }
.tiles { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 14px; }
.tile { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; }
.tile .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.tile .value { font-size: 26px; font-weight: 650; margin: 4px 0 2px; font-variant-numeric: tabular-nums; }
.tile .sub { color: var(--muted); font-size: 12px; }
section h2 { font-size: 15px; font-weight: 650; margin: 28px 0 10px; color: #344054;
             text-transform: uppercase; letter-spacing: 0.05em; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 16px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px 10px;
        min-width: 0; }
.card.wide { grid-column: 1 / -1; }
.card header { display: flex; justify-content: space-between; align-items: baseline; }
.card h3 { margin: 0; font-size: 15px; font-weight: 620; }
.card .json { font-size: 11.5px; color: var(--accent); text-decoration: none; border: 1px solid #cfd9ee;
              border-radius: 5px; padding: 1px 7px; }
.card .note { margin: 3px 0 8px; color: var(--muted); font-size: 12.5px; }
.badge { margin-left: 8px; font-size: 11px; font-weight: 500; color: #8a5a00; background: #fff4dc;
         border: 1px solid #f3d9a4; border-radius: 5px; padding: 0 6px; vertical-align: 2px; }
.graph-links { font-size: 12.5px; color: var(--muted); margin: 4px 0 2px; line-height: 2; }
.graph-links a, td a { color: var(--accent); text-decoration: none; }
.graph-links a { margin-left: 6px; border: 1px solid #cfd9ee; border-radius: 5px; padding: 1px 7px;
                 white-space: nowrap; }
.scroll { overflow: auto; max-height: 560px; }
table.sortable { border-collapse: collapse; width: 100%; font-size: 12.5px; font-variant-numeric: tabular-nums; }
table.sortable th { position: sticky; top: 0; background: #fafbfc; text-align: left; font-weight: 600;
                    padding: 6px 8px; border-bottom: 1px solid var(--line); cursor: pointer; white-space: nowrap; }
table.sortable th[data-dir=asc]::after { content: " ▲"; } table.sortable th[data-dir=desc]::after { content: " ▼"; }
table.sortable td { padding: 5px 8px; border-bottom: 1px solid #f0f2f5; vertical-align: top; white-space: nowrap; }
table.sortable td.num, table.sortable th[data-numeric] { text-align: right; white-space: nowrap; }
.chart { min-height: 120px; }
.chart .empty, .rows .empty { display: flex; align-items: center; justify-content: center; height: 180px;
                color: var(--muted); background: #fafbfc; border: 1px dashed var(--line); border-radius: 8px;
                text-align: center; padding: 0 24px; }
.chart[data-state=error] .empty, .rows[data-state=error] .empty { color: #b42318; border-color: #f4c7c3;
                                                                  background: #fffafa; }
@media (max-width: 1100px) { .grid { grid-template-columns: 1fr; }
                             .tiles { grid-template-columns: repeat(2, minmax(0, 1fr)); } }
"""

# Draws every chart and makes the grids sortable, then marks the page done (the browser tests
# wait on data-ready); the filter form leaves its unchosen filters out of the URL.
_SCRIPT = """
const pointsOf = (data) => data.reduce((n, t) => n + (t.x || t.values || t.y || []).length, 0);
const draws = [...document.querySelectorAll('.chart')].map((el) => {
  const figure = JSON.parse(document.getElementById('figure-' + el.dataset.chart).textContent);
  if (figure === null) {
    const note = document.createElement('div');
    note.className = 'empty';
    note.textContent = el.dataset.empty;
    el.appendChild(note);
    if (el.dataset.state !== 'error') el.dataset.state = 'empty';
    return Promise.resolve();
  }
  const config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ['lasso2d', 'select2d']};
  return Plotly.newPlot(el, figure.data, figure.layout, config).then(() => {
    el.dataset.points = pointsOf(el.data);
    el.dataset.state = 'ready';
  });
});
const sortKey = (cell, numeric) => {
  const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent;
  if (!numeric) return raw;
  return raw === '' ? null : Number(raw);
};
document.querySelectorAll('table.sortable th').forEach((th) => th.addEventListener('click', () => {
  const column = [...th.parentNode.children].indexOf(th);
  const numeric = th.hasAttribute('data-numeric');
  const dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
  th.parentNode.querySelectorAll('th').forEach((other) => delete other.dataset.dir);
  th.dataset.dir = dir;
  const body = th.closest('table').tBodies[0];
  const rows = [...body.rows].map((row) => [sortKey(row.cells[column], numeric), row]);
  rows.sort(([a], [b]) => {
    if (a === b) return 0;
    if (a === null) return 1;  // rows without a value last, either way
    if (b === null) return -1;
    const order = numeric ? a - b : String(a).localeCompare(String(b));
    return dir === 'asc' ? order : -order;
  });
  rows.forEach(([, row]) => body.appendChild(row));
}));
document.querySelectorAll('form.filters').forEach((form) => form.addEventListener('submit', () => {
  form.querySelectorAll('select, input').forEach((field) => { if (!field.value) field.disabled = true; });
}));
Promise.all(draws).then(() => { document.body.dataset.ready = 'true'; });
"""
