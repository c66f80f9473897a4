"""Typed descriptions of the model being served and the hardware it runs on.

These are the facts the twin's performance model needs and that grid records with every trial. They are built once
from the Hydra config (``conf/model/*.yaml``, ``conf/hardware/*.yaml``) and carry their sources there. Nothing in this
module reads files or clocks.

``ModelSpec.to_hf_config`` / ``ModelSpec.from_hf_config`` convert to and from a Hugging Face ``config.json`` dict, so
that the twin can be pointed at a model directory exactly as SGLang is (``--model-path DIR`` with ``DIR/config.json``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DsaSpec(_Frozen):
    """DeepSeek Sparse Attention indexer (GLM-5, DeepSeek-V3.2). Source: transformers GlmMoeDsaConfig."""

    index_topk: int = Field(2048, gt=0, description="KV tokens selected per query")
    index_head_dim: int = Field(128, gt=0)
    index_n_heads: int = Field(32, gt=0)


class ModelSpec(_Frozen):
    """Architecture facts of one checkpoint (values from its config.json; see conf/model/*.yaml for sources).

    Attention is ``mha`` (MHA/GQA: ``num_kv_heads`` x ``head_dim`` per layer) or ``mla`` (latent KV of
    ``kv_lora_rank + qk_rope_head_dim`` per layer). MoE fields are zero for dense models.
    """

    name: str
    path: str | None = Field(None, description="checkpoint directory or HF id; required for engine=sglang")
    architecture: str = Field(..., description="HF architectures[0], e.g. GlmMoeDsaForCausalLM")
    model_type: str = Field(..., description="HF model_type, e.g. glm_moe_dsa")
    num_layers: int = Field(..., gt=0)
    hidden_size: int = Field(..., gt=0)
    num_attention_heads: int = Field(..., gt=0)
    num_kv_heads: int = Field(..., gt=0)
    head_dim: int = Field(..., gt=0, description="per-head dim for MHA/GQA; qk_nope+qk_rope for MLA")
    attention: Literal["mha", "mla"] = "mha"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    intermediate_size: int = Field(..., gt=0, description="dense FFN width")
    dense_layers: int = Field(0, ge=0, description="leading dense layers of an MoE model (first_k_dense_replace)")
    moe_intermediate_size: int = 0
    num_experts: int = Field(0, ge=0, description="routed experts per MoE layer; 0 for dense")
    num_shared_experts: int = 0
    experts_per_token: int = 0
    vocab_size: int = Field(..., gt=0)
    context_length: int = Field(..., gt=0)
    total_params_b: float = Field(..., gt=0, description="total parameters, billions")
    active_params_b: float = Field(..., gt=0, description="parameters touched per token, billions")
    quantization: str | None = Field(None, description="SGLang --quantization name resolved from the checkpoint")
    weight_bytes_per_param: float = Field(
        2.0, gt=0, description="bytes per quantized (expert/linear) weight incl. scales: NVFP4 0.5625, FP8 1, BF16 2"
    )
    dense_weight_bytes_per_param: float = Field(
        2.0, gt=0, description="bytes per weight kept in higher precision (attention, embeddings, head)"
    )
    quantized_attention: bool = Field(
        False, description="attention projections use the quantized format (FP8 DeepSeek) instead of the dense one"
    )
    loaded_weight_gb: float | None = Field(
        None,
        gt=0,
        description="measured weight memory summed over GPUs as SGLang reports it after loading (GB = 1e9 B); "
        "when set it overrides the parameter arithmetic for memory and scales the bytes read per step",
    )
    dsa: DsaSpec | None = None
    mtp_layers: int = 0
    sliding_window: int = Field(0, ge=0, description="tokens a sliding-window layer attends to (gpt-oss 128); 0 = none")
    sliding_window_layers: int = Field(0, ge=0, description="how many of num_layers use the sliding window")
    linear_attention_layers: int = Field(
        0, ge=0, description="how many of num_layers are linear-attention (Gated DeltaNet) layers without a KV cache")
    linear_state_bytes: int = Field(
        0, ge=0, description="recurrent + convolution state per request over all linear-attention layers, bytes")
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.dense_layers if self.is_moe else 0

    def to_hf_config(self) -> dict:
        """A config.json dict with the HF field names SGLang reads (plus ``grid_*`` extras the twin uses)."""
        cfg = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.context_length,
            "torch_dtype": "bfloat16",
        }
        if self.attention == "mla":
            cfg.update(
                q_lora_rank=self.q_lora_rank,
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
            )
        if self.is_moe:
            cfg.update(
                n_routed_experts=self.num_experts,
                n_shared_experts=self.num_shared_experts,
                num_experts_per_tok=self.experts_per_token,
                moe_intermediate_size=self.moe_intermediate_size,
                first_k_dense_replace=self.dense_layers,
            )
        if self.dsa is not None:
            cfg.update(
                index_topk=self.dsa.index_topk,
                index_head_dim=self.dsa.index_head_dim,
                index_n_heads=self.dsa.index_n_heads,
            )
        if self.mtp_layers:
            cfg["num_nextn_predict_layers"] = self.mtp_layers
        if self.quantization:
            cfg["quantization_config"] = {"quant_method": self.quantization}
        cfg["grid_spec"] = self.model_dump(mode="json")
        return cfg

    @classmethod
    def from_hf_config(cls, cfg: dict) -> ModelSpec:
        """Inverse of ``to_hf_config``. Raises ``ValueError`` when the dict carries no ``grid_spec`` block."""
        if "grid_spec" not in cfg:
            raise ValueError(
                "config.json has no 'grid_spec' block: the twin serves models described by grid "
                "(conf/model/*.yaml); point --model-path at a directory written by grid"
            )
        return cls.model_validate(cfg["grid_spec"])


class HardwareSpec(_Frozen):
    """One node, or ``nodes`` identical nodes: its GPUs (spec sheet, per GPU) and how they talk to each other.

    ``tflops`` is dense (no 2:4 sparsity) tensor throughput per GPU by dtype (``bf16``, ``fp8``, ``fp4``).
    ``allreduce_latency_us`` is the small-message (<= 64 KB) all-reduce latency across ``gpu_count`` GPUs as the
    engine actually runs it (NCCL unless a custom all-reduce applies); ``allreduce_bus_gbps`` the large-message bus
    bandwidth. Sources are in conf/hardware/*.yaml. With ``nodes`` > 1, ``gpu_count`` and the all-reduce figures are
    per node and the ``internode_*`` fields describe the network between nodes (NIC bandwidth per GPU, NCCL's
    per-hop latency), which grid/twin/crossnode.py combines into the all-reduce of a TP group spanning nodes.
    """

    name: str
    vendor: Literal["nvidia", "amd", "cpu"] = Field(
        "nvidia", description="what serves: NVIDIA GPUs (CUDA), AMD GPUs (ROCm) or the host CPU (SGLang's "
                              "--device cpu; the GPU fields then describe the CPU socket, see conf/hardware/cpu_host.yaml)")
    gpu: str = Field(..., description="the device's name (NVML's name of the GPU; the CPU model for vendor cpu)")
    gpu_count: int = Field(..., gt=0, description="GPUs per node (1 for vendor cpu: one server process)")
    sm_version: int = Field(..., ge=0, description="compute capability x10: 90 Hopper, 100 B200, 120 RTX PRO 6000; "
                                                   "0 for vendor cpu (no CUDA device)")
    cpu_cores: int | None = Field(None, gt=0, description="vendor cpu: cores the server may use (its host's cores)")
    memory_gb: float = Field(..., gt=0, description="per GPU, GB (1e9 bytes)")
    memory_bandwidth_gbps: float = Field(..., gt=0, description="per GPU, GB/s")
    tflops: dict[str, float] = Field(..., description="dense TFLOP/s per GPU by dtype")
    tdp_w: float = Field(..., gt=0)
    interconnect: Literal["nvlink", "pcie"] = "pcie"
    p2p: bool = True
    virtualized: bool = False
    pcie_gbps: float = Field(63.0, gt=0, description="host link per direction, GB/s")
    allreduce_latency_us: float = Field(..., gt=0)
    allreduce_bus_gbps: float = Field(..., gt=0)
    # --- several nodes (one server over ``nodes`` x ``gpu_count`` GPUs, SGLang's --nnodes; grid/twin/crossnode.py)
    nodes: int = Field(1, gt=0, description="nodes of gpu_count GPUs each that one server may span (--nnodes)")
    internode_link: Literal["infiniband", "roce", "ethernet"] | None = Field(
        None, description="the network between the nodes (None: a single node)")
    internode_gbps_per_gpu: float | None = Field(
        None, gt=0, description="achieved network bandwidth per GPU and direction, GB/s (one NIC per GPU)")
    internode_hop_latency_us: float | None = Field(
        None, gt=0, description="NCCL's latency of one network hop of a small-message all-reduce, µs")
    source: str = ""

    @model_validator(mode="after")
    def _nodes_described(self) -> HardwareSpec:
        """A description of several nodes names its network: ``internode_link``, ``internode_gbps_per_gpu`` and
        ``internode_hop_latency_us`` are required when ``nodes`` > 1. Raises ``ValueError`` naming the keys."""
        missing = [k for k in ("internode_link", "internode_gbps_per_gpu", "internode_hop_latency_us")
                   if getattr(self, k) is None]
        if self.nodes > 1 and missing:
            raise ValueError(f"hardware {self.name!r}: nodes={self.nodes} needs {', '.join(missing)} "
                             "(the network between the nodes; see conf/hardware/h100_x16_ib.yaml)")
        if self.vendor == "cpu" and (self.sm_version != 0 or self.gpu_count != 1 or self.cpu_cores is None):
            raise ValueError(f"hardware {self.name!r}: vendor cpu needs sm_version 0, gpu_count 1 and cpu_cores "
                             "(see conf/hardware/cpu_host.yaml)")
        if self.vendor != "cpu" and self.sm_version == 0:
            raise ValueError(f"hardware {self.name!r}: sm_version must be > 0 for vendor {self.vendor}")
        return self

    @property
    def is_cpu(self) -> bool:
        """The server runs on the host CPU (SGLang's ``--device cpu``): no CUDA, no NVML, memory is host RAM."""
        return self.vendor == "cpu"

    @property
    def total_gpus(self) -> int:
        """GPUs in all nodes: ``nodes`` x ``gpu_count``."""
        return self.nodes * self.gpu_count
