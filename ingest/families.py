"""The family of every graph the warehouse holds (`hlo.family`: the same program at other shapes).

Ingestion writes a graph's family in `graphs.family` (schema version 3); a graph that landed
before the column has it null, and its family is computed here from its HLO blob, once per
fingerprint (the blob is the same module in every environment).
"""

from __future__ import annotations

from hlo.family import family_fingerprint
from hlo.module import from_text
from ingest.tables import GRAPHS
from storage.blobs import BlobStore
from storage.home import Home
from storage.home_factory import open_home
from storage.warehouse import Warehouse


def graph_families(home: Home | str) -> dict[tuple[str, str], str]:
    """(fingerprint, env_key) -> family, for each graph of `home`'s `graphs` table. A graph
    whose family is null and whose blob cannot be read or parsed is left out."""
    home = open_home(home)
    graphs = Warehouse(home).read(GRAPHS, ["fingerprint", "env_key", "hlo_blob", "family"]).to_pylist()
    known = {g["fingerprint"]: g["family"] for g in graphs if g["family"] is not None}
    blobs = BlobStore(home)
    families: dict[tuple[str, str], str] = {}
    for graph in graphs:
        fingerprint = graph["fingerprint"]
        if fingerprint not in known:
            known[fingerprint] = _family_of_blob(blobs, graph["hlo_blob"])
        family = known[fingerprint]
        if family is not None:
            families[fingerprint, graph["env_key"]] = family
    return families


def _family_of_blob(blobs: BlobStore, name: str) -> str | None:
    try:
        return family_fingerprint(from_text(blobs.get_text(name), source=name))
    except (OSError, ValueError):  # a lost blob; BlobError, HloLoadError and the hasher's are ValueErrors
        return None
