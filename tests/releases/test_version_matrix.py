"""The same sweep settings yield the right SGLang command line for each release
(docs/sources.md#sglang-server-arguments-and-defaults,
docs/sources.md#sglang-log-formats-readiness-phases-failure-modes), and every
rendered command line is one the twin's per-version parser accepts without a deprecation warning."""

import pytest

from grid.releases.flags import deprecated_flags, parse_version, to_argv, unknown_flags
from grid.twin import cli

SWEEP = {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "mem_fraction_static": 0.85,
         "cuda_graph": False, "cuda_graph_max_bs": 64, "dsa_prefill_backend": "trtllm",
         "dsa_decode_backend": "trtllm", "kv_cache_dtype": "bfloat16", "enable_metrics": True}

EXPECTED = {
    "0.5.9": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--mem-fraction-static", "0.85",
              "--disable-cuda-graph", "--cuda-graph-max-bs", "64", "--nsa-prefill-backend", "trtllm",
              "--nsa-decode-backend", "trtllm", "--kv-cache-dtype", "bfloat16", "--enable-metrics"],
    "0.5.13": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--mem-fraction-static", "0.85",
               "--disable-cuda-graph", "--cuda-graph-max-bs", "64", "--dsa-prefill-backend", "trtllm",
               "--dsa-decode-backend", "trtllm", "--kv-cache-dtype", "bfloat16", "--enable-metrics"],
    "0.5.20": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--mem-fraction-static", "0.85",
               "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
               "--cuda-graph-max-bs-decode", "64", "--dsa-prefill-backend", "trtllm", "--dsa-decode-backend",
               "trtllm", "--kv-cache-dtype", "bfloat16", "--enable-metrics"],
    "0.5.23": ["--tp-size", "8", "--attn-dp-size", "8", "--mem-fraction-static", "0.85",
               "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
               "--cuda-graph-max-bs-decode", "64", "--dsa-prefill-backend", "trtllm", "--dsa-decode-backend",
               "trtllm", "--kv-cache-dtype", "bfloat16", "--enable-metrics"],
}


@pytest.mark.parametrize("version", sorted(EXPECTED, key=parse_version))
def test_same_sweep_right_command_line_per_version(version):
    assert to_argv(SWEEP, parse_version(version)) == EXPECTED[version]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.12", "0.5.13", "0.5.14", "0.5.19", "0.5.20", "0.5.21", "0.5.22",
                                     "0.5.23"])
def test_rendered_flags_parse_on_the_twin_without_deprecations(version):
    argv = to_argv(SWEEP, parse_version(version))
    assert unknown_flags(argv, parse_version(version)) == []
    args = cli.parse_args(["--model-path", "m", *argv], version)  # argparse would exit 2 on an unknown flag
    assert args._deprecations == []
    assert deprecated_flags(argv, parse_version(version)) == []


@pytest.mark.parametrize("version, flag, known", [
    ("0.5.19", "--nsa-decode-backend", True), ("0.5.20", "--nsa-decode-backend", False),
    ("0.5.12", "--dsa-decode-backend", False), ("0.5.13", "--dsa-decode-backend", True),
    ("0.5.19", "--cuda-graph-max-bs", True), ("0.5.20", "--cuda-graph-max-bs", False),
    ("0.5.13", "--cuda-graph-max-bs-decode", False), ("0.5.14", "--cuda-graph-max-bs-decode", True),
    ("0.5.21", "--attn-dp-size", False), ("0.5.22", "--attn-dp-size", True),
])
def test_flag_lifecycle_agrees_with_the_twin_parser(version, flag, known):
    assert (unknown_flags([flag], parse_version(version)) == []) is known
    opts = {o for a in cli.build_parser(version)._actions for o in a.option_strings}
    assert (flag in opts) is known


def test_old_names_are_deprecated_not_removed_in_between():
    assert deprecated_flags(["--nsa-decode-backend"], (0, 5, 13)) == ["--nsa-decode-backend"]
    assert deprecated_flags(["--cuda-graph-max-bs"], (0, 5, 14)) == ["--cuda-graph-max-bs"]
    assert deprecated_flags(["--enable-dp-attention"], (0, 5, 22)) == ["--enable-dp-attention"]
    assert deprecated_flags(["--nsa-decode-backend"], (0, 5, 20)) == []  # removed, not deprecated
