"""Beam's SDK worker (`apache_beam.runners.worker.sdk_worker_main`), as the in-process runner
starts one per worker in its multi-process mode, less the start-up notices on its stderr.

Importing Beam warns on the root logger where apitools is missing, and Python answers a record
on a root logger without handlers by giving it a stderr handler for everything; the worker's own
notices then print there. Here stderr gets a handler of its own first, for errors only. Every
record also goes to the runner's process through Beam's logging service, whose logging decides
what shows (storage.beam_logging).

    python -m storage.beam_worker
"""

from __future__ import annotations

import logging
import sys


def main() -> None:
    """Run the worker, with its stderr for errors."""
    errors = logging.StreamHandler(sys.stderr)
    errors.setLevel(logging.ERROR)
    logging.getLogger().addHandler(errors)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
