"""The committed SGLang catalog (grid/releases/catalog/data, extracted from the released wheels) and everything derived
from it agree: grid's validation and rendering, the twin's argparse, routes, metric names and log lines, and the
hand-written launch rules. Nothing is downloaded: the tests read the committed data."""

from __future__ import annotations

import re

import pytest

from grid.releases import catalog
from grid.releases.checks import RULES, Hardware, check_config
from grid.releases.flags import SETTINGS, SettingError, check_setting, parse_version, to_argv, unknown_flags
from grid.twin import cli

RELEASES = [f"0.5.{n}" for n in range(9, 24)]
CHOICE_SETTINGS = ["attention_backend", "dsa_prefill_backend", "dsa_decode_backend", "moe_runner_backend",
                   "moe_a2a_backend", "schedule_policy", "kv_cache_dtype", "quantization"]


def test_catalog_covers_every_release_from_0_5_9_to_0_5_23():
    assert set(RELEASES) <= set(catalog.releases())
    for r in RELEASES:
        rel = catalog.release(r)
        assert rel.release == r and len(rel.options) > 300 and rel.routes and rel.metrics and rel.refusals
        assert {"prefill", "decode"} <= set(rel.log_formats)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", CHOICE_SETTINGS)
def test_grid_accepts_exactly_what_the_release_parser_accepts(release, name):
    ver = parse_version(release)
    opt = catalog.release(release).by_flag[SETTINGS[name].flag(ver)]
    assert opt.choices, (release, name)
    for value in opt.choices:
        assert check_setting(name, value, ver) == value
    every = {c for r in RELEASES for c in (catalog.release(r).by_flag.get(SETTINGS[name].flag(parse_version(r)))
                                           or opt).choices or ()}
    for value in every - set(opt.choices):
        with pytest.raises(SettingError, match=f"not accepted by SGLang {release}"):
            check_setting(name, value, ver)


@pytest.mark.parametrize("name, value, first, last", [
    ("moe_runner_backend", "flashinfer_trtllm_routed", "0.5.10", None),
    ("moe_a2a_backend", "nixl", "0.5.10", None),
    ("schedule_policy", "hrrn", "0.5.20", None),
    ("dsa_decode_backend", "flashmla_sparse_q8", "0.5.16", None),
    ("kv_cache_dtype", "nvfp4", "0.5.16", None),
    ("quantization", "modelopt_mixed", "0.5.10", None),
    ("quantization", "qoq", "0.5.9", "0.5.15"),
    ("quantization", "marlin", "0.5.9", "0.5.19"),
])
def test_issue_examples_per_release(name, value, first, last):
    for r in RELEASES:
        ver = parse_version(r)
        inside = ver >= parse_version(first) and (last is None or ver <= parse_version(last))
        if inside:
            assert check_setting(name, value, ver) == value, r
        else:
            with pytest.raises(SettingError):
                check_setting(name, value, ver)


def test_cutlass_mla_refused_on_0_5_20_to_0_5_22():
    for r in ("0.5.20", "0.5.21", "0.5.22"):
        with pytest.raises(SettingError):
            check_setting("attention_backend", "cutlass_mla", parse_version(r))
    assert check_setting("attention_backend", "cutlass_mla", (0, 5, 19)) == "cutlass_mla"


@pytest.mark.parametrize("release", RELEASES)
def test_twin_parser_declares_exactly_the_release_options(release):
    parser = cli.build_parser(release)
    declared = {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}
    assert declared == set(catalog.release(release).flags)
    dests = {a.dest for a in parser._actions} - {"help"}
    assert dests == {o.dest for o in catalog.release(release).options}


@pytest.mark.parametrize("release", RELEASES)
def test_rendered_settings_exist_in_the_release(release):
    ver = parse_version(release)
    sweep = {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "cuda_graph": False, "cuda_graph_max_bs": 64,
             "dsa_prefill_backend": "fa3", "dsa_decode_backend": "fa3", "schedule_policy": "fcfs",
             "torch_compile": True, "two_batch_overlap": True, "moe_a2a_backend": "deepep"}
    argv = to_argv(sweep, ver)
    assert unknown_flags(argv, ver) == []
    args = cli.parse_args(["--model-path", "m", *argv], release)
    assert args._deprecations == []
    assert (args.dsa_prefill_backend, args.cuda_graph_max_bs) == ("fa3", 64)


def _accepts(argv, release) -> bool:
    try:
        cli.parse_args(["--model-path", "m", *argv], release)
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize("argv, first, last", [
    (["--enable-piecewise-cuda-graph"], "0.5.9", "0.5.13"),
    (["--torchao-config", "int8wo"], "0.5.9", "0.5.17"),
    (["--collect-tokens-histogram"], "0.5.9", "0.5.19"),
    (["--stream-output"], "0.5.9", "0.5.19"),
    (["--max-total-tokens", "128k"], "0.5.10", None),
    (["--speculative-algorithm", "MY_ALGO"], "0.5.12", None),
])
def test_twin_accepts_options_exactly_in_their_releases(argv, first, last, capsys):
    for r in RELEASES:
        ver = parse_version(r)
        inside = ver >= parse_version(first) and (last is None or ver <= parse_version(last))
        assert _accepts(argv, r) is inside, (argv, r)
    capsys.readouterr()


def test_human_readable_lengths_parse_from_0_5_10():
    assert cli.parse_args(["--model-path", "m", "--max-total-tokens", "128k"], "0.5.10").max_total_tokens == 128_000


def test_every_rule_message_is_sglangs_own_in_its_release_range():
    missing = []
    for rule in RULES:
        if rule.stage != "launch":  # a kernel's hardware requirement: SGLang has no argument check to copy
            continue
        for r in RELEASES:
            if rule.releases(parse_version(r)) and rule.source(parse_version(r)) is None:
                missing.append((rule.name, r))
    # The ast extraction does not see the 0.5.20-0.5.21 tilelang message (built in a form it does not read); the
    # refusal there was observed by running those releases. Role switching's list of blockers is built by
    # concatenation (srt/arg_groups/pd_disaggregation_hook.py, read in the 0.5.21-0.5.23 wheels).
    assert set(missing) <= {("tilelang_fp8_cuda", "0.5.20"), ("tilelang_fp8_cuda", "0.5.21"),
                            *(("pd_role_switch_blockers", r) for r in ("0.5.21", "0.5.22", "0.5.23"))}, missing


def test_every_release_whose_wheel_has_a_rules_message_is_in_that_rules_range():
    """The converse of the test above: a rule whose release range was cut short (its message still in a release's
    wheel outside the range) fails here. Each refusal of a release's catalog goes to the rule whose message matches it
    longest (pp_no_speculative_mixed's message extends pp_no_speculative's), and that rule must hold for the release."""
    launch = [rule for rule in RULES if rule.stage == "launch"]

    def prefix(rule):
        return rule.message.split("{}")[0].rstrip(".")

    outside = set()
    for r in RELEASES:
        for entry in catalog.release(parse_version(r)).refusals:
            matches = [rule for rule in launch if entry["message"].startswith(prefix(rule))]
            if not matches:
                continue
            longest = max(len(prefix(rule)) for rule in matches)
            owners = [rule for rule in matches if len(prefix(rule)) == longest]
            if not any(rule.releases(parse_version(r)) for rule in owners):
                outside.add((owners[0].name, r))
    # 0.5.20 asserts the EAGLE-only message on NPUs alone (srt/arg_groups/validation_hook.py; the other devices get
    # pp_no_speculative's), and grid plans for CUDA and ROCm
    assert outside == {("pp_speculative_eagle_only", "0.5.20")}, outside


def test_rules_carry_hardware_predicates():
    class HW:
        def __init__(self, sm, vendor="nvidia"):
            self.sm_version, self.vendor = sm, vendor

    from grid.config.specs import DsaSpec

    class M:
        quantization, dsa = None, DsaSpec()

    til = {"dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang", "kv_cache_dtype": "fp8_e4m3"}
    assert check_config(til, "0.5.19", M(), HW(90))  # refused on CUDA 0.5.17-0.5.21
    assert check_config(til, "0.5.19", M(), HW(94, "amd")) == []  # ROCm supports it
    assert check_config(til, "0.5.22", M(), HW(89)) == []  # accepted on SM >= 8.9
    assert "requires SM89 or newer" in check_config(til, "0.5.22", M(), HW(86))[0]
    assert check_config(til, "0.5.16", M(), HW(90)) == []
    assert Hardware("nvidia", 90, 90).matches("nvidia", 90) and not Hardware("nvidia", 90, 90).matches("amd", 90)


@pytest.mark.parametrize("release", RELEASES)
def test_twin_metric_names_exist_in_the_release(release):
    from grid.twin.metrics import TwinMetrics

    names = catalog.release(release).metric_names()
    for metric in TwinMetrics("m").registry.collect():
        exported = metric.name + ("_total" if metric.type == "counter" else "")
        assert exported in names or metric.name in names, (release, metric.name)


@pytest.mark.parametrize("release", RELEASES)
def test_twin_routes_exist_in_the_release(release):
    from grid.twin.api import TELEMETRY_PATH

    paths = catalog.release(release).route_paths()
    twin = ["/health", "/health_generate", "/generate", "/v1/completions", "/v1/chat/completions", "/v1/models",
            "/server_info", "/get_server_info", "/model_info", "/get_model_info", "/flush_cache"]
    assert set(twin) <= paths
    assert TELEMETRY_PATH not in paths  # twin-only
    assert ("/ready" in paths) is (parse_version(release) >= (0, 5, 20))


def _labels(text: str) -> list[str]:
    return re.findall(r"(#?[a-z][a-z /()-]*?): \{", text)


@pytest.mark.parametrize("release", RELEASES)
def test_twin_log_lines_use_the_release_labels(release):
    from grid.twin import logs

    fmt = catalog.release(release).log_formats
    source = " ".join(fmt["prefill"]) + " " + " ".join(fmt["decode"])
    pre = logs.prefill_line(release, new_seq=1, new_token=2, cached_token=0, token_usage=0.1, running_req=1,
                            queue_req=0, input_throughput=1.0, cuda_graph=True)
    dec = logs.decode_line(release, running_req=1, num_token=2, token_usage=0.1, cuda_graph=True,
                           gen_throughput=1.0, queue_req=0)
    for line in (pre, dec):
        for label in re.findall(r"(#?[a-z][a-z /()-]*): ", line):
            if label in ("#token", "token usage", "cuda graph"):  # a variable in SGLang's template (pool, graph)
                continue
            assert f"{label}: " in source, (release, label)
    assert ("#pending-token: " in source) is (parse_version(release) >= (0, 5, 11))


def test_options_are_marked_modelled_or_not():
    assert cli.effect("mem_fraction_static") == "modelled"
    assert cli.effect("nsa_prefill_backend") == "modelled"
    assert cli.effect("enable_lora") == "accepted, no effect in the twin"
    rel = catalog.release("0.5.23")
    assert {cli.effect(o.dest) for o in rel.options} == {"modelled", "accepted, no effect in the twin"}


def test_sweep_varying_an_unmodelled_option_on_the_twin_is_noted():
    from types import SimpleNamespace

    from grid.sweep.notes import unmodelled_note

    plans = [SimpleNamespace(settings={"single_batch_overlap": v, "mem_fraction_static": 0.8}) for v in (True, False)]
    sim = SimpleNamespace(engine=SimpleNamespace(kind="sim"))
    note = unmodelled_note(sim, plans)
    assert note and "single_batch_overlap" in note and "no effect in the twin" in note
    assert unmodelled_note(SimpleNamespace(engine=SimpleNamespace(kind="sglang")), plans) is None
    modelled = [SimpleNamespace(settings={"mem_fraction_static": v}) for v in (0.8, 0.9)]
    assert unmodelled_note(sim, modelled) is None


@pytest.mark.parametrize("release", catalog.releases())
def test_every_metric_grid_reads_is_one_the_release_exports(release):
    """The /metrics names grid turns into srv_* columns (grid/server/metrics_scrape.py) are ones each release's
    metrics collector registers (colon spelling; grid also reads the underscore spelling some builds export)."""
    from grid.server.metrics_scrape import COUNTERS, GAUGES

    names = catalog.release(release).metric_names()
    assert {g for g in GAUGES if f"sglang:{g}" not in names} == set()
    assert {c for c in COUNTERS if not {f"sglang:{c}", f"sglang:{c}_total"} & names} == set()  # as registered
