"""How the dashboards' figures look and the small steps every chart shares: the palette, the
layout, axes of days, counts and percentages, stacked daily bars, interval markers."""

from __future__ import annotations

import datetime
import math
from collections import defaultdict
from typing import Iterable

import plotly.graph_objects as go

from pipelines.dashboard.filters import Window
from pipelines.dashboard.sql import Row
from vocabulary.decisions import DecisionOutcome
from vocabulary.store import Provenance
from vocabulary.tuning import Kind, TrialOutcome

BLUE, ORANGE, GREEN, RED, GREY, LIGHT_BLUE, LIGHT_GREY, PURPLE, DARK_GREY = (
    "#3566c8", "#ef8f35", "#2a9d8f", "#d9534f", "#9aa3ae", "#9dbbe8", "#d5dae0", "#8a63c6", "#5b6470")
KIND_COLORS: dict[str, str] = {Kind.GRAPH: BLUE, Kind.OP: ORANGE}
CATEGORY_COLORS = {"tuned": GREEN, "candidate": BLUE, "beyond_top_k": LIGHT_BLUE, "long_tail": LIGHT_GREY,
                   "missing_symbols": RED, "opted_out": DARK_GREY}
CATEGORY_LABELS = {"tuned": "tuned", "candidate": "candidate (top K)", "beyond_top_k": "ranked, beyond top K",
                   "long_tail": "long tail", "missing_symbols": "missing symbols", "opted_out": "opted out"}
# A decision's outcome (DecisionOutcome) or a trial's (TrialOutcome).
OUTCOME_COLORS: dict[str, str] = {
    DecisionOutcome.KEPT: GREEN, DecisionOutcome.REKEYED: BLUE, DecisionOutcome.INVALIDATED: RED,
    DecisionOutcome.EXPIRED: GREY, TrialOutcome.MEASURED: BLUE, TrialOutcome.DUPLICATE: LIGHT_GREY,
    TrialOutcome.IDENTICAL: GREY, TrialOutcome.FAILED: RED}
PROVENANCE_COLORS: dict[str, str] = {Provenance.TUNER: BLUE, Provenance.VALIDATOR: GREEN, Provenance.IMPORT: PURPLE}
TEAM_COLORS = ("#3566c8", "#ef8f35", "#2a9d8f", "#d9534f", "#8a63c6", "#c2a03a", "#e377c2", "#5b6470",
               "#17becf", "#9dbbe8", "#8c564b", "#bcbd22")
FONT = "Inter, 'Segoe UI', system-ui, -apple-system, 'Helvetica Neue', Arial, sans-serif"
HEIGHT = 330
DAY_MS = 86_400_000
ENVIRONMENT_CHARS = 44  # an environment label longer than this is shortened in the middle on axes


def interval_name(rows: list[Row], kind: str = "") -> str:
    """What the intervals of `rows` are, by the level their rows state: "99.9% interval"."""
    levels = sorted({row.get("ci_level") for row in rows}, key=lambda level: -(level or 0))
    return " ".join(part for part in ("/".join(map(level_text, levels)), kind, "interval") if part)


def level_text(level: float | None) -> str:
    """0.999 as "99.9%"; an interval of no stated level (an imported entry's) as "stated"."""
    return "stated" if level is None else f"{100 * level:.10g}%"


def speedup_range(rows: list[Row]) -> list[float]:
    """An x range around the intervals of `rows` that always shows 1× (no change)."""
    low = min([1.0] + [r["ci_low"] if r["ci_low"] is not None else r["speedup"] for r in rows])
    high = max([1.0] + [r["ci_high"] if r["ci_high"] is not None else r["speedup"] for r in rows])
    pad = max(0.02, 0.08 * (high - low))
    return [low - pad, high + pad]


def interval_trace(rows: list[Row], labels: list[str], across: str = "x") -> dict:
    """Markers at each speedup with asymmetric error bars to its interval (none when unknown),
    the speedups along axis `across` ("x": one row per label up the y axis, "y": over x)."""
    along = "y" if across == "x" else "x"
    return {across: [r["speedup"] for r in rows], along: labels, "mode": "markers", "type": "scatter",
            f"error_{across}": error_bars(rows, "speedup", "ci_low", "ci_high")}


def error_bars(rows: list[Row], value: str, low: str, high: str) -> dict:
    """Asymmetric error bars from each row's `value` to its `low` and `high` (none when unknown)."""
    return {"type": "data", "symmetric": False, "thickness": 1.5, "width": 4,
            "array": [(r[high] - r[value]) if r[high] is not None else 0 for r in rows],
            "arrayminus": [(r[value] - r[low]) if r[low] is not None else 0 for r in rows]}


def elide(text: str, limit: int = ENVIRONMENT_CHARS) -> str:
    """`text` shortened in the middle to `limit` characters: a CPU's device kind lists its ISA
    features, while the device count and compiler at the end tell environments apart."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return f"{text[:head]}…{text[len(text) - (limit - 1 - head):]}"


def key_label(row: Row) -> str:
    """A key as axes name it: its graph's or op's name (else its kind), fingerprint and environment."""
    name = row.get("name") or row["kind"]
    return f"{name} · {row['fingerprint'][:8]} · {elide(row['environment'])}"


def version_text(version: int | None) -> str:
    """A store version as "v7"; "unknown" when no version is known."""
    return "unknown" if version is None else f"v{version}"


def base_layout(fig: go.Figure, xaxis_title: str | None = None, yaxis_title: str | None = None,
            height: int = HEIGHT, barmode: str | None = None) -> go.Figure:
    """`fig` in the dashboards' look: white template, the font, tight margins, the legend on top."""
    fig.update_layout(
        template="plotly_white", height=height, barmode=barmode, bargap=0.25,
        font={"family": FONT, "size": 12, "color": "#2b3340"},
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0,
                "font": {"size": 11}},
        hoverlabel={"font": {"family": FONT}}, xaxis_title=xaxis_title, yaxis_title=yaxis_title)
    fig.update_xaxes(automargin=True, linecolor="#c9ced6")
    fig.update_yaxes(automargin=True, gridcolor="#eceff3")
    return fig


def day_layout(fig: go.Figure, window: Window, yaxis_title: str, barmode: str) -> go.Figure:
    """A per-day chart: every day of the window on the x axis, labelled 'Nov 22'."""
    base_layout(fig, yaxis_title=yaxis_title, barmode=barmode)
    days = (window.last - window.first).days + 1
    # A day's bar is centred on its midnight: half a day more on each side shows the whole bars.
    half_day = datetime.timedelta(hours=12)
    edges = [datetime.datetime.combine(window.first, datetime.time()) - half_day,
             datetime.datetime.combine(window.last, datetime.time()) + half_day]
    fig.update_xaxes(type="date", tickformat="%b %d", dtick=DAY_MS * max(1, math.ceil(days / 10)),
                     hoverformat="%b %d, %Y", range=[edge.isoformat(sep=" ") for edge in edges])
    fig.layout.yaxis.rangemode = "tozero"
    return fig


def bargap(bars: int) -> float:
    """Wide gaps between few bars, so that one or two bars do not fill a whole chart."""
    return 0.25 if bars >= 5 else 0.75 - 0.1 * bars


def count_axis(fig: go.Figure, largest: float) -> go.Figure:
    """A y axis of whole numbers: at most about six ticks of 1, 2 or 5 x 10^k, never a fraction
    of an entry or trial."""
    rough = max(1.0, largest / 6)
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    fig.update_yaxes(dtick=step, tickformat=",d")
    return fig


def percent_axis(fig: go.Figure, title: str) -> None:
    """The right-hand axis of a two-axis chart: 0 to 100%, quarters, no grid of its own."""
    fig.update_yaxes(title_text=title, range=[0, 105], tickmode="array", tickvals=[0, 25, 50, 75, 100],
                     ticktext=["0%", "25%", "50%", "75%", "100%"], showgrid=False, secondary_y=True)


def present(rows: list[Row], column: str, order: dict[str, str]) -> list[str]:
    """The values of `column` in `rows`: the known ones in `order`'s order, then the rest."""
    values = {r[column] for r in rows}
    return [v for v in order if v in values] + sorted(values - set(order))


def stacked_days(rows: list[Row], window: Window, column: str, colors: dict[str, str], value: str | None,
                  hover: str, name: str = "{}") -> go.Figure:
    """Bars on every day of the window, one stacked series per value of `column`: the sum of
    `value` (None: the number of rows), zero on a day without rows."""
    days = window.days()
    fig = go.Figure()
    for series in present(rows, column, colors):
        mine = [r for r in rows if r[column] == series]
        per_day = sum_by(mine, "dt", value) if value else count_by(r["dt"] for r in mine)
        fig.add_bar(x=days, y=[per_day.get(d, 0) for d in days], name=name.format(series),
                    marker_color=colors.get(series, GREY),
                    hovertemplate="%{x|%b %d}: " + hover + "<extra>" + series + "</extra>")
    return fig


def sum_by(rows: list[Row], key: str, value: str) -> dict:
    """The sum of column `value` (a missing value as 0) per value of column `key`."""
    sums: dict = defaultdict(float)
    for row in sorted(rows, key=lambda r: r[key]):
        sums[row[key]] += row[value] or 0.0
    return dict(sums)


def count_by(values: Iterable[str]) -> dict[str, int]:
    """How many times each of `values` occurs."""
    counts: dict[str, int] = defaultdict(int)
    for value in sorted(values):
        counts[value] += 1
    return dict(counts)


def percent(share: float | None) -> float | None:
    """A share (0.25) in percent (25.0); None stays None."""
    return None if share is None else 100 * share
