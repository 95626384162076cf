"""Transfer, for real: a model tuned and delivered at one shape, then run by a hooked job at
another, gets a verified config from the next night's loop without a search, and the job's next
compile applies it. The README's quickstart job (an n-body step), its number of systems changed."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hlo.environment import current_environment, store_key
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse
from tests.support import ROOT
from tuner.tables import TUNING_RESULTS
from tuner.transfer import TRANSFER_CHECK
from vocabulary.tuning import Origin

# The step's win is several-fold on every CPU we know (its reductions off YNNPACK).
pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.measure_scale(0.2)]

TODAY = datetime.date.today()


def fdo(home: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, f"fdo {' '.join(args)}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def job(home: Path, job_id: str, systems: int) -> None:
    """The quickstart job at `systems` systems, hooked, its modules spooled and its steps traced
    into the inbox the nightly run reads."""
    run = home / "inbox" / job_id
    run.mkdir(parents=True)
    (run / "fdo-job.json").write_text(json.dumps({"job_id": job_id, "team": "me", "chips": 1}))
    fdo(home, "run", "--spool-hlo", "--job-id", job_id, "--", sys.executable, str(ROOT / "examples" / "quickstart.py"),
        "--steps", "50", "--systems", str(systems), "--trace", str(run))


def night(home: Path, date: datetime.date, searches: int) -> dict:
    """A nightly run on `date` of at most `searches` searches; its validator measures nothing
    (no minutes: it is not what this file tests). Its stages' counts by stage. A search's two
    evaluations find the step's win (its reductions off YNNPACK are screened first), and one
    fresh worker verifies a several-fold gain as well as three."""
    out = fdo(home, "nightly", "--date", date.isoformat(), "--top", str(searches), "--top-ops", "0",
              "--tune-evals", "2", "--tune-minutes", "3", "--validate-minutes", "0", "--verify-workers", "1",
              "--json")
    report = json.loads(out)
    assert report["ok"], out
    return {stage["stage"]: stage["counts"] for stage in report["stages"]}


def step_result(home: Path, fingerprint: str) -> list[dict]:
    rows = Warehouse(home).read(TUNING_RESULTS).to_pylist()
    return [r for r in rows if r["fingerprint"] == fingerprint]


def test_a_tuned_model_at_a_new_shape_gets_a_transferred_config_from_the_next_night_without_a_search(tmp_path):
    home = tmp_path / "home"
    job(home, "four-1", 4)
    first = night(home, TODAY, searches=1)
    assert first["tune"]["accepted"] == 1 and first["deliver"]["version"] is not None
    [tuned] = [e for e in StoreReader(home).live_records() if e.kind == "graph"]

    job(home, "eight-1", 8)  # the same model at another shape: a miss, a new fingerprint
    second = night(home, TODAY + datetime.timedelta(days=1), searches=0)  # no search may run
    tune = second["tune"]
    assert (tune["checks"], tune["checks_accepted"], tune["tuned"]) == (1, 1, 0), tune
    [entry] = [e for e in StoreReader(home).live_records() if e.kind == "graph" and e.fingerprint != tuned.fingerprint]
    source = f"{tuned.fingerprint}/{tuned.env_key}"
    assert (entry.origin, entry.transferred_from) == (Origin.TRANSFER, source)
    assert entry.config == tuned.config and entry.ci_low > 1.01
    [result] = step_result(home, entry.fingerprint)
    assert (result["origin"], result["transferred_from"], result["strategy"], result["accepted"]) == (
        Origin.TRANSFER, source, TRANSFER_CHECK, True)
    assert entry.key == store_key(entry.fingerprint, current_environment().key())

    job(home, "eight-2", 8)  # the job's next compile applies it
    hits = json.loads(fdo(home, "hits", "--job", "eight-2", "--json"))["records"]
    applied = [h for h in hits if h["outcome"] == "applied"]
    assert [h["module_name"] for h in applied] == ["jit_step"]
    assert applied[0]["fingerprint"] == entry.fingerprint


@pytest.mark.xla
def test_keys_whose_per_device_programs_are_one_are_measured_alike(tmp_path):
    """An unannotated program partitioned over 16 and over 32 devices gives one per-device
    program, built in one worker as in a worker of its own: the two keys are one measurement."""
    from execution.evaluate import per_device_program, per_device_programs
    from hlo.environment import Environment, Partitioning
    from hlo.fingerprint import graph_fingerprint
    from hlo.module import from_lowered
    from ingest.tables import partitioning_text
    from storage.blobs import BlobStore
    from storage.home_factory import open_home
    from tuner.plan import measured_alike
    from workloads import zoo

    module = from_lowered(zoo.get("mlp-s").lower())
    wide = [Partitioning(partitions=n, spmd=True, mesh=(("data", n // 4), ("model", 4)), processes=n // 4,
                         local_devices=4) for n in (16, 32)]
    together = per_device_programs([(module, p) for p in wide])
    alone = [per_device_program(module, p) for p in wide]
    assert [graph_fingerprint(m) for m in together] == [graph_fingerprint(m) for m in alone]
    home, here = open_home(tmp_path), current_environment()
    fingerprint = graph_fingerprint(module)
    blob = BlobStore(home).put_text(fingerprint, module.to_text())
    rows = {}
    for p in wide:
        env = Environment(here.platform, here.device_kind, p.devices, here.compiler_version, partitioning=p)
        rows[(fingerprint, env.key())] = {
            "fingerprint": fingerprint, "env_key": env.key(), "hlo_blob": blob, "platform": here.platform,
            "device_kind": here.device_kind, "partitioning": partitioning_text(p)}
    found = measured_alike(home, rows, set(rows))
    first, second = (found[key] for key in rows)
    assert first == second and first.program == graph_fingerprint(together[0])
    assert measured_alike(home, rows, set()) == found  # known from then on, no worker


@pytest.mark.xla
def test_a_check_verifies_only_a_transfer_its_screen_showed_faster(tmp_path):
    """A transferred config that screens slower here is not verified: the check ends without
    a fresh worker, saying why, and its key waits for a search."""
    import jax
    import jax.numpy as jnp

    from hlo.module import from_lowered
    from tuner.task import tune_module
    from tuner.transfer import Kinship, Transfer
    from tuner.tune import NO_TRANSFER_GAIN, TuneSettings
    from vocabulary.tuning import Verdict

    x = jnp.ones((512, 512), jnp.float32)  # elementwise code XLA emits itself: level 0 is slow
    module = from_lowered(jax.jit(lambda a: jnp.sum(jnp.tanh(a) * jnp.exp(a) + jnp.sin(a) ** 2, axis=0)).lower(x))
    slower = Transfer({"xla_backend_optimization_level": 0}, "a" * 32 + "/" + "b" * 32, Kinship.FAMILY, 1.3)
    result = tune_module(module, tmp_path, TuneSettings(transfers=(slower,), transfer_check=True, budget_evals=1))
    assert (result.status, result.reason, result.origin) == (Verdict.NO_GAIN, NO_TRANSFER_GAIN, Origin.TRANSFER)
    assert [p.configs for p in result.phases if p.phase == "verify"] == [0]
    assert [t.speedup.low <= 1.0 for t in result.trials] == [True]  # screened, not faster
