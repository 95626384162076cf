"""The dashboards' charts: each a Plotly figure built from the rows of one query.

A chart names the endpoint (query) it draws and a builder from those rows to a figure; a builder
returns None when the rows hold nothing to draw, and the page then says "No data yet". Units are
in the axis titles: chip-hours, % and × (speedup over the default compile).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import plotly.graph_objects as go
from plotly.subplots import make_subplots

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


@dataclass(frozen=True)
class Chart:
    """One chart of the page: what it shows, the endpoint of its rows, how it is drawn."""

    id: str
    title: str
    note: str  # what is counted and in which unit, shown under the title
    endpoint: str  # a key of queries.QUERIES
    build: Callable[[list[Row]], go.Figure | None]
    fills: str  # the command whose output it draws, for the "No data yet" note
    wide: bool = False


def savings_by_kind(rows: list[Row]) -> go.Figure | None:
    """Chip-hours saved per day, stacked by config kind (graph or op)."""
    if not rows:
        return None
    fig = _stacked_days(rows, "kind", KIND_COLORS, "chip_hours_saved", "%{y:,.0f} chip-hours", "{} configs")
    return _time_layout(fig, rows, "chip-hours saved / day", barmode="stack")


def savings_by_team(rows: list[Row]) -> go.Figure | None:
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


def hit_rate(rows: list[Row]) -> go.Figure | None:
    """Chip-hours that ran tuned per day (bars) and the hit rate (lines, right axis): the share
    of chip-time with a tuned config per kind, and the compiler hook's share of compiles."""
    if not rows:
        return None
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    profiles = [r for r in rows if r["source"] == "profiles"]
    for kind in _present(profiles, "kind", KIND_COLORS):
        mine = [r for r in profiles if r["kind"] == kind]
        fig.add_bar(x=[r["dt"] for r in mine], y=[r["hit_chip_hours"] for r in mine],
                    name=f"{kind}: chip-hours tuned", marker_color=KIND_COLORS.get(kind, GREY), opacity=0.55,
                    hovertemplate="%{y:,.0f} chip-hours<extra>" + kind + " hits</extra>", secondary_y=False)
        fig.add_scatter(x=[r["dt"] for r in mine], y=[_pct(r["hit_rate"]) for r in mine], mode="lines+markers",
                        name=f"{kind}: hit rate", line={"color": KIND_COLORS.get(kind, GREY), "width": 2.5},
                        hovertemplate="%{y:.1f}%<extra>" + kind + " hit rate</extra>", secondary_y=True)
    hook = [r for r in rows if r["source"] == "hook"]
    if hook:
        fig.add_scatter(x=[r["dt"] for r in hook], y=[_pct(r["hit_rate"]) for r in hook], mode="lines+markers",
                        name="hook: compile hit rate", line={"color": GREEN, "width": 2.5, "dash": "dot"},
                        customdata=[[r["hit_runs"], r["runs"]] for r in hook],
                        hovertemplate="%{y:.1f}% (%{customdata[0]} of %{customdata[1]} compiles)"
                                      "<extra>compiler hook</extra>", secondary_y=True)
    _time_layout(fig, rows, "chip-hours run tuned / day", barmode="group")
    _percent_axis(fig, "hit rate (%)")
    return fig


def coverage(rows: list[Row]) -> go.Figure | None:
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


def validator_outcomes(rows: list[Row]) -> go.Figure | None:
    """The validator's decisions per day, stacked by outcome."""
    if not rows:
        return None
    fig = _stacked_days(rows, "outcome", OUTCOME_COLORS, "entries", "%{y} entries")
    _time_layout(fig, rows, "entries validated / day", barmode="stack")
    return _count_axis(fig, max(_sum_by(rows, "dt", "entries").values()))


def validator_hit_share(rows: list[Row]) -> go.Figure | None:
    """Tuned chip-hours per day served by validator-updated entries vs. the rest (bars), and the
    validator-updated share (line, right axis)."""
    if not rows:
        return None
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    days = [r["dt"] for r in rows]
    fig.add_bar(x=days, y=[r["validator_hit_chip_hours"] for r in rows], name="validator-updated entries",
                marker_color=GREEN, hovertemplate="%{y:,.0f} chip-hours<extra>validator-updated</extra>")
    fig.add_bar(x=days, y=[r["hit_chip_hours"] - r["validator_hit_chip_hours"] for r in rows],
                name="other entries", marker_color=LIGHT_BLUE,
                hovertemplate="%{y:,.0f} chip-hours<extra>other entries</extra>")
    fig.add_scatter(x=days, y=[_pct(r["validator_share"]) for r in rows], mode="lines+markers",
                    name="validator-updated share", line={"color": DARK_GREY, "width": 2.5},
                    hovertemplate="%{y:.1f}%<extra>validator-updated share</extra>", secondary_y=True)
    _time_layout(fig, rows, "chip-hours run tuned / day", barmode="stack")
    _percent_axis(fig, "share of hits (%)")
    return fig


def staleness(rows: list[Row]) -> go.Figure | None:
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


def top_graphs(rows: list[Row]) -> go.Figure | None:
    """The costliest graph keys: chip-hours (left) and the tuned speedup with its 99% interval."""
    return _top(rows, "graph")


def top_ops(rows: list[Row]) -> go.Figure | None:
    """The costliest op keys: chip-hours (left) and the tuned speedup with its 99% interval."""
    return _top(rows, "op")


def tuner_trials(rows: list[Row]) -> go.Figure | None:
    """Tuning trials per day, stacked by outcome."""
    if not rows:
        return None
    fig = _stacked_days(rows, "outcome", OUTCOME_COLORS, None, "%{y} trials")
    _time_layout(fig, rows, "trials / day", barmode="stack")
    return _count_axis(fig, max(_count_by(r["dt"] for r in rows).values()))


def tuner_progress(rows: list[Row]) -> go.Figure | None:
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
                        name=f"{trials[0]['fingerprint'][:8]} · env {trials[0]['env_key'][:6]}",
                        hovertemplate="trial %{x}: best %{y:.3f}×<extra>" + task[:12] + "</extra>")
    fig.add_hline(y=1, line={"color": GREY, "dash": "dash", "width": 1})
    _layout(fig, xaxis_title="trial", yaxis_title="best speedup so far (×)")
    fig.update_yaxes(ticksuffix="×")
    fig.update_xaxes(dtick=max(1, math.ceil(max(r["index"] + 1 for r in rows) / 12)))
    return fig


def tuning_results(rows: list[Row]) -> go.Figure | None:
    """Each task's verified speedup with its 99% interval, accepted or not."""
    measured = [r for r in rows if r["speedup"] is not None]
    if not measured:
        return None
    measured.sort(key=lambda r: r["speedup"])
    fig = go.Figure()
    for accepted, color, label in ((True, GREEN, "accepted"), (False, GREY, "not accepted")):
        mine = [r for r in measured if bool(r["accepted"]) == accepted]
        if mine:
            fig.add_scatter(**_interval_trace(mine, [_label(r) for r in mine]), name=label,
                            marker={"color": color, "size": 9}, customdata=[r["status"] for r in mine],
                            hovertemplate="%{y}: %{x:.3f}× (%{customdata})<extra></extra>")
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1})
    _layout(fig, xaxis_title="verified speedup (×), 99% interval",
            height=max(HEIGHT, 80 + 26 * len(measured)))
    fig.update_xaxes(range=_speedup_range(measured), ticksuffix="×")
    fig.update_yaxes(categoryorder="array", categoryarray=[_label(r) for r in measured])
    return fig


def store_versions(rows: list[Row]) -> go.Figure | None:
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


SECTIONS: tuple[tuple[str, tuple[Chart, ...]], ...] = (
    ("Savings", (
        Chart("savings-by-kind", "Savings over time", "Chip-hours saved per day by tuned configs, "
              "graph vs. op configs", "savings", savings_by_kind, "fdo savings"),
        Chart("savings-by-team", "Savings per team", "Chip-hours saved in the window, per team",
              "savings", savings_by_team, "fdo savings"),
    )),
    ("Hits and coverage", (
        Chart("hits", "Config hits and hit rate", "Chip-hours that ran with a tuned config (bars) "
              "and hit rate in % (lines): of fleet chip-time, and of the compiler hook's compiles",
              "hits", hit_rate, "fdo ingest profiles"),
        Chart("coverage", "Fleet coverage", "Share of fleet chip-time by category at the last ranking",
              "coverage", coverage, "fdo rank"),
    )),
    ("Validator and staleness", (
        Chart("validations", "Validator outcomes", "Store entries re-validated per day, by decision",
              "validations", validator_outcomes, "fdo validate"),
        Chart("validator-hits", "Hits on validator-updated entries", "Tuned chip-hours per day by "
              "who last measured the entry; line: validator-updated share in %", "validator-hits",
              validator_hit_share, "fdo validate, then fdo savings"),
        Chart("staleness", "Staleness of live entries", "Live store entries by days since they were "
              "last measured", "staleness", staleness, "fdo deliver"),
        Chart("store", "Store versions", "Entries per published version of the config store",
              "store", store_versions, "fdo deliver"),
    )),
    ("Top graphs and ops", (
        Chart("top-graphs", "Top graphs", "Costliest graph keys of the window (chip-hours of jobs "
              "that accept tuning) and their tuned speedup (×) with its 99% interval", "top",
              top_graphs, "fdo ingest profiles", wide=True),
        Chart("top-ops", "Top ops", "Costliest op keys (kernels) of the window and their tuned "
              "speedup (×) with its 99% interval", "top", top_ops, "fdo ingest profiles", wide=True),
    )),
    ("Tuner", (
        Chart("tuner-trials", "Tuner trials", "Trials per day, by outcome", "tuner", tuner_trials, "fdo tune"),
        Chart("tuner-progress", "Tuner progress", "Best speedup (×) with correct numerics found so "
              "far, per task", "tuner", tuner_progress, "fdo tune"),
        Chart("tuning-results", "Tuning results", "Verified speedup (×) of each task with its 99% "
              "interval", "tuning-results", tuning_results, "fdo tune", wide=True),
    )),
)
CHARTS: tuple[Chart, ...] = tuple(chart for _, charts in SECTIONS for chart in charts)


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
                customdata=[r["chip_hours_saved"] for r in mine], showlegend=False,
                hovertemplate="%{x:,.0f} chip-hours, saved %{customdata:,.0f}<extra></extra>", row=1, col=1)
    _layout(fig, height=max(HEIGHT, 70 + 28 * len(mine)))
    fig.update_yaxes(categoryorder="array", categoryarray=labels, automargin=True)
    if not tuned:
        fig.update_xaxes(title_text=f"chip-hours (no {kind} key here is tuned yet)")
        return fig
    fig.add_scatter(**_interval_trace([r for _, r in tuned], [label for label, _ in tuned]),
                    name="tuned speedup", marker={"color": GREEN, "size": 9}, showlegend=False,
                    hovertemplate="%{x:.3f}×<extra></extra>", row=1, col=2)
    fig.add_vline(x=1, line={"color": GREY, "dash": "dash", "width": 1}, row=1, col=2)
    fig.update_xaxes(title_text="chip-hours (green: tuned)", row=1, col=1)
    fig.update_xaxes(title_text="speedup (×), 99% interval", range=_speedup_range([r for _, r in tuned]),
                     ticksuffix="×", row=1, col=2)
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
    return f"{name} · {row['fingerprint'][:8]} · env {row['env_key'][:6]}"


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


def _time_layout(fig: go.Figure, rows: list[Row], yaxis_title: str, barmode: str) -> go.Figure:
    """A per-day chart: whole days on the x axis, labelled 'Nov 22'."""
    days = sorted({r["dt"] for r in rows})
    _layout(fig, yaxis_title=yaxis_title, barmode=barmode)
    fig.update_xaxes(type="date", tickformat="%b %d", dtick=DAY_MS * max(1, math.ceil(len(days) / 10)),
                     hoverformat="%b %d, %Y")
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


def _stacked_days(rows: list[Row], column: str, colors: dict[str, str], value: str | None, hover: str,
                  name: str = "{}") -> go.Figure:
    """Bars per day, one stacked series per value of `column`: the sum of `value` (None: rows)."""
    fig = go.Figure()
    for series in _present(rows, column, colors):
        mine = [r for r in rows if r[column] == series]
        per_day = _sum_by(mine, "dt", value) if value else _count_by(r["dt"] for r in mine)
        fig.add_bar(x=list(per_day), y=list(per_day.values()), name=name.format(series),
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
