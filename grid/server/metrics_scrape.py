"""Scrape SGLang's Prometheus ``/metrics`` (served with ``--enable-metrics``) and reduce it to the gauges grid keeps.

Parsing is prometheus_client's own text parser (``text_string_to_metric_families``). Names and labels are SGLang's
(docs/sources.md#sglang-http-api-and-bench_serving): scheduler gauges carry ``tp_rank``/``dp_rank``/... labels, so
one name can have several samples;
they are combined per gauge as :data:`GAUGES` says (requests and token counts add up over DP ranks, fractions take
the largest rank, as 0.5.23's ``token_usage`` itself does over pools).

Spelling: every catalogued release (0.5.9-0.5.23, grid/releases/catalog; tests/releases/test_catalog.py checks each name
grid reads) registers ``sglang:num_running_reqs``; sgl-project/sglang PR #15758 renamed the gauges to
``sglang_num_running_reqs`` in builds outside that range (llm-d/llm-d PR #1970 renamed its dashboards for it), so both
spellings (:data:`SGLANG_PREFIXES`) are read for every release. vLLM's names are read through
grid/server/metrics_vllm.py.
"""

from __future__ import annotations

import http.client

import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from grid.server.net import urlopen


from grid.server.metrics_vllm import as_sglang

#: Gauge (the name after the engine's prefix) -> (grid column suffix, how samples over ranks combine, unit).
GAUGES: dict[str, tuple[str, str, str]] = {
    "num_running_reqs": ("running_reqs", "sum", "requests"),
    "num_queue_reqs": ("queue_reqs", "sum", "requests"),
    "num_used_tokens": ("used_tokens", "sum", "tokens"),
    "token_usage": ("token_usage", "max", "fraction"),
    "gen_throughput": ("gen_throughput_tok_per_s", "sum", "tok/s"),
    "cache_hit_rate": ("cache_hit_rate", "max", "fraction"),
    "max_total_num_tokens": ("max_total_num_tokens", "sum", "tokens"),
    "spec_accept_length": ("spec_accept_length", "max", "tokens"),
    "spec_accept_rate": ("spec_accept_rate", "max", "fraction"),
}
#: Counters kept as totals (``_total`` samples), to compute rates between scrapes.
COUNTERS: dict[str, str] = {
    "generation_tokens": "generation_tokens_total",
    "prompt_tokens": "prompt_tokens_total",
    "num_requests": "num_requests_total",
}
#: Histograms kept as their running sum and count (``_sum``, ``_count`` samples), for the mean between scrapes:
#: the name after the engine's prefix -> grid's column prefix. ``kv_transfer_latency_ms``: each KV transfer of a
#: prefill server (ms; every release 0.5.9-0.5.23, ``srt/observability/metrics_collector.py`` in 0.5.23).
HISTOGRAMS: dict[str, str] = {
    "kv_transfer_latency_ms": "kv_transfer_ms",
}
_GAUGE_COLUMNS = {g[0] for g in GAUGES.values()}


#: The prefixes SGLang's metric names carry, tried in this order (module docstring for the sources).
SGLANG_PREFIXES: tuple[str, ...] = ("sglang:", "sglang_")


def _strip(name: str, prefixes: tuple[str, ...]) -> str | None:
    for prefix in prefixes:
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


class MetricsUnavailable(RuntimeError):
    """``/metrics`` is not served (404: the server runs without ``--enable-metrics``) or not reachable."""


def parse_metrics(text: str, prefixes: tuple[str, ...] | None = None) -> dict[str, float]:
    """The gauges of :data:`GAUGES`, counters of :data:`COUNTERS` and the sums and counts of :data:`HISTOGRAMS`
    (``<column prefix>_sum`` / ``_count``, added over ranks) in one ``/metrics`` body, keyed by grid's names.

    ``prefixes``: the spellings to read (default: :data:`SGLANG_PREFIXES`). Metrics absent from the body
    are absent from the result. Raises ``ValueError`` when the text is not the Prometheus text format
    (prometheus_client's parser error).
    """
    prefixes = prefixes or SGLANG_PREFIXES
    values: dict[str, list[float]] = {}
    for family in as_sglang(text_string_to_metric_families(text)):  # vLLM's names read as SGLang's
        name = _strip(family.name, prefixes)
        if name is None or (name not in GAUGES and name not in COUNTERS and name not in HISTOGRAMS):
            continue
        for sample in family.samples:
            sname = _strip(sample.name, prefixes)
            if name in GAUGES and sname == name:
                values.setdefault(GAUGES[name][0], []).append(float(sample.value))
            elif name in COUNTERS and sname == f"{name}_total":
                values.setdefault(COUNTERS[name], []).append(float(sample.value))
            elif name in HISTOGRAMS and sname in (f"{name}_sum", f"{name}_count"):
                values.setdefault(f"{HISTOGRAMS[name]}_{sname.rsplit('_', 1)[1]}", []).append(float(sample.value))
    out: dict[str, float] = {}
    for key, samples in values.items():
        how = next((g[1] for g in GAUGES.values() if g[0] == key), "sum")
        out[key] = max(samples) if how == "max" else sum(samples)
    return out


def gauges_found(samples: list[dict[str, Any]]) -> int:
    """How many of the :data:`GAUGES` any of the parsed scrapes ``samples`` holds (0: none of the expected names)."""
    return len({k for s in samples for k, v in s.items() if k in _GAUGE_COLUMNS and v is not None})


def missing_gauges_message(text: str, prefixes: tuple[str, ...] | None = None) -> str | None:
    """None when ``text`` names at least one expected gauge; else one line saying so, with the names it does carry
    (the first few), so a user can tell another engine's or release's spelling from an empty endpoint."""
    prefixes = prefixes or SGLANG_PREFIXES
    if gauges_found([parse_metrics(text, prefixes)]):
        return None
    names = sorted({f.name for f in text_string_to_metric_families(text)})
    shown = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
    expected = " or ".join(f"{p}num_running_reqs" for p in prefixes)
    return (f"/metrics names none of the expected gauges (e.g. {expected}); it has: {shown or 'no metrics'}. "
            "The srv_* columns stay null and the diagnosis cannot use server metrics.")


def fetch_text(base_url: str, timeout_s: float = 2.0, api_key: str | None = None) -> str:
    """GET ``base_url/metrics``. Raises ``MetricsUnavailable`` on an HTTP error (404: no ``--enable-metrics``) or a
    connection error."""
    req = urllib.request.Request(base_url.rstrip("/") + "/metrics")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urlopen(req, timeout=timeout_s) as resp:
            return resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        raise MetricsUnavailable(f"{base_url}/metrics answered HTTP {err.code}"
                                 + (" (the server runs without --enable-metrics)" if err.code == 404 else "")
                                 ) from err
    except (OSError, ValueError) as err:
        raise MetricsUnavailable(f"{base_url}/metrics: {err}") from None


def scrape(base_url: str, timeout_s: float = 2.0, api_key: str | None = None,
           prefixes: tuple[str, ...] | None = None) -> dict[str, float]:
    """GET ``base_url/metrics`` and parse it. Raises ``MetricsUnavailable`` on 404 or a connection error."""
    return parse_metrics(fetch_text(base_url, timeout_s, api_key), prefixes)


def summarize_series(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Load-point summary of scraped rows: mean/max running and queued requests, mean/max token usage, mean gen
    throughput, last cache hit rate, mean speculative acceptance length (its positive values). Keys are load-point
    column names (``srv_*``); None when not scraped."""
    def col(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    running, queue, usage, gen, hit = (col("running_reqs"), col("queue_reqs"), col("token_usage"),
                                       col("gen_throughput_tok_per_s"), col("cache_hit_rate"))
    accept = [a for a in col("spec_accept_length") if a > 0]  # 0 without speculation (SGLang registers it anyway)
    return {
        "srv_scrapes": len(rows),
        "srv_running_mean": mean(running), "srv_running_max": max(running) if running else None,
        "srv_queue_mean": mean(queue), "srv_queue_max": max(queue) if queue else None,
        "srv_token_usage_mean": mean(usage), "srv_token_usage_max": max(usage) if usage else None,
        "srv_gen_tok_per_s_mean": mean(gen), "srv_cache_hit_rate": hit[-1] if hit else None,
        "srv_spec_accept_length_mean": mean(accept),
    }


def summarize_transfers(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The KV transfers between the first and the last of the scraped ``rows`` (those bracketing the load point):
    their count (``srv_kv_transfers``) and mean ms (``srv_kv_transfer_ms_mean``: the change of the histogram's sum
    over the change of its count). None where fewer than two scrapes carry the histogram (no prefill server)."""
    pairs = [(r["kv_transfer_ms_sum"], r["kv_transfer_ms_count"]) for r in rows
             if r.get("kv_transfer_ms_sum") is not None and r.get("kv_transfer_ms_count") is not None]
    if len(pairs) < 2:
        return {"srv_kv_transfers": None, "srv_kv_transfer_ms_mean": None}
    moved = pairs[-1][1] - pairs[0][1]
    return {"srv_kv_transfers": moved,
            "srv_kv_transfer_ms_mean": (pairs[-1][0] - pairs[0][0]) / moved if moved > 0 else None}


def requests_finished(urls: list[str], api_key: str | None = None, timeout_s: float = 2.0) -> list[float | None]:
    """Each server's count of finished requests so far (SGLang's ``num_requests_total`` counter, summed over its
    ranks) at ``urls``, in order; None for one whose ``/metrics`` does not answer or does not carry the counter."""
    out: list[float | None] = []
    for url in urls:
        try:
            out.append(parse_metrics(fetch_text(url, timeout_s, api_key)).get("num_requests_total"))
        except (MetricsUnavailable, ValueError, http.client.HTTPException):  # unreachable, not Prometheus, cut off
            out.append(None)
    return out

