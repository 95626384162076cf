"""XLA's message classes for autotune results: xla.AutotuneResults and xla.AutotuneResult.

The record of one result is XLA's `xla.AutotuneResults.Entry` (xla/autotune_results.proto): the
device description XLA keys on (`device`), the fusion's canonical HLO (`hlo`), the key's version
constant (`version`) and the `xla.AutotuneResult` (xla/autotuning.proto) it chose; a set of them
is an `xla.AutotuneResults` in text form, what `xla_gpu_dump_autotune_results_to` writes for a
whole compile.

The classes are XLA's own (`schema`): built with protobuf's descriptor pool from the serialized
FileDescriptorProtos the installed compiler's shared libraries embed
(`execution.autotune.descriptors`: a GPU plugin's first, it is the XLA:GPU that reads the
files; else jaxlib's). Where no binary yields them, the fields declared here
(`declared_schema`) take their place; a test holds the two equal.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from execution.autotune.descriptors import compiler_libraries, library_descriptors
from hlo.proto import FieldSpec, build_messages

RESULTS_FILE = "xla/autotune_results.proto"


@dataclass(frozen=True)
class Schema:
    """The message classes of xla.AutotuneResults and xla.AutotuneResult, and where their
    definitions came from (a shared library's path, or "declared")."""

    results: type[Message]
    result: type[Message]
    source: str


@functools.lru_cache(maxsize=None)
def schema() -> Schema:
    """XLA's classes as the installed compiler embeds them (`extracted_schema`), else the
    declared ones (`declared_schema`). Read once per process."""
    return extracted_schema() or declared_schema()


def extracted_schema() -> Schema | None:
    """The classes built from the FileDescriptorProtos of xla/autotune_results.proto and its
    imports that the first shared library holding them embeds (`compiler_libraries`); None
    when none does."""
    for library in compiler_libraries():
        files = library_descriptors(library, RESULTS_FILE)
        if files is None:
            continue
        pool = descriptor_pool.DescriptorPool()
        for proto in files:
            pool.Add(proto)
        return Schema(message_factory.GetMessageClass(pool.FindMessageTypeByName("xla.AutotuneResults")),
                      message_factory.GetMessageClass(pool.FindMessageTypeByName("xla.AutotuneResult")),
                      str(library))
    return None


_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _I32, _BOOL, _STR, _MSG = _F.TYPE_INT64, _F.TYPE_INT32, _F.TYPE_BOOL, _F.TYPE_STRING, _F.TYPE_MESSAGE
# jaxlib 0.10.2's xla.AutotuneResults and xla.AutotuneResult, field for field (xla/
# autotune_results.proto, xla/autotuning.proto, xla/tsl/protobuf/dnn.proto's AlgorithmProto,
# google/protobuf's Duration and UInt64Value); nested messages flattened (`Result_Triton` is
# xla.AutotuneResult.TritonGemmKey) and enums as their numbers, which XLA's text parser takes.
_DECLARED: dict[str, list[FieldSpec]] = {
    "Results": [("version", 1, _I32, _OPT, None), ("results", 4, _MSG, _REP, ".fdo_autotune.Entry")],
    "Entry": [("device", 1, _STR, _OPT, None), ("hlo", 2, _STR, _OPT, None),
              ("result", 3, _MSG, _OPT, ".fdo_autotune.Result"), ("version", 4, _I32, _OPT, None)],
    "Result": [("scratch_bytes", 8, _I64, _OPT, None),
               ("run_time", 9, _MSG, _OPT, ".fdo_autotune.Duration"),
               ("failure", 7, _MSG, _OPT, ".fdo_autotune.Failure"),
               ("conv", 5, _MSG, _OPT, ".fdo_autotune.Conv"), ("gemm", 6, _MSG, _OPT, ".fdo_autotune.Gemm"),
               ("triton", 17, _MSG, _OPT, ".fdo_autotune.Triton"),
               ("cuda_conv_plan", 15, _MSG, _OPT, ".fdo_autotune.ConvPlan"),
               ("custom_kernel_fusion", 18, _MSG, _OPT, ".fdo_autotune.CustomKernel"),
               ("algorithm", 16, _MSG, _OPT, ".fdo_autotune.Algorithm"),
               ("other", 19, _MSG, _OPT, ".fdo_autotune.BackendConfig")],
    "Failure": [("kind", 1, _I32, _OPT, None), ("msg", 2, _STR, _OPT, None),
                ("reference_conv", 11, _MSG, _OPT, ".fdo_autotune.Conv"),
                ("reference_gemm", 12, _MSG, _OPT, ".fdo_autotune.Gemm"),
                ("reference_cuda_conv_plan", 14, _MSG, _OPT, ".fdo_autotune.ConvPlan"),
                ("reference_algorithm", 15, _MSG, _OPT, ".fdo_autotune.Algorithm"),
                ("buffer_address", 13, _I64, _OPT, None)],
    "Conv": [("algorithm", 1, _I64, _OPT, None), ("tensor_ops_enabled", 2, _BOOL, _OPT, None)],
    "Gemm": [("algorithm", 1, _I64, _OPT, None), ("autotune_workspace_size", 2, _I64, _OPT, None)],
    "ConvPlan": [("exec_plan_id", 1, _STR, _OPT, None)],
    "Triton": [("block_m", 1, _I64, _OPT, None), ("block_n", 2, _I64, _OPT, None),
               ("block_k", 3, _I64, _OPT, None), ("split_k", 4, _I64, _OPT, None),
               ("num_stages", 5, _I64, _OPT, None), ("num_warps", 6, _I64, _OPT, None),
               ("num_ctas", 7, _I64, _OPT, None), ("is_tma_allowed", 8, _BOOL, _OPT, None),
               ("is_warp_specialization_allowed", 9, _BOOL, _OPT, None),
               ("waves_per_eu", 10, _I64, _OPT, None)],
    "CustomKernel": [("kernel_index", 1, _I64, _OPT, None)],
    "BackendConfig": [("name", 1, _STR, _OPT, None), ("config", 2, _MSG, _OPT, ".fdo_autotune.Any")],
    "Any": [("type_url", 1, _STR, _OPT, None), ("value", 2, _F.TYPE_BYTES, _OPT, None)],
    "Algorithm": [("algo_id", 1, _I64, _OPT, None), ("math_type", 2, _I32, _OPT, None),
                  ("tuning_knobs", 4, _MSG, _REP, ".fdo_autotune.Knob"),
                  ("is_cudnn_frontend", 5, _BOOL, _OPT, None),
                  ("workspace_size", 6, _MSG, _OPT, ".fdo_autotune.UInt64")],
    "Knob": [("key", 1, _I64, _OPT, None), ("value", 2, _I64, _OPT, None)],
    "Duration": [("seconds", 1, _I64, _OPT, None), ("nanos", 2, _I32, _OPT, None)],
    "UInt64": [("value", 1, _F.TYPE_UINT64, _OPT, None)],
}
_DECLARED_ONEOFS: dict[str, tuple[str, frozenset[int]]] = {"Result": ("key", frozenset({5, 6, 15, 16, 17, 18, 19})),
                    "Failure": ("key", frozenset({11, 12, 14, 15}))}
# Declared message -> XLA's full name, for the test that holds the two schemas equal.
DECLARED_NAMES = {"Results": "xla.AutotuneResults", "Entry": "xla.AutotuneResults.Entry",
                  "Result": "xla.AutotuneResult", "Failure": "xla.AutotuneResult.FailureResult",
                  "Conv": "xla.AutotuneResult.ConvKey", "Gemm": "xla.AutotuneResult.GemmKey",
                  "ConvPlan": "xla.AutotuneResult.CudaConvPlanKey",
                  "Triton": "xla.AutotuneResult.TritonGemmKey",
                  "CustomKernel": "xla.AutotuneResult.CustomKernelFusionKey",
                  "BackendConfig": "xla.AutotuneResult.BackendConfigKey", "Any": "google.protobuf.Any",
                  "Algorithm": "stream_executor.dnn.AlgorithmProto",
                  "Knob": "stream_executor.dnn.AlgorithmProto.TuningKnobsEntry",
                  "Duration": "google.protobuf.Duration", "UInt64": "google.protobuf.UInt64Value"}


@functools.lru_cache(maxsize=None)
def declared_schema() -> Schema:
    """The classes of the fields declared here (jaxlib 0.10.2's), for a compiler whose
    binaries embed no descriptors."""
    classes = build_messages("fdo_autotune", _DECLARED, _DECLARED_ONEOFS)
    return Schema(classes["Results"], classes["Result"], "declared")


def declared_fields() -> dict[str, dict[int, tuple[str, int]]]:
    """XLA's full message name -> field number -> (name, type) of the declared schema."""
    return {DECLARED_NAMES[name]: {number: (field, type_) for field, number, type_, _, _ in fields}
            for name, fields in _DECLARED.items()}
