"""How fdo runs its Beam pipelines: the default runner (Beam's in-process one, its workers
started quietly) and pipeline options from standard Beam flags.

Every pipeline of fdo (rank, savings, deliver) runs where `pipeline_options` says: by default
the in-process runner below, in multi-process mode, nothing to download or start; any Beam
runner a command's flags name (`--runner=FlinkRunner`, `--project`, ...) otherwise.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import shlex
import sys
from typing import Iterable

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from storage import beam_worker


class InProcessRunner(PipelineRunner):
    """The runner Beam's DirectRunner uses for batch pipelines (the FnApiRunner, handed the
    options for its workers as DirectRunner hands them), without DirectRunner's first try of
    Prism: a download of a Go binary from GitHub on each pipeline, which runs the pipeline on
    another runner where it succeeds, hangs where the network drops packets, and leaves a
    `beam-temp*` directory in the temp dir where it fails."""

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> PipelineResult:
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        environment = None
        if options.view_as(DirectOptions).direct_running_mode == "multi_processing":
            # Beam's own worker processes, started as storage.beam_worker: quiet on stderr. The
            # runner takes the environment given here where no running mode names another
            # (on a copy: the caller's options stay as they were).
            environment = SubprocessSDKEnvironment.from_command_string(
                f"{shlex.quote(sys.executable)} -m {beam_worker.__name__}")
            options = copy.deepcopy(options)
            options.view_as(DirectOptions).direct_running_mode = None
        runner = fn_runner.FnApiRunner(default_environment=environment, provision_info=provision)
        return runner.run_pipeline(pipeline, options)


# Beam's in-process runner, in multi-process mode: nothing to download or start. Beam finds a
# runner named by its dotted path.
DEFAULT_OPTIONS = (f"--runner={InProcessRunner.__module__}.{InProcessRunner.__qualname__}",
                   "--direct_running_mode=multi_processing",
                   "--default_sdk_harness_log_level=WARNING")

# Rows a worker of the in-process runner must have to read before adding it pays. Each worker
# is a fresh Python that imports Beam (about 1 s of CPU) and is stopped in turn at the end; one
# core reads and sums about 10 million rows a second. On 2 cores shared with other work, two
# workers ranked 10 million rows 1.6 s slower than one when the machine was busy, 0.2 s faster
# when it was quiet (benchmarks/bench_rank.py).
ROWS_PER_WORKER = 25_000_000


def default_workers(rows: int) -> int:
    """Workers for the in-process runner to read `rows`: one per ROWS_PER_WORKER rows, at
    least one, at most one per core this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, math.ceil(rows / ROWS_PER_WORKER)))


def pipeline_options(beam_args: Iterable[str] = (), rows: int = 0) -> PipelineOptions:
    """Pipeline options from standard Beam flags (`--runner=FlinkRunner`, `--project`, ...);
    the defaults apply only where the flags do not say otherwise. `rows`, what the pipeline
    reads, sizes the default runner's workers."""
    args = list(beam_args)
    defaults = [*DEFAULT_OPTIONS, f"--direct_num_workers={default_workers(rows)}"]
    given = {a.split("=", 1)[0] for a in args}
    defaults = [a for a in defaults if a.split("=", 1)[0] not in given]
    if any(a.startswith(("--runner", "--direct_running_mode")) for a in args):
        defaults = [a for a in defaults if not a.startswith("--direct")]
    beam = logging.getLogger("apache_beam")
    beam.setLevel(max(beam.level, logging.WARNING))  # as high as a command set it (storage.beam_logging)
    return PipelineOptions(defaults + args)
