"""The tuner page's charts, each a Plotly figure built from the rows of one query (tuning.py): trials
per day, each task's best speedup so far, the verified results, which flags matter. As charts.py's,
a builder returns None when the rows hold nothing to draw."""

from __future__ import annotations

import math
from collections import defaultdict

import plotly.graph_objects as go

from pipelines.dashboard.figures import (
    BLUE,
    DARK_GREY,
    GREEN,
    GREY,
    HEIGHT,
    OUTCOME_COLORS,
    TEAM_COLORS,
    bargap,
    base_layout,
    count_axis,
    count_by,
    day_layout,
    elide,
    error_bars,
    interval_name,
    interval_trace,
    key_label,
    speedup_range,
    stacked_days,
)
from pipelines.dashboard.filters import Window
from pipelines.dashboard.sql import Row


def tuner_trials(rows: list[Row], window: Window) -> go.Figure | None:
    """Tuning trials per day, stacked by outcome."""
    if not rows:
        return None
    fig = stacked_days(rows, window, "outcome", OUTCOME_COLORS, None, "%{y} trials")
    day_layout(fig, window, "trials / day", barmode="stack")
    return count_axis(fig, max(count_by(r["dt"] for r in rows).values()))


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
                        name=f"{trials[0]['fingerprint'][:8]} · {elide(trials[0]['environment'])}",
                        hovertemplate="trial %{x}: best %{y:.3f}×<extra>" + task[:12] + "</extra>")
    fig.add_hline(y=1, line={"color": GREY, "dash": "dash", "width": 1})
    base_layout(fig, xaxis_title="trial", yaxis_title="best speedup so far (×)")
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
            fig.add_scatter(**interval_trace(mine, [key_label(r) for r in mine]), name=label,
                            marker={"color": color, "size": 9},
                            customdata=[[r["status"], r["environment"]] for r in mine],
                            hovertemplate="%{x:.3f}× (%{customdata[0]})<br>%{customdata[1]}<extra></extra>")
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1})
    base_layout(fig, xaxis_title=f"verified speedup (×), {interval_name(measured)}",
            height=max(HEIGHT, 80 + 26 * len(measured)))
    fig.update_xaxes(range=speedup_range(measured), ticksuffix="×")
    fig.update_yaxes(categoryorder="array", categoryarray=[key_label(r) for r in measured])
    return fig


def flag_importance(rows: list[Row], window: Window) -> go.Figure | None:
    """Each flag's importance (mean |Shapley value| on log speedup over the trials that set it)
    with its bootstrap interval, most important on top."""
    scored = [r for r in rows if r["importance"] is not None][::-1]  # plotly draws bottom-up
    if not scored:
        return None
    fig = go.Figure(go.Bar(
        x=[r["importance"] for r in scored], y=[r["flag"] for r in scored], orientation="h", marker_color=BLUE,
        error_x={**error_bars(scored, "importance", "low", "high"), "color": DARK_GREY},
        customdata=[[r["trials"], r["failed"], r["winners"]] for r in scored],
        hovertemplate="%{y}: %{x:.4f} (%{customdata[0]} trials, %{customdata[1]} failed, "
                      "%{customdata[2]} winners)<extra></extra>"))
    base_layout(fig,
                xaxis_title=f"importance: mean |Shapley value| on log speedup, {interval_name(scored, 'bootstrap')}",
            height=max(HEIGHT, 70 + 26 * len(scored)))
    fig.update_layout(bargap=bargap(len(scored)))
    return fig
