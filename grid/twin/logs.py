"""SGLang's log lines, per version (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes), and the twin's
log writer.

Every line is ``[YYYY-mm-dd HH:MM:SS{prefix}] message`` (§3.1). Scheduler lines carry the rank prefix
(``DP0`` with DP attention, ``TP0`` when tp > 1, ``EP0`` when ep > 1); the HTTP process and uvicorn lines have none.
Timestamps are on the *modelled* clock (process start + elapsed real time x time_scale), so that numbers printed in
the lines (elapsed, throughput) agree with the timestamps around them.

The ``parse_*`` functions read the same lines back (grid's log scrapers and the tests use them).
"""

from __future__ import annotations

import re
import sys
import time
from typing import Callable, Mapping, TextIO

from grid.twin.cli import Version, parse_version
from grid.releases.features import holds
from grid.server.statuses import FAILURE_CLASS


LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


# --- scheduler statistics lines (§3.2, §3.3) -------------------------------------------------------------------------
def prefill_line(version: str | Version, *, new_seq: int, new_token: int, cached_token: int, token_usage: float,
                 running_req: int, queue_req: int, input_throughput: float, cuda_graph: bool,
                 pending_token: int = 0) -> str:
    """The ``Prefill batch`` message (no timestamp prefix) as ``version`` prints it."""
    ver = parse_version(version) if isinstance(version, str) else version
    head = (f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
            f"token usage: {token_usage:.2f}, #running-req: {running_req}, #queue-req: {queue_req}, ")
    if not holds("prefill_line_graph_before_throughput", ver):
        return head + f"input throughput (token/s): {input_throughput:.2f}, cuda graph: {cuda_graph}"
    if holds("prefill_line_pending_token", ver):
        head += f"#pending-token: {pending_token}, "
    return head + f"cuda graph: {cuda_graph}, input throughput (token/s): {input_throughput:.2f}"


def decode_line(version: str | Version, *, running_req: int, num_token: int, token_usage: float, cuda_graph: bool,
                gen_throughput: float, queue_req: int, accept_len: float | None = None,
                accept_rate: float | None = None) -> str:
    """The ``Decode batch`` message (identical from 0.5.9 to 0.5.23 for dense models). With speculative decoding
    (``accept_len`` given: tokens per verify iteration; ``accept_rate``: accepted draft tokens over drafted) SGLang
    adds ``accept len: {:.2f}, accept rate: {:.2f}, `` after the token usage (the catalog's ``decode`` parts; 0.5.23
    ``managers/scheduler_components/metrics_reporter.py``)."""
    spec = "" if accept_len is None else f"accept len: {accept_len:.2f}, accept rate: {accept_rate or 0.0:.2f}, "
    return (f"Decode batch, #running-req: {running_req}, #token: {num_token}, token usage: {token_usage:.2f}, {spec}"
            f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue_req}")


_PREFIX_RE = r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)(?P<ranks>(?: [A-Z_]+\d+)*)\] "


def parse_line(line: str) -> tuple[str | None, str, str]:
    """``(timestamp, rank prefix, message)``; timestamp None when the line has no ``[...]`` prefix."""
    m = re.match(_PREFIX_RE, line)
    if not m:
        return None, "", line
    return m.group("ts"), m.group("ranks").strip(), line[m.end():]


CAPACITY_RE = re.compile(
    r"max_total_num_tokens=(?P<max_total_num_tokens>\d+), chunked_prefill_size=(?P<chunked_prefill_size>-?\d+), "
    r"max_prefill_tokens=(?P<max_prefill_tokens>\d+), max_running_requests=(?P<max_running_requests>\d+), "
    r"context_len=(?P<context_len>\d+), available_gpu_mem=(?P<available_gpu_mem>[\d.]+) GB")
KV_RE = re.compile(r"KV Cache is allocated\. (?:dtype: (?P<dtype>[\w.]+), )?#tokens: (?P<tokens>\d+), "
                   r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")


def parse_capacity_line(line: str) -> dict | None:
    m = CAPACITY_RE.search(line)
    if not m:
        return None
    return {k: (float(v) if k == "available_gpu_mem" else int(v)) for k, v in m.groupdict().items()}


# --- startup lines (§3.4) --------------------------------------------------------------------------------------------
def torch_dtype(kv_cache_dtype: str) -> str:
    return {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2", "fp4_e2m1": "torch.float4_e2m1fn_x2",
            "nvfp4": "torch.float4_e2m1fn_x2", "mxfp8": "torch.float8_e4m3fn"}.get(kv_cache_dtype, "torch.bfloat16")


def kv_cache_line(version: str | Version, *, tokens: int, kv_gb: float, mla: bool, kv_cache_dtype: str) -> str:
    ver = parse_version(version) if isinstance(version, str) else version
    sizes = f"KV size: {kv_gb:.2f} GB" if mla else f"K size: {kv_gb / 2:.2f} GB, V size: {kv_gb / 2:.2f} GB"
    if holds("kv_cache_line_dtype", ver):
        return f"KV Cache is allocated. dtype: {torch_dtype(kv_cache_dtype)}, #tokens: {tokens}, {sizes}"
    return f"KV Cache is allocated. #tokens: {tokens}, {sizes}"


def capacity_line(*, max_total_num_tokens: int, chunked_prefill_size: int, max_prefill_tokens: int,
                  max_running_requests: int, context_len: int, available_gpu_mem: float) -> str:
    return (f"max_total_num_tokens={max_total_num_tokens}, chunked_prefill_size={chunked_prefill_size}, "
            f"max_prefill_tokens={max_prefill_tokens}, max_running_requests={max_running_requests}, "
            f"context_len={context_len}, available_gpu_mem={available_gpu_mem:.2f} GB")


def load_weight_end_line(version: str | Version, *, elapsed: float, arch: str, avail: float, usage: float) -> str:
    ver = parse_version(version) if isinstance(version, str) else version
    dtype = "" if holds("load_weight_line_without_dtype", ver) else ", dtype=torch.bfloat16"
    return f"Load weight end. elapsed={elapsed:.2f} s, type={arch}{dtype}, avail mem={avail:.2f} GB, mem usage={usage:.2f} GB."


def graph_begin_lines(version: str | Version, *, avail: float, bs: list[int]) -> list[str]:
    """The lines that open the decode CUDA graph capture (srt/model_executor/model_runner.py; 0.5.16+
    model_runner_components/cuda_graph_setup.py): from 0.5.14 one ``Capture target decode CUDA graph begin.`` line
    (with the batch sizes until 0.5.21), before a begin line and the ``Capture cuda graph bs`` line."""
    ver = parse_version(version) if isinstance(version, str) else version
    if holds("target_decode_cuda_graph_lines", ver):
        per = "num_tokens_per_req" if holds("cuda_graph_num_tokens_per_req", ver) else "num_tokens_per_bs"
        sizes = "" if holds("cuda_graph_bs_on_end_line", ver) else f"bs={bs}, "
        return [f"Capture target decode CUDA graph begin. backend=full, {per}=1, {sizes}avail mem={avail:.2f} GB"]
    return [f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB",
            f"Capture cuda graph bs {bs}"]


def graph_end_line(version: str | Version, *, elapsed: float, usage: float, avail: float, bs: list[int]) -> str:
    """The line that closes the decode CUDA graph capture (the batch sizes on it from 0.5.22)."""
    ver = parse_version(version) if isinstance(version, str) else version
    if holds("target_decode_cuda_graph_lines", ver):
        sizes = f"bs={bs}, " if holds("cuda_graph_bs_on_end_line", ver) else ""
        return (f"Capture target decode CUDA graph end. {sizes}elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB, "
                f"avail mem={avail:.2f} GB.")
    return f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. avail mem={avail:.2f} GB."


READY_LINE = "The server is fired up and ready to roll!"


def _declared_line(name: str) -> str:
    line = FAILURE_CLASS[name].twin_line
    if line is None:
        raise KeyError(f"failure class {name!r} declares no twin_line (grid/server/statuses.py)")
    return line


#: The line SGLang 0.5.9-0.5.12 log for NaN in the logits with --enable-nan-detection (srt/layers/sampler.py), as the
#: class nan_output declares it (grid/server/statuses.py).
NAN_LINE: str = _declared_line("nan_output")
#: What 0.5.14+ log for NaN in the logits with SGLANG_SANITIZE_NAN_LOGITS set, once per process: srt/utils/async_probe.py
#: ``_AsyncNanWarner`` with the message the sampler passes to ``sanitize_nan_logits`` (tests/releases/test_features.py
#: fills the release's template with it).
NAN_SANITIZED_LINE = ("NaN detected in sampler: next_token_logits; values were sanitized before sampling. This usually "
                      "indicates numerical overflow (e.g. fp16 activations) or an upstream bug producing NaN. Logged "
                      "once; further occurrences are silent.")
#: The switch of the 0.5.14+ warning (srt/environ.py, default off) and the values SGLang's EnvBool reads as on.
NAN_SANITIZE_ENV = "SGLANG_SANITIZE_NAN_LOGITS"
_ENV_TRUE = ("true", "1", "yes", "y")


def nan_lines(version: str | Version, fault_lines: tuple[str, ...], *, nan_detection: bool,
              env: Mapping[str, str]) -> tuple[str, ...]:
    """What a release logs at a decode step whose logits hold NaN (``fault_lines``: the failure's own wording of the
    sampler's line): 0.5.9-0.5.12 the sampler's line, only with --enable-nan-detection (``nan_detection``); 0.5.14+
    :data:`NAN_SANITIZED_LINE`, only with SGLANG_SANITIZE_NAN_LOGITS set in ``env`` (the caller writes it once);
    nothing otherwise (0.5.13 has neither: grid/releases/features.py ``nan_detection_flag``,
    ``nan_sanitize_warning``)."""
    ver = parse_version(version) if isinstance(version, str) else version
    if holds("nan_detection_flag", ver):
        return (fault_lines or (NAN_LINE,)) if nan_detection else ()
    if holds("nan_sanitize_warning", ver) and env.get(NAN_SANITIZE_ENV, "").lower() in _ENV_TRUE:
        return (NAN_SANITIZED_LINE,)
    return ()


def uvicorn(msg: str) -> str:
    """Uvicorn's ``INFO:     ...`` form (level name padded to 9 columns)."""
    return f"INFO:     {msg}"


def access_line(peer: str, method: str, path: str, status: int, reason: str) -> str:
    return uvicorn(f'{peer} - "{method} {path} HTTP/1.1" {status} {reason}')


def rank_prefix(*, tp_size: int, ep_size: int = 1, dp_attention: bool = False, pp_size: int = 1, rank: int = 0) -> str:
    """The scheduler's rank prefix (§3.1), e.g. ``" TP0 EP0"``; empty with tp=1 and no DP/PP/EP."""
    parts = []
    if dp_attention:
        parts.append(f"DP{rank}")
    if pp_size > 1:
        parts.append("PP0")
    if tp_size > 1:
        parts.append(f"TP{rank}")
    if ep_size > 1:
        parts.append(f"EP{rank}")
    return "".join(" " + p for p in parts)


class LogWriter:
    """Writes prefixed lines. ``clock()`` returns modelled unix seconds. Access lines go to stdout, the rest to stderr
    (as Python logging and uvicorn's access logger do)."""

    def __init__(self, clock: Callable[[], float], *, level: str = "info", sched_prefix: str = "",
                 err: TextIO | None = None, out: TextIO | None = None) -> None:
        self.clock = clock
        self.level = LEVELS.get(level.lower(), 20)
        self.sched_prefix = sched_prefix
        self.err = err or sys.stderr
        self.out = out or sys.stdout
        self._sec = -1
        self._stamp = ""

    def _ts(self) -> str:
        now = self.clock()
        sec = int(now)
        if sec != self._sec:
            self._sec = sec
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sec))
        return self._stamp

    def _write(self, stream: TextIO, prefix: str, msg: str, level: int) -> None:
        if level < self.level:
            return
        stream.write(f"[{self._ts()}{prefix}] {msg}\n")
        stream.flush()

    def info(self, msg: str, *, level: str = "info") -> None:
        """A line from the HTTP/tokenizer (main) process: no rank prefix."""
        self._write(self.err, "", msg, LEVELS[level])

    def sched(self, msg: str, *, level: str = "info") -> None:
        """A line from the scheduler on rank 0."""
        self._write(self.err, self.sched_prefix, msg, LEVELS[level])

    def access(self, msg: str) -> None:
        self._write(self.out, "", msg, 20)

    def raw(self, text: str) -> None:
        """Unprefixed text (tracebacks)."""
        self.err.write(text if text.endswith("\n") else text + "\n")
        self.err.flush()


def traceback_text(exc_type: str, message: str, *, where: str = "server_args.py", func: str = "__post_init__") -> str:
    """A Python traceback as SGLang prints it when ``prepare_server_args`` raises at launch."""
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        '  File "sglang/launch_server.py", line 24, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f'  File "sglang/srt/{where}", line 5016, in {func}\n'
        "    self.check_server_args()\n"
        f"{exc_type}: {message}\n"
    )
