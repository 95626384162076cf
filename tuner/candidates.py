"""Which ranked candidates this machine can tune, with their HLO from the blob store.

A config is measured on the machine that runs the tuner, so a graph candidate is tunable here
when it was ranked for this platform and device kind; the result is keyed to the candidate's
own environment.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from ingest.blobs import BlobStore
from ingest.environment import current_environment
from ingest.hlo_module import HloModule, from_text
from ingest.tables import GRAPHS
from ingest.warehouse import Warehouse
from ranking.tables import CANDIDATES


def tunable_candidates(home: Path, top: int) -> list[tuple[str, HloModule, str]]:
    """(label, module, env_key) of the best-ranked graph candidates of the latest ranking that
    run on this machine's platform and device kind, at most `top`."""
    warehouse = Warehouse(home)
    candidates = warehouse.read(CANDIDATES)
    if candidates.num_rows == 0:
        return []
    latest = pc.max(candidates.column("dt"))
    candidates = candidates.filter(pc.and_(pc.equal(candidates.column("dt"), latest),
                                           pc.equal(candidates.column("kind"), "graph")))
    here = current_environment()
    graphs = {(g["fingerprint"], g["env_key"]): g for g in warehouse.read(GRAPHS).to_pylist()}
    blobs = BlobStore(home)
    tasks = []
    for candidate in candidates.sort_by("rank").to_pylist():
        graph = graphs.get((candidate["fingerprint"], candidate["env_key"]))
        if graph is None or (graph["platform"], graph["device_kind"]) != (here.platform, here.device_kind):
            continue
        module = from_text(blobs.get_text(graph["hlo_blob"]), source=graph["hlo_blob"])
        tasks.append((f"#{candidate['rank']} {graph['module_name']} {candidate['fingerprint'][:8]}",
                      module, candidate["env_key"]))
        if len(tasks) == top:
            break
    return tasks
