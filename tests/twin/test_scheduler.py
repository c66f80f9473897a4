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


def test_kv_limit_admission_reserves_new_tokens():
    # 300 + ceil(400 x 0.7) = 580 reserved per request: r0 runs alone. Each of its 399 decode steps lowers SGLang's
    # new_token_ratio by (0.7 - 0.098) / 600 (no retraction, no idle step in between), to 0.2997 when r0 finishes:
    # 300 + ceil(400 x 0.2997) = 420 each, so r1 and r2 are admitted together. They grow to 2 x 500 = 1000 tokens, so
    # r2 (admitted last) is retracted and re-prefilled later with its 300 + 200 tokens; r3 runs last, alone.
    s = Scheduler(_perf(max_total_tokens=1000, chunked_prefill_size=-1))
    for i in range(4):
        s.add(TwinRequest(f"r{i}", 300, 400), 0.0)
    steps = _drain(s)
    prefills = [(k, x.stats.new_tokens, sorted(x.emitted)) for k, x in enumerate(steps) if x.stats.kind == "prefill"]
    assert prefills == [(0, 300, ["r0"]), (400, 600, ["r1", "r2"]), (800, 500, ["r2"]), (1000, 300, ["r3"])]
    assert max(x.stats.used_tokens for x in steps) <= 1000
    assert max(x.stats.running for x in steps) == 2
    fin = {k: v for x in steps for k, v in x.finished.items()}
    assert fin == {f"r{i}": "length" for i in range(4)}
    out = {}
    for x in steps:
        for k, n in x.emitted.items():
            out[k] = out.get(k, 0) + n
    assert out == {f"r{i}": 400 for i in range(4)}


def test_new_token_ratio_decays_resets_and_follows_retraction():
    from grid.twin.scheduler import NewTokenRatio

    r = NewTokenRatio.for_conservativeness(1.0)
    assert (r.init, r.min) == (0.7, pytest.approx(0.098))
    for _ in range(600):
        r.decay_step()
    assert r.current == pytest.approx(0.098)
    r.decay_step()
    assert r.current == pytest.approx(0.098)
    r.reset()
    assert r.current == 0.7
    assert NewTokenRatio.for_conservativeness(2.0).init == 1.0  # capped at 1
    assert NewTokenRatio.for_conservativeness(0.5).init == 0.35


def test_kv_limit_and_retraction():
    # 50 + ceil(400 x 0.7) = 330 reserved per request: three are admitted into 1000 tokens, but they grow to
    # 3 x 450 = 1350 > 1000, so decoding must retract one (the one admitted last) and re-prefill it later
    s = Scheduler(_perf(max_total_tokens=1000, chunked_prefill_size=-1))
    for i in range(8):
        s.add(TwinRequest(f"r{i}", 50, 400), 0.0)
    steps = _drain(s)
    assert steps[0].stats.kind == "prefill" and steps[0].stats.new_seqs == 3 and set(steps[0].emitted) == \
        {"r0", "r1", "r2"}
    assert max(x.stats.used_tokens for x in steps) <= 1000
    generated: dict[str, int] = {}
    retracted = None
    for k, x in enumerate(steps):
        if x.stats.kind == "decode" and retracted is None and k > 0:
            before = set(steps[k - 1].emitted) - set(steps[k - 1].finished)
            if x.stats.running < steps[k - 1].stats.running and not x.finished:
                (victim,) = before - set(x.emitted)            # exactly one request left the batch unfinished
                retracted = (k, victim, generated[victim])
        for rid, n in x.emitted.items():
            generated[rid] = generated.get(rid, 0) + n
    assert retracted is not None, "no retraction happened"
    k, victim, done = retracted
    assert victim == "r2" and 0 < done < 400                     # the request admitted last, mid-generation
    # it emits nothing until a prefill step takes it back with its generated tokens as prefix (re-prefill)
    back = next(j for j in range(k, len(steps)) if victim in steps[j].emitted)
    assert steps[back].stats.kind == "prefill"
    assert steps[back].stats.new_tokens == (50 + done) + 50 * (steps[back].stats.new_seqs - 1)
    fin = {rid: why for x in steps for rid, why in x.finished.items()}
    assert fin == {f"r{i}": "length" for i in range(8)}
    assert generated == {f"r{i}": 400 for i in range(8)}       # no token lost or repeated by the retraction


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


def test_a_steps_kv_tokens_are_what_its_running_requests_hold():
    # the decode step keeps its count of KV tokens through retractions, decodes and finishes instead of summing over
    # the running requests again: after every step the count it reports is the sum, exactly; with chunked prefill
    # (a request mid-prefill while others decode) and retractions (a pool of 1000 tokens for requests of 450)
    for kw in ({"max_total_tokens": 1000, "chunked_prefill_size": -1}, {"max_total_tokens": 1000,
                                                                        "chunked_prefill_size": 64}):
        s = Scheduler(_perf(**kw))
        for i in range(8):
            s.add(TwinRequest(f"r{i}", 50 + 40 * i, 400 - 30 * i, eos_after=200 if i % 3 == 0 else None), 0.0)
        kinds = set()
        now = 0.0
        while s.has_work():
            step = s.step(now)
            now += step.stats.duration_s
            kinds.add(step.stats.kind)
            assert step.stats.used_tokens == s.used_tokens(), (kw, now)
        assert kinds == {"prefill", "decode"}
