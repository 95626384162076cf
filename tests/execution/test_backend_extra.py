"""Backend extra options (`xla_backend_extra_options`) set per executable: they reach XLA's code
generation, each executable keeps its own, jobs keep the entries they set, and the spaces keep
only options the installed compiler is seen to act on."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from execution.compile import apply_config, backend_extra_options, compile_module, compile_options, object_code
from execution.flags import FLAGS, FlagSpec
from execution.inputs import make_inputs, parameter_specs
from hlo.module import from_lowered
from tuner.space import accepted_flags, acting_backend_extra, graph_space
from vocabulary.flags import Channel, FlagType
from workloads import zoo

SMALL = {"xla_cpu_optimize_for_size": True}
NO_UNROLL = {"xla_cpu_disable_loop_unrolling": True}


@pytest.fixture(scope="module")
def mlp():
    return from_lowered(zoo.get("mlp-s").lower())


def _code_and_outputs(module, config) -> tuple[tuple[bytes, ...], list[np.ndarray]]:
    executable = compile_module(module.proto, config).executable
    arguments = [jax.device_put(a) for a in make_inputs(parameter_specs(module), seed=0)]
    return object_code(executable), [np.asarray(o) for o in executable.execute(arguments)]


@pytest.mark.xla
def test_each_executable_gets_its_own_backend_extra_options(mlp):
    # Interleaved in one process: a process-wide setting would leak into the later compiles.
    default, default_out = _code_and_outputs(mlp, {})
    small, small_out = _code_and_outputs(mlp, SMALL)
    again, again_out = _code_and_outputs(mlp, {})
    no_unroll, _ = _code_and_outputs(mlp, NO_UNROLL)
    small_again, _ = _code_and_outputs(mlp, SMALL)
    size = lambda code: sum(map(len, code))  # noqa: E731
    assert default and size(small) < size(default) and size(no_unroll) < size(default)
    assert len({small, no_unroll, default}) == 3
    assert again == default and small_again == small
    for tuned, reference in ((small_out, default_out), (again_out, default_out)):
        for a, b in zip(tuned, reference):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_entries_the_options_set_already_stay_as_they_are():
    job = apply_config(compile_options({}), {"xla_llvm_dot_tiling_factor": 4})
    tuned = apply_config(job, {"xla_llvm_dot_tiling_factor": 16, **SMALL})
    assert backend_extra_options(job) == {"xla_llvm_dot_tiling_factor": "4"}
    assert backend_extra_options(tuned) == {"xla_llvm_dot_tiling_factor": "4",
                                            "xla_cpu_optimize_for_size": "true"}
    assert backend_extra_options(compile_options({})) == {}  # applying copied, never changed


@pytest.mark.xla
def test_spaces_keep_the_backend_extra_options_the_compiler_acts_on(monkeypatch):
    declared = {name for name, spec in FLAGS.items() if spec.channel == Channel.BACKEND_EXTRA}
    accepted = accepted_flags("cpu")
    assert declared <= accepted  # all three act on jaxlib's CPU backend
    assert declared <= {p.name for p in graph_space("cpu", accepted).params}
    # XLA ignores a key it does not know: declared (as if a newer XLA had dropped it), the
    # probe sees no effect and keeps it out.
    unknown = FlagSpec("xla_fdo_no_such_backend_option", FlagType.BOOL, channel=Channel.BACKEND_EXTRA)
    monkeypatch.setitem(FLAGS, unknown.name, unknown)
    assert acting_backend_extra([unknown, FLAGS["xla_cpu_optimize_for_size"]]) == {
        "xla_cpu_optimize_for_size"}
