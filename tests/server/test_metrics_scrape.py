"""/metrics parsing (prometheus_client's parser) on SGLang-named fixtures
(docs/sources.md#sglang-http-api-and-bench_serving) and the twin's own body."""

import pytest

from grid.server.metrics_scrape import parse_metrics, summarize_series

# Names, types and labels as docs/sources.md#sglang-http-api-and-bench_serving lists them: scheduler gauges with
# model_name/engine_type/tp_rank/pp_rank/
# moe_ep_rank (+ dp_rank with DP), tokenizer counters with model_name; two DP ranks.
BODY = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 21.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="glm-5",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 11.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="glm-5",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 0.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.08
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="glm-5",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 0.29
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{dp_rank="0",engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 144.95
sglang:gen_throughput{dp_rank="1",engine_type="unified",model_name="glm-5",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 63.05
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp_rank="0",engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.25
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="glm-5"} 11179.0
sglang:generation_tokens_created{model_name="glm-5"} 1.7e9
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="glm-5"} 0.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="glm-5"} 32.0
sglang:time_to_first_token_seconds_count{model_name="glm-5"} 32.0
sglang:time_to_first_token_seconds_sum{model_name="glm-5"} 40.5
"""


def test_parse_sums_requests_over_dp_ranks_and_takes_the_largest_fraction():
    m = parse_metrics(BODY)
    assert m["running_reqs"] == 32.0 and m["queue_reqs"] == 3.0
    assert m["token_usage"] == 0.29 and m["cache_hit_rate"] == 0.25
    assert m["gen_throughput_tok_per_s"] == pytest.approx(208.0)
    assert m["generation_tokens_total"] == 11179.0
    assert "max_total_num_tokens" not in m  # absent from the body: absent from the result


def test_parse_the_twins_metrics_body():
    from grid.twin.metrics import TwinMetrics

    tm = TwinMetrics("glm-5")
    tm.max_total_num_tokens.set(370_000)
    tm.on_step(running=5, queued=2, used_tokens=20800, token_usage=0.2912, cuda_graph=True)
    tm.gen_throughput.set(144.95)
    m = parse_metrics(tm.render().decode())
    assert m == {"running_reqs": 5.0, "queue_reqs": 2.0, "used_tokens": 20800.0, "token_usage": 0.29,
                 "gen_throughput_tok_per_s": 144.95, "cache_hit_rate": 0.0, "max_total_num_tokens": 370000.0,
                 "generation_tokens_total": 0.0, "prompt_tokens_total": 0.0, "num_requests_total": 0.0,
                 "spec_accept_length": 0.0, "spec_accept_rate": 0.0}  # registered without speculation, as SGLang's


def test_not_prometheus_text_raises():
    with pytest.raises(ValueError):
        parse_metrics("sglang:num_running_reqs{oops 1\n")


def test_summary_of_a_series():
    rows = [{"running_reqs": 10.0, "queue_reqs": 0.0, "token_usage": 0.1, "gen_throughput_tok_per_s": 100.0},
            {"running_reqs": 30.0, "queue_reqs": 4.0, "token_usage": 0.3, "gen_throughput_tok_per_s": 300.0,
             "cache_hit_rate": 0.5}]
    s = summarize_series(rows)
    assert s["srv_running_mean"] == 20.0 and s["srv_running_max"] == 30.0 and s["srv_queue_mean"] == 2.0
    assert s["srv_token_usage_max"] == 0.3 and s["srv_gen_tok_per_s_mean"] == 200.0 and s["srv_cache_hit_rate"] == 0.5
    assert summarize_series([])["srv_running_mean"] is None


def test_kv_transfers_between_the_bracketing_scrapes_are_counted_and_averaged():
    """``sglang:kv_transfer_latency_ms`` (a histogram, summed over ranks): the load point's transfers are the change
    of its count between the first and the last scrape, their mean the change of its sum over that."""
    from grid.server.metrics_scrape import summarize_transfers

    def body(total_ms: float, n: int) -> str:
        return ("# TYPE sglang:kv_transfer_latency_ms histogram\n"
                + "".join(f'sglang:kv_transfer_latency_ms_{k}{{tp_rank="{r}"}} {v / 2}\n'
                          for r in (0, 1) for k, v in (("sum", total_ms), ("count", n))))
    rows = [parse_metrics(body(100.0, 4)), parse_metrics("sglang:num_running_reqs 3\n"), parse_metrics(body(550.0, 19))]
    assert rows[0]["kv_transfer_ms_sum"] == 100.0 and rows[0]["kv_transfer_ms_count"] == 4.0
    assert summarize_transfers(rows) == {"srv_kv_transfers": 15.0, "srv_kv_transfer_ms_mean": 30.0}
    assert summarize_transfers(rows[:2]) == {"srv_kv_transfers": None, "srv_kv_transfer_ms_mean": None}


def test_a_deployments_servers_read_together_add_requests_and_take_the_fullest_pool():
    """The server-metrics sampler of a deployment joins its servers' /metrics bodies (grid/sweep/samplers.py): they
    combine as one server's ranks do (GAUGES): requests and throughput add up, token usage is the fullest server's,
    counters and transfer sums add up."""
    def body(running: int, usage: float, gen: float, requests: int, transfers: int) -> str:
        return ("# TYPE sglang:num_running_reqs gauge\n"
                f"sglang:num_running_reqs{{tp_rank=\"0\"}} {running}\n"
                "# TYPE sglang:token_usage gauge\n"
                f"sglang:token_usage{{tp_rank=\"0\"}} {usage}\n"
                "# TYPE sglang:gen_throughput gauge\n"
                f"sglang:gen_throughput{{tp_rank=\"0\"}} {gen}\n"
                "# TYPE sglang:num_requests_total counter\n"
                f"sglang:num_requests_total{{tp_rank=\"0\"}} {requests}\n"
                "# TYPE sglang:kv_transfer_latency_ms histogram\n"
                f"sglang:kv_transfer_latency_ms_sum{{tp_rank=\"0\"}} {transfers * 10.0}\n"
                f"sglang:kv_transfer_latency_ms_count{{tp_rank=\"0\"}} {transfers}\n")
    joined = parse_metrics(body(3, 0.25, 100.0, 8, 2) + "\n" + body(5, 0.5, 150.0, 7, 3))
    assert joined == {"running_reqs": 8.0, "token_usage": 0.5, "gen_throughput_tok_per_s": 250.0,
                      "num_requests_total": 15.0, "kv_transfer_ms_sum": 50.0, "kv_transfer_ms_count": 5.0}
