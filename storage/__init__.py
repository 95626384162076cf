"""The storage every stage shares, below the stages: a `Home` (warehouse tables, blobs, the config
store, journals, runs) with one atomic write, one lock and one read path, on a local directory
or on any URL scheme Beam's `FileSystems` serves.

- `home`: the `Home` interface, which states the guarantees; `local` (`LocalHome`) and `url`
  (`UrlHome`) implement it; `home_factory`: `open_home(root)`, the home a root names, and
  `atomic_write` for a file outside any home;
- `warehouse` (`Warehouse`, `TableSchema`): the Parquet tables, their declared schemas, atomic
  partitioned writes and checked reads; in Beam pipelines `beam_io` (`ReadTables`,
  `WriteWarehouse`, `StageTable`), run by `beam_runner` (Beam's in-process runner, its workers,
  `beam_worker`, and its logs, `beam_logging`, kept quiet);
- `blobs` (`BlobStore`): the content-addressed HLO blob store; `journal`: append-only
  JSON-lines journals (`append_record`, `read_records`);
- the config store: its schema and entry record (`store_schema`: `StoreEntry`) and its read path
  (`store_reader`: `live_entries`, `live_records`); its one writer is `delivery.store_writer`.
"""
