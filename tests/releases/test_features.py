"""Release behaviour is one table of named features (grid/releases/features.py): where the catalog of each release
can show a feature, the table agrees with it at every catalogued release; the twin asks the table instead of comparing
release numbers (its failure rows keep the release ranges of the reports they cite, docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grid.releases import catalog
from grid.releases.features import FEATURES, holds
from grid.releases.flags import parse_version

ROOT = Path(__file__).resolve().parents[2]
RELEASES = catalog.releases()


def test_every_feature_spans_catalogued_releases():
    known = {parse_version(r) for r in RELEASES}
    for f in FEATURES.values():
        assert parse_version(f.since) in known and (f.until is None or parse_version(f.until) in known), f.name
        assert f.until is None or parse_version(f.since) <= parse_version(f.until), f.name
        assert f.what and f.source, f.name


def test_an_unknown_feature_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="no release feature 'nope'; known: .*caches_last_output_token"):
        holds("nope", (0, 5, 9))


@pytest.mark.parametrize("release", RELEASES)
def test_the_features_the_catalog_shows_agree_with_it(release):
    rel, ver = catalog.release(release), parse_version(release)
    prefill = " ".join(rel.log_formats["prefill"])
    assert holds("prefill_line_pending_token", ver) is ("#pending-token: " in prefill)
    assert holds("prefill_line_graph_before_throughput", ver) is (
        prefill.index("{}: {}") < prefill.index("input throughput"))
    assert holds("attn_dp_size_flag", ver) is ("--attn-dp-size" in rel.by_flag)
    assert holds("dsa_named", ver) is ("--dsa-prefill-backend" in rel.by_flag)


@pytest.mark.parametrize("release", RELEASES)
def test_the_features_the_catalog_evidence_shows_agree_with_it(release):
    """Each feature read off the server's code agrees with the fact the catalog extracted from the release's wheel
    (grid/releases/catalog/extract.py ``evidence``)."""
    ev, ver = catalog.release(release).evidence, parse_version(release)
    assert holds("flush_cache_failure_text", ver) is bool(ev["flush_cache_failure_text"])
    assert holds("ready_exempt_from_api_key", ver) is ("/ready" in ev["auth_exempt_prefixes"])
    assert ev["kv_cache_lines"] and ev["load_weight_lines"]
    assert holds("kv_cache_line_dtype", ver) is all("dtype: {}, #tokens: {}" in t for t in ev["kv_cache_lines"])
    assert holds("load_weight_line_without_dtype", ver) is not any("dtype=" in t for t in ev["load_weight_lines"])
    assert holds("sglang_serve", ver) is (ev["server_args_prog"] == "sglang serve")
    assert holds("dsa_attention_backend", ver) is (ev["dsa_defaults"]["attention_backend"] == ["dsa"])
    assert holds("cuda_graph_bs_includes_max", ver) is ev["graph_bs_defaults"]["appends_max"]
    assert holds("graph_bs_capped_by_running", ver) is ev["graph_bs_defaults"]["capped_by_max_running_requests"]
    assert ev["prefill_throughput_tokens"] in ("previous_batch", "this_batch")
    assert holds("prefill_throughput_of_this_batch", ver) is (ev["prefill_throughput_tokens"] == "this_batch")
    meta, http = set(ev["meta_info_keys"]), {k: set(v) for k, v in ev["http_keys"].items()}
    assert "prompt_tokens" in meta and {"internal_states", "version"} <= http["server_info"]
    assert holds("meta_info_reasoning_tokens", ver) is ("reasoning_tokens" in meta)
    assert holds("meta_info_num_retractions", ver) is ("num_retractions" in meta) is ("total_retractions" not in meta)
    assert holds("server_info_startup_time", ver) is ("startup_time" in http["server_info"])
    assert holds("server_info_launch_command", ver) is ("launch_command" in http["server_info"])
    assert holds("server_info_frontend", ver) is ("frontend" in http["server_info"])
    assert holds("internal_state_world_size", ver) is ("world_size" in http["internal_state"])
    assert holds("internal_state_decode_cuda_graph_bs", ver) is ("decode_cuda_graph_bs" in http["internal_state"])
    assert holds("model_info_serving_fields", ver) is (
        {"served_model_name", "load_format", "reasoning_parser", "tool_call_parser"} <= http["model_info"])
    assert holds("model_info_disaggregation_mode", ver) is ("disaggregation_mode" in http["model_info"])
    dsa = ev["dsa_defaults"]
    assert holds("dsa_fp8_blackwell_trtllm", ver) is (dsa["fp8"]["sm100"] == ["trtllm"])
    assert holds("dsa_fp8_hopper_flashmla_kv", ver) is (dsa["fp8"]["below_sm100"] == ["flashmla_kv"])
    for side in ("sm100", "below_sm100"):  # the other value: 0.5.9's flashmla_auto prefill, flashmla_kv decode
        assert dsa["fp8"][side] in (["flashmla_auto", "flashmla_kv"], ["trtllm"], ["flashmla_kv"]), side
    assert holds("dsa_fp8_sm120_flashinfer", ver) is (dsa["glm_fp8_sm120"] == ["flashinfer_sparse_mla"])
    small = next(b for b in ev["gpu_memory_defaults"] if b["below_gib"] == 35)
    assert holds("small_gpu_defaults_raised", ver) is (small["chunked_prefill_size"] == [4096]
                                                       and small["cuda_graph_max_bs"] == [48, 160])


def _fits(template: str, line: str) -> bool:
    """Whether ``line`` is ``template`` (the catalog's: ``{}`` a value, possibly empty; ``{:.2f}`` a decimal with
    two places; ``%s`` a value) filled in."""
    parts = re.split(r"(\{\}|\{:\.2f\}|%s)", template)
    rx = "".join({"{}": ".*?", "%s": ".*?", "{:.2f}": r"-?\d+\.\d\d"}.get(p, re.escape(p)) for p in parts)
    return re.fullmatch(rx, line) is not None


@pytest.mark.parametrize("release", RELEASES)
def test_the_twins_startup_lines_are_the_releases(release):
    """The twin's weight, KV pool and CUDA graph lines fill in templates of the release (the catalog's evidence), and
    the capture lines name the graph as the release does (``cuda graph`` / ``target decode CUDA graph``)."""
    from grid.twin import logs

    ev, ver = catalog.release(release).evidence, parse_version(release)
    graph = ev["cuda_graph_lines"]
    begin = logs.graph_begin_lines(release, avail=70.25, bs=[1, 2, 4])
    end = logs.graph_end_line(release, elapsed=3.5, usage=1.25, avail=69.0, bs=[1, 2, 4])
    for line in [*begin, end]:
        assert any(_fits(t, line) for t in graph["lines"]), (release, line)
    name = graph["cuda_graph_name"][0]
    prefix = f"Capture target decode {name} " if holds("target_decode_cuda_graph_lines", ver) else f"Capture {name} "
    assert all(line.startswith(prefix) for line in (begin[0], end)), (release, begin, end)
    assert holds("target_decode_cuda_graph_lines", ver) is (name == "CUDA graph")
    assert holds("cuda_graph_num_tokens_per_req", ver) is any("num_tokens_per_req=" in t for t in graph["lines"])
    assert holds("cuda_graph_bs_on_end_line", ver) is any(" end. bs={}" in t for t in graph["lines"])
    assert holds("target_decode_cuda_graph_lines", ver) is not any(t.startswith("Capture cuda graph bs")
                                                                   for t in graph["lines"])
    for mla in (False, True):
        kv = logs.kv_cache_line(release, tokens=1000, kv_gb=2.5, mla=mla, kv_cache_dtype="auto")
        assert any(_fits(t, kv) for t in ev["kv_cache_lines"]), (release, kv)
    load = logs.load_weight_end_line(release, elapsed=4.5, arch="LlamaForCausalLM", avail=70.0, usage=2.0)
    assert any(_fits(t, load) for t in ev["load_weight_lines"]), (release, load)


@pytest.mark.parametrize("release", RELEASES)
def test_the_nan_lines_are_the_releases(release):
    """What each release logs for NaN in the logits (the catalog's ``nan_logits``): the sampler's line under
    --enable-nan-detection to 0.5.12, nothing in 0.5.13, the sanitize warning under SGLANG_SANITIZE_NAN_LOGITS (off
    by default) from 0.5.14; the twin writes the same per release and grid's log classifier knows each line."""
    from grid.server.logparse import runtime_error
    from grid.twin import logs

    ev, rel, ver = catalog.release(release).evidence["nan_logits"], catalog.release(release), parse_version(release)
    assert holds("nan_detection_flag", ver) is (ev["lines"] == [logs.NAN_LINE]) is ("--enable-nan-detection"
                                                                                    in rel.by_flag)
    sanitize = [t for t in ev["lines"] if "values were sanitized" in t]
    assert holds("nan_sanitize_warning", ver) is bool(sanitize) is (
        ev["env_defaults"].get(logs.NAN_SANITIZE_ENV) is False)
    if sanitize:
        assert ev["sanitize_messages"] == ["sampler: next_token_logits"]
        assert sanitize[0].replace("%s", ev["sanitize_messages"][0]) == logs.NAN_SANITIZED_LINE
    assert ev["lines"] or not (holds("nan_detection_flag", ver) or holds("nan_sanitize_warning", ver))
    fault = ("Detected errors during sampling! NaN in the logits.",) * 2
    on, off = {logs.NAN_SANITIZE_ENV: "1"}, {}
    expect_flag = fault if holds("nan_detection_flag", ver) else ()
    expect_env = (logs.NAN_SANITIZED_LINE,) if holds("nan_sanitize_warning", ver) else ()
    assert logs.nan_lines(release, fault, nan_detection=True, env=off) == expect_flag
    assert logs.nan_lines(release, fault, nan_detection=False, env=on) == expect_env
    assert logs.nan_lines(release, fault, nan_detection=False, env=off) == ()
    for line in (*expect_flag, *expect_env):
        assert runtime_error(f"[2026-01-01 10:00:00 TP0] {line}")[0] == "nan_output"


@pytest.mark.parametrize("release", RELEASES)
def test_the_twins_defaults_by_gpu_memory_are_the_releases(release):
    """grid/twin/perf.py's chunked prefill size and decode CUDA graph max batch size by GPU memory and tp are the
    release's, band by band (SGLang's ``gpu_mem < N * 1024`` MiB)."""
    from grid.twin.perf import gpu_memory_defaults

    bands = catalog.release(release).evidence["gpu_memory_defaults"]
    assert [b["below_gib"] for b in bands] == [20, 35, 60, 90, 160, None]
    for band in bands:
        mib = (band["below_gib"] - 0.5) * 1024 if band["below_gib"] else 200 * 1024
        for tp in (1, 2, 4, 8):
            graph = band["cuda_graph_max_bs"][0 if tp < 4 else -1]
            assert gpu_memory_defaults(mib, tp, release) == (band["chunked_prefill_size"][0], graph), (band, tp)


def test_the_twin_compares_no_release_numbers_but_in_its_failure_rows():
    gate = re.compile(r"(?:>=?|<=?)\s*\(0, 5, \d+\)|\(0, 5, \d+\)\s*(?:<=?|>=?)")
    for path in sorted((ROOT / "grid" / "twin").glob("*.py")):
        if path.name == "failures.py":  # a known failure's release range comes with the report it cites
            continue
        assert not gate.search(path.read_text()), path.name
