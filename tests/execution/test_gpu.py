"""XLA:GPU in the loop: the environment of a GPU graph built from what JAX reports, the GPU flags
of the table (domains, the allowlist, acceptance by the installed compiler), the space a GPU
graph gets, the effort level as a build option, how workers share a GPU, the numerics rule.

Everything here but the tests marked `needs_gpu` runs without a GPU, from described devices and
the installed compiler's DebugOptions (a CPU jaxlib declares the GPU fields too). Those need a
GPU and are skipped elsewhere, saying so; benchmarks/gpu_check.py runs this file on the device.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types

import numpy as np
import pytest

from execution.compile import apply_config, compile_options, compiler_defaults, job_build_options
from execution.cores import plan_cores
from execution.flags import FLAGS, FlagError, FlagSpec, check_name, checked_config, parse_assignment, to_xla
from execution.numerics import SPREAD_FACTOR, all_ok, compare_outputs
from execution.worker import DEFAULT_MEMORY_LIMIT, Worker, device_variables
from hlo import environment
from hlo.environment import Environment, GpuDescription, describe_gpu, gpu_environment
from tests.support import worker_tasks
from tuner.schedule import neighbourhood
from tuner.space import accepted_flags, graph_space
from vocabulary.flags import Channel, FlagType
from workloads import zoo

H100 = GpuDescription("NVIDIA H100 80GB HBM3", "9.0", 1, "0.11.2",
                      (("jax-cuda13-pjrt", "0.11.2"), ("jax-cuda13-plugin", "0.11.2")))
GPU_FLAGS = {name for name, spec in FLAGS.items() if spec.platform == "gpu"}


def _on_a_gpu() -> bool:
    import jax

    return jax.default_backend() == "gpu"


needs_gpu = pytest.mark.skipif("not _on_a_gpu()", reason="needs a GPU: JAX's default backend "
                               "here is not one (benchmarks/gpu_check.py runs these on a GPU machine)")


# --- the environment --------------------------------------------------------------------------

def test_a_gpu_environment_names_the_device_its_capability_and_the_stack_that_compiles():
    env = gpu_environment(H100, {"xla_gpu_enable_triton_gemm": "false"})
    assert env == Environment(
        "gpu", "NVIDIA H100 80GB HBM3 (compute capability 9.0)", 1,
        "jaxlib-0.11.2+jax-cuda13-pjrt-0.11.2+jax-cuda13-plugin-0.11.2",
        {"xla_gpu_enable_triton_gemm": "false"})
    assert environment.environment_from_json(json.loads(json.dumps(env.to_json()))).key() == env.key()


@pytest.mark.parametrize("change", [
    {"device_kind": "NVIDIA H200"}, {"compute_capability": "8.0"}, {"device_count": 8},
    {"jaxlib_version": "0.11.3"}, {"plugins": (("jax-cuda13-pjrt", "0.11.3"), ("jax-cuda13-plugin", "0.11.2"))},
    {"plugins": (("jax-cuda12-pjrt", "0.11.2"), ("jax-cuda12-plugin", "0.11.2"))},
])
def test_each_thing_a_gpu_key_says_changes_it(change):
    assert gpu_environment(dataclasses.replace(H100, **change)).key() != gpu_environment(H100).key()


def test_the_jobs_own_flags_join_a_gpu_key_and_the_plugins_order_does_not():
    plain = gpu_environment(H100)
    assert gpu_environment(H100, {"xla_gpu_autotune_level": "0"}).key() != plain.key()
    swapped = dataclasses.replace(H100, plugins=tuple(reversed(H100.plugins)))
    assert gpu_environment(swapped).key() == plain.key()


def test_cpu_keys_are_what_they_were():
    # Computed by the environment code before GPUs joined it: a CPU entry's key must not move.
    assert Environment("cpu", "cpu:x86_64:avx,avx2,fma", 1, "jaxlib-0.10.2").key() == (
        "16a973876b139cc791851e688bb8cece")
    assert Environment("cpu", "cpu:x86_64:avx,avx2,fma", 1, "jaxlib-0.10.2",
                       {"xla_cpu_use_xnnpack": "false"}).key() == "60dd81d27a2ba8413127cf84e6bb312d"


@pytest.mark.parametrize("bad", [{"device_count": 0}, {"device_kind": ""}, {"compute_capability": ""}])
def test_a_description_without_a_device_is_refused(bad):
    with pytest.raises(ValueError):
        dataclasses.replace(H100, **bad)


def test_a_description_reads_the_devices_and_the_gpu_plugin_distributions(monkeypatch):
    def dist(name: str, version: str):
        return types.SimpleNamespace(metadata={"Name": name}, version=version)

    installed = [dist("jax_cuda13_plugin", "0.11.2"), dist("jax-cuda13-pjrt", "0.11.2"), dist("numpy", "2.4"),
                 dist("jax", "0.11.2"), dist("jaxlib", "0.11.2"), dist("nvidia-cublas", "13.1")]
    monkeypatch.setattr("importlib.metadata.distributions", lambda: installed)
    device = types.SimpleNamespace(device_kind="NVIDIA H100 80GB HBM3", compute_capability="9.0")
    found = describe_gpu([device, device])
    assert (found.device_kind, found.compute_capability, found.device_count) == ("NVIDIA H100 80GB HBM3", "9.0", 2)
    assert found.plugins == (("jax-cuda13-pjrt", "0.11.2"), ("jax-cuda13-plugin", "0.11.2"))


# --- the flag table ---------------------------------------------------------------------------

# XLA:GPU's DebugOptions fields that name a file, a directory or a cache (jaxlib 0.10.2, 0.11.2).
GPU_FILE_FLAGS = ("xla_gpu_cuda_data_dir", "xla_gpu_per_fusion_autotune_cache_dir",
                  "xla_gpu_experimental_autotuner_cache_dir", "xla_gpu_load_autotune_results_from",
                  "xla_gpu_dump_autotune_results_to", "xla_gpu_kernel_cache_file",
                  "xla_gpu_pgle_profile_file_or_directory_path", "xla_gpu_gemm_autotuner_override_file",
                  "xla_gpu_target_config_filename", "xla_gpu_algorithm_denylist_path",
                  "xla_gpu_llvm_ir_file", "xla_gpu_ptx_file", "xla_gpu_experimental_autotune_cache_mode",
                  "xla_gpu_experimental_matmul_perf_table_path", "xla_gpu_dump_autotune_logs_to")


def test_no_flag_of_the_table_names_a_file_a_directory_or_a_cache():
    for name, spec in FLAGS.items():
        check_name(name)  # raises for a flag that touches files
        assert spec.type != FlagType.STRING, f"{name}: a string flag names something; none is tunable"
    for name in GPU_FILE_FLAGS:
        with pytest.raises(FlagError, match="never applied"):
            parse_assignment(f"{name}=/tmp/x")


def test_each_gpu_flag_has_a_domain_a_prior_rank_and_a_default_to_read():
    for name in GPU_FLAGS:
        spec = FLAGS[name]
        assert spec.type in (FlagType.BOOL, FlagType.INT, FlagType.ENUM, FlagType.REPEATED_ENUM), name
        assert spec.type == FlagType.BOOL or spec.choices, f"{name}: no declared domain"
        assert spec.field is not None or spec.channel == Channel.BUILD_OPTION, name
        assert spec.type != FlagType.ENUM or len(spec.numbers) == len(spec.choices), name
    lists = FLAGS["xla_gpu_enable_command_buffer"]
    assert () in lists.lists and all(set(value) <= set(lists.choices) for value in lists.lists)


def test_gpu_flag_values_travel_as_xla_takes_them():
    config = checked_config({"xla_gpu_enable_triton_gemm": False, "xla_gpu_enable_command_buffer": ["FUSION"],
                        "xla_gpu_pipeline_all_reduce": "ON", "optimization_level": "O3"})
    settings = to_xla(config)
    assert settings.overrides == {"xla_gpu_enable_triton_gemm": False,
                                  "xla_gpu_enable_command_buffer": "FUSION",
                                  "xla_gpu_pipeline_all_reduce": "COLLECTIVE_PIPELINING_MODE_ON"}
    assert settings.build == {"optimization_level": 39} and settings.backend_extra == {}
    for refused in ({"xla_gpu_graph_min_graph_size": 7}, {"xla_gpu_enable_command_buffer": ["GRAPHS"]},
                    {"optimization_level": "O9"}):
        with pytest.raises(FlagError):
            checked_config(refused)


def test_the_effort_level_is_a_build_option_and_the_jobs_own_stays():
    options = compile_options({"optimization_level": "O1"})
    assert options.executable_build_options.optimization_level == 19
    assert job_build_options(options) == {"optimization_level": "O1"}
    # A job that asked for O3 keeps it: the config's O1 does not reach its compile.
    tuned = apply_config(options, {"optimization_level": "O3"})
    assert tuned.executable_build_options.optimization_level == 19
    assert job_build_options(compile_options({})) == {}


# --- the space --------------------------------------------------------------------------------

@pytest.mark.xla
def test_acceptance_is_the_installed_compilers(monkeypatch):
    accepted = accepted_flags("gpu")
    assert {"xla_gpu_enable_triton_gemm", "xla_gpu_enable_command_buffer", "optimization_level"} <= accepted
    # Collective pipelining is an enum per collective on jaxlib 0.11, a bool on 0.10: one of each.
    for collective in ("all_reduce", "all_gather", "reduce_scatter"):
        assert (f"xla_gpu_pipeline_{collective}" in accepted) != (
            f"xla_gpu_enable_pipelined_{collective}" in accepted), collective
    monkeypatch.setitem(FLAGS, "xla_gpu_no_such_flag", FlagSpec("xla_gpu_no_such_flag", FlagType.BOOL, platform="gpu"))
    accepted_flags.cache_clear()
    try:
        assert "xla_gpu_no_such_flag" not in accepted_flags("gpu")
    finally:
        accepted_flags.cache_clear()


@pytest.mark.xla
def test_compiler_defaults_of_the_gpu_flags_are_of_their_kinds():
    defaults = compiler_defaults()
    for name in GPU_FLAGS & accepted_flags("gpu"):
        spec, value = FLAGS[name], defaults[name]
        if spec.type == FlagType.BOOL:
            assert isinstance(value, bool), name
        elif spec.type == FlagType.INT:
            assert isinstance(value, int) and not isinstance(value, bool), name
        elif spec.type == FlagType.REPEATED_ENUM:
            assert set(value) <= set(spec.choices), name
        else:
            assert value in spec.choices or value.isdigit(), name
    assert "FUSION" in defaults["xla_gpu_enable_command_buffer"]


@pytest.mark.xla
def test_a_gpu_graph_gets_the_gpu_space_and_a_cpu_graph_the_cpu_space():
    defaults = compiler_defaults()
    gpu = graph_space("gpu", accepted_flags("gpu"), defaults)
    names = {p.name for p in gpu.params}
    assert names <= GPU_FLAGS and "xla_gpu_enable_triton_gemm" in names
    assert not any(FLAGS[n].min_devices > 1 for n in names)  # collectives: not on one device
    across = {p.name for p in graph_space("gpu", accepted_flags("gpu"), defaults, device_count=8).params}
    assert "xla_gpu_all_reduce_combine_threshold_bytes" in across - names
    cpu = graph_space("cpu", accepted_flags("cpu"), defaults)
    assert not {p.name for p in cpu.params} & GPU_FLAGS
    assert any(p.name.startswith("placement:") for p in cpu.params)
    # No single move sets a flag to the compiler's default.
    assert all(defaults.get(name) != value for name, value in neighbourhood(gpu))


@pytest.mark.xla
def test_a_flag_the_program_key_cannot_see_joins_it_by_value():
    from execution.compile import compile_module
    from execution.session import program_key
    from hlo.module import from_text

    optimized = compile_module(from_text("HloModule m\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n").proto,
                               {}).optimized_proto
    code = (b"kernels",)
    plain = program_key(optimized, code, {})
    # Command buffers and the schedule leave the optimized HLO's fingerprint and the kernels as
    # they are: without their values in the key, their programs would pass for the default's.
    assert program_key(optimized, code, {"xla_gpu_enable_command_buffer": ()}) != plain
    assert program_key(optimized, code, {"xla_gpu_enable_latency_hiding_scheduler": True}) != plain
    assert program_key(optimized, code, {"xla_gpu_enable_triton_gemm": False}) == plain  # shows in HLO


# --- workers, measurement ---------------------------------------------------------------------

def test_a_worker_gets_the_first_devices_its_caller_sees():
    assert device_variables({"CUDA_VISIBLE_DEVICES": "2,3"}, 1)["CUDA_VISIBLE_DEVICES"] == "2"
    assert device_variables({}, 1)["CUDA_VISIBLE_DEVICES"] == "0"
    assert device_variables({"CUDA_VISIBLE_DEVICES": ""}, 1)["CUDA_VISIBLE_DEVICES"] == ""
    assert device_variables({"CUDA_VISIBLE_DEVICES": "2,3,5"}, 2)["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert device_variables({}, 4)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert device_variables({"CUDA_VISIBLE_DEVICES": "1"}, None) == {}
    # On a CPU, N host devices; the caller's other XLA flags kept, its own device count replaced.
    flags = "--xla_cpu_use_thunk_runtime=true --xla_force_host_platform_device_count=8"
    assert device_variables({"XLA_FLAGS": flags}, 4)["XLA_FLAGS"] == (
        "--xla_cpu_use_thunk_runtime=true --xla_force_host_platform_device_count=4")
    assert device_variables({"XLA_FLAGS": flags}, 1)["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=true"


def test_on_a_gpu_compiles_and_measurements_take_turns():
    cores = frozenset(range(16))
    assert not plan_cores(cores=cores, platform="cpu").overlapping
    plan = plan_cores(cores=cores, platform="gpu")
    assert plan.overlapping and plan.execute == plan.compile == cores


def test_the_defaults_own_spread_widens_the_tolerance_of_that_output():
    reference = np.linspace(1.0, 2.0, 64, dtype=np.float32)
    off = reference * np.float32(1 + 5e-3)  # past float32's 2e-3
    assert not all_ok(compare_outputs([reference], [off]))
    spread = 2e-3  # the default's own two runs differ this much on it
    checks = compare_outputs([reference, reference], [off, off], [spread])
    assert checks[0].ok and checks[0].tolerance == SPREAD_FACTOR * spread
    assert not checks[1].ok  # an output the default agrees with itself on keeps its tolerance


def test_the_gpu_zoo_is_apart_from_the_listing():
    names = [w.name for w in zoo.gpu_workloads()]
    assert names == ["transformer-g", "cnn-g", "attention_kv-g"]
    assert not set(names) & {w.name for w in zoo.all_workloads()}


# --- on a GPU ---------------------------------------------------------------------------------

@needs_gpu
def test_on_a_gpu_the_environment_is_what_jax_reports():
    import jax

    env = environment.current_environment()
    assert env.platform == "gpu" and env.device_count == len(jax.devices())
    assert env.device_kind.startswith(jax.devices()[0].device_kind) and "compute capability" in env.device_kind
    assert env.compiler_version.startswith("jaxlib-") and "+jax-cuda" in env.compiler_version


@needs_gpu
def test_on_a_gpu_a_worker_owns_one_gpu_and_takes_memory_as_it_needs_it():
    with Worker() as worker:
        seen = worker.call(worker_tasks.device_view, timeout=120)
    assert seen == {"platform": "gpu", "devices": 1, "visible": device_variables(os.environ, 1)["CUDA_VISIBLE_DEVICES"],
                    "preallocate": "false", "data_limit": DEFAULT_MEMORY_LIMIT}


@needs_gpu
def test_on_a_gpu_every_single_move_compiles_and_a_candidate_travels_to_the_measuring_worker():
    from execution.measure import MeasureSettings
    from execution.session import compile_serialized, measure_serialized, prepare
    from hlo.module import from_text

    module = from_text("HloModule m\nENTRY e {\n  a = f32[512,512]{1,0} parameter(0)\n"
                       "  b = f32[512,512]{1,0} parameter(1)\n  ROOT d = f32[512,512]{1,0} dot(a, b), "
                       "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n").proto
    space = graph_space("gpu", accepted_flags("gpu"), compiler_defaults())
    for name, value in neighbourhood(space):
        assert compile_serialized(module, {name: value}).error is None, (name, value)
    assert prepare(module).error is None
    built = compile_serialized(module, {"xla_gpu_enable_triton_gemm": False})
    timed = measure_serialized(built.executable, {"xla_gpu_enable_triton_gemm": False},
                               MeasureSettings(max_seconds=2.0))
    assert timed.error is None and timed.numerics_ok and timed.measurement.speedup.estimate > 0
