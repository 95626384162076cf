"""What the tests share, as `optuna/testing` holds Optuna's: helpers a test module imports
(`from tests.support.serving import fdo`), contract fixtures, and under `jobs/` the scripts the
tests start as processes, by path (`JOBS / "hook_job.py"`), never imported. No test module
imports another test module, and a benchmark imports from here alone (tests/project/test_architecture.py
checks both)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
JOBS = ROOT / "tests" / "support" / "jobs"  # the job scripts, run as `python JOBS/<name>.py`
