"""The prior that ships with the tuner: what each single move did across the zoo, per platform.

A fresh home has no trials of other graphs (`tuner.prior`), so its first search would order its
moves by the flag table's cold ranks alone, and screen moves that are slower almost everywhere
(optimization level 0: 0.55x on the zoo's geometric mean on an AMD EPYC; on a slow module on an
Intel Xeon, levels 0 to 2 and the loop-unrolling switch at 0.1x to 0.2x took 50 to 75 s each).
`benchmarks/build_prior.py` screens every one-move config of the graph space on every zoo
workload, as the search screens, and writes what it found per move to
`tuner/priors/<platform>.json`, with the commit, CPU, device kind and compiler it was measured
on. Checked in, it ships with the package.

A search on a device kind the file covers (`device_kinds`, a prefix such as `cpu:x86_64:`: the
architecture; which moves win differs by CPU, so the file names the one it came from):
- orders its neighbours by the file's mean log speedup per move, counted as `SHIPPED_WEIGHT`
  graphs of evidence beside the warehouse's own (`tuner.prior.move_prior`): the home's evidence
  overrides it as it accumulates;
- skips a move the file marks `skipped` (`MoveEvidence.skipped`): it changed the program of at
  least `SKIP_MIN_CHANGED` workloads and screened faster than the default on none of them. A
  move that won on another graph of the home is not skipped. The rule's error rate: a move
  that is faster on a fraction p of the programs it changes screens faster on none of n with
  probability (1 - p)^n, less where noise makes a neutral screen read faster; with the CPU
  file's n = 22, 10% for p = 0.1 and 0.7% for p = 0.2. A skipped move can still be proposed by
  the search's last phase (the strategy's mutations), where a catastrophic one is stopped in
  two runs (`execution.measure`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any, Mapping

from execution.flags import FlagError, checked_config, to_json
from tuner.schedule import Move
from tuner.strategies import FAILED
from vocabulary.tuning import UNTIMED, TrialOutcome

FORMAT = 1  # the files' format: a reader refuses another
SHIPPED_WEIGHT = 2.0  # the file's mean counts as this many graphs of the home's evidence
SKIP_MIN_CHANGED = 5
CATASTROPHIC = 1 / 3  # the search's catastrophe ratio (tuner.tune.SEARCH_SETTINGS): 3x slower
# A move that compiled to the default's program: known to do nothing there, so it waits behind
# moves never tried, which might do something.
NO_CHANGE = -1e-3
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class MoveScreen:
    """One move tried on one graph: how it fared, its speedup's estimate (None where it failed)
    and whether its numerics held."""

    outcome: TrialOutcome
    speedup: float | None
    numerics_ok: bool = True

    @property
    def new_program(self) -> bool:
        """Whether it compiled to a program of its own: not the default's, nor that of a move
        tried before it (REDUCE to oneDNN or XNNPACK builds what REDUCE to XLA's emitters does)."""
        return self.outcome not in UNTIMED

    @property
    def evidence(self) -> float:
        """Its log speedup as a prior counts it: NO_CHANGE where it built no program of its own,
        FAILED (tuner.strategies) where it failed or got the numerics wrong."""
        if not self.new_program:
            return NO_CHANGE
        if self.outcome == TrialOutcome.FAILED or not self.speedup or not self.numerics_ok:
            return FAILED
        return math.log(self.speedup)

    @property
    def catastrophic(self) -> bool:
        return self.evidence == FAILED or self.evidence < math.log(CATASTROPHIC)


@dataclass(frozen=True)
class MoveEvidence:
    """What the workloads showed of one move: on how many it was screened, built a program of
    its own (`changed`), screened faster than the default, was catastrophic; its mean evidence."""

    move: Move
    workloads: int
    changed: int
    faster: int
    catastrophic: int
    mean_log_speedup: float

    @property
    def skipped(self) -> bool:
        """Whether a search skips it (the module docstring's rule)."""
        return self.changed >= SKIP_MIN_CHANGED and self.faster == 0


@dataclass(frozen=True)
class Measured:
    """Where a prior was measured: the commit of the code, the CPU's model, the device kind,
    the compiler, the date, and the workloads."""

    commit: str
    cpu: str
    device_kind: str
    compiler_version: str
    date: str
    workloads: tuple[str, ...]


@dataclass(frozen=True)
class PlatformPrior:
    """Per move, what the zoo showed on one platform (`device_kinds`: the device kinds it is
    for, a prefix), and where that was measured."""

    device_kinds: str
    measured: Measured
    moves: tuple[MoveEvidence, ...]

    def scores(self) -> dict[Move, float]:
        return {m.move: m.mean_log_speedup for m in self.moves}

    def skipped(self) -> frozenset[Move]:
        return frozenset(m.move for m in self.moves if m.skipped)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "device_kinds": self.device_kinds, "measured": asdict(self.measured),
                "moves": [{"config": to_json(dict([m.move])), "workloads": m.workloads,
                           "changed": m.changed, "faster": m.faster, "catastrophic": m.catastrophic,
                           "mean_log_speedup": m.mean_log_speedup, "skipped": m.skipped}
                          for m in self.moves]}

    @staticmethod
    def from_json(data: Any, source: str) -> PlatformPrior:
        """The prior a file holds; ValueError naming `source` and what is wrong. A move whose
        flag this compiler does not accept (the file came from another version) is left out."""
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, this tuner reads {FORMAT}")
            measured = data["measured"]
            moves = []
            for row in data["moves"]:
                try:
                    ((name, value),) = checked_config(row["config"]).items()
                except FlagError:
                    continue
                moves.append(MoveEvidence((name, value), int(row["workloads"]), int(row["changed"]),
                                          int(row["faster"]), int(row["catastrophic"]),
                                          float(row["mean_log_speedup"])))
            return PlatformPrior(str(data["device_kinds"]), Measured(
                str(measured["commit"]), str(measured["cpu"]), str(measured["device_kind"]),
                str(measured["compiler_version"]), str(measured["date"]),
                tuple(str(w) for w in measured["workloads"])), tuple(moves))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"platform prior {source}: not a prior of format {FORMAT} ({exc!r})") from exc


def summarize(screens: Mapping[str, Mapping[Move, MoveScreen]], device_kinds: str,
              measured: Measured) -> PlatformPrior:
    """The prior of `screens` (per workload, per move), for the device kinds `device_kinds`."""
    by_move: dict[Move, list[MoveScreen]] = {}
    for per_move in screens.values():
        for move, screen in per_move.items():
            by_move.setdefault(move, []).append(screen)
    moves = []
    for move, seen in by_move.items():
        changed = [s for s in seen if s.new_program]
        moves.append(MoveEvidence(
            move, len(seen), len(changed),
            sum(1 for s in changed if s.evidence > 0), sum(1 for s in changed if s.catastrophic),
            sum(s.evidence for s in seen) / len(seen)))
    return PlatformPrior(device_kinds, measured,
                         tuple(sorted(moves, key=lambda m: (-m.mean_log_speedup, m.move[0], str(m.move[1])))))


def shipped_priors() -> list[PlatformPrior]:
    """The priors that ship in `tuner/priors/` (ValueError naming a file that is not one)."""
    found = []
    for entry in sorted(resources.files("tuner").joinpath("priors").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            text = entry.read_bytes()
            if len(text) > MAX_FILE_BYTES:
                raise ValueError(f"platform prior {entry.name}: over {MAX_FILE_BYTES} bytes")
            found.append(PlatformPrior.from_json(json.loads(text), entry.name))
    return found


@functools.cache
def prior_for(device_kind: str) -> PlatformPrior | None:
    """The shipped prior for `device_kind`: the one whose `device_kinds` prefix it starts with,
    the longest such; None where none covers it."""
    covering = [p for p in shipped_priors() if device_kind.startswith(p.device_kinds)]
    return max(covering, key=lambda p: len(p.device_kinds), default=None)
