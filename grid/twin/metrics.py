"""The twin's Prometheus metrics (``/metrics`` with ``--enable-metrics``), named as SGLang names them
(docs/sources.md#sglang-http-api-and-bench_serving).

All times are modelled seconds (real seconds x time_scale), the same clock as the log lines and ``/server_info``.
A private registry is used so several twins can live in one process (tests).
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
               600.0, 1200.0, 1800.0, 2400.0)
#: ``sglang:kv_transfer_latency_ms`` buckets (ms), as SGLang registers them (0.5.23
#: ``srt/observability/metrics_collector.py``; the same name in every release 0.5.9-0.5.23)
KV_TRANSFER_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
QUEUE_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
                 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: a ``*_created`` sample, or its HELP / TYPE line
_CREATED = re.compile(r"^(?:# (?:HELP|TYPE) )?[\w:]+_created[ {]")


class TwinMetrics:
    """Scheduler gauges (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank) and tokenizer counters and
    histograms (label model_name)."""

    def __init__(self, model_name: str, disaggregated: bool = False) -> None:
        """``disaggregated``: the twin serves prefill and decode servers, whose KV transfers it observes in
        ``sglang:kv_transfer_latency_ms`` (ms; SGLang's prefill servers export it)."""
        self.registry = reg = CollectorRegistry(auto_describe=True)
        sl = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        sv = dict(model_name=model_name, engine_type="unified", tp_rank="0", pp_rank="0", moe_ep_rank="0")

        def g(name: str, doc: str) -> Gauge:
            return Gauge(f"sglang:{name}", doc, sl, registry=reg).labels(**sv)

        self.num_running_reqs = g("num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = g("num_queue_reqs", "The number of requests in the waiting queue.")
        self.num_used_tokens = g("num_used_tokens", "The number of used tokens.")
        self.token_usage = g("token_usage", "The token usage.")
        self.gen_throughput = g("gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = g("cache_hit_rate", "The prefix cache hit rate.")
        self.max_total_num_tokens = g("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
        self.is_cuda_graph = g("is_cuda_graph", "Whether the batch is using CUDA graph.")
        self.utilization = g("utilization", "The utilization.")
        self.num_grammar_queue_reqs = g("num_grammar_queue_reqs", "The number of requests in the grammar queue.")
        self.new_token_ratio = g("new_token_ratio", "The new token ratio.")
        self.spec_accept_length = g("spec_accept_length", "The average acceptance length of speculative decoding.")
        self.spec_accept_rate = g("spec_accept_rate", "The average acceptance rate of speculative decoding.")

        tl = ["model_name"]
        tv = dict(model_name=model_name)

        def c(name: str, doc: str) -> Counter:
            return Counter(f"sglang:{name}", doc, tl, registry=reg).labels(**tv)

        def h(name: str, doc: str, buckets: tuple) -> Histogram:
            return Histogram(f"sglang:{name}", doc, tl, buckets=buckets, registry=reg).labels(**tv)

        self.prompt_tokens = c("prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = c("generation_tokens", "Number of generation tokens processed.")
        self.num_requests = c("num_requests", "Number of requests processed.")
        self.num_aborted_requests = c("num_aborted_requests", "Number of requests aborted.")
        self.cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt tokens.",
                                     ["model_name", "cache_source"], registry=reg).labels(
            model_name=model_name, cache_source="device")
        self.cuda_graph_passes = Counter("sglang:cuda_graph_passes", "Number of forward passes by CUDA graph mode.",
                                         ["model_name", "mode"], registry=reg)
        self.ttft = h("time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = h("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = h("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                     E2E_BUCKETS)
        self.queue_time = h("queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS)
        self.kv_transfer_ms = (Histogram("sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in "
                                         "ms.", sl, buckets=KV_TRANSFER_BUCKETS_MS, registry=reg).labels(**sv)
                               if disaggregated else None)
        self._model_name = model_name
        self._graph_on = self.cuda_graph_passes.labels(model_name=model_name, mode="cuda_graph")
        self._graph_off = self.cuda_graph_passes.labels(model_name=model_name, mode="none")

    def on_step(self, *, running: int, queued: int, used_tokens: int, token_usage: float, cuda_graph: bool) -> None:
        self.num_running_reqs.set(running)
        self.num_queue_reqs.set(queued)
        self.num_used_tokens.set(used_tokens)
        self.token_usage.set(round(token_usage, 2))
        self.is_cuda_graph.set(1.0 if cuda_graph else 0.0)
        self.utilization.set(1.0 if running else 0.0)
        (self._graph_on if cuda_graph else self._graph_off).inc()

    def on_finish(self, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int, ttft_s: float | None,
                  e2e_s: float, queue_s: float, aborted: bool) -> None:
        self.num_requests.inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(completion_tokens)
        if cached_tokens:
            self.cached_tokens.inc(cached_tokens)
        if aborted:
            self.num_aborted_requests.inc()
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        self.e2e.observe(e2e_s)
        self.queue_time.observe(max(0.0, queue_s))

    def render(self) -> bytes:
        """The exposition text without ``*_created`` series: SGLang runs prometheus_client in multiprocess mode
        (``PROMETHEUS_MULTIPROC_DIR``; 0.5.23 srt/observability/metrics_collector.py), whose collector exports no
        creation timestamps (seen on the released server: tests/twin/test_conformance_sglang.py)."""
        lines = generate_latest(self.registry).decode().splitlines(keepends=True)
        return "".join(ln for ln in lines if not _CREATED.match(ln)).encode()
