"""Speculative decoding (EAGLE / EAGLE3 / NEXTN-MTP) in the twin's performance model (pure: no clocks, no I/O).

SGLang's EAGLE worker (``python/sglang/srt/speculative/eagle_worker.py``; NEXTN is EAGLE with the checkpoint's MTP
layer as the draft) runs, per decode iteration over a batch of ``B`` requests:

1. ``speculative_num_steps`` draft forwards (``B`` tokens, then ``B x speculative_eagle_topk``) building a tree;
2. one target *verify* forward over ``B x speculative_num_draft_tokens`` tokens (one query per tree node, the
   context's KV read once per request);
3. one draft *extend* over the accepted tokens.

Each request then advances by the **acceptance length** ``L`` (tokens per iteration, the bonus token included),
which depends on the draft head and the text and is therefore an **input**: ``ServingConfig.speculative_accept_length``
(the twin's server takes ``GRID_TWIN_SPEC_ACCEPT_LENGTH``); without it :func:`default_accept_length`. The model
returns the iteration time divided by ``L`` as the "decode step" (one token per request), so the scheduler, TPOT and
throughput need no other change::

    t_iter  = verify(B x draft_tokens tokens; weights, KV, all-reduces, kernels as a TP decode step)
            + (num_steps + 1) x draft(B x topk tokens)
    draft   = one draft layer's weights (+ experts x coverage for an MTP MoE layer) + LM head, read at the decode
              bandwidth efficiencies, + 2 all-reduces + the layer's kernels (eager CPU launch above cuda_graph_max_bs)
    step    = t_iter / L

Draft sizes: NEXTN (MTP) is one decoder layer of the target (an MoE layer for MoE models) in the dense weight dtype
(``dense_weight_bytes_per_param``: the GLM-5 NVFP4 MTP checkpoint keeps layer 78 in BF16, ~19 GB, voipmonitor/rtx6kpro
models/glm5.md) and shares the target's LM head; EAGLE / EAGLE3 drafts are one dense Llama layer of the target's width
(EAGLE3 with its own 32,000-token head; yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config ``draft_vocab_size``).

No constant here is fitted: the verify and draft forwards use the calibrated decode constants of ``grid/twin/perf.py``.
Calibration rows (``grid/twin/calibration_rows.yaml``, docs/twin.md): E1 GLM-5 NVFP4 MTP on 8x RTX PRO 6000,
concurrency 1-64 (voipmonitor/rtx6kpro models/glm5.md), with the published acceptance length 2.19-2.80 read as 2.5.
"""

from __future__ import annotations

import math

from grid.config.specs import ModelSpec
from grid.releases.flags import SPECULATIVE_MAX_RUNNING_REQUESTS, SPECULATIVE_SETTINGS
from grid.twin import perf as _perf
from grid.twin.perf import PerfModel, expert_coverage

#: Algorithms the model represents (SGLang ``--speculative-algorithm``; 0.5.9 choices EAGLE, EAGLE3, NEXTN,
#: STANDALONE, NGRAM). STANDALONE (a separate small LLM) and NGRAM (no draft model) have no draft-size rule here.
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
#: SGLang's documented defaults when the speculative flags are not given: ``--speculative-num-steps 5``,
#: ``--speculative-eagle-topk 4``, ``--speculative-num-draft-tokens 8`` (docs.sglang.io speculative_decoding).
DEFAULT_STEPS, DEFAULT_TOPK, DEFAULT_DRAFT_TOKENS = 5, 4, 8
#: The (num_steps, eagle_topk, num_draft_tokens) SGLang picks when none is given, for targets with MTP layers: a
#: chain of 3 (0.5.23 ``python/sglang/srt/arg_groups/speculative_hook.py`` ``_auto_choose_speculative_params``; these
#: architectures there; every other one gets :data:`DEFAULT_STEPS` ...).
MTP_AUTO_PARAMS = (3, 1, 4)
MTP_AUTO_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
    "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM", "MistralLarge3ForCausalLM", "MiMoV2ForCausalLM"})
#: What SGLang logs when it sets its speculative running-request cap (grid.releases.flags
#: ``SPECULATIVE_MAX_RUNNING_REQUESTS``): a speculative configuration that does not set the cap serves at most 48
#: requests at once however large its KV pool, a throughput loss at high concurrency that is the cap's.
MAX_RUNNING_RESET_LINE = ("Max running requests is reset to 48 for speculative decoding. You can override this by "
                          "explicitly setting --max-running-requests.")
#: Logged when ``--speculative-eagle-topk 1`` comes with a draft-token count other than steps + 1, which SGLang then
#: sets (same functions).
DRAFT_TOKENS_ADJUSTED_LINE = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                              "speculative_eagle_topk == 1")


def resolve_launch(settings: dict, architecture: str | None) -> list[str]:
    """Apply SGLang's launch-time rewrites of the speculative flags to ``settings`` (a dict of grid setting names:
    ``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
    ``speculative_num_draft_tokens``, ``max_running_requests``) in place, as SGLang does before it serves; returns the
    lines SGLang logs for them. Nothing changes without ``speculative_algorithm``. The rewrites: the algorithm upper
    case; all three counts from :data:`MTP_AUTO_PARAMS` (``architecture`` in :data:`MTP_AUTO_ARCHITECTURES`) or the
    documented defaults when none is given; draft tokens = steps + 1 with top-k 1; the running-request cap
    :data:`SPECULATIVE_MAX_RUNNING_REQUESTS` when unset."""
    algo = settings.get("speculative_algorithm")
    if algo is None:
        return []
    lines = []
    settings["speculative_algorithm"] = str(algo).upper()
    keys = SPECULATIVE_SETTINGS[1:]
    if all(settings.get(k) is None for k in keys):
        auto = MTP_AUTO_PARAMS if architecture in MTP_AUTO_ARCHITECTURES else (
            DEFAULT_STEPS, DEFAULT_TOPK, DEFAULT_DRAFT_TOKENS)
        settings.update(zip(keys, auto))
    steps, topk, draft = (settings.get(k) for k in keys)
    if topk == 1 and steps is not None and draft != steps + 1:
        settings["speculative_num_draft_tokens"] = steps + 1
        lines.append(DRAFT_TOKENS_ADJUSTED_LINE)
    if settings.get("max_running_requests") is None:
        settings["max_running_requests"] = SPECULATIVE_MAX_RUNNING_REQUESTS
        lines.append(MAX_RUNNING_RESET_LINE)
    return lines
#: EAGLE3 draft vocabulary (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config ``draft_vocab_size``).
EAGLE3_DRAFT_VOCAB = 32000
#: Per-position acceptance of a chain draft, T+1..T+5, measured with GLM-5/Qwen3.5 MTP on RTX PRO 6000
#: (voipmonitor/rtx6kpro optimization/speculative-decoding.md, "Per-Position Acceptance Rates (MTP=5)"). Used only
#: when no acceptance length is given: ``L = 1 + sum of the first min(steps, draft_tokens - 1) rates``.
POSITION_ACCEPTANCE = (0.85, 0.67, 0.51, 0.36, 0.31)


def resolved(cfg) -> tuple[str, int, int, int] | None:
    """(algorithm, num_steps, eagle_topk, num_draft_tokens) of ``cfg`` (a ``ServingConfig``), defaults filled in;
    None without speculative decoding. Raises ``ValueError`` naming ``speculative_algorithm`` and the modelled
    algorithms for one the twin does not model, and for non-positive step/topk/draft-token counts."""
    algo = getattr(cfg, "speculative_algorithm", None)
    if algo is None:
        return None
    algo = str(algo).upper()
    if algo == "MTP":
        algo = "NEXTN"
    if algo not in ALGORITHMS:
        raise ValueError(f"speculative_algorithm {algo!r}: the twin models {', '.join(ALGORITHMS)} only")
    steps = cfg.speculative_num_steps or DEFAULT_STEPS
    topk = cfg.speculative_eagle_topk or DEFAULT_TOPK
    draft = cfg.speculative_num_draft_tokens or (steps + 1 if topk == 1 else DEFAULT_DRAFT_TOKENS)
    if min(steps, topk, draft) < 1:
        raise ValueError("speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens must be >= 1")
    return algo, int(steps), int(topk), int(draft)


def default_accept_length(steps: int, draft_tokens: int) -> float:
    """Tokens per iteration when none is given: 1 + the per-position acceptance (``POSITION_ACCEPTANCE``) of the
    first ``min(steps, draft_tokens - 1)`` draft positions."""
    n = max(0, min(steps, draft_tokens - 1, len(POSITION_ACCEPTANCE)))
    return 1.0 + sum(POSITION_ACCEPTANCE[:n])


class SpeculativePerf(PerfModel):
    """``PerfModel`` with speculative decoding: ``decode_step_s`` is the iteration time over the acceptance length
    (see the module docstring); prefill and memory are the target's (the draft's KV and weights are not deducted
    from the KV pool: an assumption, a one-layer draft holds ~1/num_layers of the pool)."""

    def __init__(self, model: ModelSpec, hardware, cfg) -> None:
        super().__init__(model, hardware, cfg)
        spec = resolved(cfg)
        if spec is None:
            raise ValueError("SpeculativePerf needs cfg.speculative_algorithm")
        self.spec_algorithm, self.spec_steps, self.spec_topk, self.spec_draft_tokens = spec
        given = cfg.speculative_accept_length
        if given is not None and not (1.0 <= given <= self.spec_draft_tokens):
            raise ValueError(f"speculative_accept_length must be between 1 and speculative_num_draft_tokens "
                             f"({self.spec_draft_tokens}), not {given}")
        self.accept_length: float = float(given) if given is not None else default_accept_length(
            self.spec_steps, self.spec_draft_tokens)

    # --- draft model ------------------------------------------------------------------------------------------------
    def _draft_bytes(self, tokens: int) -> float:
        """Bytes one draft forward over ``tokens`` tokens reads per GPU."""
        m, p, tp = self.model, self.params, self.tp
        db = m.dense_weight_bytes_per_param
        attn = p.attention / m.num_layers * db / self.attn_tp
        if self.spec_algorithm == "NEXTN" and m.is_moe:
            experts = p.experts / max(1, m.moe_layers) * db / tp
            shared = p.shared_experts / max(1, m.moe_layers) * db / tp
            cov = expert_coverage(tokens, m.num_experts, m.experts_per_token)
            layer = attn + shared + experts * cov
        else:
            layer = attn + 3 * m.hidden_size * m.intermediate_size * db / tp
        vocab = EAGLE3_DRAFT_VOCAB if self.spec_algorithm == "EAGLE3" else m.vocab_size
        return layer + vocab * m.hidden_size * db / tp

    def _draft_forward_s(self, tokens: int, graph: bool) -> float:
        bw = self.hardware.memory_bandwidth_gbps * 1e9
        dense_k, moe_k = self._kernels_per_layer()
        kernels = (moe_k if (self.spec_algorithm == "NEXTN" and self.model.is_moe) else dense_k) + 6
        gpu = self._draft_bytes(tokens) / (_perf.ETA_BW_DENSE * bw) + kernels * _perf.T_KERNEL_GPU
        gpu += 2 * self._allreduce_s(tokens)
        return max(gpu, 0.0 if graph else kernels * _perf.T_OP_CPU_EAGER)

    def iteration_terms(self, batch_size: int, context_tokens: float) -> dict[str, float]:
        """Seconds of one speculative iteration over ``batch_size`` requests: ``verify``, ``draft`` (all draft
        forwards), ``total``, and ``tokens_per_request`` (the acceptance length)."""
        b = max(1, batch_size)
        graph = self.uses_cuda_graph(b)  # SGLang captures draft and verify graphs per request batch size
        verify = self._decode_terms(b * self.spec_draft_tokens, context_tokens)
        eager = 0.0 if graph else self._kernels_per_step(b) * _perf.T_OP_CPU_EAGER
        t_verify = max(verify["gpu"], eager) + verify["cpu"]
        draft = self._draft_forward_s(b, graph)  # first draft step: one token per request
        draft += self.spec_steps * self._draft_forward_s(b * self.spec_topk, graph)  # later steps + draft extend
        return {"verify": t_verify, "draft": draft, "total": t_verify + draft, "tokens_per_request": self.accept_length}

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        """Seconds per generated token of every running request: one iteration / acceptance length."""
        if batch_size <= 0:
            return 0.0
        t = self.iteration_terms(batch_size, context_tokens)
        return t["total"] / t["tokens_per_request"]


def speedup(perf: PerfModel, batch_size: int, context_tokens: int) -> float:
    """Decode throughput with speculation over without, at ``batch_size`` (needs a ``SpeculativePerf``)."""
    base = PerfModel.decode_step_s(perf, batch_size, context_tokens)
    return base / perf.decode_step_s(batch_size, context_tokens) if math.isfinite(base) else float("nan")


def acceptance(perf: PerfModel) -> tuple[float | None, float | None]:
    """(accept len, accept rate) a speculative server logs and serves: the acceptance length ``L`` (tokens per verify
    iteration, the bonus token included) and the accepted share of the drafted tokens, ``(L - 1) / (draft_tokens -
    1)`` as SGLang computes it (0.5.23 ``metrics_reporter.py``: correct drafts over forward count x (draft tokens -
    1)); (None, None) without speculative decoding."""
    if not isinstance(perf, SpeculativePerf):
        return None, None
    drafted = max(1, perf.spec_draft_tokens - 1)
    return perf.accept_length, (perf.accept_length - 1.0) / drafted
