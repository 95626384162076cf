"""Transfer: the configs a graph's siblings were verified with, as its first candidates.

A fleet runs each program in many keys: other releases, device counts and partitionings, and the
same model at other shapes. A config verified for a sibling is a graph's best first guess, never
a verdict: it is tried on the graph itself and judged by the task's own verification (fresh
workers, the same statistics and numerics rule, strict configs only), before any job sees it
(`tuner.tune`, `TuneSettings.transfers`). The candidates of a graph key, nearest kin first, each
config once (at its nearest kinship), none the key has tried already (`tried`), at most
`MAX_TRANSFERS`:

1. SAME_PROGRAM: the live store's configs of the graph itself in other environments (another
   device count or partitioning on this platform and device kind), best lower bound first;
2. FAMILY: the live store's configs of the graph's family (`ingest.families`: the same program
   at other shapes) on this platform and device kind, best lower bound first;
3. PLATFORM: the strict configs accepted on the most graphs of this platform and device kind
   (then by the mean log of their lower bounds: `fdo analyze`'s question, "which configs win
   broadly", in its simplest form), from the warehouse's tuning results.

Sources are the live store's entries the loop measured (the tuner's, kept or re-keyed by the
validator): a config the validator has since invalidated is no sibling's winner any more. And,
for a key without one, its best accepted result that no store version has held yet: tonight's,
which the deliver stage publishes only after the tune stage, so that the night's late checks
(`tuner.plan`) can carry a search's winner to its kin the same night. Once a version held a
result, the store alone speaks for it.
"""

from __future__ import annotations

import datetime
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Iterable, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from execution.flags import CompilerConfig, FlagError, checked_config, relaxes_numerics, trusted_config
from ingest.tables import GRAPHS
from storage.home import Home
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse
from tuner.space import config_key
from tuner.tables import TRIALS, TUNING_RESULTS, results_of
from vocabulary.store import Provenance
from vocabulary.tuning import Kind

# The strategy a transfer check's result names: it searched nothing, its transfers were tried
# alone (`TuneSettings.transfer_check`).
TRANSFER_CHECK = "transfer check"
# The most transferred configs a graph is checked with: each costs a compile and a screen, and
# the winner a verification.
MAX_TRANSFERS = 3
# The store's entries whose configs the loop verified (an import is a team's claim).
_MEASURED_BY_LOOP = (Provenance.TUNER, Provenance.VALIDATOR)

GraphKey = tuple[str, str]  # (fingerprint, env_key)


def key_text(key: GraphKey) -> str:
    """A graph key as results and entries name it: "<fingerprint>/<env_key>"."""
    return f"{key[0]}/{key[1]}"


class Kinship(StrEnum):
    """How a transferred config's source is related to the graph: the same program in another
    environment, the same program at other shapes, or none (a config that won broadly on the
    platform)."""

    SAME_PROGRAM = "same program"
    FAMILY = "family"
    PLATFORM = "platform"


@dataclass(frozen=True)
class Transfer:
    """A config to try on a graph first: `source`, the graph key it was verified for (for a
    broad winner, the one where it verified best), how that graph is related to this one, the
    lower end of its verified speedup there, and on how many graphs of the platform it won."""

    config: CompilerConfig
    source: str
    kinship: Kinship
    speedup: float
    graphs: int = 1

    def describe(self) -> str:
        """E.g. "family: 1.210x on 3f2a.../9c1b..."."""
        where = f" (won on {self.graphs} graphs)" if self.kinship is Kinship.PLATFORM else ""
        return f"{self.kinship}: {self.speedup:.3f}x on {self.source[:8]}...{where}"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the config in its JSON form, the kinship's value."""
        return {"config": json.loads(config_key(self.config)), "source": self.source,
                "kinship": str(self.kinship), "speedup": self.speedup, "graphs": self.graphs}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Transfer:
        """The transfer `to_json` wrote."""
        return cls(trusted_config(data["config"]), data["source"], Kinship(data["kinship"]),
                   float(data["speedup"]), int(data.get("graphs", 1)))


class Verified(NamedTuple):
    """A live entry's config the loop verified, the lower end of its speedup, and when it was
    measured (None: not recorded)."""

    config: CompilerConfig
    speedup: float
    measured_at: datetime.datetime | None


@dataclass(frozen=True)
class GraphFacts:
    """What transfer needs to know of a graph key: its family and where it runs."""

    family: str | None
    platform: str
    device_kind: str


@dataclass
class TransferSources:
    """The warehouse's and the store's evidence, read once for many graphs (`load`): the live
    verified configs by graph key, the platforms' broad winners, and the configs each key has
    tried."""

    graphs: dict[GraphKey, GraphFacts]
    verified: dict[GraphKey, Verified] = field(default_factory=dict)
    # (platform, device kind) -> [(config, graphs it won on, mean log lower end, best source)], broadest first
    broad: dict[tuple[str, str], list[tuple[CompilerConfig, int, float, str]]] = field(default_factory=dict)
    tried: dict[GraphKey, set[str]] = field(default_factory=dict)  # config keys tried on each key

    @classmethod
    def load(cls, home: Home, families: dict[GraphKey, str]) -> TransferSources:
        """The evidence of `home`, its graphs' families given (`ingest.families.graph_families`)."""
        warehouse = Warehouse(home)
        rows = warehouse.read(GRAPHS, ["fingerprint", "env_key", "platform", "device_kind"]).to_pylist()
        graphs = {(r["fingerprint"], r["env_key"]): GraphFacts(families.get((r["fingerprint"], r["env_key"])),
                                                               r["platform"], r["device_kind"]) for r in rows}
        sources = cls(graphs)
        store = StoreReader(home)
        for entry in store.live_records():
            if entry.kind != Kind.GRAPH or entry.provenance not in _MEASURED_BY_LOOP:
                continue
            config = _strict_config(entry.config)
            if config is not None and config:
                sources.verified[(entry.fingerprint, entry.env_key)] = Verified(
                    config, entry.ci_low if entry.ci_low is not None else entry.speedup, entry.measured_at)
        results = warehouse.read(TUNING_RESULTS)
        accepted = results.filter(pc.and_(pc.equal(results.column("kind"), Kind.GRAPH), results.column("accepted")))
        sources._add_undelivered(accepted, store.sources())
        sources._add_broad(accepted)
        # Columnar: three columns of every trial, no row made.
        trials = warehouse.read(TRIALS, ["fingerprint", "env_key", "config"])
        for fingerprint, env_key, config in zip(*(trials.column(c).to_pylist()
                                                  for c in ("fingerprint", "env_key", "config"))):
            sources.tried.setdefault((fingerprint, env_key), set()).add(_canonical(config))
        return sources

    def _add_undelivered(self, results: Any, delivered: set[str]) -> None:
        """Of the accepted graph `results`, the best strict one of each key without a live
        verified config, of those no store version has held (`delivered`: the tasks any version
        held) and newer than the newest that one did for the key (an older one lost to it, or went
        with it)."""
        held = pc.is_in(results.column("task_id"), value_set=pa.array(sorted(delivered), pa.string()))
        last_held: dict[GraphKey, datetime.date] = {}
        for result in results_of(results.filter(held)):
            key = (result.fingerprint, result.env_key)
            last_held[key] = max(result.dt, last_held.get(key, result.dt))
        found: dict[GraphKey, Verified] = {}
        for result in sorted(results_of(results.filter(pc.invert(held))), key=lambda r: r.task_id):
            key = (result.fingerprint, result.env_key)
            config = _strict_config(result.config)
            if (key in self.verified or not config or not result.ci_low or not result.numerics_ok
                    or (key in last_held and result.dt <= last_held[key])):
                continue
            if key not in found or result.ci_low >= found[key].speedup:  # as deliver: ties, the later task
                # Measured when deliver will say it was: the result's day, at midnight UTC.
                measured = datetime.datetime.combine(result.dt, datetime.time(), datetime.UTC)
                found[key] = Verified(config, result.ci_low, measured)
        self.verified.update(found)

    def _add_broad(self, results: Any) -> None:
        """The platforms' broad winners, from the accepted graph `results`."""
        won: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        configs: dict[str, CompilerConfig] = {}
        for result in results_of(results):
            facts = self.graphs.get((result.fingerprint, result.env_key))
            config = _strict_config(result.config)
            if facts is None or not config or not result.ci_low:
                continue
            key = config_key(config)
            configs[key] = config
            where = key_text((result.fingerprint, result.env_key))
            per_graph = won[(facts.platform, facts.device_kind)][key]
            per_graph[where] = max(per_graph.get(where, 0.0), result.ci_low)
        for platform, by_config in won.items():
            ranked = []
            for key, per_graph in by_config.items():
                fingerprints = {where.split("/")[0] for where in per_graph}
                mean_log = sum(math.log(v) for v in per_graph.values()) / len(per_graph)
                best = max(per_graph, key=lambda where: (per_graph[where], where))
                ranked.append((configs[key], len(fingerprints), mean_log, best))
            ranked.sort(key=lambda r: (-r[1], -r[2], config_key(r[0])))
            self.broad[platform] = ranked

    def candidates(self, key: GraphKey, facts: GraphFacts | None = None,
                   limit: int = MAX_TRANSFERS) -> list[Transfer]:
        """The transfers of graph `key` (see the module docstring), nearest kin first; `facts`
        where the key is no graph of the warehouse (a module given as a file)."""
        facts = facts or self.graphs.get(key)
        if facts is None or limit <= 0:
            return []
        seen = set(self.tried.get(key, set()))
        found: list[Transfer] = []

        def add(config: CompilerConfig, source: str, kinship: Kinship, speedup: float, graphs: int = 1) -> None:
            text = config_key(config)
            if text not in seen and len(found) < limit:
                seen.add(text)
                found.append(Transfer(config, source, kinship, speedup, graphs))

        same, family = [], []
        for other, (config, speedup, _) in self.verified.items():
            other_facts = self.graphs.get(other)
            if other == key or other_facts is None or (other_facts.platform, other_facts.device_kind) != (
                    facts.platform, facts.device_kind):
                continue
            if other[0] == key[0]:
                same.append((speedup, key_text(other), config))
            elif facts.family is not None and other_facts.family == facts.family:
                family.append((speedup, key_text(other), config))
        for kinship, kin in ((Kinship.SAME_PROGRAM, same), (Kinship.FAMILY, family)):
            for speedup, source, config in sorted(kin, key=lambda k: (-k[0], k[1])):
                add(config, source, kinship, speedup)
        for config, graphs, mean_log, source in self.broad.get((facts.platform, facts.device_kind), []):
            add(config, source, Kinship.PLATFORM, math.exp(mean_log), graphs)
        return found

    def keys_of_family(self, family: str) -> list[GraphKey]:
        """The graph keys of `family`, in key order."""
        return sorted(key for key, facts in self.graphs.items() if facts.family == family)


def _strict_config(text: str) -> CompilerConfig | None:
    """A stored config's flags, where it reads and relaxes no numerics (None otherwise: a
    transfer is a strict config, as every job's default)."""
    try:
        config = checked_config(json.loads(text))
    except (FlagError, ValueError, TypeError):
        return None
    return None if relaxes_numerics(config) else config


def _canonical(text: str) -> str:
    """A trial's config JSON in `config_key`'s canonical form (itself where it does not read)."""
    try:
        return config_key(trusted_config(json.loads(text)))
    except (ValueError, TypeError, AttributeError):
        return text


def transferred(config: CompilerConfig, transfers: Iterable[Transfer]) -> Transfer | None:
    """The transfer whose config is `config`, if any."""
    text = config_key(config)
    return next((t for t in transfers if config_key(t.config) == text), None)
