"""The dashboards' HTML: headline figures, then one card per chart, drawn by Plotly in the browser.

Each card embeds its figure as JSON (or null: "No data yet", or the error that kept its rows
from being read) and links the JSON rows it was drawn from. Plotly's script is served by the
same app (routes.PLOTLY_PATH): the page loads nothing from any other host.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import plotly.io as pio

from pipelines.dashboard.charts import SECTIONS, Chart
from pipelines.dashboard.queries import Row, Window

WINDOW_CHOICES = (7, 30, 90)


@dataclass(frozen=True)
class PageData:
    """What one rendering of the page shows."""

    home: Path
    window: Window
    rows: dict[str, list[Row]]  # by endpoint
    errors: dict[str, str]  # endpoint -> why its rows could not be read
    summary: Row
    plotly_path: str


def render(data: PageData) -> str:
    """The whole page."""
    sections = "\n".join(_section(title, charts, data) for title, charts in SECTIONS)
    return _PAGE.format(
        plotly=html.escape(data.plotly_path), style=_STYLE, script=_SCRIPT,
        home=html.escape(str(data.home)), first=data.window.first.isoformat(), last=data.window.last.isoformat(),
        span=_span(data.window), choices=_choices(data.window), tiles=_tiles(data.summary), sections=sections)


def _section(title: str, charts: tuple[Chart, ...], data: PageData) -> str:
    cards = "\n".join(_card(chart, data) for chart in charts)
    return f'<section><h2>{html.escape(title)}</h2><div class="grid">{cards}</div></section>'


def _card(chart: Chart, data: PageData) -> str:
    query = f"/api/{chart.endpoint}?from={data.window.first}&to={data.window.last}"
    error = data.errors.get(chart.endpoint)
    figure = None if error else chart.build(data.rows[chart.endpoint])
    # "<" escaped so that no string in the figure can close the script element.
    payload = "null" if figure is None else pio.to_json(figure, validate=False).replace("<", "\\u003c")
    empty = (f"Could not read the data: {error}" if error else
             f"No data yet: {chart.fills} fills this chart.")
    return f"""
<article class="card{' wide' if chart.wide else ''}">
  <header><h3>{html.escape(chart.title)}</h3><a class="json" href="{html.escape(query)}">JSON</a></header>
  <p class="note">{html.escape(chart.note)}</p>
  <div class="chart" id="chart-{chart.id}" data-chart="{chart.id}" data-endpoint="/api/{chart.endpoint}"
       data-state="{'error' if error else 'loading'}" data-empty="{html.escape(empty)}"></div>
  <script type="application/json" id="figure-{chart.id}">{payload}</script>
</article>"""


def _tiles(summary: Row) -> str:
    def number(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    live = summary.get("live_version")
    tiles = (
        ("Chip-hours saved", number(summary.get("chip_hours_saved"), ",.0f"), "in the window, by tuned configs"),
        ("Graph hit rate", number(summary.get("hit_rate"), ".1%"),
         f"of graph chip-time ran tuned on {summary.get('hit_rate_dt') or '—'}"),
        ("Tuned coverage", number(summary.get("tuned_share"), ".1%"), "of graph chip-time at the last ranking"),
        ("Live store", "—" if live is None else f"v{live}", _count(summary.get("live_entries", 0), "entry", "entries")),
        ("Tuning tasks", f"{summary.get('tasks_accepted', 0)} / {summary.get('tasks', 0)}", "accepted / run"),
        ("Validations", f"{summary.get('validations', 0)}", "store entries re-validated"),
    )
    return "\n".join(f'<div class="tile"><div class="label">{html.escape(label)}</div>'
                     f'<div class="value">{html.escape(value)}</div><div class="sub">{html.escape(sub)}</div></div>'
                     for label, value, sub in tiles)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _span(window: Window) -> str:
    days = (window.last - window.first).days + 1
    return f"{window.first:%b %d} – {window.last:%b %d, %Y} ({_count(days, 'day', 'days')})"


def _choices(window: Window) -> str:
    days = (window.last - window.first).days + 1
    return " ".join(f'<a class="{"on" if n == days else ""}" href="/?days={n}&amp;to={window.last}">{n} d</a>'
                    for n in WINDOW_CHOICES)


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fleet-fdo dashboards</title>
<link rel="icon" href="data:,">
<style>{style}</style>
<script src="{plotly}"></script>
</head>
<body>
<header class="top">
  <div><h1>fleet-fdo <span>dashboards</span></h1>
  <div class="meta">{span} · data root <code>{home}</code></div></div>
  <nav>{choices} <a href="/api">API</a></nav>
</header>
<main data-first="{first}" data-last="{last}">
<div class="tiles">{tiles}</div>
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
nav a.on { color: #fff; background: var(--accent); border-color: var(--accent); }
main { padding: 20px 28px 40px; max-width: 1480px; margin: 0 auto; }
.tiles { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 14px; }
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
.chart { min-height: 120px; }
.chart .empty { display: flex; align-items: center; justify-content: center; height: 180px;
                color: var(--muted); background: #fafbfc; border: 1px dashed var(--line); border-radius: 8px;
                text-align: center; padding: 0 24px; }
.chart[data-state=error] .empty { color: #b42318; border-color: #f4c7c3; background: #fffafa; }
@media (max-width: 1100px) { .grid { grid-template-columns: 1fr; }
                             .tiles { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
"""

# Draws every card, then marks the page done (the browser test waits on data-ready).
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
Promise.all(draws).then(() => { document.body.dataset.ready = 'true'; });
"""
