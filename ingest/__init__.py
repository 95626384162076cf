"""Ingest: what the fleet hands over, into the warehouse (docs/ingest.md).

- `symbols` (`ingest_symbols`): HLO modules from XLA dumps, single files and the hook's symbol
  spool, into `graphs`, `ops` and the blob store;
- `profiles` (`ingest_profiles`): profile drops (`drops`) and JAX profiler traces (`xplane`,
  `xplane_metadata`) into `graph_runs` and `op_runs`;
- `hits` (`ingest_hits`, `read_hits`): the compiler hook's hit spool, a row a `Hit`, into `hits`;
- `families` (`graph_families`): every graph's family; `quarantine` (`Quarantine`): inputs that
  failed validation, kept with the reason beside them;
- `tables`: the tables it fills, declared once; `ran_tuned`: which of their hits and runs ran
  tuned (`vocabulary.hits`' rule), as Arrow filters and SQL conditions; `input_files`, `sidecars`
  and `rowids`: the files it is handed, what a fleet leaves beside them, and rows counted once
  however often sent.
"""
