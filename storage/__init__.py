"""The storage interface every stage shares: a `Home` (warehouse tables, blobs, the config
store, journals, runs) with one atomic write, one lock and one read path, on a local directory
or on any URL scheme Beam's `FileSystems` serves. `storage.home` states the guarantees."""
