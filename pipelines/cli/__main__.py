"""`python -m pipelines.cli`: `fdo` without its console script (the scheduler's child runs,
the tests)."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main())
