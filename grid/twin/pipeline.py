"""Pipeline parallelism (``--pp-size``) in the twin's performance model (pure: no clocks, no I/O).

SGLang splits the decoder layers into ``pp_size`` consecutive stages, each on its own TP group
(``python/sglang/srt/managers/scheduler_pp_mixin.py`` in 0.5.x: ``event_loop_pp`` keeps ``pp_size`` micro-batches
in flight and hands each stage's hidden states to the next with NCCL send/recv). This module models that as:

* **Stage model** (:func:`stage_model`): a ``ModelSpec`` with ``ceil(num_layers / pp)`` layers (the slowest, i.e.
  largest, stage), the same number of dense leading layers scaled by ``1/pp`` and ``loaded_weight_gb / pp``. Every
  per-GPU quantity of ``PerfModel`` (weight bytes, KV cell bytes and so KV capacity in tokens, kernels, all-reduces)
  then describes one stage. The embedding and LM head stay in the stage model (SGLang holds them on the first and
  last stage only): an over-count of one vocab x hidden matrix per stage (2% of a Qwen3-30B-A3B stage), an
  assumption kept for simplicity.
* **Decode** (:meth:`PipelinePerf.decode_step_s`): the running batch of ``B`` requests is split into
  ``m = min(pp, B)`` micro-batches of ``ceil(B / m)``. Every request gets one token per cycle, and a micro-batch must
  pass all ``pp`` stages and the ``pp`` hand-offs (``pp - 1`` hidden-state sends plus the sampled ids back to the
  first stage) before its next token, so::

      cycle = pp x (t_stage(ceil(B / m)) + t_xfer(ceil(B / m)))

  With ``B >= pp`` each stage is busy ``m x t_stage`` of the cycle (no bubble); with ``B < pp`` stages idle (the
  bubble), and a single stream decodes no faster than the whole model on one TP group.
* **Prefill** (:meth:`PipelinePerf.prefill_step_s`): a prefill batch over ``s`` sequences is split into
  ``m = min(pp, s)`` micro-batches and runs GPipe-style, filling and draining the pipeline:
  ``(m + pp - 1) x t_stage(N / m) + pp x t_xfer(N / m)``.
* **Hand-off** (:func:`transfer_s`): ``tokens x hidden x 2`` bytes (bf16 hidden states) per stage boundary over the
  node's GPU link, at the hardware file's NCCL latency and bus bandwidth (``allreduce_latency_us``,
  ``allreduce_bus_gbps``: PCIe on RTX PRO 6000 nodes, NVLink on HGX; 470 µs per NCCL call in the seed's VM).

No constant here is fitted: the stage times are the calibrated TP model's, the hand-off is spec-sheet/NCCL figures.
Calibration rows (``grid/twin/calibration_rows.yaml``, docs/twin.md): sonar-pr1447 (Qwen3-30B-A3B, 2x A100, PP2).
"""

from __future__ import annotations

import math

from grid.config.specs import ModelSpec
from grid.twin.perf import PerfModel

#: Bytes per hidden-state element handed between stages (bf16 activations; SGLang's PPProxyTensors).
ACT_BYTES = 2


def stage_model(model: ModelSpec, pp: int) -> ModelSpec:
    """The largest of ``pp`` pipeline stages of ``model`` as a ``ModelSpec`` (see the module docstring).

    Raises ``ValueError`` when ``pp`` is below 1 or above the model's layer count (SGLang cannot place an empty
    stage)."""
    if pp < 1 or pp > model.num_layers:
        raise ValueError(f"pp_size must be between 1 and the model's {model.num_layers} layers, not {pp}")
    if pp == 1:
        return model
    layers = math.ceil(model.num_layers / pp)
    update: dict[str, float] = {"num_layers": layers, "dense_layers": min(layers, math.ceil(model.dense_layers / pp)),
              "sliding_window_layers": min(layers, math.ceil(model.sliding_window_layers / pp)),
              "linear_attention_layers": min(layers, math.ceil(model.linear_attention_layers / pp)),
              "linear_state_bytes": math.ceil(model.linear_state_bytes / pp)}
    if model.loaded_weight_gb:
        update["loaded_weight_gb"] = model.loaded_weight_gb * layers / model.num_layers
    return model.model_copy(update=update)


def transfer_s(perf: PerfModel, tokens: float) -> float:
    """Seconds to hand ``tokens`` hidden states (``hidden_size`` x ``ACT_BYTES`` each) to the next stage:
    NCCL latency + bytes / bus bandwidth of the hardware file (one send per TP rank, in parallel)."""
    hw = perf.hardware
    size = max(0.0, tokens) * perf.model.hidden_size * ACT_BYTES / max(1, perf.tp)
    return hw.allreduce_latency_us * 1e-6 + size / (hw.allreduce_bus_gbps * 1e9)


class PipelinePerf(PerfModel):
    """``PerfModel`` of a ``pp_size > 1`` server: per-GPU figures are those of one stage (:func:`stage_model`),
    step times follow the micro-batch formulas of the module docstring. ``full_model`` keeps the whole model."""

    def __init__(self, model: ModelSpec, hardware, cfg) -> None:
        self.pp = max(1, cfg.pp_size)
        self.full_model = model
        super().__init__(stage_model(model, self.pp), hardware, cfg)

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        """One token for each of ``batch_size`` requests (s): ``pp x (t_stage(b) + t_xfer(b))``, ``b`` requests per
        micro-batch; ``context_tokens`` is the batch's KV tokens (split evenly over the micro-batches)."""
        if batch_size <= 0:
            return 0.0
        m = min(self.pp, batch_size)
        b = math.ceil(batch_size / m)
        stage = super().decode_step_s(b, context_tokens / m)
        return self.pp * (stage + transfer_s(self, b))

    def prefill_step_s(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        """A prefill batch through the pipeline (s): ``(m + pp - 1) x t_stage(N/m) + pp x t_xfer(N/m)`` with
        ``m = min(pp, num_seqs)`` micro-batches."""
        if new_tokens <= 0:
            return 0.0
        m = max(1, min(self.pp, num_seqs))
        part = math.ceil(new_tokens / m)
        stage = super().prefill_step_s(part, cached_tokens / m, max(1, math.ceil(num_seqs / m)))
        return (m + self.pp - 1) * stage + self.pp * transfer_s(self, part)

    def startup_phases_s(self) -> dict[str, float]:
        """The TP model's phases for one stage; every stage loads its own weights from the node's disks, so the
        weight-load phase (node aggregate bandwidth) carries all ``pp`` stages."""
        phases = super().startup_phases_s()
        phases["load_weights"] *= self.pp
        return phases
