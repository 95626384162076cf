"""A figure with its confidence interval: the one record of a speedup (or of savings) and its
bounds that every stage shares, and the flat keys that JSON documents and tables hold it under."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Interval:
    """An estimate and the bounds of its confidence interval (99% two-sided wherever this
    project measures one): a speedup over the default and its bounds, or chip-seconds saved
    and theirs."""

    estimate: float
    low: float
    high: float

    def as_speedup(self) -> str:
        """The interval of a speedup as people read it: `1.234x [1.200, 1.268]`."""
        return f"{self.estimate:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def columns(interval: Interval | None, prefix: str = "", estimate: str = "speedup"
            ) -> dict[str, float | None]:
    """The interval as flat keys, as the warehouse's tables and the journals hold it:
    `{prefix}{estimate}`, `{prefix}ci_low`, `{prefix}ci_high`; null where there is none."""
    if interval is None:
        return {f"{prefix}{estimate}": None, f"{prefix}ci_low": None, f"{prefix}ci_high": None}
    return {f"{prefix}{estimate}": interval.estimate, f"{prefix}ci_low": interval.low,
            f"{prefix}ci_high": interval.high}


def from_columns(data: Mapping[str, Any], prefix: str = "", estimate: str = "speedup"
                 ) -> Interval | None:
    """The interval `columns` wrote into `data` (a table's row, a JSON document); None where
    its estimate is null or absent."""
    if data.get(f"{prefix}{estimate}") is None:
        return None
    return Interval(data[f"{prefix}{estimate}"], data[f"{prefix}ci_low"], data[f"{prefix}ci_high"])


def as_flat(record: Any, *prefixes: str) -> dict[str, Any]:
    """A record's fields (a dataclass's, `asdict`) as its JSON form holds them: each interval,
    the field `{prefix}speedup` for each of `prefixes` (none given: the one `speedup`), as its
    flat keys (`columns`)."""
    data = asdict(record)
    for prefix in prefixes or ("",):
        data.update(columns(getattr(record, f"{prefix}speedup"), prefix))
    return data


def from_flat(data: Mapping[str, Any], *prefixes: str) -> dict[str, Any]:
    """The fields `as_flat` wrote into `data`: each interval back in its field (None where its
    estimate is null or absent), its bounds' keys gone."""
    prefixes = prefixes or ("",)
    bounds = {f"{prefix}{bound}" for prefix in prefixes for bound in ("ci_low", "ci_high")}
    return {**{k: v for k, v in data.items() if k not in bounds},
            **{f"{prefix}speedup": from_columns(data, prefix) for prefix in prefixes}}
