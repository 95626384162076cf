"""The workloads that drive the stages, above them (of the packages only pipelines/ imports it).

- `zoo/`: real JAX programs of the kinds an ML fleet runs, each in two sizes (`get`,
  `all_workloads`, `gpu_workloads`; `sharded`), and their XLA dumps (`zoo.dump`);
- `simulator/`: a fleet that runs them and hands over dumps and profile drops, ingested
  (`simulator.run.simulate`, `fdo simulate`).
"""
