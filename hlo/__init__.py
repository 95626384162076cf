"""The HLO model every stage shares, below the stages: of the project it imports only vocabulary/.

- `module`: a module loaded in every form a fleet hands it over (`load_file`, `from_text`,
  `from_proto_bytes`, `from_lowered`, `from_stablehlo`): an `HloModule`, or `HloLoadError`;
- `proto`: a schema-light view of XLA's HloModuleProto; `layout`: XLA's default layout;
- fingerprints: `fingerprint` (the public API: `graph_fingerprint`, `fingerprint_module`),
  `reference_hasher` (their definition, an instruction at a time), `bulk_hasher` (the same
  digests, a computation at a time), `family` (`family_fingerprint`: the same program at other
  shapes);
- `environment`: what a graph is compiled for (`Environment`, `current_environment`) and the
  store key that joins it to a fingerprint (`store_key`).
"""
