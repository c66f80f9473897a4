"""Scrape SGLang's Prometheus ``/metrics`` (served with ``--enable-metrics``) and reduce it to the gauges grid keeps.

Parsing is prometheus_client's own text parser (``text_string_to_metric_families``). Names and labels are SGLang's
(sglang.md §2.8): scheduler gauges carry ``tp_rank``/``dp_rank``/... labels, so one name can have several samples;
they are combined per gauge as :data:`GAUGES` says (requests and token counts add up over DP ranks, fractions take
the largest rank, as 0.5.23's ``token_usage`` itself does over pools).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from grid.server.metrics_vllm import as_sglang

#: SGLang gauge (without the ``sglang:`` prefix) -> (grid column suffix, how samples over ranks combine, unit).
GAUGES: dict[str, tuple[str, str, str]] = {
    "num_running_reqs": ("running_reqs", "sum", "requests"),
    "num_queue_reqs": ("queue_reqs", "sum", "requests"),
    "num_used_tokens": ("used_tokens", "sum", "tokens"),
    "token_usage": ("token_usage", "max", "fraction"),
    "gen_throughput": ("gen_throughput_tok_per_s", "sum", "tok/s"),
    "cache_hit_rate": ("cache_hit_rate", "max", "fraction"),
    "max_total_num_tokens": ("max_total_num_tokens", "sum", "tokens"),
}
#: Counters kept as totals (``_total`` samples), to compute rates between scrapes.
COUNTERS: dict[str, str] = {
    "generation_tokens": "generation_tokens_total",
    "prompt_tokens": "prompt_tokens_total",
    "num_requests": "num_requests_total",
}


class MetricsUnavailable(RuntimeError):
    """``/metrics`` is not served (404: the server runs without ``--enable-metrics``) or not reachable."""


def parse_metrics(text: str) -> dict[str, float]:
    """The gauges of :data:`GAUGES` and counters of :data:`COUNTERS` in one ``/metrics`` body, keyed by grid's names.

    Metrics absent from the body are absent from the result. Raises ``ValueError`` when the text is not the
    Prometheus text format (prometheus_client's parser error).
    """
    values: dict[str, list[float]] = {}
    for family in as_sglang(text_string_to_metric_families(text)):  # vLLM's names read as SGLang's
        name = family.name.removeprefix("sglang:")
        for sample in family.samples:
            sname = sample.name.removeprefix("sglang:")
            if name in GAUGES and sname == name:
                values.setdefault(GAUGES[name][0], []).append(float(sample.value))
            elif name in COUNTERS and sname == f"{name}_total":
                values.setdefault(COUNTERS[name], []).append(float(sample.value))
    out: dict[str, float] = {}
    for key, samples in values.items():
        how = next((g[1] for g in GAUGES.values() if g[0] == key), "sum")
        out[key] = max(samples) if how == "max" else sum(samples)
    return out


def scrape(base_url: str, timeout_s: float = 2.0, api_key: str | None = None) -> dict[str, float]:
    """GET ``base_url/metrics`` and parse it. Raises ``MetricsUnavailable`` on 404 or a connection error."""
    req = urllib.request.Request(base_url.rstrip("/") + "/metrics")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        raise MetricsUnavailable(f"{base_url}/metrics answered HTTP {err.code}"
                                 + (" (the server runs without --enable-metrics)" if err.code == 404 else ""))
    except (OSError, ValueError) as err:
        raise MetricsUnavailable(f"{base_url}/metrics: {err}") from None
    return parse_metrics(body)


def summarize_series(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Load-point summary of scraped rows: mean/max running and queued requests, mean/max token usage, mean gen
    throughput, last cache hit rate. Keys are load-point column names (``srv_*``); None when not scraped."""
    def col(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    running, queue, usage, gen, hit = (col("running_reqs"), col("queue_reqs"), col("token_usage"),
                                       col("gen_throughput_tok_per_s"), col("cache_hit_rate"))
    return {
        "srv_scrapes": len(rows),
        "srv_running_mean": mean(running), "srv_running_max": max(running) if running else None,
        "srv_queue_mean": mean(queue), "srv_queue_max": max(queue) if queue else None,
        "srv_token_usage_mean": mean(usage), "srv_token_usage_max": max(usage) if usage else None,
        "srv_gen_tok_per_s_mean": mean(gen), "srv_cache_hit_rate": hit[-1] if hit else None,
    }
