"""Every status and error class grid stores, as ``Literal`` types for the code that produces them (the trial
boundary in grid/server/handle.py, the probe, the process, the log patterns, the trial's verdict in
grid/sweep/measure.py), and each trial error class declared once (:data:`FAILURE_CLASSES`: status, phase, meaning,
its wordings in a server's log with their sources). What each value means is the table of grid/storage/vocabulary.py
(docs/schema.md shows it; the trial error classes' rows come from here); tests/storage/test_vocabulary_types.py checks
that each type lists exactly the values of its column there, in order. The types are written out, not computed from
the table, so that a type checker reads them; they sit in grid.server, below grid.storage, so that the server's
modules may use them (the package layers in pyproject.toml).

Adding a failure class: one :class:`FailureClass` entry (and its name in ``TrialErrorClass``, which a test checks);
``python -m grid.docs`` then rewrites docs/schema.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

RequestStatus = Literal["ok", "failed"]
RequestErrorClass = Literal["http_error", "conn_error", "read_timeout", "stall_timeout", "parse_error", "decode_error",
                            "server_error", "context_exceeded", "truncated_stream", "empty_output", "client_error"]
PointStatus = Literal["ok", "partial", "failed", "not_run"]
TrialStatus = Literal["ok", "failed", "invalid", "skipped"]
TrialErrorClass = Literal["refused", "startup_exit", "startup_kv_pool", "startup_oom", "startup_timeout", "probe_error",
                          "garbage_output", "empty_output", "nan_output", "server_crash", "server_hang",
                          "server_broken", "runtime_oom", "nccl_error", "cuda_error", "all_points_failed",
                          "context_exceeded", "external_unreachable", "env_dirty", "port_in_use", "actor_lost", "node_lost"]
#: ``probe_status``: the correctness probe passed, failed, or was not sent (``probe.enabled=false``).
ProbeStatus = Literal["passed", "failed", "skipped"]

#: The phase of a trial in which a trial error class is decided: ``before_launch`` (nothing started), ``startup``
#: (launched, not ready), ``probe`` (ready; the correctness probe), ``load`` (during or after a load point).
Phase = Literal["before_launch", "startup", "probe", "load"]


@dataclass(frozen=True)
class TrialClass:
    """What a trial error class means for the configuration: the ``trial_status`` it gives and its phase. A class
    whose status is ``skipped`` is an infrastructure problem, never charged to the configuration (run again)."""

    status: TrialStatus
    phase: Phase

    @property
    def charged(self) -> bool:
        """True when the class counts against the configuration (it is not an infrastructure problem)."""
        return self.status != "skipped"


@dataclass(frozen=True)
class Wording:
    """One way a server's log says a failure: ``pattern`` (a regular expression, case-insensitive unless it says
    otherwise), ``example`` (a line as the server writes it, which the pattern matches: the tests check it, and the
    twin's fault injector writes it) and ``source`` (the file of the server that writes it, or the issue that shows
    it)."""

    pattern: str
    example: str
    source: str
    ignore_case: bool = True

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)


@dataclass(frozen=True)
class FailureClass:
    """One trial error class, declared once: its ``trial_status``, the phase that decides it, what it means (the
    text docs/schema.md shows after the status), and every wording of it in a server's log (``wordings``; empty for a
    class decided otherwise). :data:`TRIAL_CLASSES`, the vocabulary table (grid/storage/vocabulary.py), the log
    classifiers (:func:`log_class`; grid/server/logparse.py ``RUNTIME_ERRORS``, grid/server/process.py, the probe's
    NaN check), the twin's fault lines and the report's known causes derive from it."""

    name: TrialErrorClass
    status: TrialStatus
    phase: Phase
    meaning: str
    wordings: tuple[Wording, ...] = ()
    #: The effects of known failures (grid/twin/failures.py ``FAILURE_TABLE``: ``startup_crash``, ``nan_output``
    #: ...) a configuration recorded with this class may show: the report names such a failure as its known cause.
    known_effects: tuple[str, ...] = ()
    #: Which classifier decides the class from the server's log, trying classes in the order of
    #: :data:`FAILURE_CLASSES`: ``"startup_log"``, the log of a server that exited before ready
    #: (:data:`STARTUP_LOG_CLASSES`, grid/server/process.py); ``"runtime_log"``, a line written while a load point
    #: runs (grid/server/logparse.py ``runtime_error``). None: the trial decides it otherwise (the process, the probe,
    #: the load points' outcome).
    classifier: Literal["startup_log", "runtime_log"] | None = None
    #: The line the twin writes for it when a fault makes it happen (grid/twin/faults.py; ``{total}``: the GPU's
    #: memory in GiB), matched by one of :attr:`wordings` (tests/storage/test_vocabulary_types.py).
    twin_line: str | None = None

    def pattern(self) -> re.Pattern[str] | None:
        """One expression matching any of the class's wordings (None for a class without wordings)."""
        if not self.wordings:
            return None
        return re.compile("|".join(f"(?{'i' if w.ignore_case else ''}:{w.pattern})" for w in self.wordings))

    def matches(self, text: str) -> bool:
        pattern = self.pattern()
        return pattern is not None and pattern.search(text) is not None


_TORCH_OOM = Wording(r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory",
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                     "capacity of 79.19 GiB of which 1.06 GiB is free.",
                     "PyTorch's CUDA caching allocator raises torch.OutOfMemoryError (torch.cuda.OutOfMemoryError "
                     "before 2.5) 'CUDA out of memory. Tried to allocate ...'; SGLang logs it as 'Scheduler hit an "
                     "exception' (sgl-project/sglang#435: requests hang after a CUDA OOM in the scheduler)",
                     ignore_case=False)

# The same failures in other vendors' words (AMD ROCm/HIP, Huawei Ascend NPU), declared once each and used by every
# class whose log can show them (the startup and the runtime OOM classes share the allocators' wordings).
_HIP_OOM = Wording(r"\bHIP out of memory\b",
                   "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB. GPU 0 has a total capacity "
                   "of 128.00 GiB of which 780.24 MiB is free.",
                   "PyTorch's caching allocator as built for ROCm (c10/cuda/CUDACachingAllocator.cpp 'CUDA out of "
                   "memory. Tried to allocate ...', hipified: 'HIP out of memory', PYTORCH_HIP_ALLOC_CONF; "
                   "kyuz0/amd-strix-halo-image-video-toolboxes#3, Comfy-Org/ComfyUI#9529)", ignore_case=False)
_NPU_OOM = Wording(r"\bNPU out of memory\b",
                   "torch.OutOfMemoryError: NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total "
                   "capacity; 56.05 GiB already allocated; 56.05 GiB current active; 5.04 MiB free; 58.39 GiB reserved "
                   "in total by PyTorch).",
                   "torch_npu's caching allocator (Ascend/pytorch torch_npu/csrc/core/npu/NPUCachingAllocator.cpp 'NPU "
                   "out of memory. Tried to allocate ...'); SGLang on Ascend under load: sgl-project/sglang#29838, "
                   "#9646", ignore_case=False)
_HIP_ERROR = Wording(r"HIP error: |\bhipErrorIllegalAddress\b",
                     "torch.AcceleratorError: HIP error: an illegal memory access was encountered",
                     "PyTorch's C10_CUDA_CHECK as built for ROCm ('HIP error: ' and hipGetErrorString's text, ROCm/clr "
                     "hipamd/src/hip_error.cpp: hipErrorIllegalAddress -> 'an illegal memory access was "
                     "encountered'); ROCm/legacy-rocm-build#5245, #5742, #6003", ignore_case=False)
_HSA_FAULT = Wording(r"HSA_STATUS_ERROR_(?:MEMORY_APERTURE_VIOLATION|MEMORY_FAULT|EXCEPTION)\b",
                     ":0:rocdevice.cpp :2672: 0696142325 us: 5999 : [tid:0x7f676e4c7640] Device::callbackQueue aborting "
                     "with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
                     "beyond the largest legal address. code: 0x29",
                     "ROCm's HIP runtime aborts on a GPU queue error (ROCm/clr rocclr/device/rocm/rocdevice.cpp "
                     "callbackQueue: 'aborting with error : %s code: 0x%x', the HSA status string); "
                     "ROCm/legacy-rocm-build#2153 (APERTURE_VIOLATION), #5025 (HSA_STATUS_ERROR_EXCEPTION 'An HSAIL "
                     "operation resulted in a hardware exception. code: 0x1016' during LLM generation)",
                     ignore_case=False)
_GPU_PAGE_FAULT = Wording(r"Memory access fault by GPU node-\d+",
                          "Memory access fault by GPU node-2 (Agent handle: 0x56468ab3bb50) on address 0x7fe55fb03000. "
                          "Reason: Page not present or supervisor privilege.",
                          "ROCm's ROCR runtime GPU memory-fault handler (ROCR-Runtime core/runtime/runtime.cpp 'Memory "
                          "access fault by GPU node-%u (Agent handle: %p) on address %p%s. Reason: %s.'); "
                          "sgl-project/sglang#10195 (SGLang with EP on MI300), ROCm/pytorch#797", ignore_case=False)

#: Every trial error class, in the order of ``TrialErrorClass`` (tests/storage/test_vocabulary_types.py checks it).
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    FailureClass("refused", "invalid", "before_launch", "the installed SGLang would refuse this configuration (flag, "
                 "choice or combination); nothing launched"),
    FailureClass("startup_exit", "failed", "startup", "the server exited before it was ready",
                 known_effects=("startup_crash", "startup_oom")),
    FailureClass("startup_kv_pool", "failed", "startup", "the server exited before ready because no KV cache fits: "
                 "after the weights (and CUDA graphs) the memory fraction left nothing for the pool; raise "
                 "mem_fraction_static (vLLM: gpu_memory_utilization), or use more GPUs or a smaller model. The other "
                 "end of the same memory budget from startup_oom, where the fraction is too high",
                 (Wording(r"Not enough memory\. Please try to increase --mem-fraction-static",
                          "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current "
                          "value: mem_fraction_static=0.5",
                          "SGLang 0.5.9 srt/model_executor/model_runner_kv_cache_mixin.py, 0.5.23 "
                          "srt/model_executor/pool_configurator.py (max_total_num_tokens <= 0); sgl-project/sglang#322",
                          ignore_case=False),
                  Wording(r"No available memory for the cache blocks",
                          "ValueError: No available memory for the cache blocks. Try increasing "
                          "`gpu_memory_utilization` when initializing the engine.",
                          "vLLM vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; vllm-project/vllm#27508",
                          ignore_case=False)),
                 known_effects=("startup_crash",),
                 classifier="startup_log"),
    FailureClass("startup_oom", "failed", "startup", "the server exited before ready with a CUDA out of memory (or "
                 "ROCm's HIP, Ascend's NPU out of memory) in its log: what was allocated at start (weights, KV pool, "
                 "CUDA graphs) did not fit; lower mem_fraction_static or cuda_graph_max_bs, or use more GPUs",
                 (_TORCH_OOM, _HIP_OOM, _NPU_OOM,
                  Wording(r"out of memory|OutOfMemoryError", "RuntimeError: CUDA error: out of memory",
                          "the CUDA runtime's cudaErrorMemoryAllocation text, as torch raises it"),
                  Wording(r"Capture cuda graph failed", "Exception: Capture cuda graph failed: CUDA out of memory.",
                          "SGLang cuda_graph_runner.py CUDA_GRAPH_CAPTURE_FAILED_MSG (0.5.9); sgl-project/sglang#4489")),
                 known_effects=("startup_oom",),
                 classifier="startup_log"),
    FailureClass("startup_timeout", "failed", "startup", "not ready within `engine.startup_timeout_s`",
                 known_effects=("startup_hang",)),
    FailureClass("probe_error", "failed", "probe", "the correctness probe's requests failed"),
    FailureClass("garbage_output", "invalid", "probe", "the probe's answers are garbage (one token repeated, not "
                 "text, none correct)",
                 known_effects=("nan_output",)),
    FailureClass("empty_output", "invalid", "probe", "a probe answer was empty",
                 known_effects=("nan_output",)),
    FailureClass("nan_output", "invalid", "probe", "the server logged NaN in the logits (at the probe or during load)",
                 (Wording(r"NaN in the logits", "Detected errors during sampling! NaN in the logits.",
                          "SGLang 0.5.9-0.5.12's sampler with --enable-nan-detection (srt/layers/sampler.py; the "
                          "flag and the line are gone from 0.5.13)"),
                  Wording(r"NaN detected in .*values were sanitized before sampling",
                          "NaN detected in sampler: next_token_logits; values were sanitized before sampling. This "
                          "usually indicates numerical overflow (e.g. fp16 activations) or an upstream bug producing "
                          "NaN. Logged once; further occurrences are silent.",
                          "SGLang 0.5.14+ with SGLANG_SANITIZE_NAN_LOGITS set, once per process "
                          "(srt/utils/async_probe.py _AsyncNanWarner; 0.5.13 logs nothing for NaN logits)",
                          ignore_case=False),
                  Wording(r"probability tensor contains either `?inf`?, `?nan`?",
                          "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
                          "torch.multinomial's check of its input")),
                 known_effects=("nan_output",), classifier="runtime_log",
                 twin_line="Detected errors during sampling! NaN in the logits."),
    FailureClass("server_crash", "failed", "load", "the server process exited during a load point (exit code in the "
                 "message)",
                 known_effects=("runtime_crash",)),
    FailureClass("server_hang", "failed", "load", "the process lives but produced no token, neither for the load "
                 "point's requests nor for a short check request sent after it (or for the probe); the message names "
                 "the timeout that fired",
                 known_effects=("startup_hang",)),
    FailureClass("server_broken", "failed", "load", "the process lives but requests of a load point failed fast "
                 "(reset, HTTP 5xx or 429, an error in the stream) and so did the check request after it"),
    FailureClass("runtime_oom", "failed", "load", "the server broke under load (exit, hang or failed check) and its "
                 "log shows a CUDA out of memory (ROCm's HIP, Ascend's NPU out of memory; or SGLang's "
                 "'Decode/Prefill out of memory')",
                 (_TORCH_OOM, _HIP_OOM, _NPU_OOM,
                  Wording(r"\b(?:Decode|Prefill) out of memory\b",
                          "RuntimeError: Decode out of memory. Try to lower your batch size.",
                          "SGLang's KV-cache allocator (sgl-project/sglang#4602)", ignore_case=False)),
                 classifier="runtime_log",
                 twin_line="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                           "capacity of {total:.2f} GiB of which 1.06 GiB is free. Of the allocated memory 70.12 GiB "
                           "is allocated by PyTorch."),
    FailureClass("nccl_error", "failed", "load", "as runtime_oom, with an NCCL error or a collective timeout in the "
                 "log",
                 (Wording(r"NCCL error|\bnccl(?:UnhandledCuda|System|Internal|Remote)Error\b",
                          "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                          "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
                          "version 2.21.5",
                          "torch.distributed: 'torch.distributed.DistBackendError: NCCL error in: "
                          ".../NCCLUtils.hpp' and 'ncclUnhandledCudaError: Call to CUDA function failed.' "
                          "(NVIDIA/nccl#1410, vllm-project/vllm#7896); on ROCm, RCCL keeps NCCL's API and torch "
                          "writes the same lines (ROCm/rccl#1728 on MI300X, 'NCCL error in: .../NCCLUtils.hpp:317, "
                          "internal error')", ignore_case=False),
                  Wording(r"Watchdog caught collective operation timeout",
                          "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
                          "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
                          "ProcessGroupNCCL (sgl-project/sglang#3784)", ignore_case=False)),
                 classifier="runtime_log",
                 twin_line="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                           "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
                           "version 2.21.5"),
    FailureClass("cuda_error", "failed", "load", "as runtime_oom, with a CUDA error (illegal memory access, "
                 "device-side assert) in the log, or the same in ROCm's words (HIP error, HSA hardware exception, GPU "
                 "memory access fault)",
                 (Wording(r"CUDA error: |device-side assert triggered",
                          "RuntimeError: CUDA error: an illegal memory access was encountered",
                          "PyTorch's C10_CUDA_CHECK (sgl-project/sglang#4188: 'CUDA error: an illegal instruction was "
                          "encountered' under load)", ignore_case=False),
                  _HIP_ERROR, _HSA_FAULT, _GPU_PAGE_FAULT),
                 classifier="runtime_log", twin_line="RuntimeError: CUDA error: an illegal memory access was encountered"),
    FailureClass("all_points_failed", "failed", "load", "every load point failed on a server that still answered "
                 "(else the point's request class, e.g. stall_timeout when the timeout is shorter than the TTFT)"),
    FailureClass("context_exceeded", "invalid", "load", "every load point failed because the server refused its "
                 "requests as longer than the context length it serves (input plus requested output; the request "
                 "class context_exceeded, with each server's words in grid/loadgen/records.py CONTEXT_EXCEEDED): "
                 "the workload does not fit, so the configuration was not measured; lower load.input_len or "
                 "load.output_len, or serve a longer context (server.context_length). grid refuses such a workload "
                 "before launch where it knows the limit (refused)"),
    FailureClass("external_unreachable", "skipped", "startup", "an external server (engine=openai) did not answer "
                 "its readiness paths within `engine.startup_timeout_s`, or its /health still answered 5xx (starting): "
                 "grid did not start that server, so nothing is charged to the configuration (it runs again)"),
    FailureClass("env_dirty", "skipped", "before_launch", "the node was not clean (a process of the last server "
                 "left, its port held, GPU memory not freed); nothing launched"),
    FailureClass("port_in_use", "skipped", "startup", "every port tried was taken at launch",
                 (Wording(r"error while attempting to bind on address|address already in use",
                          "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
                          "address already in use",
                          "uvicorn's bind error (SGLang's HTTP server); sgl-project/sglang#9799"),),
                 classifier="startup_log"),
    FailureClass("actor_lost", "skipped", "load", "the Ray actor that owns the node's server died (killed, its "
                 "worker crashed, its node was lost); points measured before are kept, the configuration runs again"),
    FailureClass("node_lost", "skipped", "load", "the Ray node the trial ran on left the cluster mid-trial (the "
                 "trial, the node's actor and its server went with it); every point not_run, the configuration runs "
                 "again on another node"),
)
FAILURE_CLASS: dict[str, FailureClass] = {c.name: c for c in FAILURE_CLASSES}

#: Every trial error class with its status and phase (from :data:`FAILURE_CLASSES`): the one map the code uses from a
#: class to its status (the session, the trial's verdict, the lost-actor and lost-node paths) and the report reads
#: a class's phase.
TRIAL_CLASSES: dict[TrialErrorClass, TrialClass] = {c.name: TrialClass(c.status, c.phase) for c in FAILURE_CLASSES}

#: The classes a server's log decides at start, in the order they are tried (the first that matches names a start
#: that failed; none: ``startup_exit``).
STARTUP_LOG_CLASSES: tuple[TrialErrorClass, ...] = tuple(c.name for c in FAILURE_CLASSES
                                                          if c.classifier == "startup_log")


def log_class(text: str, classes: tuple[TrialErrorClass, ...]) -> TrialErrorClass | None:
    """The first of ``classes`` whose wordings occur in ``text`` (a log tail), or None."""
    for name in classes:
        if FAILURE_CLASS[name].matches(text):
            return name
    return None


def status_of(error_class: str | None) -> TrialStatus:
    """The ``trial_status`` a trial error class gives (:data:`TRIAL_CLASSES`). A request class that ended a trial
    (every point failed that way on a healthy server, e.g. ``stall_timeout``), or none, gives ``failed``."""
    known = trial_class(error_class)
    return known.status if known is not None else "failed"


def trial_class(error_class: str | None) -> TrialClass | None:
    """:data:`TRIAL_CLASSES`' entry for ``error_class`` (None for a request class, an unknown one, or none)."""
    return TRIAL_CLASSES.get(error_class) if error_class else None  # type: ignore[call-overload]
