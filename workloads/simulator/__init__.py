"""The fleet simulator (`fdo simulate`): a realistic fleet that hands us dumps and profile drops.

`catalog` (`build_catalog`): the programs it runs, zoo workloads at several shapes, compiled
and profiled for real on this machine; `fleet` (`FleetSpec`): its jobs, deterministic by seed,
and what each day hands over; `run` (`simulate`): some days of it, ingested (or handed to an
inbox).
"""
