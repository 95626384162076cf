"""`python -m pipelines.cli`: `fdo` without its console script (the scheduler's child runs,
the tests)."""

from pipelines.cli import console

if __name__ == "__main__":
    console()
