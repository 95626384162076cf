"""What a dashboard shows: a date window and, optionally, one team, device kind, compiler
version and graph; parsed from the query parameters of every page and endpoint, and written
back into every link, so that a page's URL says all it shows.

Parameters: `from` and `to` (YYYY-MM-DD, both included) or `days` (ending at `to`, default
today; the default window is the last DEFAULT_DAYS days), `team`, `device_kind`,
`compiler_version` (exact values, as the warehouse holds them; empty means any), `graph` (a
graph fingerprint: the graph pages) and `entry` (a store key: the entry pages). A bad value is a
FilterError naming the parameter.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from dataclasses import dataclass

from ingest.tables import COMPILER_VERSION, DEVICE_KIND, TEAM

DEFAULT_DAYS = 30
MAX_DAYS = 366
# The filters besides the window, each with the longest value its warehouse column holds.
NARROWING = {"team": TEAM, "device_kind": DEVICE_KIND, "compiler_version": COMPILER_VERSION}
# The filters that choose what a page is about (a graph's, an entry's page): the links to other
# pages leave them out.
PAGE_FILTERS = frozenset({"graph", "entry"})
_KEY = re.compile(r"[0-9a-f]{32}")


class FilterError(ValueError):
    """A query parameter that names no window or filter; the message names the parameter."""


@dataclass(frozen=True)
class Window:
    """The dates a dashboard covers, both ends included."""

    first: datetime.date
    last: datetime.date

    @classmethod
    def last_days(cls, days: int, last: datetime.date | None = None) -> Window:
        """The `days` days ending on `last` (default: today, as the other stages date their rows)."""
        last = last or datetime.date.today()
        return cls(last - datetime.timedelta(days=days - 1), last)

    def holds(self, dt: str) -> bool:
        """Whether partition `dt` (YYYY-MM-DD) is inside the window."""
        return self.first.isoformat() <= dt <= self.last.isoformat()

    def days(self) -> list[str]:
        """Every day of the window, YYYY-MM-DD, in order."""
        return [(self.first + datetime.timedelta(days=i)).isoformat()
                for i in range((self.last - self.first).days + 1)]


@dataclass(frozen=True)
class Filters:
    """The window and the optional filters of one page or endpoint."""

    window: Window
    team: str | None = None
    device_kind: str | None = None
    compiler_version: str | None = None
    graph: str | None = None  # a graph fingerprint
    entry: str | None = None  # a store key

    def given(self) -> set[str]:
        """The names of the filters set, besides the window."""
        return {name for name in (*NARROWING, *PAGE_FILTERS) if getattr(self, name) is not None}

    def params(self, leave_out: frozenset[str] = frozenset()) -> dict[str, str]:
        """The query parameters that ask for these filters, less those named in `leave_out`."""
        values = {"from": self.window.first.isoformat(), "to": self.window.last.isoformat(),
                  **{name: getattr(self, name) for name in self.given()}}
        return {name: value for name, value in values.items() if name not in leave_out}

    def query(self, leave_out: frozenset[str] = frozenset()) -> str:
        """`params` as a URL's query string."""
        return urllib.parse.urlencode(self.params(leave_out))


def parse_filters(first: str | None = None, last: str | None = None, days: str | None = None,
                  team: str | None = None, device_kind: str | None = None,
                  compiler_version: str | None = None, graph: str | None = None,
                  entry: str | None = None) -> Filters:
    """The filters that query parameters ask for; FilterError naming a bad one."""
    narrowing = {name: _bounded(name, value, NARROWING[name])
                 for name, value in (("team", team), ("device_kind", device_kind),
                                     ("compiler_version", compiler_version))}
    return Filters(parse_window(first, last, days), **narrowing, graph=parse_fingerprint("graph", graph),
                   entry=parse_fingerprint("entry", entry, "store key"))


def parse_window(first: str | None, last: str | None, days: str | None) -> Window:
    """The window that `from`, `to` and `days` ask for; FilterError naming a bad one."""
    end = _date("to", last) if last else datetime.date.today()
    if first and days:
        raise FilterError("give either 'from' or 'days', not both")
    count = _days(days) if days else DEFAULT_DAYS
    window = Window(_date("from", first), end) if first else Window.last_days(count, end)
    if window.first > window.last:
        raise FilterError(f"from ({window.first}) is after to ({window.last})")
    if (window.last - window.first).days >= MAX_DAYS:
        raise FilterError(f"the window is limited to {MAX_DAYS} days")
    return window


def parse_fingerprint(name: str, text: str | None, what: str = "fingerprint") -> str | None:
    """A graph fingerprint or store key (`what`: 32 lowercase hex digits), or None for an
    empty one."""
    return check_fingerprint(name, text, what) if text else None


def check_fingerprint(name: str, text: str, what: str = "fingerprint") -> str:
    """`text`, a graph fingerprint or store key (`what`: 32 lowercase hex digits); FilterError
    naming `name` otherwise."""
    if not _KEY.fullmatch(text):
        raise FilterError(f"{name}: {text[:40]!r} is not a {what} (32 hex digits)")
    return text


def _bounded(name: str, text: str | None, longest: int) -> str | None:
    if not text:
        return None  # an HTML form sends an unchosen filter as empty
    if len(text) > longest:
        raise FilterError(f"{name}: {len(text)} characters, longer than any {name} ({longest})")
    if not text.isprintable():
        raise FilterError(f"{name}: {text[:40]!r} holds control characters")
    return text


def _date(name: str, text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise FilterError(f"{name}: {text[:40]!r} is not a date (YYYY-MM-DD)") from None


def _days(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_DAYS:
        raise FilterError(f"days: {text[:40]!r} is not a whole number of days from 1 to {MAX_DAYS}")
    return int(text)
