"""Continuous-batching scheduler of the twin, modelled on SGLang's (pure stepping, no clocks).

Each ``step`` picks the next batch the way SGLang's scheduler loop does and returns its modelled duration
(from ``PerfModel`` only), the tokens it produced and the requests it finished:

* **Prefill first.** If a request is waiting (or a chunked prefill is in progress) and it can be admitted, the step is
  a prefill batch; prefill and decode are not mixed (``--enable-mixed-chunk`` off, SGLang's default).
* **Admission** takes requests from the waiting queue in policy order while: running + new < max_running_requests;
  the new tokens fit the prefill budget (``chunked_prefill_size``, or ``max_prefill_tokens`` with chunking disabled;
  the first request may exceed ``max_prefill_tokens`` when chunking is off, as in SGLang); and KV fits. KV admission
  reserves ``held + ceil(min(remaining, CLIP_MAX_NEW_TOKENS) * new_token_ratio)`` per running request. A request
  longer than the chunk budget is prefilled in chunks over consecutive prefill steps; its first token comes with its
  last chunk. With DP attention each attention-DP rank chunks its own requests with ``chunked_prefill_size / dp``
  (``PerfModel`` divides it, as SGLang does): one step takes up to that share per request and ``dp`` shares in all.
* **New-token ratio** (``NewTokenRatio``, SGLang ``new_token_ratio``): starts at ``0.7 x schedule_conservativeness``,
  falls by ``(init - min) / 600`` after every decode step that needs no retraction down to ``init x 0.14``, and is
  reset to ``init`` when the server goes idle. So under a long burst admission grows more optimistic until the KV
  pool fills; a retraction then sets it to ``(decoded + 20 x running) / sum(max_new_tokens)`` of the batch that is
  left (capped at 1). Constants: SGLang ``environ.py`` ``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7,
  ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14, ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600,
  ``SGLANG_RETRACT_DECODE_STEPS`` 20, ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` 4096 (older releases: the same
  defaults in ``global_config.py``); the update rule is ``Scheduler.update_running_batch`` / ``retract_decode``.
* **Decode** runs one iteration over every running request. If the KV pool cannot hold one more token per request,
  the request admitted last is retracted (its KV freed, it returns to the front of the queue and is re-prefilled with
  its generated tokens as prefix), like SGLang's ``retract_decode``.
* **Policies** (``--schedule-policy``): ``fcfs`` arrival order; ``lof`` longest max_new_tokens first; ``random``
  (seeded); ``priority`` larger value first, then arrival; ``lpm`` longest cached prefix first (the radix cache's
  match when the request arrived, grid/twin/radix.py), then arrival, and fcfs once more than
  ``LPM_MAX_QUEUE`` requests wait (SGLang ``schedule_policy.py`` ``_determine_active_policy``: prefix matching of a
  long queue costs too much); ``dfs-weight`` falls back to fcfs (the twin does not model its tree walk). Without the
  radix cache every cached prefix is 0, so lpm orders as fcfs, as SGLang's does.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from grid.twin.perf import PerfModel

NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO: init_new_token_ratio at schedule_conservativeness 1.0
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
#: lpm orders by cached prefix only while at most this many requests wait (0.5.23 ``schedule_policy.py``
#: ``WAITING_QUEUE_PREFIX_MATCH_MAX``)
LPM_MAX_QUEUE = 128


@dataclass
class NewTokenRatio:
    """SGLang's estimate of the share of ``max_new_tokens`` a running request will still generate (module docstring).

    ``current`` is dimensionless in [min, 1]; ``conservativeness`` is ``--schedule-conservativeness`` (>= 0)."""

    init: float
    min: float
    decay: float
    current: float

    @classmethod
    def for_conservativeness(cls, conservativeness: float = 1.0) -> NewTokenRatio:
        init = min(NEW_TOKEN_RATIO * conservativeness, 1.0)
        low = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        return cls(init=init, min=low, decay=(init - low) / NEW_TOKEN_RATIO_DECAY_STEPS, current=init)

    def decay_step(self) -> None:
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        self.current = self.init


@dataclass
class TwinRequest:
    rid: str
    input_tokens: int
    max_new_tokens: int
    eos_after: int | None = None  # natural stop after this many tokens (ignore_eos False); None -> max_new_tokens
    priority: int = 0
    cached_tokens: int = 0  # prefix-cache hit (0 unless radix cache modelled)
    #: its KV and first token came from a prefill server (SGLang's decode server, ``--disaggregation-mode decode``):
    #: admitted without a forward pass (SGLang's prebuilt extend), streaming that first token when admitted
    kv_ready: bool = False


@dataclass(frozen=True)
class StepStats:
    kind: str  # "prefill" | "decode" | "idle"
    duration_s: float  # modelled
    new_seqs: int
    new_tokens: int
    cached_tokens: int
    running: int
    queued: int
    used_tokens: int
    token_usage: float
    cuda_graph: bool


@dataclass
class Step:
    stats: StepStats
    emitted: dict[str, int]  # rid -> tokens produced by this step (prefill completing a request emits its first token)
    finished: dict[str, str]  # rid -> "length" | "stop" | "abort"


@dataclass
class _State:
    req: TwinRequest
    arrival_s: float
    seq: int
    prefix: int  # tokens that must be in KV before decoding (input, or input + generated after a retraction)
    prefilled: int = 0  # tokens of prefix already in KV
    generated: int = 0
    admitted_seq: int = -1

    @property
    def target(self) -> int:
        t = self.req.max_new_tokens
        if self.req.eos_after is not None:
            t = min(t, self.req.eos_after)
        return max(1, t)

    _gen_in_prefix: int = 0  # generated tokens already folded into prefix by a retraction

    def reserve(self, ratio: float = NEW_TOKEN_RATIO) -> int:
        """KV tokens held now (or after prefill) plus the estimated share ``ratio`` of the tokens still to generate
        (clipped at ``CLIP_MAX_NEW_TOKENS``, as SGLang's PrefillAdder does)."""
        remaining = max(0, self.req.max_new_tokens - self.generated)  # SGLang does not know the EOS point
        held = self.prefix + (self.generated - self._gen_in_prefix if self.prefilled >= self.prefix else 0)
        return held + math.ceil(min(remaining, CLIP_MAX_NEW_TOKENS) * ratio)


class Scheduler:
    """SGLang-like continuous batching over a ``PerfModel``; see the module docstring."""

    def __init__(self, perf: PerfModel, policy: str | None = None) -> None:
        self.perf = perf
        self.ratio = NewTokenRatio.for_conservativeness(perf.cfg.schedule_conservativeness)
        self.policy = (policy or perf.cfg.schedule_policy or "fcfs").lower()
        self.capacity = max(1, perf.kv_capacity_tokens * (perf.dp if perf.dp_attention else perf.replicas))
        self.max_running = max(1, perf.max_running_requests * (perf.replicas if perf.replicas > 1 else 1))
        # With DP attention every attention-DP rank runs its own scheduler with chunked_prefill_size / dp (PerfModel
        # already divided it): one step of this global scheduler prefills up to that many tokens per request and
        # dp times that in all (the ranks' batches meet in the MoE layers).
        self.request_chunk = perf.chunked_prefill_size
        if perf.chunked_prefill_size and perf.chunked_prefill_size > 0:
            self.prefill_budget = perf.chunked_prefill_size * (perf.dp if perf.dp_attention else 1)
            self.chunking = True
        else:
            self.prefill_budget = perf.max_prefill_tokens
            self.chunking = False
        self._rng = random.Random(0)
        self._seq = 0
        self._admit_seq = 0
        self.waiting: list[_State] = []
        self.running: list[_State] = []  # admitted (prefilling or decoding)
        self._aborted: list[str] = []

    # ------------------------------------------------------------------------------------------------------------
    def add(self, req: TwinRequest, now_s: float) -> None:
        st = _State(req=req, arrival_s=now_s, seq=self._seq, prefix=max(1, req.input_tokens))
        if req.kv_ready:
            st.prefilled = st.prefix
        else:
            st.prefilled = min(req.cached_tokens, st.prefix - 1) if req.cached_tokens else 0
        self._seq += 1
        self.waiting.append(st)

    def abort(self, rid: str) -> None:
        for lst in (self.waiting, self.running):
            for st in list(lst):
                if st.req.rid == rid:
                    lst.remove(st)
                    self._aborted.append(rid)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._aborted)

    def running_count(self) -> int:
        """Requests admitted (prefilling or decoding)."""
        return len(self.running)

    def waiting_count(self) -> int:
        """Requests queued for admission."""
        return len(self.waiting)

    # ------------------------------------------------------------------------------------------------------------
    def used_tokens(self) -> int:
        return sum(self._kv(st) for st in self.running)

    def uncached_tokens(self) -> int:
        """KV tokens the running requests hold beyond their prefix-cache hits (what the radix tree does not own)."""
        return sum(max(0, self._kv(st) - st.req.cached_tokens) for st in self.running)

    @staticmethod
    def _kv(st: _State) -> int:
        if st.prefilled < st.prefix:
            return st.prefilled
        return st.prefix + st.generated - st._gen_in_prefix

    def _order(self) -> list[_State]:
        w = self.waiting
        if self.policy == "lpm" and len(w) <= LPM_MAX_QUEUE:
            return sorted(w, key=lambda s: (-s.req.cached_tokens, s.seq))
        if self.policy == "lof":
            return sorted(w, key=lambda s: (-s.req.max_new_tokens, s.seq))
        if self.policy == "priority":
            return sorted(w, key=lambda s: (-s.req.priority, s.seq))
        if self.policy == "random":
            out = list(w)
            self._rng.shuffle(out)
            return out
        return sorted(w, key=lambda s: s.seq)  # fcfs, lpm / dfs-weight without radix cache

    def _stats(self, kind: str, dur: float, new_seqs=0, new_tokens=0, cached=0, graph=False,
               used: int | None = None) -> StepStats:
        """The step's stats; ``used``: the running requests' KV tokens when the caller kept count (else summed)."""
        if used is None:
            used = self.used_tokens()
        return StepStats(
            kind=kind,
            duration_s=dur,
            new_seqs=new_seqs,
            new_tokens=new_tokens,
            cached_tokens=cached,
            running=len(self.running),
            queued=len(self.waiting),
            used_tokens=used,
            token_usage=used / self.capacity,
            cuda_graph=graph,
        )

    def step(self, now_s: float, until_s: float = math.inf) -> Step:
        """The next batch, started at ``now_s`` (modelled s). ``until_s`` is not read: one server's batch is one step
        (a deployment's scheduler, grid/twin/deployment.py, ends its span there)."""
        finished: dict[str, str] = {rid: "abort" for rid in self._aborted}
        self._aborted.clear()
        step = self._prefill_step(finished)
        if step is None:
            step = self._decode_step(finished)
        return step

    # ------------------------------------------------------------------------------------------------------------
    def _prefill_step(self, finished: dict[str, str]) -> Step | None:
        budget = self.prefill_budget
        batch: list[tuple[_State, int]] = []
        # a chunked request in progress goes first (SGLang keeps it as chunked_req)
        for st in self.running:
            if st.prefilled < st.prefix:
                take = min(st.prefix - st.prefilled, budget, self.request_chunk) if self.chunking \
                    else st.prefix - st.prefilled
                batch.append((st, take))
                budget -= take
        admitted: list[_State] = []
        if not self.waiting:  # nothing to admit: the running requests' reservations need not be summed
            if not batch:
                return None
            order: list[_State] = []
        else:
            order = self._order()
        ratio = self.ratio.current
        reserved = sum(st.reserve(ratio) for st in self.running) if order else 0
        n_running = len(self.running)
        for st in order:
            if budget <= 0 or n_running + len(admitted) >= self.max_running:
                break
            need = st.reserve(ratio)
            if reserved + need > self.capacity and (self.running or admitted):
                break
            rest = st.prefix - st.prefilled
            if self.chunking:
                take = min(rest, budget, self.request_chunk)
            else:
                if batch and rest > budget:
                    break
                take = rest
            admitted.append(st)
            batch.append((st, take))
            budget -= take
            reserved += need
        if not batch:
            return None
        for st in admitted:
            self.waiting.remove(st)
            st.admitted_seq = self._admit_seq
            self._admit_seq += 1
            self.running.append(st)
        new_tokens = sum(t for _, t in batch)
        cached = sum(st.prefilled for st, _ in batch)  # the keys this batch attends to beyond its new tokens
        # #cached-token counts the prefix-cache hits of the requests admitted now; a chunked request's next chunk
        # reports none (0.5.23 schedule_policy.py PrefillAdder.add_chunked_req: _update_prefill_budget(0, ...))
        hit = sum(st.prefilled for st in admitted if not st.req.kv_ready)
        dur = self.perf.prefill_step_s(new_tokens, cached, len(batch))
        emitted: dict[str, int] = {}
        for st, take in batch:
            st.prefilled += take
            if st.prefilled >= st.prefix and st.generated == st._gen_in_prefix:
                st.generated += 1  # the prefill's sampled token
                emitted[st.req.rid] = 1
                self._maybe_finish(st, finished)
        return Step(
            stats=self._stats("prefill", dur, len(admitted), new_tokens, hit, False),
            emitted=emitted,
            finished=finished,
        )

    def _maybe_finish(self, st: _State, finished: dict[str, str]) -> bool:
        """Finish ``st`` if it has all its tokens (removed from the running requests); True when it did."""
        if st.generated >= st.target:
            eos_after = st.req.eos_after
            eos = eos_after is not None and eos_after <= st.req.max_new_tokens and st.generated >= eos_after
            finished[st.req.rid] = "stop" if eos else "length"
            self.running.remove(st)
            return True
        return False

    def _decode_step(self, finished: dict[str, str]) -> Step:
        decoding = [st for st in self.running if st.prefilled >= st.prefix]
        # the running requests' KV tokens, kept up to date through the step (integers: the same as summing again)
        used = self.used_tokens()
        # retract until one more token per request fits (SGLang retract_decode)
        retracted = False
        while decoding and used + len(decoding) > self.capacity and len(decoding) > 1:
            victim = max(decoding, key=lambda s: s.admitted_seq)
            used -= self._kv(victim)
            decoding.remove(victim)
            self.running.remove(victim)
            victim.prefix = victim.prefix + victim.generated - victim._gen_in_prefix
            victim._gen_in_prefix = victim.generated
            victim.prefilled = 0
            self.waiting.append(victim)
            victim.seq = -1 - victim.seq  # front of the fcfs queue
            retracted = True
        if retracted:
            decoded = sum(st.generated for st in decoding)
            max_new = sum(st.req.max_new_tokens for st in decoding)
            self.ratio.current = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(decoding)) / max(1, max_new))
        elif decoding:
            self.ratio.decay_step()
        if not decoding:
            if not self.running:
                self.ratio.reset()  # SGLang resets new_token_ratio when the server goes idle
            return Step(stats=self._stats("idle", 0.0, used=used), emitted={}, finished=finished)
        bs = len(decoding)
        # every running request decodes (none mid-prefill): the batch's context is what they all hold
        ctx = used if bs == len(self.running) else sum(self._kv(st) for st in decoding)
        dur = self.perf.decode_step_s(bs, ctx)
        graph = self.perf.uses_cuda_graph(bs)
        emitted: dict[str, int] = {}
        used += bs  # one more KV token each
        for st in decoding:
            st.generated += 1
            emitted[st.req.rid] = 1
            if self._maybe_finish(st, finished):
                used -= self._kv(st)
        return Step(stats=self._stats("decode", dur, 0, 0, 0, graph, used), emitted=emitted, finished=finished)
