"""The hook's settings (`HookSettings`): where it looks configs up, what it records, and how the
job takes part in the holdout arm, relaxed numerics and its processes' shared decisions.

They come from `install()`'s arguments, each named for its field, else from the environment:
`FDO_HOME` (data root, default ~/.fdo), `FDO_STORE_URL` (ask the config service instead of the
embedded store), `FDO_STORE_VERSION` (pin an embedded version), `FDO_STORE_TIMEOUT` (seconds),
`FDO_SPOOL_HLO=1` (spool modules for symbol ingestion), `FDO_JOB_ID`, `FDO_TEAM` (the job's team,
which a store version may opt in to relaxed numerics), `FDO_HOLDOUT` (force the holdout share, 0
to 1), `FDO_OPT_OUT=1` (no holdout arm for this job), `FDO_RELAXED_NUMERICS=1` (take entries'
relaxed-numerics configs) and `FDO_DECISION_TIMEOUT` (seconds a process of a multi-process job
waits for its job's decision, default 300). A bad value is a ValueError naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from delivery.lookup import Found

DEFAULT_DECISION_TIMEOUT = 300.0  # seconds a process waits for its leader's decision (delivery.multiprocess)


@dataclass(frozen=True)
class HookSettings:
    """Where the hook looks configs up, and what it records."""

    home: Path
    url: str | None = None  # the config service; None: the embedded store under `home`
    version: int | None = None  # embedded: pin this version (default: the live one at first use)
    timeout: float = 0.25
    spool_hlo: bool = False
    job_id: str = ""
    team: str = ""  # the job's team: it takes relaxed configs where an entry's version lists it
    holdout: float | None = None  # a forced holdout share, 0 to 1; None: the entries' shares
    opt_out: bool = False  # the job takes no part in the holdout arm (unless one is forced)
    relaxed_numerics: bool = False  # the job takes entries' relaxed-numerics configs
    decision_timeout: float = DEFAULT_DECISION_TIMEOUT  # seconds a process waits for its job's decision

    @classmethod
    def from_environment(cls) -> "HookSettings":
        """Settings from the FDO_* environment variables; ValueError names a bad one."""
        env = os.environ
        home = Path(env.get("FDO_HOME") or Path.home() / ".fdo")
        return cls(home=home, url=env.get("FDO_STORE_URL") or None,
                   version=_int_var("FDO_STORE_VERSION"),
                   timeout=_float_var("FDO_STORE_TIMEOUT", 0.25),
                   spool_hlo=_flag_var("FDO_SPOOL_HLO"), job_id=env.get("FDO_JOB_ID", ""),
                   team=env.get("FDO_TEAM", ""), holdout=_share_var("FDO_HOLDOUT"),
                   opt_out=_flag_var("FDO_OPT_OUT"), relaxed_numerics=_flag_var("FDO_RELAXED_NUMERICS"),
                   decision_timeout=_timeout_var("FDO_DECISION_TIMEOUT", DEFAULT_DECISION_TIMEOUT))

    @classmethod
    def given(cls, **values: Any) -> "HookSettings":
        """The settings of the FDO_* variables, with the fields `values` gives (by name; None:
        not given) in their place. ValueError names a bad variable, or a bad holdout share or
        decision timeout given."""
        base = cls.from_environment()
        given = {name: value for name, value in values.items() if value is not None}
        holdout, decision_timeout = given.get("holdout"), given.get("decision_timeout")
        if holdout is not None and not 0 <= holdout <= 1:
            raise ValueError(f"holdout={holdout!r}: must be a share from 0 to 1")
        if decision_timeout is not None and not 0 < decision_timeout <= 3600:
            raise ValueError(f"decision_timeout={decision_timeout!r}: must be between 0 and 3600 seconds")
        if "home" in given:
            given["home"] = Path(given["home"])
        return replace(base, **given)

    def holdout_share(self, found: Found) -> float:
        """The share of jobs held out to the defaults for `found`'s key: the forced one, else
        none for a job that opted out, else the entry's."""
        if self.holdout is not None:
            return self.holdout
        return 0.0 if self.opt_out else found.holdout_share

    def takes_relaxed(self, found: Found) -> bool:
        """Whether the job takes `found`'s relaxed-numerics config, where it has one: the job
        opted in itself, or its team is one the entry's version lists. Neither by default."""
        return self.relaxed_numerics or self.team in found.relaxed_numerics_teams


def _int_var(name: str) -> int | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r}: must be a non-negative integer")
    return int(raw)


def _flag_var(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


def _share_var(name: str) -> float | None:
    """$name as a share from 0 to 1; None where it is unset or empty."""
    return _number_var(name, lambda value: 0 <= value <= 1, "a number from 0 to 1",
                       "a share from 0 to 1")


def _timeout_var(name: str, default: float) -> float:
    """$name as seconds, over 0 and at most an hour; `default` where it is unset or empty."""
    value = _number_var(name, lambda value: 0 < value <= 3600, "a number of seconds",
                        "between 0 and 3600 seconds")
    return default if value is None else value


def _float_var(name: str, default: float) -> float:
    """$name as seconds, over 0 and at most 60; `default` where it is unset or empty."""
    value = _number_var(name, lambda value: 0 < value <= 60, "a number of seconds",
                        "between 0 and 60 seconds")
    return default if value is None else value


def _number_var(name: str, within: Callable[[float], bool], number: str, domain: str) -> float | None:
    """$name as a number for which `within` holds (a NaN never does); None where it is unset
    or empty. ValueError naming the variable: not a number ("must be {number}"), or outside
    its domain ("must be {domain}")."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be {number}") from None
    if not within(value):
        raise ValueError(f"{name}={raw!r}: must be {domain}")
    return value
