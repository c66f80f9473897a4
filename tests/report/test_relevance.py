"""The report says when a varied setting could not have mattered at the load measured (exact notes)."""

import json

from grid.storage.schema import judged_point_row
from grid.report.relevance import notes, swept_values
from grid.report.select import Verdict


def verdict(h, settings, **cols):
    row = judged_point_row({}, config_hash=h, config_json=json.dumps(settings), status="ok", trial_status="ok", **cols)
    return Verdict(h, h, "lost", 1.0, "", row, [row])


def test_mem_fraction_at_one_percent_kv_usage_could_not_matter():
    low = [verdict("a", {"mem_fraction_static": 0.8}, srv_token_usage_max=0.01, srv_queue_max=0.0),
           verdict("b", {"mem_fraction_static": 0.92}, srv_token_usage_max=0.008, srv_queue_max=0.0)]
    assert notes(low) == [
        "mem_fraction_static could not have mattered at the measured load: the KV pool was at most 1% full "
        "(sglang:token_usage) and no request queued, so any pool size tested held every request; load longer "
        "contexts or more streams (conf/sweep/mem_fraction.yaml) to compare them"]
    full = [verdict("a", {"mem_fraction_static": 0.8}, srv_token_usage_max=0.97, srv_queue_max=12.0), low[1]]
    assert notes(full) == []
    unscraped = [verdict("a", {"mem_fraction_static": 0.8}), verdict("b", {"mem_fraction_static": 0.9})]
    assert notes(unscraped) == []


def test_cuda_graph_max_bs_above_every_batch_could_not_matter():
    v = [verdict("a", {"cuda_graph_max_bs": 16}, srv_running_max=8.0),
         verdict("b", {"cuda_graph_max_bs": 64}, srv_running_max=8.0),
         verdict("c", {"cuda_graph": False}, srv_running_max=8.0)]
    assert notes(v) == [
        "cuda_graph_max_bs could not have mattered at the measured load: at most 8 requests ran at once "
        "(sglang:num_running_reqs), within the smallest captured batch size tested (16); load more streams to "
        "compare them"]
    v[0].rows[0]["srv_running_max"] = 48.0
    assert notes(v) == []


def test_schedule_policy_with_one_request_queued_could_not_matter():
    # the schedule_policy sweep at 0.5 req/s: the twin_guided search measured fcfs only, whose queue peaked at one
    # request (mean 0.09); the sweep's five policies are known from its configurations, not from the recorded ones
    fcfs = [verdict("a", {"schedule_policy": "fcfs"}, srv_queue_max=1.0, srv_running_max=15.0)]
    swept = swept_values([{"schedule_policy": p} for p in ("fcfs", "lpm", "lof", "random", "dfs-weight")])
    assert swept == {"schedule_policy": ["fcfs", "lpm", "lof", "random", "dfs-weight"]}
    note = ("schedule_policy could not have mattered at the measured load: at most 1 request waited in the server's "
            "queue at once (sglang:num_queue_reqs), and the policy only orders waiting requests, of which one or none "
            "has a single order; load more (a higher rate or more streams than max_running_requests) to compare them")
    assert notes(fcfs, swept) == [note]
    assert notes(fcfs) == []                         # one configuration recorded and no sweep given: nothing varied
    assert notes(fcfs, swept_values([{"schedule_policy": "fcfs"}])) == []
    two = [fcfs[0], verdict("b", {"schedule_policy": "lpm"}, srv_queue_max=0.0)]
    assert notes(two) == [note]
    two[1].rows[0]["srv_queue_max"] = 2.0            # two requests waited: the order among them could matter
    assert notes(two, swept) == []


def test_a_note_says_when_early_stopping_skipped_the_levels_that_would_tell():
    # the schedule_policy sweep with max_goodput: every policy measured 0.5 req/s (one request queued at most); the
    # 1.5 req/s level, where a queue builds, was skipped by the twin's bound or after the SLOs were missed
    def v(h, policy, skip):
        ok = {"config_hash": h, "config_json": json.dumps({"schedule_policy": policy}), "status": "ok",
              "trial_status": "ok", "point_kind": "rate", "point_value": 0.5, "srv_queue_max": 1.0}
        off = dict(ok, status="not_run", error_class=skip, point_value=1.5, srv_queue_max=None)
        return Verdict(h, h, "lost", 1.0, "", ok, [ok, off])
    vs = [v("a", "fcfs", "early_stop_twin_bound"), v("b", "lof", "early_stop_slo")]
    assert notes(vs) == [
        "schedule_policy could not have mattered at the measured load: at most 1 request waited in the server's "
        "queue at once (sglang:num_queue_reqs), and the policy only orders waiting requests, of which one or none "
        "has a single order; load more (a higher rate or more streams than max_running_requests) to compare them; "
        "the sweep's 1.5 req/s level was not run (early stopping, search.early_stop=false measures every level)"]
    vs[1].rows[1]["status"] = "ok"  # one configuration measured 1.5 req/s: that level was run
    vs[1].rows[1]["srv_queue_max"] = 1.0
    assert notes(vs)[0].endswith("to compare them")
