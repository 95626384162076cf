"""The dashboards' charts: each a Plotly figure built from the rows of one query (the tuner page's
are tuning_charts.py's).

A chart names the endpoint (query) it draws and a builder from those rows and the window to a
figure; a builder returns None when the rows hold nothing to draw, and the page then says "No
data yet". Units are in the axis titles: chip-hours, % and × (speedup over the default compile).
Charts over time show every day of the window, bars at zero on a day without rows. Intervals
are labelled with the confidence their rows say they were measured at (`ci_level`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipelines.dashboard.figures import (
    BLUE,
    CATEGORY_COLORS,
    CATEGORY_LABELS,
    DARK_GREY,
    GREEN,
    GREY,
    HEIGHT,
    KIND_COLORS,
    LIGHT_BLUE,
    ORANGE,
    OUTCOME_COLORS,
    PROVENANCE_COLORS,
    PURPLE,
    TEAM_COLORS,
    bargap,
    base_layout,
    count_axis,
    day_layout,
    error_bars,
    interval_name,
    interval_trace,
    key_label,
    percent,
    percent_axis,
    present,
    speedup_range,
    stacked_days,
    sum_by,
    version_text,
)
from pipelines.dashboard.filters import Window
from pipelines.dashboard.sql import Row
from vocabulary.tuning import Kind

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
    """Chip-hours saved per day: at run time stacked by config kind (graph or op), and at
    compile time where compiles tried a config (below zero where they were slower)."""
    if not rows:
        return None
    fig = stacked_days(rows, window, "kind", KIND_COLORS, "chip_hours_saved", "%{y:,.0f} chip-hours",
                        "{} configs, run time")
    if _compiled(rows):
        days = window.days()
        saved, hits = sum_by(rows, "dt", "compile_chip_hours_saved"), sum_by(rows, "dt", "compile_hits")
        unmeasured = sum_by(rows, "dt", "compile_unmeasured")
        fig.add_bar(x=days, y=[saved.get(d, 0) for d in days], name="compile time", marker_color=PURPLE,
                    customdata=[[int(hits.get(d, 0)), int(unmeasured.get(d, 0))] for d in days],
                    hovertemplate="%{x|%b %d}: %{y:,.1f} chip-hours over %{customdata[0]} compiles "
                                  "(%{customdata[1]} unmeasured)<extra>compile time</extra>")
    return day_layout(fig, window, "chip-hours saved / day", barmode="relative")


def _compiled(rows: list[Row]) -> bool:
    """Whether any compile of the savings rows tried a config, its saving claimed or not: the
    charts then draw compile time as a series of its own."""
    return any(r["compile_hits"] or r["compile_unmeasured"] for r in rows)


def savings_by_team(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours saved in the window per team, run and compile time together, largest first;
    the hover splits them."""
    if not rows:
        return None
    runtime, compile_time = sum_by(rows, "team", "chip_hours_saved"), sum_by(rows, "team", "compile_chip_hours_saved")
    per_team = sorted(sum_by(rows, "team", "total_chip_hours_saved").items(), key=lambda item: item[1])
    fig = go.Figure(go.Bar(x=[v for _, v in per_team], y=[t for t, _ in per_team], orientation="h",
                           marker_color=BLUE, text=[f"{v:,.0f}" for _, v in per_team],
                           textposition="outside", cliponaxis=False,
                           customdata=[[runtime[t], compile_time[t]] for t, _ in per_team],
                           hovertemplate="%{y}: %{x:,.0f} chip-hours (run time %{customdata[0]:,.0f}, "
                                         "compile time %{customdata[1]:,.1f})<extra></extra>"))
    base_layout(fig, xaxis_title="chip-hours saved", height=max(HEIGHT, 60 + 26 * len(per_team)))
    fig.update_layout(bargap=bargap(len(per_team)))
    positive = per_team[0][1] >= 0 and per_team[-1][1] > 0  # a team's slower compiles can cost more than it saved
    fig.update_xaxes(range=[0, 1.15 * per_team[-1][1]] if positive else None)
    return fig


def savings_by_version(rows: list[Row], window: Window) -> go.Figure | None:
    """Chip-hours saved in the window per config store version that served the hits: at run
    time stacked by config kind, and at compile time."""
    if not rows:
        return None
    versions = sorted({r["config_version"] for r in rows}, key=lambda v: (v is None, v or 0))
    labels = [version_text(v) for v in versions]
    saved: dict[tuple[str, str], float] = defaultdict(float)
    compile_time: dict[str, float] = defaultdict(float)
    for row in rows:
        saved[row["kind"], version_text(row["config_version"])] += row["chip_hours_saved"]
        compile_time[version_text(row["config_version"])] += row["compile_chip_hours_saved"]
    fig = go.Figure()
    for kind in present(rows, "kind", KIND_COLORS):
        fig.add_bar(x=labels, y=[saved[kind, label] for label in labels], name=f"{kind} configs, run time",
                    marker_color=KIND_COLORS.get(kind, GREY),
                    hovertemplate="%{x}: %{y:,.0f} chip-hours<extra>" + kind + " configs</extra>")
    if _compiled(rows):
        fig.add_bar(x=labels, y=[compile_time[label] for label in labels], name="compile time", marker_color=PURPLE,
                    hovertemplate="%{x}: %{y:,.1f} chip-hours<extra>compile time</extra>")
    base_layout(fig, xaxis_title="config store version that served the hits", yaxis_title="chip-hours saved",
            barmode="relative")
    fig.update_xaxes(type="category")
    fig.update_layout(bargap=bargap(len(versions)))
    return fig


def realized_by_team(rows: list[Row], window: Window) -> go.Figure | None:
    """Per team, chip-hours saved booked and realized, on the entries with a realized speedup."""
    teams = [r for r in rows if r["slice"] == "team"]
    return _booked_and_realized(teams, [r["team"] for r in teams])


def realized_by_version(rows: list[Row], window: Window) -> go.Figure | None:
    """Per store version, chip-hours saved booked and realized, on the entries with a realized
    speedup."""
    versions = [r for r in rows if r["slice"] == "version"]
    return _booked_and_realized(versions, [version_text(r["config_version"]) for r in versions])


def _booked_and_realized(rows: list[Row], labels: list[str]) -> go.Figure | None:
    """Bars of booked and realized chip-hours saved per label, the realized ones with their
    interval; the undecided entries (booked only) named in the hover."""
    if not rows:
        return None
    fig = go.Figure()
    undecided = [[r["undecided_entries"], r["booked_chip_hours"] - r["booked_decided_chip_hours"]] for r in rows]
    fig.add_bar(x=labels, y=[r["booked_decided_chip_hours"] for r in rows], name="booked (expected speedup)",
                marker_color=LIGHT_BLUE, customdata=undecided,
                hovertemplate="%{x}: %{y:,.1f} chip-hours booked<br>and %{customdata[1]:,.1f} on "
                              "%{customdata[0]} undecided entries<extra></extra>")
    fig.add_bar(x=labels, y=[r["realized_chip_hours"] for r in rows],
                name=f"realized (fleet holdout), {interval_name(rows)}", marker_color=GREEN,
                error_y={**error_bars(rows, "realized_chip_hours", "realized_low", "realized_high"),
                         "color": DARK_GREY},
                customdata=[[r["realized_low"], r["realized_high"], r["decided_entries"]] for r in rows],
                hovertemplate="%{x}: %{y:,.1f} chip-hours realized [%{customdata[0]:,.1f}, %{customdata[1]:,.1f}]"
                              " on %{customdata[2]} entries<extra></extra>")
    base_layout(fig, yaxis_title="chip-hours saved", barmode="group")
    fig.update_xaxes(type="category")
    fig.update_layout(bargap=bargap(len(rows)))
    return fig


def realized_over_time(rows: list[Row], window: Window) -> go.Figure | None:
    """Per day, the speedup realized in the fleet that day with its interval (markers with error
    bars; an undecided day has none) and the speedup expected (a line), per store version."""
    if not rows:
        return None
    decided = [r for r in rows if r["speedup"] is not None]
    days = window.days()
    fig = go.Figure()
    for n, version in enumerate(sorted({r["config_version"] for r in rows})):
        mine = {r["dt"]: r for r in rows if r["config_version"] == version}
        color = TEAM_COLORS[n % len(TEAM_COLORS)]
        shown = [r for r in decided if r["config_version"] == version]
        fig.add_scatter(**interval_trace(shown, [r["dt"] for r in shown], across="y"),
                        name=f"{version_text(version)} realized, {interval_name(rows)}",
                        marker={"color": color, "size": 9},
                        customdata=[[r["holdout_jobs"], r["tuned_jobs"]] for r in shown],
                        hovertemplate="%{x|%b %d}: %{y:.3f}× (%{customdata[0]} holdout jobs, %{customdata[1]} tuned)"
                                      "<extra></extra>")
        fig.add_scatter(x=days, y=[mine[d]["expected_speedup"] if d in mine else None for d in days],
                        mode="lines+markers", connectgaps=True, name=f"{version_text(version)} expected",
                        line={"color": color, "dash": "dot", "width": 2}, marker={"color": color, "size": 5},
                        hovertemplate="%{x|%b %d}: %{y:.3f}× expected<extra></extra>")
    fig.add_hline(y=1, line={"color": GREY, "dash": "dash", "width": 1})
    day_layout(fig, window, "speedup (×)", barmode="group")
    fig.update_yaxes(rangemode="normal", range=speedup_range(decided + [
        {"speedup": r["expected_speedup"], "ci_low": None, "ci_high": None} for r in rows]), ticksuffix="×")
    return fig


def loop_return(rows: list[Row], window: Window) -> go.Figure | None:
    """The loop's cost in the window, stacked by what spent it, against the savings realized;
    the return on cost (their ratio) in the axis title."""
    if not rows or not (rows[0]["cost_chip_hours"] or rows[0]["realized_chip_hours"]):
        return None
    row = rows[0]
    fig = go.Figure()
    for part, color, label in (("tuning", BLUE, "tuning"), ("validation", GREEN, "validation"),
                               ("holdout", ORANGE, "holdout arms' forgone savings")):
        fig.add_bar(y=["loop cost"], x=[row[f"{part}_chip_hours"]], orientation="h", name=label, marker_color=color,
                    hovertemplate="%{x:,.2f} chip-hours<extra>" + label + "</extra>")
    fig.add_bar(y=["realized savings"], x=[row["realized_chip_hours"]], orientation="h", name="realized savings",
                marker_color=DARK_GREY, hovertemplate="%{x:,.1f} chip-hours<extra>realized</extra>")
    ratio = row["return_on_cost"]
    base_layout(fig, xaxis_title="chip-hours in the window; return on cost "
                + ("—" if ratio is None else f"{ratio:,.1f}×"), barmode="stack")
    fig.update_layout(bargap=bargap(2))
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
    for kind in present(profiles, "kind", KIND_COLORS):
        mine = {r["dt"]: r for r in profiles if r["kind"] == kind}
        fig.add_bar(x=days, y=[mine[d]["hit_chip_hours"] if d in mine else 0.0 for d in days],
                    name=f"{kind}: chip-hours tuned", marker_color=KIND_COLORS.get(kind, GREY), opacity=0.55,
                    hovertemplate="%{y:,.0f} chip-hours<extra>" + kind + " hits</extra>", secondary_y=False)
        fig.add_scatter(x=days, y=[percent(mine[d]["hit_rate"]) if d in mine else None for d in days],
                        mode="lines+markers", name=f"{kind}: hit rate",
                        line={"color": KIND_COLORS.get(kind, GREY), "width": 2.5},
                        hovertemplate="%{y:.1f}%<extra>" + kind + " hit rate</extra>", secondary_y=True)
    hook = {r["dt"]: r for r in rows if r["source"] == "hook"}
    if hook:
        fig.add_scatter(x=days, y=[percent(hook[d]["hit_rate"]) if d in hook else None for d in days],
                        mode="lines+markers", name="hook: compile hit rate",
                        line={"color": GREEN, "width": 2.5, "dash": "dot"},
                        customdata=[[hook[d]["hit_runs"], hook[d]["runs"]] if d in hook else [0, 0] for d in days],
                        hovertemplate="%{y:.1f}% (%{customdata[0]} of %{customdata[1]} compiles)"
                                      "<extra>compiler hook</extra>", secondary_y=True)
    day_layout(fig, window, "chip-hours run tuned / day", barmode="group")
    percent_axis(fig, "hit rate (%)")
    return fig


def graph_cost(rows: list[Row], window: Window) -> go.Figure | None:
    """A graph's chip-hours per day, stacked: run with a tuned config, and not."""
    graph = {r["dt"]: r for r in rows if r["source"] == "profiles" and r["kind"] == Kind.GRAPH}
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
    return day_layout(fig, window, "chip-hours / day", barmode="stack")


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
    base_layout(fig, xaxis_title="chip-hours in the window", barmode="stack",
            height=max(HEIGHT, 80 + 26 * len(teams)))
    fig.update_layout(bargap=bargap(len(teams)))
    return fig


def coverage(rows: list[Row], window: Window) -> go.Figure | None:
    """Where the last ranking's fleet chip-time went, per kind, by coverage category (%)."""
    if not rows:
        return None
    last = max(r["dt"] for r in rows)
    latest = [r for r in rows if r["dt"] == last]
    kinds = sorted({r["kind"] for r in latest}, key=lambda k: (k != Kind.GRAPH, k))
    fig = go.Figure()
    for category in CATEGORY_COLORS:
        mine = {r["kind"]: r for r in latest if r["category"] == category}
        fig.add_bar(y=[f"{k} keys" for k in kinds], x=[percent(mine[k]["share"]) if k in mine else 0 for k in kinds],
                    name=CATEGORY_LABELS[category], orientation="h", marker_color=CATEGORY_COLORS[category],
                    customdata=[[mine[k]["keys"], mine[k]["chip_hours"]] if k in mine else [0, 0] for k in kinds],
                    hovertemplate="%{x:.1f}% of chip-time, %{customdata[0]} keys, %{customdata[1]:,.0f} "
                                  "chip-hours<extra>" + CATEGORY_LABELS[category] + "</extra>")
    base_layout(fig, xaxis_title=f"share of fleet chip-time (%), ranking of {last}", barmode="stack")
    fig.update_xaxes(range=[0, 100], ticksuffix="%")
    return fig


def verified_coverage(rows: list[Row], window: Window) -> go.Figure | None:
    """The loop's reach after each night (%): the share of the tunable chip-time that runs a
    verified faster config, and the share decided (that, or its defaults verified best)."""
    if not rows:
        return None
    fig = go.Figure()
    x = [f"night {r['night']}" for r in rows]
    fig.add_bar(x=x, y=[percent(r["share"]) or 0.0 for r in rows],
                name="faster (verified config)", marker_color=KIND_COLORS[Kind.GRAPH],
                customdata=[[r["date"], r["covered_chip_hours"], r["tunable_chip_hours"]] for r in rows],
                hovertemplate="%{x} (%{customdata[0]}): %{y:.1f}% of the tunable chip-time runs a verified "
                              "config, %{customdata[1]:,.0f} of %{customdata[2]:,.0f} chip-hours<extra></extra>")
    fig.add_bar(x=x, y=[percent(r.get("decided_share")) or 0.0 for r in rows],
                name="decided (or defaults verified best)", marker_color=KIND_COLORS[Kind.OP],
                customdata=[[r["date"]] for r in rows],
                hovertemplate="%{x} (%{customdata[0]}): %{y:.1f}% of the tunable chip-time decided"
                              "<extra></extra>")
    base_layout(fig, yaxis_title="share of the tunable chip-time (%)", barmode="group")
    fig.update_yaxes(range=[0, 100], ticksuffix="%")
    fig.update_layout(bargap=bargap(len(rows)))
    return fig


def validator_outcomes(rows: list[Row], window: Window) -> go.Figure | None:
    """The validator's decisions per day, stacked by outcome."""
    if not rows:
        return None
    fig = stacked_days(rows, window, "outcome", OUTCOME_COLORS, "entries", "%{y} entries")
    day_layout(fig, window, "entries validated / day", barmode="stack")
    return count_axis(fig, max(sum_by(rows, "dt", "entries").values()))


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
    fig.add_scatter(x=days, y=[percent(by_day[d]["validator_share"]) if d in by_day else None for d in days],
                    mode="lines+markers", name="validator-updated share", line={"color": DARK_GREY, "width": 2.5},
                    hovertemplate="%{y:.1f}%<extra>validator-updated share</extra>", secondary_y=True)
    day_layout(fig, window, "chip-hours run tuned / day", barmode="stack")
    percent_axis(fig, "share of hits (%)")
    return fig


def staleness(rows: list[Row], window: Window) -> go.Figure | None:
    """Live store entries by age (days since last measured), stacked by who measured them."""
    aged = [r for r in rows if r["age_days"] is not None]
    if not aged:
        return None
    fig = go.Figure()
    for provenance in present(aged, "provenance", PROVENANCE_COLORS):
        fig.add_histogram(x=[r["age_days"] for r in aged if r["provenance"] == provenance], name=provenance,
                          marker_color=PROVENANCE_COLORS.get(provenance, GREY), xbins={"size": 1, "start": 0},
                          hovertemplate="%{x} days old: %{y} entries<extra>" + provenance + "</extra>")
    base_layout(fig, xaxis_title="age (days since measured)", yaxis_title="live entries", barmode="stack")
    fig.update_xaxes(rangemode="tozero", dtick=max(1, math.ceil(max(r["age_days"] for r in aged) / 10)))
    return count_axis(fig, len(aged))


def top_graphs(rows: list[Row], window: Window) -> go.Figure | None:
    """The costliest graph keys: chip-hours (left) and the tuned speedup with its interval."""
    return _top(rows, Kind.GRAPH)


def top_ops(rows: list[Row], window: Window) -> go.Figure | None:
    """The costliest op keys: chip-hours (left) and the tuned speedup with its interval."""
    return _top(rows, Kind.OP)


def top_graph_links(rows: list[Row]) -> list[tuple[str, str]]:
    """The graph pages of the top graph keys, costliest first, one per fingerprint."""
    links: dict[str, str] = {}
    for row in rows:
        if row["kind"] == Kind.GRAPH:
            links.setdefault(row["fingerprint"], f"{row.get('name') or Kind.GRAPH} · {row['fingerprint'][:8]}")
    return list(links.items())


def store_versions(rows: list[Row], window: Window) -> go.Figure | None:
    """Entries per store version, stacked by kind; the live version marked."""
    if not rows:
        return None
    fig = go.Figure()
    labels = [f"v{r['version']}{' (live)' if r['live'] else ''}" for r in rows]
    for kind in (Kind.GRAPH, Kind.OP):
        fig.add_bar(x=labels, y=[r[f"{kind}_entries"] for r in rows], name=f"{kind} entries",
                    marker_color=KIND_COLORS[kind], customdata=[r["reason"] for r in rows],
                    hovertemplate="%{x}: %{y} " + kind + " entries<br>%{customdata}<extra></extra>")
    base_layout(fig, yaxis_title="entries", barmode="stack")
    fig.update_layout(bargap=bargap(len(rows)))
    return count_axis(fig, max(r["entries"] for r in rows))


def _top(rows: list[Row], kind: Kind) -> go.Figure | None:
    mine = [r for r in rows if r["kind"] == kind]
    if not mine:
        return None
    mine.sort(key=lambda r: -r["rank"])  # plotly draws horizontal bars bottom-up
    labels = [f"#{r['rank']} {key_label(r)}" for r in mine]
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
    base_layout(fig, height=max(HEIGHT, 70 + 28 * len(mine)))
    fig.update_yaxes(categoryorder="array", categoryarray=labels, automargin=True)
    if not tuned:
        fig.update_xaxes(title_text=f"chip-hours (no {kind} key here is tuned yet)")
        return fig
    # One series per writer of the entries: their intervals are measured at different levels.
    for provenance in present([r for _, r in tuned], "provenance", PROVENANCE_COLORS):
        written = [(label, r) for label, r in tuned if r["provenance"] == provenance]
        fig.add_scatter(**interval_trace([r for _, r in written], [label for label, _ in written]),
                        name=f"{provenance} entry, {interval_name([r for _, r in written])}",
                        marker={"color": PROVENANCE_COLORS.get(provenance, GREY), "size": 9},
                        hovertemplate="%{x:.3f}×<extra>" + provenance + "</extra>", row=1, col=2)
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1}, row=1, col=2)
    fig.update_xaxes(title_text="chip-hours (green: tuned)", row=1, col=1)
    fig.update_xaxes(title_text="tuned speedup (×)", range=speedup_range([r for _, r in tuned]), ticksuffix="×",
                     row=1, col=2)
    return fig
