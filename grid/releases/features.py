"""How SGLang's released server behaves, per release: named features with the releases they hold for, each read off
the released server or its wheel (pure facts, with sources). The twin and the tests ask :func:`holds` instead of
comparing version numbers where they use the fact.

A feature's ``since``/``until`` are the releases it was measured or read in; where the releases between two measured
ones were not checked, ``source`` says so and the boundary is the last measured release. Most features are read in
every catalogued release: the catalog's ``evidence`` (grid/releases/catalog/extract.py, one named fact per feature,
extracted from each release's wheel) shows them, and tests/releases/test_features.py holds each such feature to it at
every release.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.versions import release_tuple


@dataclass(frozen=True)
class Feature:
    """A behaviour of SGLang's server from release ``since`` to ``until`` (inclusive; None: still), and its
    ``source``."""

    name: str
    since: str
    until: str | None
    what: str
    source: str

    def holds(self, version: tuple[int, ...]) -> bool:
        return release_tuple(self.since) <= version[:3] and (self.until is None
                                                             or version[:3] <= release_tuple(self.until))


#: Read from every catalogued release's log formats (grid/releases/catalog/data ``log_formats``, extracted from each
#: wheel; tests/releases/test_catalog.py holds the twin's lines to them).
_CATALOG_LOGS = "each release's log formats in the catalog (srt/managers/scheduler_metrics_mixin.py and successors)"
#: The literal keys of an HTTP answer, read in every release's wheel (grid/releases/catalog/extract.py).
_HTTP_KEYS = "every release's catalog evidence "
#: The decode CUDA graph capture lines, read in every release's wheel.
_GRAPH_LINES = ("every release's catalog evidence `cuda_graph_lines`: the capture templates of "
                "srt/model_executor/model_runner.py and cuda_graph_runner.py (0.5.16+ "
                "model_runner_components/cuda_graph_setup.py), with the capture name `{role} decode` (role `target`) "
                "from 0.5.14 and the graph name graph_backend gives CUDA (`cuda graph`, `CUDA graph` from 0.5.14)")
#: The DSA (NSA before 0.5.13) backend defaults for an fp8 KV cache, read in every release's wheel.
_DSA_DEFAULTS = ("every release's catalog evidence `dsa_defaults.fp8`: the backends the fp8 branch of the function "
                 "that logs `Set NSA/DSA backends for {} KV Cache` assigns, by `major >= 10` (srt/server_args.py "
                 "_set_default_nsa_backends, 0.5.13 _set_default_dsa_backends, 0.5.15+ srt/arg_groups/overrides.py "
                 "_dsa_split_backend_resolution)")

FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("caches_last_output_token", "0.5.9", "0.5.9",
            "a finished request leaves its prompt and every generated token in the radix cache, the last one included "
            "(later releases leave all but the last, whose KV was never computed)",
            "measured on a CPU host: a 64-token prompt answered with 32 tokens is found as 96 cached tokens of the "
            "next turn on 0.5.9 and 95 on 0.5.23; 0.5.10-0.5.22 not measured, taken as 0.5.23. Not readable from "
            "the code: in every wheel srt/mem_cache/radix_cache.py cache_finished_req inserts the request's "
            "committed KV (kv_committed_len), a count the scheduler's decode steps advance at run time"),
    # --- the scheduler's log lines
    Feature("prefill_line_graph_before_throughput", "0.5.10", None,
            "the Prefill batch line prints `cuda graph` before `input throughput (token/s)` (0.5.9: after)",
            _CATALOG_LOGS),
    Feature("prefill_line_pending_token", "0.5.11", None,
            "the Prefill batch line prints `#pending-token` after `#queue-req`", _CATALOG_LOGS),
    Feature("prefill_throughput_of_this_batch", "0.5.11", None,
            "the Prefill batch line's input throughput counts this batch's new tokens over the time since the "
            "previous line (0.5.9-0.5.10: the previous batch's tokens)",
            "every release's catalog evidence `prefill_throughput_tokens`: the scheduler's last_input_throughput is "
            "last_prefill_tokens / gap (the previous line's tokens) in 0.5.9 srt/managers/scheduler_metrics_mixin.py "
            "and 0.5.10 srt/observability/scheduler_metrics_mixin.py, prefill_stats.log_input_tokens / gap from 0.5.11 "
            "(0.5.13+ srt/managers/scheduler_components/metrics_reporter.py; 0.5.21+ add the batch's replayed "
            "tokens, log_replay_tokens, which the twin does not have)"),
    Feature("kv_cache_line_dtype", "0.5.13", None,
            "the `KV Cache is allocated.` line names the KV dtype",
            "every release's catalog evidence `kv_cache_lines`: the templates of srt/mem_cache/memory_pool.py print "
            "`dtype: {}, #tokens: {}` from 0.5.13, `#tokens: {}` alone before"),
    Feature("load_weight_line_without_dtype", "0.5.10", None,
            "the `Load weight end.` line no longer prints `dtype=` (from 0.5.10 it prints the quantization, if any, "
            "in its place)",
            "every release's catalog evidence `load_weight_lines`: srt/model_executor/model_runner.py's template has "
            "`dtype={}` in 0.5.9, the quantization string (empty for an unquantized model) from 0.5.10"),
    Feature("target_decode_cuda_graph_lines", "0.5.14", None,
            "the decode CUDA graph capture logs `Capture target decode CUDA graph begin. backend=..., "
            "num_tokens_per_bs=..., bs=[...], avail mem=...` and `... end. elapsed=..., mem usage=..., avail mem=...` "
            "(before: `Capture cuda graph begin. This can take up to several minutes. ...`, `Capture cuda graph bs "
            "[...]` and `Capture cuda graph end. Time elapsed: ...`)", _GRAPH_LINES),
    Feature("cuda_graph_num_tokens_per_req", "0.5.16", None,
            "the capture's begin line says `num_tokens_per_req=` (0.5.14-0.5.15: `num_tokens_per_bs=`)", _GRAPH_LINES),
    Feature("cuda_graph_bs_on_end_line", "0.5.22", None,
            "the captured batch sizes are printed on the capture's end line (`end. bs=[...], elapsed=...`), no "
            "longer on its begin line", _GRAPH_LINES),
    Feature("nan_detection_flag", "0.5.9", "0.5.12",
            "--enable-nan-detection exists, and with it the sampler logs `Detected errors during sampling! NaN in the "
            "logits.` (a warning) at every step whose logits hold NaN and replaces them; without it nothing is logged",
            "every release's catalog evidence `nan_logits` and options: srt/layers/sampler.py "
            "Sampler._preprocess_logits logs the line under `if self.use_nan_detection` (server_args."
            "enable_nan_detection) in 0.5.9-0.5.12; 0.5.13 drops the check and the flag, and logs nothing for NaN "
            "logits"),
    Feature("nan_sanitize_warning", "0.5.14", None,
            "with SGLANG_SANITIZE_NAN_LOGITS set (default off) the sampler replaces NaN logits and warns once per "
            "process `NaN detected in sampler: next_token_logits; values were sanitized before sampling. ...`; by "
            "default nothing is logged",
            "every release's catalog evidence `nan_logits`: srt/utils/async_probe.py sanitize_nan_logits returns "
            "unless envs.SGLANG_SANITIZE_NAN_LOGITS (srt/environ.py EnvBool(False)), then _AsyncNanWarner logs the "
            "line once with the message srt/layers/sampler.py passes (`sampler: next_token_logits`)"),
    Feature("dsa_named", "0.5.13", None,
            "sparse attention is called DSA (`--dsa-*` flags, `Set DSA backends` log line); NSA before",
            "the catalog's options (--nsa-* renamed --dsa-* in 0.5.13, grid/releases/flags.py SETTINGS)"),
    # --- the HTTP API
    Feature("ready_exempt_from_api_key", "0.5.20", None,
            "GET /ready answers without the API key, as /health and /metrics do",
            "every release's catalog evidence `auth_exempt_prefixes`: the path.startswith prefixes of "
            "srt/utils/auth.py are /health and /metrics, and /ready from 0.5.20"),
    Feature("meta_info_reasoning_tokens", "0.5.10", None,
            "a response's meta_info counts `reasoning_tokens`",
            _HTTP_KEYS + "`meta_info_keys` (the meta_info dict of srt/managers/tokenizer_manager.py)"),
    Feature("meta_info_num_retractions", "0.5.12", None,
            "a response's meta_info counts retractions as `num_retractions` (before: `total_retractions`)",
            _HTTP_KEYS + "`meta_info_keys` (the meta_info dict of srt/managers/tokenizer_manager.py)"),
    Feature("server_info_startup_time", "0.5.17", None,
            "/server_info has `startup_time`",
            _HTTP_KEYS + "`http_keys.server_info` (srt/entrypoints/http_server.py server_info)"),
    Feature("server_info_launch_command", "0.5.20", None,
            "/server_info has `launch_command`: the server's arguments as given, joined by spaces (no program name)",
            _HTTP_KEYS + "`http_keys.server_info` (srt/entrypoints/http_server.py server_info; 0.5.22+ "
            "srt/utils/common.py build_server_info); the value is prepare_server_args' argv joined "
            "(srt/server_args.py)"),
    Feature("server_info_frontend", "0.5.21", None,
            "/server_info has `frontend` (`python`)",
            _HTTP_KEYS + "`http_keys.server_info` (srt/entrypoints/http_server.py server_info)"),
    Feature("internal_state_world_size", "0.5.19", None,
            "/server_info's internal state has `world_size`",
            _HTTP_KEYS + "`http_keys.internal_state` (srt/managers/scheduler.py get_internal_state; 0.5.22+ "
            "srt/managers/scheduler_components/internal_state.py)"),
    Feature("internal_state_decode_cuda_graph_bs", "0.5.21", None,
            "/server_info's internal state has `decode_cuda_graph_bs`, the captured decode batch sizes",
            _HTTP_KEYS + "`http_keys.internal_state` (srt/managers/scheduler.py get_internal_state; 0.5.22+ "
            "srt/managers/scheduler_components/internal_state.py _add_disaggregation)"),
    Feature("model_info_serving_fields", "0.5.18", None,
            "/model_info has `served_model_name`, `load_format`, `reasoning_parser` and `tool_call_parser`",
            _HTTP_KEYS + "`http_keys.model_info` (srt/entrypoints/http_server.py model_info)"),
    Feature("model_info_disaggregation_mode", "0.5.21", None,
            "/model_info has `disaggregation_mode`",
            _HTTP_KEYS + "`http_keys.model_info` (srt/entrypoints/http_server.py model_info)"),
    Feature("flush_cache_failure_text", "0.5.10", None,
            "a refused /flush_cache answers 400 with `Flush cache failed.` (0.5.9: 400 with the `Cache flushed.` "
            "text of a flush that happened)",
            "every release's catalog evidence `flush_cache_failure_text`: srt/entrypoints/http_server.py flush_cache "
            "answers `ret.message or \"Flush cache failed.\\n\"` when the flush fails from 0.5.10 (the scheduler's "
            "refusal carries no message), and its one `Cache flushed.` text with the status of the result in 0.5.9"),
    # --- the command line and its defaults
    Feature("attn_dp_size_flag", "0.5.22", None,
            "attention DP is `--attn-dp-size N` (`--dp-size N --enable-dp-attention` is rewritten to it)",
            "SGLang 0.5.22 server_args.py; the catalog declares --attn-dp-size from 0.5.22"),
    Feature("sglang_serve", "0.5.10", None,
            "the server's parser is named `sglang serve` (its usage and error lines; 0.5.9: argv[0], "
            "`launch_server.py` under `python -m sglang.launch_server`)",
            "every release's catalog evidence `server_args_prog`: srt/server_args.py prepare_server_args builds "
            "`argparse.ArgumentParser()` in 0.5.9 and `ArgumentParser(prog=\"sglang serve\")` from 0.5.10"),
    Feature("dsa_attention_backend", "0.5.13", None,
            "a DSA model's attention backend defaults to `dsa` (before: `nsa`)",
            "every release's catalog evidence `dsa_defaults.attention_backend`: the server arguments log `Use nsa "
            "attention backend for DeepSeek with DSA.` to 0.5.12 and `Use dsa ...` from 0.5.13 (srt/server_args.py; "
            "0.5.15+ srt/arg_groups/overrides.py, 0.5.19+ srt/arg_groups/model_overrides/deepseek_v2.py)"),
    Feature("cuda_graph_bs_includes_max", "0.5.10", None,
            "the decode CUDA graph batch sizes end with --cuda-graph-max-bs itself when the size list skips it",
            "every release's catalog evidence `graph_bs_defaults.appends_max`: the function that builds the default "
            "sizes ([1, 2, 4, 8, 12] + ...; srt/server_args.py _generate_cuda_graph_batch_sizes, 0.5.14+ "
            "_generate_decode_cuda_graph_batch_sizes, 0.5.19+ "
            "srt/arg_groups/cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes) appends the max batch size "
            "when missing from 0.5.10, not in 0.5.9"),
    Feature("small_gpu_defaults_raised", "0.5.20", None,
            "on GPUs of 20-35 GB the default chunked prefill size is 4096 and the decode CUDA graph max batch size 48 "
            "(tp < 4) or 160 (before: 2048 and 24 / 80)",
            "every release's catalog evidence `gpu_memory_defaults` (the `gpu_mem < N * 1024` bands of "
            "_handle_gpu_memory_settings: srt/server_args.py, 0.5.19+ srt/arg_groups/memory_hook.py); "
            "tests/releases/test_features.py holds grid/twin/perf.py gpu_memory_defaults to every band of every "
            "release"),
    Feature("graph_bs_capped_by_running", "0.5.22", None,
            "the default decode CUDA graph max batch size is capped by --max-running-requests",
            "every release's catalog evidence `graph_bs_defaults.capped_by_max_running_requests`: from 0.5.22 "
            "srt/arg_groups/memory_hook.py lowers a defaulted max_bs above max_running_requests to it"),
    Feature("dsa_fp8_blackwell_trtllm", "0.5.10", None,
            "with an fp8 KV cache on SM100 and newer a DSA model's prefill and decode backends default to trtllm "
            "(0.5.9: flashmla_auto and flashmla_kv on every GPU)", _DSA_DEFAULTS),
    Feature("dsa_fp8_hopper_flashmla_kv", "0.5.11", None,
            "with an fp8 KV cache below SM100 a DSA model's prefill backend defaults to flashmla_kv, as its decode "
            "backend (before: flashmla_auto)", _DSA_DEFAULTS),
    Feature("dsa_fp8_sm120_flashinfer", "0.5.17", None,
            "GLM-5's DSA backends with an fp8 KV cache on SM120/SM121 default to flashinfer_sparse_mla (before: the "
            "SM100+ default)",
            "every release's catalog evidence `dsa_defaults.glm_fp8_sm120`: from 0.5.17 srt/arg_groups/overrides.py "
            "_dsa_split_backend_resolution assigns flashinfer_sparse_mla where it logs `Set DSA backends for GLM FP8 "
            "KV Cache on SM120/SM121`"),
)}


def holds(name: str, version: tuple[int, ...]) -> bool:
    """Whether feature ``name`` holds for SGLang ``version``. Raises ``KeyError`` naming the known features."""
    try:
        feature = FEATURES[name]
    except KeyError:
        raise KeyError(f"no release feature {name!r}; known: {', '.join(sorted(FEATURES))}") from None
    return feature.holds(version)
