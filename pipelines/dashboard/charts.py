"""The dashboards' charts: each a Plotly figure built from the rows of one query.

A chart names the endpoint (query) it draws and a builder from those rows and the window to a
figure; a builder returns None when the rows hold nothing to draw, and the page then says "No
data yet". Units are in the axis titles: chip-hours, % and × (speedup over the default compile).
Charts over time show every day of the window, bars at zero on a day without rows. Intervals
are labelled with the confidence their rows say they were measured at (`ci_level`).
"""

from __future__ import annotations

import datetime
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipelines.dashboard.filters import Window
from pipelines.dashboard.queries import Row

BLUE, ORANGE, GREEN, RED, GREY, LIGHT_BLUE, LIGHT_GREY, PURPLE, DARK_GREY = (
    "#3566c8", "#ef8f35", "#2a9d8f", "#d9534f", "#9aa3ae", "#9dbbe8", "#d5dae0", "#8a63c6", "#5b6470")
KIND_COLORS = {"graph": BLUE, "op": ORANGE}
CATEGORY_COLORS = {"tuned": GREEN, "candidate": BLUE, "beyond_top_k": LIGHT_BLUE, "long_tail": LIGHT_GREY,
                   "missing_symbols": RED, "opted_out": DARK_GREY}
CATEGORY_LABELS = {"tuned": "tuned", "candidate": "candidate (top K)", "beyond_top_k": "ranked, beyond top K",
                   "long_tail": "long tail", "missing_symbols": "missing symbols", "opted_out": "opted out"}
OUTCOME_COLORS = {"kept": GREEN, "rekeyed": BLUE, "invalidated": RED, "expired": GREY,
                  "measured": BLUE, "duplicate": LIGHT_GREY, "identical": GREY, "failed": RED}
PROVENANCE_COLORS = {"tuner": BLUE, "validator": GREEN, "import": PURPLE}
TEAM_COLORS = ("#3566c8", "#ef8f35", "#2a9d8f", "#d9534f", "#8a63c6", "#c2a03a", "#e377c2", "#5b6470",
               "#17becf", "#9dbbe8", "#8c564b", "#bcbd22")
FONT = "Inter, 'Segoe UI', system-ui, -apple-system, 'Helvetica Neue', Arial, sans-serif"
HEIGHT = 330
DAY_MS = 86_400_000
ENVIRONMENT_CHARS = 44  # an environment label longer than this is shortened in the middle on axes

Builder = Callable[[list[Row], Window], go.Figure | None]


@dataclass(frozen=True)
class Chart:
    """One chart card: what it shows, the endpoint of its rows, how it is drawn."""

    id: str
    title: str
    note: str  # what is counted and in which unit, shown under the title
    endpoint: str  # a key of queries.QUERIES
    build: Builder
    fills: str  # the command whose output it draws, for the "No data yet" note
    wide: bool = False
    # The graph pages its rows lead to, as (fingerprint, link text), listed under the chart.
    graph_links: Callable[[list[Row]], list[tuple[str, str]]] | None = None


def savings_by_kind(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours saved per day, stacked by config kind (graph or op)."""
    if not rows:
        return None
    fig = _stacked_days(rows, window, "kind", KIND_COLORS, "chip_hours_saved", "%{y:,.0f} chip-hours",
                        "{} configs")
    return _time_layout(fig, window, "chip-hours saved / day", barmode="stack")


def savings_by_team(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours saved in the window per team, largest first."""
    if not rows:
        return None
    per_team = sorted(_sum_by(rows, "team", "chip_hours_saved").items(), key=lambda item: item[1])
    fig = go.Figure(go.Bar(x=[v for _, v in per_team], y=[t for t, _ in per_team], orientation="h",
                           marker_color=BLUE, text=[f"{v:,.0f}" for _, v in per_team],
                           textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: %{x:,.0f} chip-hours<extra></extra>"))
    _layout(fig, xaxis_title="chip-hours saved", height=max(HEIGHT, 60 + 26 * len(per_team)))
    fig.update_layout(bargap=_bargap(len(per_team)))
    fig.update_xaxes(range=[0, 1.15 * max(v for _, v in per_team)] if per_team[-1][1] > 0 else None)
    return fig


def savings_by_version(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours saved in the window per config store version that served the hits, stacked
    by config kind."""
    if not rows:
        return None
    versions = sorted({r["config_version"] for r in rows}, key=lambda v: (v is None, v or 0))
    labels = [_version(v) for v in versions]
    saved: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        saved[row["kind"], _version(row["config_version"])] += row["chip_hours_saved"]
    fig = go.Figure()
    for kind in _present(rows, "kind", KIND_COLORS):
        fig.add_bar(x=labels, y=[saved[kind, label] for label in labels], name=f"{kind} configs",
                    marker_color=KIND_COLORS.get(kind, GREY),
                    hovertemplate="%{x}: %{y:,.0f} chip-hours<extra>" + kind + " configs</extra>")
    _layout(fig, xaxis_title="config store version that served the hits", yaxis_title="chip-hours saved",
            barmode="stack")
    fig.update_xaxes(type="category")
    fig.update_layout(bargap=_bargap(len(versions)))
    return fig


def hit_rate(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours that ran tuned per day (bars) and the hit rate (lines, right axis): the share
    of chip-time with a tuned config per kind, and the compiler hook's share of compiles. A day
    without runs has no rate: a gap in its line."""
    if not rows:
        return None
    days = window.days()
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    profiles = [r for r in rows if r["source"] == "profiles"]
    for kind in _present(profiles, "kind", KIND_COLORS):
        mine = {r["dt"]: r for r in profiles if r["kind"] == kind}
        fig.add_bar(x=days, y=[mine[d]["hit_chip_hours"] if d in mine else 0.0 for d in days],
                    name=f"{kind}: chip-hours tuned", marker_color=KIND_COLORS.get(kind, GREY), opacity=0.55,
                    hovertemplate="%{y:,.0f} chip-hours<extra>" + kind + " hits</extra>", secondary_y=False)
        fig.add_scatter(x=days, y=[_pct(mine[d]["hit_rate"]) if d in mine else None for d in days],
                        mode="lines+markers", name=f"{kind}: hit rate",
                        line={"color": KIND_COLORS.get(kind, GREY), "width": 2.5},
                        hovertemplate="%{y:.1f}%<extra>" + kind + " hit rate</extra>", secondary_y=True)
    hook = {r["dt"]: r for r in rows if r["source"] == "hook"}
    if hook:
        fig.add_scatter(x=days, y=[_pct(hook[d]["hit_rate"]) if d in hook else None for d in days],
                        mode="lines+markers", name="hook: compile hit rate",
                        line={"color": GREEN, "width": 2.5, "dash": "dot"},
                        customdata=[[hook[d]["hit_runs"], hook[d]["runs"]] if d in hook else [0, 0] for d in days],
                        hovertemplate="%{y:.1f}% (%{customdata[0]} of %{customdata[1]} compiles)"
                                      "<extra>compiler hook</extra>", secondary_y=True)
    _time_layout(fig, window, "chip-hours run tuned / day", barmode="group")
    _percent_axis(fig, "hit rate (%)")
    return fig


def graph_cost(rows: list[Row], window: Window) -> go.Figure | None:
    """A graph's chip-hours per day, stacked: run with a tuned config, and not."""
    graph = {r["dt"]: r for r in rows if r["source"] == "profiles" and r["kind"] == "graph"}
    if not graph:
        return None
    days = window.days()
    tuned = [graph[d]["hit_chip_hours"] if d in graph else 0.0 for d in days]
    fig = go.Figure()
    fig.add_bar(x=days, y=tuned, name="ran tuned", marker_color=GREEN,
                hovertemplate="%{x|%b %d}: %{y:,.0f} chip-hours<extra>ran tuned</extra>")
    fig.add_bar(x=days, y=[graph[d]["chip_hours"] - t if d in graph else 0.0 for d, t in zip(days, tuned)],
                name="default config", marker_color=BLUE,
                hovertemplate="%{x|%b %d}: %{y:,.0f} chip-hours<extra>default config</extra>")
    return _time_layout(fig, window, "chip-hours / day", barmode="stack")


def runs_by_team(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours per team, stacked: run tuned, opted out of tuning, the rest; largest first."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: r["chip_hours"])  # plotly draws horizontal bars bottom-up
    teams = [r["team"] for r in ordered]
    parts = (("ran tuned", GREEN, [r["hit_chip_hours"] for r in ordered]),
             ("default config", BLUE,
              [r["chip_hours"] - r["hit_chip_hours"] - r["opted_out_chip_hours"] for r in ordered]),
             ("opted out", DARK_GREY, [r["opted_out_chip_hours"] for r in ordered]))
    fig = go.Figure()
    for name, color, values in parts:
        fig.add_bar(y=teams, x=values, orientation="h", name=name, marker_color=color,
                    customdata=[[r["runs"], r["jobs"]] for r in ordered],
                    hovertemplate="%{y}: %{x:,.0f} chip-hours (%{customdata[0]} runs, %{customdata[1]} jobs)"
                                  "<extra>" + name + "</extra>")
    _layout(fig, xaxis_title="chip-hours in the window", barmode="stack",
            height=max(HEIGHT, 80 + 26 * len(teams)))
    fig.update_layout(bargap=_bargap(len(teams)))
    return fig


def coverage(rows: list[Row], window: Window) -> go.Figure | None:
    """Where the last ranking's fleet chip-time went, per kind, by coverage category (%)."""
    if not rows:
        return None
    last = max(r["dt"] for r in rows)
    latest = [r for r in rows if r["dt"] == last]
    kinds = sorted({r["kind"] for r in latest}, key=lambda k: (k != "graph", k))
    fig = go.Figure()
    for category in CATEGORY_COLORS:
        mine = {r["kind"]: r for r in latest if r["category"] == category}
        fig.add_bar(y=[f"{k} keys" for k in kinds], x=[_pct(mine[k]["share"]) if k in mine else 0 for k in kinds],
                    name=CATEGORY_LABELS[category], orientation="h", marker_color=CATEGORY_COLORS[category],
                    customdata=[[mine[k]["keys"], mine[k]["chip_hours"]] if k in mine else [0, 0] for k in kinds],
                    hovertemplate="%{x:.1f}% of chip-time, %{customdata[0]} keys, %{customdata[1]:,.0f} "
                                  "chip-hours<extra>" + CATEGORY_LABELS[category] + "</extra>")
    _layout(fig, xaxis_title=f"share of fleet chip-time (%), ranking of {last}", barmode="stack")
    fig.update_xaxes(range=[0, 100], ticksuffix="%")
    return fig


def validator_outcomes(rows: list[Row], window: Window) -> go.Figure | None:
    """The validator's decisions per day, stacked by outcome."""
    if not rows:
        return None
    fig = _stacked_days(rows, window, "outcome", OUTCOME_COLORS, "entries", "%{y} entries")
    _time_layout(fig, window, "entries validated / day", barmode="stack")
    return _count_axis(fig, max(_sum_by(rows, "dt", "entries").values()))


def validator_hit_share(rows: list[Row], window: Window) -> go.Figure | None:
    """Tuned chip-hours per day served by validator-updated entries vs. the rest (bars), and the
    validator-updated share (line, right axis)."""
    if not rows:
        return None
    days = window.days()
    by_day = {r["dt"]: r for r in rows}
    validator = [by_day[d]["validator_hit_chip_hours"] if d in by_day else 0.0 for d in days]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_bar(x=days, y=validator, name="validator-updated entries",
                marker_color=GREEN, hovertemplate="%{y:,.0f} chip-hours<extra>validator-updated</extra>")
    fig.add_bar(x=days, y=[by_day[d]["hit_chip_hours"] - v if d in by_day else 0.0 for d, v in zip(days, validator)],
                name="other entries", marker_color=LIGHT_BLUE,
                hovertemplate="%{y:,.0f} chip-hours<extra>other entries</extra>")
    fig.add_scatter(x=days, y=[_pct(by_day[d]["validator_share"]) if d in by_day else None for d in days],
                    mode="lines+markers", name="validator-updated share", line={"color": DARK_GREY, "width": 2.5},
                    hovertemplate="%{y:.1f}%<extra>validator-updated share</extra>", secondary_y=True)
    _time_layout(fig, window, "chip-hours run tuned / day", barmode="stack")
    _percent_axis(fig, "share of hits (%)")
    return fig


def staleness(rows: list[Row], window: Window) -> go.Figure | None:
    """Live store entries by age (days since last measured), stacked by who measured them."""
    aged = [r for r in rows if r["age_days"] is not None]
    if not aged:
        return None
    fig = go.Figure()
    for provenance in _present(aged, "provenance", PROVENANCE_COLORS):
        fig.add_histogram(x=[r["age_days"] for r in aged if r["provenance"] == provenance], name=provenance,
                          marker_color=PROVENANCE_COLORS.get(provenance, GREY), xbins={"size": 1, "start": 0},
                          hovertemplate="%{x} days old: %{y} entries<extra>" + provenance + "</extra>")
    _layout(fig, xaxis_title="age (days since measured)", yaxis_title="live entries", barmode="stack")
    fig.update_xaxes(rangemode="tozero", dtick=max(1, math.ceil(max(r["age_days"] for r in aged) / 10)))
    return _count_axis(fig, len(aged))


def top_graphs(rows: list[Row], window: Window) -> go.Figure | None:
    """The costliest graph keys: chip-hours (left) and the tuned speedup with its interval."""
    return _top(rows, "graph")


def top_ops(rows: list[Row], window: Window) -> go.Figure | None:
    """The costliest op keys: chip-hours (left) and the tuned speedup with its interval."""
    return _top(rows, "op")


def top_graph_links(rows: list[Row]) -> list[tuple[str, str]]:
    """The graph pages of the top graph keys, costliest first, one per fingerprint."""
    links: dict[str, str] = {}
    for row in rows:
        if row["kind"] == "graph":
            links.setdefault(row["fingerprint"], f"{row.get('name') or 'graph'} · {row['fingerprint'][:8]}")
    return list(links.items())


def tuner_trials(rows: list[Row], window: Window) -> go.Figure | None:
    """Tuning trials per day, stacked by outcome."""
    if not rows:
        return None
    fig = _stacked_days(rows, window, "outcome", OUTCOME_COLORS, None, "%{y} trials")
    _time_layout(fig, window, "trials / day", barmode="stack")
    return _count_axis(fig, max(_count_by(r["dt"] for r in rows).values()))


def tuner_progress(rows: list[Row], window: Window) -> go.Figure | None:
    """Per task, the best speedup with correct numerics found so far, by trial."""
    tasks: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        tasks[row["task_id"]].append(row)
    if not any(r["best_so_far"] is not None for r in rows):
        return None
    fig = go.Figure()
    for n, (task, trials) in enumerate(sorted(tasks.items())):
        fig.add_scatter(x=[t["index"] + 1 for t in trials], y=[t["best_so_far"] for t in trials],
                        mode="lines+markers", line={"shape": "hv", "color": TEAM_COLORS[n % len(TEAM_COLORS)]},
                        name=f"{trials[0]['fingerprint'][:8]} · {_elide(trials[0]['environment'])}",
                        hovertemplate="trial %{x}: best %{y:.3f}×<extra>" + task[:12] + "</extra>")
    fig.add_hline(y=1, line={"color": GREY, "dash": "dash", "width": 1})
    _layout(fig, xaxis_title="trial", yaxis_title="best speedup so far (×)")
    fig.update_yaxes(ticksuffix="×")
    fig.update_xaxes(dtick=max(1, math.ceil(max(r["index"] + 1 for r in rows) / 12)))
    return fig


def tuning_results(rows: list[Row], window: Window) -> go.Figure | None:
    """Each task's verified speedup with its interval, accepted or not."""
    measured = [r for r in rows if r["speedup"] is not None]
    if not measured:
        return None
    measured.sort(key=lambda r: r["speedup"])
    fig = go.Figure()
    for accepted, color, label in ((True, GREEN, "accepted"), (False, GREY, "not accepted")):
        mine = [r for r in measured if bool(r["accepted"]) == accepted]
        if mine:
            fig.add_scatter(**_interval_trace(mine, [_label(r) for r in mine]), name=label,
                            marker={"color": color, "size": 9},
                            customdata=[[r["status"], r["environment"]] for r in mine],
                            hovertemplate="%{x:.3f}× (%{customdata[0]})<br>%{customdata[1]}<extra></extra>")
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1})
    _layout(fig, xaxis_title=f"verified speedup (×), {interval_name(measured)}",
            height=max(HEIGHT, 80 + 26 * len(measured)))
    fig.update_xaxes(range=_speedup_range(measured), ticksuffix="×")
    fig.update_yaxes(categoryorder="array", categoryarray=[_label(r) for r in measured])
    return fig


def flag_importance(rows: list[Row], window: Window) -> go.Figure | None:
    """Each flag's importance (mean |Shapley value| on log speedup over the trials that set it)
    with its bootstrap interval, most important on top."""
    scored = [r for r in rows if r["importance"] is not None][::-1]  # plotly draws bottom-up
    if not scored:
        return None
    fig = go.Figure(go.Bar(
        x=[r["importance"] for r in scored], y=[r["flag"] for r in scored], orientation="h", marker_color=BLUE,
        error_x={"type": "data", "symmetric": False, "thickness": 1.5, "width": 4, "color": DARK_GREY,
                 "array": [r["high"] - r["importance"] for r in scored],
                 "arrayminus": [r["importance"] - r["low"] for r in scored]},
        customdata=[[r["trials"], r["failed"], r["winners"]] for r in scored],
        hovertemplate="%{y}: %{x:.4f} (%{customdata[0]} trials, %{customdata[1]} failed, "
                      "%{customdata[2]} winners)<extra></extra>"))
    _layout(fig, xaxis_title=f"importance: mean |Shapley value| on log speedup, {interval_name(scored, 'bootstrap')}",
            height=max(HEIGHT, 70 + 26 * len(scored)))
    fig.update_layout(bargap=_bargap(len(scored)))
    return fig


def store_versions(rows: list[Row], window: Window) -> go.Figure | None:
    """Entries per store version, stacked by kind; the live version marked."""
    if not rows:
        return None
    fig = go.Figure()
    labels = [f"v{r['version']}{' (live)' if r['live'] else ''}" for r in rows]
    for kind in ("graph", "op"):
        fig.add_bar(x=labels, y=[r[f"{kind}_entries"] for r in rows], name=f"{kind} entries",
                    marker_color=KIND_COLORS[kind], customdata=[r["reason"] for r in rows],
                    hovertemplate="%{x}: %{y} " + kind + " entries<br>%{customdata}<extra></extra>")
    _layout(fig, yaxis_title="entries", barmode="stack")
    fig.update_layout(bargap=_bargap(len(rows)))
    return _count_axis(fig, max(r["entries"] for r in rows))


def interval_name(rows: list[Row], kind: str = "") -> str:
    """What the intervals of `rows` are, by the level their rows state: "99.9% interval"."""
    levels = sorted({row.get("ci_level") for row in rows}, key=lambda level: -(level or 0))
    return " ".join(part for part in ("/".join(map(level_text, levels)), kind, "interval") if part)


def level_text(level: float | None) -> str:
    """0.999 as "99.9%"; an interval of no stated level (an imported entry's) as "stated"."""
    return "stated" if level is None else f"{100 * level:.10g}%"


def _top(rows: list[Row], kind: str) -> go.Figure | None:
    mine = [r for r in rows if r["kind"] == kind]
    if not mine:
        return None
    mine.sort(key=lambda r: -r["rank"])  # plotly draws horizontal bars bottom-up
    labels = [f"#{r['rank']} {_label(r)}" for r in mine]
    tuned = [(label, r) for label, r in zip(labels, mine) if r["speedup"] is not None]
    # A speedup panel beside the bars only when some key here is tuned.
    fig = make_subplots(rows=1, cols=2 if tuned else 1, shared_yaxes=True, horizontal_spacing=0.03,
                        column_widths=[0.62, 0.38] if tuned else None)
    fig.add_bar(x=[r["chip_hours"] for r in mine], y=labels, orientation="h", name="chip-hours",
                marker_color=[GREEN if r["tuned"] else KIND_COLORS[kind] for r in mine],
                text=[f"{r['chip_hours']:,.0f} ({r['share']:.0%})" for r in mine], textposition="auto",
                customdata=[[r["chip_hours_saved"], r["environment"]] for r in mine], showlegend=False,
                hovertemplate="%{x:,.0f} chip-hours, saved %{customdata[0]:,.0f}<br>%{customdata[1]}"
                              "<extra></extra>", row=1, col=1)
    _layout(fig, height=max(HEIGHT, 70 + 28 * len(mine)))
    fig.update_yaxes(categoryorder="array", categoryarray=labels, automargin=True)
    if not tuned:
        fig.update_xaxes(title_text=f"chip-hours (no {kind} key here is tuned yet)")
        return fig
    # One series per writer of the entries: their intervals are measured at different levels.
    for provenance in _present([r for _, r in tuned], "provenance", PROVENANCE_COLORS):
        mine = [(label, r) for label, r in tuned if r["provenance"] == provenance]
        fig.add_scatter(**_interval_trace([r for _, r in mine], [label for label, _ in mine]),
                        name=f"{provenance} entry, {interval_name([r for _, r in mine])}",
                        marker={"color": PROVENANCE_COLORS.get(provenance, GREY), "size": 9},
                        hovertemplate="%{x:.3f}×<extra>" + provenance + "</extra>", row=1, col=2)
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1}, row=1, col=2)
    fig.update_xaxes(title_text="chip-hours (green: tuned)", row=1, col=1)
    fig.update_xaxes(title_text="tuned speedup (×)", range=_speedup_range([r for _, r in tuned]), ticksuffix="×",
                     row=1, col=2)
    return fig


def _speedup_range(rows: list[Row]) -> list[float]:
    """An x range around the intervals of `rows` that always shows 1× (no change)."""
    low = min([1.0] + [r["ci_low"] if r["ci_low"] is not None else r["speedup"] for r in rows])
    high = max([1.0] + [r["ci_high"] if r["ci_high"] is not None else r["speedup"] for r in rows])
    pad = max(0.02, 0.08 * (high - low))
    return [low - pad, high + pad]


def _interval_trace(rows: list[Row], labels: list[str]) -> dict:
    """Markers at each speedup with asymmetric error bars to its interval (none when unknown)."""
    return {"x": [r["speedup"] for r in rows], "y": labels, "mode": "markers", "type": "scatter",
            "error_x": {"type": "data", "symmetric": False, "thickness": 1.5, "width": 4,
                        "array": [(r["ci_high"] - r["speedup"]) if r["ci_high"] is not None else 0 for r in rows],
                        "arrayminus": [(r["speedup"] - r["ci_low"]) if r["ci_low"] is not None else 0
                                       for r in rows]}}


def _label(row: Row) -> str:
    name = row.get("name") or row["kind"]
    return f"{name} · {row['fingerprint'][:8]} · {_elide(row['environment'])}"


def _elide(text: str, limit: int = ENVIRONMENT_CHARS) -> str:
    """`text` shortened in the middle to `limit` characters: a CPU's device kind lists its ISA
    features, while the device count and compiler at the end tell environments apart."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return f"{text[:head]}…{text[len(text) - (limit - 1 - head):]}"


def _version(version: int | None) -> str:
    return "unknown" if version is None else f"v{version}"


def _layout(fig: go.Figure, xaxis_title: str | None = None, yaxis_title: str | None = None,
            height: int = HEIGHT, barmode: str | None = None) -> go.Figure:
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


def _time_layout(fig: go.Figure, window: Window, yaxis_title: str, barmode: str) -> go.Figure:
    """A per-day chart: every day of the window on the x axis, labelled 'Nov 22'."""
    _layout(fig, yaxis_title=yaxis_title, barmode=barmode)
    days = (window.last - window.first).days + 1
    # A day's bar is centred on its midnight: half a day more on each side shows the whole bars.
    half_day = datetime.timedelta(hours=12)
    edges = [datetime.datetime.combine(window.first, datetime.time()) - half_day,
             datetime.datetime.combine(window.last, datetime.time()) + half_day]
    fig.update_xaxes(type="date", tickformat="%b %d", dtick=DAY_MS * max(1, math.ceil(days / 10)),
                     hoverformat="%b %d, %Y", range=[edge.isoformat(sep=" ") for edge in edges])
    fig.layout.yaxis.rangemode = "tozero"
    return fig


def _bargap(bars: int) -> float:
    """Wide gaps between few bars, so that one or two bars do not fill a whole chart."""
    return 0.25 if bars >= 5 else 0.75 - 0.1 * bars


def _count_axis(fig: go.Figure, largest: float) -> go.Figure:
    """A y axis of whole numbers: at most about six ticks of 1, 2 or 5 x 10^k, never a fraction
    of an entry or trial."""
    rough = max(1.0, largest / 6)
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    fig.update_yaxes(dtick=step, tickformat=",d")
    return fig


def _percent_axis(fig: go.Figure, title: str) -> None:
    """The right-hand axis of a two-axis chart: 0 to 100%, quarters, no grid of its own."""
    fig.update_yaxes(title_text=title, range=[0, 105], tickmode="array", tickvals=[0, 25, 50, 75, 100],
                     ticktext=["0%", "25%", "50%", "75%", "100%"], showgrid=False, secondary_y=True)


def _present(rows: list[Row], column: str, order: dict[str, str]) -> list[str]:
    """The values of `column` in `rows`: the known ones in `order`'s order, then the rest."""
    values = {r[column] for r in rows}
    return [v for v in order if v in values] + sorted(values - set(order))


def _stacked_days(rows: list[Row], window: Window, column: str, colors: dict[str, str], value: str | None,
                  hover: str, name: str = "{}") -> go.Figure:
    """Bars on every day of the window, one stacked series per value of `column`: the sum of
    `value` (None: the number of rows), zero on a day without rows."""
    days = window.days()
    fig = go.Figure()
    for series in _present(rows, column, colors):
        mine = [r for r in rows if r[column] == series]
        per_day = _sum_by(mine, "dt", value) if value else _count_by(r["dt"] for r in mine)
        fig.add_bar(x=days, y=[per_day.get(d, 0) for d in days], name=name.format(series),
                    marker_color=colors.get(series, GREY),
                    hovertemplate="%{x|%b %d}: " + hover + "<extra>" + series + "</extra>")
    return fig


def _sum_by(rows: list[Row], key: str, value: str) -> dict:
    sums: dict = defaultdict(float)
    for row in sorted(rows, key=lambda r: r[key]):
        sums[row[key]] += row[value] or 0.0
    return dict(sums)


def _count_by(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in sorted(values):
        counts[value] += 1
    return dict(counts)


def _pct(share: float | None) -> float | None:
    return None if share is None else 100 * share
