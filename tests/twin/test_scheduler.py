"""Scheduler semantics: prefill-first, chunking, limits, policies, finish reasons, retraction."""

from __future__ import annotations

import pytest

from grid.twin.perf import PerfModel, ServingConfig
from grid.twin.scheduler import Scheduler, TwinRequest
from grid.twin.simulate import simulate

from ._specs import hardware, model


def _perf(**kw) -> PerfModel:
    return PerfModel(model("llama3_1_8b"), hardware("h100_x1"), ServingConfig(**kw))


def _drain(s: Scheduler, now: float = 0.0, limit: int = 100000):
    steps = []
    while s.has_work() and len(steps) < limit:
        st = s.step(now)
        now += st.stats.duration_s
        steps.append(st)
    return steps


def test_prefill_then_decode_and_length_finish():
    s = Scheduler(_perf())
    s.add(TwinRequest("a", 100, 5), 0.0)
    steps = _drain(s)
    assert [x.stats.kind for x in steps] == ["prefill"] + ["decode"] * 4
    assert steps[0].emitted == {"a": 1} and steps[0].stats.new_tokens == 100 and steps[0].stats.new_seqs == 1
    assert sum(x.emitted.get("a", 0) for x in steps) == 5
    assert steps[-1].finished == {"a": "length"}
    assert all(x.stats.duration_s > 0 for x in steps)


def test_eos_stop_and_single_token():
    s = Scheduler(_perf())
    s.add(TwinRequest("a", 10, 50, eos_after=3), 0.0)
    s.add(TwinRequest("b", 10, 1), 0.0)
    steps = _drain(s)
    fin = {k: v for x in steps for k, v in x.finished.items()}
    assert fin == {"a": "stop", "b": "length"}
    assert steps[0].finished == {"b": "length"}  # max_new_tokens 1 ends at prefill


def test_chunked_prefill():
    s = Scheduler(_perf(chunked_prefill_size=1000))
    s.add(TwinRequest("a", 2500, 2), 0.0)
    steps = _drain(s)
    pre = [x for x in steps if x.stats.kind == "prefill"]
    assert [x.stats.new_tokens for x in pre] == [1000, 1000, 500]
    assert pre[0].emitted == {} and pre[-1].emitted == {"a": 1}


def test_no_chunking_respects_max_prefill_tokens():
    s = Scheduler(_perf(chunked_prefill_size=-1, max_prefill_tokens=1000))
    for i in range(3):
        s.add(TwinRequest(f"r{i}", 600, 2), 0.0)
    first = s.step(0.0)
    assert first.stats.kind == "prefill" and first.stats.new_seqs == 1  # 600 + 600 > 1000


def test_max_running_requests_limit():
    s = Scheduler(_perf(max_running_requests=4))
    for i in range(10):
        s.add(TwinRequest(f"r{i}", 10, 20), 0.0)
    first = s.step(0.0)
    assert first.stats.new_seqs == 4 and first.stats.running == 4 and first.stats.queued == 6
    assert max(x.stats.running for x in _drain(s)) <= 4


def test_policies_order():
    def first_admitted(policy):
        s = Scheduler(_perf(max_running_requests=1), policy=policy)
        s.add(TwinRequest("short", 10, 5, priority=1), 0.0)
        s.add(TwinRequest("long", 10, 50, priority=5), 0.0)
        return next(iter(s.step(0.0).emitted))

    assert first_admitted("fcfs") == "short"
    assert first_admitted("lpm") == "short"
    assert first_admitted("lof") == "long"
    assert first_admitted("priority") == "long"
    assert first_admitted("random") in {"short", "long"}


def test_abort():
    s = Scheduler(_perf())
    s.add(TwinRequest("a", 10, 100), 0.0)
    s.step(0.0)
    s.abort("a")
    st = s.step(0.0)
    assert st.finished == {"a": "abort"} and not s.has_work()


def test_kv_limit_and_retraction():
    s = Scheduler(_perf(max_total_tokens=1000, chunked_prefill_size=-1))
    for i in range(4):
        s.add(TwinRequest(f"r{i}", 300, 400), 0.0)
    steps = _drain(s)
    assert max(x.stats.used_tokens for x in steps) <= 1000
    fin = {k: v for x in steps for k, v in x.finished.items()}
    assert fin == {f"r{i}": "length" for i in range(4)}
    out = {}
    for x in steps:
        for k, n in x.emitted.items():
            out[k] = out.get(k, 0) + n
    assert out == {f"r{i}": 400 for i in range(4)}


def test_simulate_single_stream_is_prefill_plus_decodes():
    p = _perf()
    r = simulate(p, [(0.0, TwinRequest("a", 16, 100))])
    (req,) = r.requests
    assert req.output_tokens == 100
    fe = p.frontend_latency_s(16)  # HTTP + tokenization + first-token delivery, before the scheduler sees it
    assert fe == pytest.approx(0.012)
    assert req.ttft_s == pytest.approx(fe + p.prefill_step_s(16, 0, 1), abs=1e-12)
    expect = fe + p.prefill_step_s(16, 0, 1) + sum(p.decode_step_s(1, 16 + k) for k in range(1, 100))
    assert abs(req.e2e_s - expect) < 1e-9 and abs(r.duration_s - expect) < 1e-9
    assert r.samples and r.samples[0].running == 1
