"""What the loop has decided for each graph key, and what a night's plan still owes it.

A key is *decided* (`KeyDecision`) when:
- FASTER: a config the loop verified is live for it in the store (the tuner's entry, kept or
  re-keyed by the validator: `ranking.verified_coverage`'s covered keys);
- DEFAULTS: its conclusive result on this compiler found nothing that holds up (no significant
  gain, or numerics that differ) and still stands (`KeyStatus.stands`).

A result is *conclusive* (`conclusive`) unless it is a transfer check's that found nothing (only
the siblings' configs were tried: the key waits for a search), or a search's cut short by its
stage's time before `tuner.allot.FLOOR_EVALUATIONS` evaluations. An accepted transfer check, a
search (seeded with transfers or not) and another key's conclusive result shared with a key
measured alike (`Origin.SHARED`) conclude.

A conclusion stands until:
- its compiler changes (results are read for this machine's compiler only);
- it is older than `DECISION_DAYS`, the store's entry lifetime (a decision ages as a config does);
- the fleet's evidence moves: a sibling (the same program in another environment, or its family)
  has had a config verified since, which the key has not tried (`tuner.transfer`). The key then
  gets a transfer check of it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass

from hlo.environment import current_environment
from storage.home import Home
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse
from tuner.allot import FLOOR_EVALUATIONS
from tuner.tables import TUNING_RESULTS, results_of
from tuner.transfer import TRANSFER_CHECK, GraphKey, Kinship, TransferSources
from vocabulary.store import Provenance
from vocabulary.tuning import KeyDecision, Kind, StopReason, Verdict

# How long a conclusion stands: as long as a delivered config lives (delivery.store_writer's
# DEFAULT_TTL, which tuner may not import).
DECISION_DAYS = 30
# Verdicts that keep the defaults: nothing verified faster with the same outputs.
_DEFAULTS_KEPT = (Verdict.NO_GAIN, Verdict.NUMERICS_DIFFER)


@dataclass(frozen=True)
class KeyStatus:
    """Where one graph key stands. `decision`: what is decided (None: nothing). `concluded`: a
    conclusive result stands (see the module docstring), so the key needs no new search; its
    task is `result_task` (the latest, where several). `checked`: transfer checks of it found
    nothing (it waits for a search). `attempts`: inconclusive tasks so far (a search cut short,
    a check whose time let it measure nothing), so a new one is a task of its own. `moved`:
    siblings' configs verified since its conclusion that it has not tried."""

    decision: KeyDecision | None = None
    concluded: bool = False
    checked: bool = False
    attempts: int = 0
    moved: bool = False
    result_task: str | None = None

    @property
    def stands(self) -> bool:
        """Whether its conclusion holds: concluded, and the evidence has not moved since."""
        return self.concluded and not self.moved


def conclusive(strategy: str, verdict: Verdict, search_stop: StopReason | None, evaluations: int) -> bool:
    """Whether a graph result concludes its key (the module docstring): not a transfer check
    that found nothing, nor a search cut short by its time before its floor of evaluations."""
    if strategy == TRANSFER_CHECK and verdict != Verdict.ACCEPTED:
        return False
    return not (search_stop == StopReason.TIME and evaluations < FLOOR_EVALUATIONS)


def key_statuses(home: Home, sources: TransferSources, today: datetime.date | None = None,
                 compiler: str | None = None) -> dict[GraphKey, KeyStatus]:
    """Every graph key with a live verified config or a graph result on `compiler` (default:
    this machine's), and where it stands (`KeyStatus`); `sources`: the transfer evidence
    (`TransferSources.load`), for whether a conclusion's evidence has moved."""
    today = today or datetime.date.today()
    compiler = compiler or current_environment().compiler_version
    results = results_of(Warehouse(home).read(TUNING_RESULTS))
    concluded: dict[GraphKey, tuple[datetime.date, str]] = {}
    kept_defaults: set[GraphKey] = set()
    checked: set[GraphKey] = set()
    attempts: dict[GraphKey, int] = defaultdict(int)
    for result in sorted(results, key=lambda r: (r.dt, r.task_id)):
        if result.kind != Kind.GRAPH or result.compiler_version != compiler:
            continue
        key = (result.fingerprint, result.env_key)
        if not conclusive(result.strategy, result.status, result.search_stop, result.evaluations):
            if result.strategy == TRANSFER_CHECK and not _starved(result.search_stop, result.evaluations):
                checked.add(key)
            else:  # a search cut short, or a check its time let measure nothing: try again, anew
                attempts[key] += 1
            continue
        if (today - result.dt).days >= DECISION_DAYS:
            continue
        concluded[key] = (result.dt, result.task_id)
        if result.status in _DEFAULTS_KEPT:
            kept_defaults.add(key)
        else:
            kept_defaults.discard(key)
    faster = {(e.fingerprint, e.env_key) for e in StoreReader(home).live_records()
              if e.kind == Kind.GRAPH and e.provenance in (Provenance.TUNER, Provenance.VALIDATOR)}
    statuses = {}
    for key in set(concluded) | checked | set(attempts) | faster:
        moved = key in concluded and _moved_since(sources, key, concluded[key][0])
        decision = (KeyDecision.FASTER if key in faster else
                    KeyDecision.DEFAULTS if key in kept_defaults and not moved else None)
        statuses[key] = KeyStatus(decision, key in concluded or key in faster, key in checked,
                                  attempts[key], moved, concluded[key][1] if key in concluded else None)
    return statuses


def _starved(search_stop: StopReason | None, evaluations: int) -> bool:
    """Whether a task's time ran out before it measured anything: it found nothing about its key."""
    return search_stop == StopReason.TIME and evaluations == 0


def _moved_since(sources: TransferSources, key: GraphKey, since: datetime.date) -> bool:
    """Whether a sibling of `key` (its program elsewhere, or its family) has a config verified
    after `since` that `key` has not tried."""
    for transfer in sources.candidates(key):
        if transfer.kinship is Kinship.PLATFORM:
            continue
        fingerprint, env_key = transfer.source.split("/")
        verified = sources.verified.get((fingerprint, env_key))
        if verified is not None and verified.measured_at is not None and verified.measured_at.date() > since:
            return True
    return False


def decided_keys(statuses: dict[GraphKey, KeyStatus]) -> dict[KeyDecision, set[GraphKey]]:
    """The keys of each decision."""
    found: dict[KeyDecision, set[GraphKey]] = {decision: set() for decision in KeyDecision}
    for key, status in statuses.items():
        if status.decision is not None:
            found[status.decision].add(key)
    return found


def home_statuses(home: Home, today: datetime.date | None = None) -> dict[GraphKey, KeyStatus]:
    """`key_statuses` of `home`, its transfer evidence read with its graphs' families."""
    from ingest.families import graph_families

    return key_statuses(home, TransferSources.load(home, graph_families(home)), today)


def defaults_kept(home: Home, today: datetime.date | None = None) -> set[GraphKey]:
    """The graph keys of `home` whose defaults the loop verified best, and whose decision
    stands (`KeyDecision.DEFAULTS`)."""
    return decided_keys(home_statuses(home, today))[KeyDecision.DEFAULTS]
