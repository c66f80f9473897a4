"""Sliding-window attention (gpt-oss) in the twin's performance model (pure: no clocks, no I/O).

gpt-oss alternates sliding-window layers (each query attends to the last ``sliding_window`` = 128 tokens, plus learned
attention sinks that cost nothing to store) with full-attention layers (HF config ``layer_types``, ``sliding_window``;
openai/gpt-oss-20b: 12 of 24 layers). SGLang keeps the two kinds in a hybrid pool
(``python/sglang/srt/mem_cache/memory_pool.py`` ``SWAKVPool``): the sliding-window layers get
``--swa-full-tokens-ratio`` (default 0.8, every catalogued release) times the full layers' token slots.

:class:`SlidingWindowMixin` changes three things of whatever ``PerfModel`` class it is mixed into:

* **KV capacity** (tokens of the full pool): the KV memory over ``full + ratio x sliding`` layers' cells instead of
  all layers' cells, i.e. the plain figure times ``L / (L_full + ratio x L_swa)``.
* **Decode**: the KV bytes and attention FLOPs of a step are linear in the batch's context, so the step is the plain
  one at an *effective* context ``ctx x (L_full + L_swa x min(1, B x window / ctx)) / L`` (a sliding-window layer
  reads at most ``window`` keys per request; equal contexts assumed).
* **Prefill**: likewise the keys each new token attends to: ``avg = cached/seqs + new/seqs/2`` on full layers,
  ``min(avg, window)`` on sliding-window layers, passed on as an equivalent cached-token count (never below zero, so
  the causal attention among a chunk's own new tokens is not reduced: an over-count for prompts much longer than
  the window).

No constant is fitted. Calibration row: achatbot-gptoss20b-h100-c32 (``grid/twin/calibration_rows.yaml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the mixins go before a PerfModel class (grid.twin.perf_class.perf_class); at run time: object
    from grid.twin.perf import PerfModel as _PerfBase
else:
    _PerfBase = object

#: SGLang ``--swa-full-tokens-ratio`` default (0.8 in every catalogued release 0.5.9-0.5.23).
SWA_FULL_TOKENS_RATIO = 0.8


def _fractions(model) -> tuple[float, float, int]:
    """(fraction of layers with full attention, fraction with a sliding window, window)."""
    n = max(1, model.num_layers)
    swa = min(model.sliding_window_layers, n) if model.sliding_window else 0
    return (n - swa) / n, swa / n, int(model.sliding_window)


class SlidingWindowMixin(_PerfBase):
    """Mixed in before a ``PerfModel`` class (see :func:`grid.twin.perf_class.perf_class`) for models with
    ``sliding_window`` > 0; see the module docstring."""

    def __init__(self, model, hardware, cfg) -> None:
        super().__init__(model, hardware, cfg)
        full, swa, _ = _fractions(self.model)
        scale = 1.0 / (full + SWA_FULL_TOKENS_RATIO * swa)
        tokens = int(self.kv_capacity_tokens * scale)
        if cfg.max_total_tokens is not None and 0 < cfg.max_total_tokens < tokens:
            tokens = cfg.max_total_tokens
        if self.page_size > 1:
            tokens = tokens // self.page_size * self.page_size
        self.kv_capacity_tokens = tokens
        if cfg.max_running_requests is None:  # SGLang derives the default cap from the pool (perf.py)
            self.max_running_requests = min(max(int(tokens / self.context_length * 512), 2048), 4096)

    def _effective_context(self, batch_size: int, context_tokens: float) -> float:
        full, swa, window = _fractions(self.model)
        if context_tokens <= 0 or not swa:
            return context_tokens
        return context_tokens * (full + swa * min(1.0, max(1, batch_size) * window / context_tokens))

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        return super().decode_step_s(batch_size, self._effective_context(batch_size, context_tokens))

    def breakdown(self, batch_size: int, context_tokens: float) -> dict[str, float]:
        return super().breakdown(batch_size, self._effective_context(batch_size, context_tokens))

    def prefill_step_s(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        full, swa, window = _fractions(self.model)
        seqs = max(1, num_seqs)
        if new_tokens <= 0 or not swa:
            return super().prefill_step_s(new_tokens, cached_tokens, num_seqs)
        avg = cached_tokens / seqs + new_tokens / seqs / 2
        eff = full * avg + swa * min(avg, window)
        cached_eff = max(0.0, (eff - new_tokens / seqs / 2) * seqs)
        return super().prefill_step_s(new_tokens, cached_eff, num_seqs)


# --- hybrid linear attention (Qwen3-Next / Qwen3.5) ------------------------------------------------------------------
#: SGLang ``--mamba-full-memory-ratio`` default in 0.5.9 (the catalog): the recurrent-state pool gets this many bytes per
#: byte of the full-attention KV pool. (0.5.23 leaves it None and sizes the pools itself; 0.9 is used for every release,
#: an assumption there.)
MAMBA_FULL_MEMORY_RATIO = 0.9


class HybridLinearMixin(_PerfBase):
    """Hybrid linear attention (Qwen3-Next: three Gated DeltaNet layers per full-attention layer, HF config
    ``full_attention_interval`` 4). SGLang keeps a KV cache for the full-attention layers only and a fixed-size
    recurrent + convolution state per request for the linear layers (``HybridLinearKVPool`` + ``MambaPool``, sglang
    PR #10233), splitting the memory ``1 : --mamba-full-memory-ratio``. Mixed in, it changes:

    * **KV capacity**: ``1 / (1 + ratio)`` of the KV memory over the full layers' cells only; the running-request cap
      is at most the state slots (``ratio / (1 + ratio)`` of it over ``linear_state_bytes / tp`` per request).
    * **Decode**: KV reads on the full layers only, plus each request's state read and written once per step, as an
      effective context ``ctx x L_full / L + B x 2 x state / kv_bytes_per_token``.
    * **Prefill**: attention over earlier keys on the full layers only (equivalent cached-token count, as
      :class:`SlidingWindowMixin`); the chunked linear scan itself is not costed (an assumption: it is linear in the
      tokens, like the projections already counted).

    No constant is fitted. Calibration rows: sglang PR #10404 (Qwen3-Next-80B-A3B, H200, TP2/4/8)."""

    def __init__(self, model, hardware, cfg) -> None:
        super().__init__(model, hardware, cfg)
        m = self.model
        n = max(1, m.num_layers)
        self._full_frac = (n - min(m.linear_attention_layers, n)) / n
        ratio = MAMBA_FULL_MEMORY_RATIO
        kv_mem = self.kv_capacity_tokens * self.kv_cell_bytes
        tokens = int(kv_mem / (1 + ratio) / max(1.0, self.kv_cell_bytes * self._full_frac))
        if cfg.max_total_tokens is not None and 0 < cfg.max_total_tokens < tokens:
            tokens = cfg.max_total_tokens
        if self.page_size > 1:
            tokens = tokens // self.page_size * self.page_size
        self.kv_capacity_tokens = tokens
        self._state_bytes = m.linear_state_bytes / max(1, self.tp)
        slots = int(kv_mem * ratio / (1 + ratio) / self._state_bytes) if self._state_bytes else 10**9
        self.linear_state_slots = slots
        if cfg.max_running_requests is None:
            self.max_running_requests = min(max(int(tokens / self.context_length * 512), 2048), 4096, slots)
        else:
            self.max_running_requests = min(self.max_running_requests, slots)

    def _effective_context(self, batch_size: int, context_tokens: float) -> float:
        per_token = max(1.0, self._kv_read_bytes_per_token())
        return context_tokens * self._full_frac + max(1, batch_size) * 2 * self._state_bytes / per_token

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        return super().decode_step_s(batch_size, self._effective_context(batch_size, context_tokens))

    def breakdown(self, batch_size: int, context_tokens: float) -> dict[str, float]:
        return super().breakdown(batch_size, self._effective_context(batch_size, context_tokens))

    def prefill_step_s(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        seqs = max(1, num_seqs)
        if new_tokens <= 0:
            return super().prefill_step_s(new_tokens, cached_tokens, num_seqs)
        avg = cached_tokens / seqs + new_tokens / seqs / 2
        cached_eff = max(0.0, (self._full_frac * avg - new_tokens / seqs / 2) * seqs)
        return super().prefill_step_s(new_tokens, cached_eff, num_seqs)
