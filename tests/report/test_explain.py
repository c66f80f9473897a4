"""Failures grouped by cause on a hand-made 3 x 3 backend sweep: exact groups, patterns and known causes."""

import json

from grid.diagnosis.rules import classify
from grid.report.explain import Cause, group_failures, markdown_lines, normalize_message
from grid.report.select import Verdict

FA3_LINE = ("[2026-03-01 10:00:01] RuntimeError: FlashAttention-3 (fa3) requires compute capability 9.0 (Hopper "
            "wgmma/TMA); this device is sm_120.")
VALUES = ("flashmla_kv", "fa3", "trtllm")


def verdict(prefill, decode):
    settings = {"dsa_prefill_backend": prefill, "dsa_decode_backend": decode, "kv_cache_dtype": "bfloat16"}
    label = f"prefill={prefill} decode={decode}"
    row = {"config_json": json.dumps(settings), "label": label, "config_hash": label, "point_index": 0}
    if "aiter" in (prefill, decode):   # fails at import, before fa3 could
        row.update(trial_status="failed", trial_error_class="startup_exit",
                   log_tail="ModuleNotFoundError: No module named 'aiter'\n")
        return Verdict(label, label, "failed", None, "", None, [row])
    if "fa3" in (prefill, decode):
        row.update(trial_status="failed", trial_error_class="startup_exit", log_tail=f"loading\n{FA3_LINE}\n",
                   trial_error_message="server exited with code 1 before it was ready")
        return Verdict(label, label, "failed", None, "", None, [row])
    if "flashmla_kv" in (prefill, decode):
        garbage = "!!!!" if prefill == "flashmla_kv" else "ёё 12"
        row.update(trial_status="invalid", trial_error_class="garbage_output", log_tail="",
                   trial_error_message=f"probe {len(decode)}: {garbage!r}")
        return Verdict(label, label, "invalid", None, "", None, [row])
    row.update(trial_status="ok")
    return Verdict(label, label, "best", 100.0, "", row, [row])


VERDICTS = [verdict(p, d) for p in VALUES for d in VALUES]


def test_three_causes_that_hide_each_other():
    # aiter kills fa3 pairs first, fa3 kills flashmla_kv pairs first: each pattern still names its own backend
    values = ("flashmla_kv", "fa3", "aiter", "trtllm")
    groups = group_failures([verdict(p, d) for p in values for d in values])
    assert [(g.message, len(g.verdicts), g.pattern_text(), g.uncovered) for g in groups] == [
        ("ModuleNotFoundError: No module named 'aiter'", 7,
         "every configuration with dsa_decode_backend=aiter or dsa_prefill_backend=aiter", []),
        ("RuntimeError: FlashAttention-N (fa3) requires compute capability N (Hopper wgmma/TMA); this device is "
         "sm_120.", 5, "every configuration with dsa_decode_backend=fa3 or dsa_prefill_backend=fa3", []),
        ("probe N: '…'", 3,
         "every configuration with dsa_decode_backend=flashmla_kv or dsa_prefill_backend=flashmla_kv", []),
    ]


def test_normalize_masks_quotes_numbers_and_addresses():
    assert normalize_message("probe 0: '!!!!'") == normalize_message("probe 11: 'ёё 12'") == "probe N: '…'"
    assert normalize_message("at 0x7f3a  size 1.5 GiB") == "at <addr> size N GiB"
    assert normalize_message("No module named 'sgl_kernel.ops'") == "No module named 'sgl_kernel.ops'"
    assert normalize_message("open '/tmp/x y'") == "open '…'"


def test_groups_patterns_and_causes_exact():
    fa3 = Cause("dsa_fa3_sm120", "fa3 needs Hopper", "calibration §1a")
    groups = group_failures(VERDICTS, lambda v: [fa3] if v.rows[0]["trial_error_class"] == "startup_exit" else [])
    assert [(g.status, g.error_class, g.message, len(g.verdicts)) for g in groups] == [
        ("failed", "startup_exit", "RuntimeError: FlashAttention-N (fa3) requires compute capability N (Hopper "
                                   "wgmma/TMA); this device is sm_120.", 5),
        ("invalid", "garbage_output", "probe N: '…'", 3),
    ]
    crash, garbage = groups
    assert crash.pattern == [("dsa_decode_backend", ["fa3"]), ("dsa_prefill_backend", ["fa3"])]
    assert crash.causes == [fa3] and crash.uncovered == []
    assert FA3_LINE in crash.log_tail
    # flashmla_kv paired with fa3 crashed as fa3 does before it could answer: it still explains the garbage group
    assert garbage.pattern == [("dsa_decode_backend", ["flashmla_kv"]), ("dsa_prefill_backend", ["flashmla_kv"])]
    assert garbage.pattern_text() == ("every configuration with dsa_decode_backend=flashmla_kv or "
                                      "dsa_prefill_backend=flashmla_kv")
    assert garbage.causes == []
    md = "\n".join(markdown_lines(groups))
    # the title is one real message of the group: numbers and quotes are masked only to group
    assert "- **invalid garbage_output: probe 11: '!!!!' — 3 configurations**" in md
    assert crash.headline() == f"failed startup_exit: {FA3_LINE[22:]} — 5 configurations"
    assert "  - known cause `dsa_fa3_sm120`: fa3 needs Hopper (source: calibration §1a)" in md


def test_a_value_a_working_configuration_has_is_no_pattern():
    # trtllm/trtllm with an fp8 KV cache gives garbage too; trtllm and bfloat16 also ran fine elsewhere
    row = dict(VERDICTS[0].rows[0], config_hash="fp8", label="fp8", config_json=json.dumps(
        {"dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm", "kv_cache_dtype": "fp8_e4m3"}))
    vs = VERDICTS + [Verdict("fp8", "fp8", "invalid", None, "", None, [row])]
    garbage = next(g for g in group_failures(vs) if g.error_class == "garbage_output")
    assert garbage.pattern == [("dsa_decode_backend", ["flashmla_kv"]), ("dsa_prefill_backend", ["flashmla_kv"]),
                               ("kv_cache_dtype", ["fp8_e4m3"])]
    assert garbage.uncovered == []


def test_bottleneck_text_does_not_credit_cuda_graphs_it_has_not():
    row = {"point_kind": "concurrency", "point_value": 8, "srv_running_mean": 8.0, "srv_queue_mean": 0.0,
           "gpu_sm_util_mean": 0.99, "gpu_mem_bw_util_mean": 0.3, "gpu_power_frac_mean": 0.5,
           "gpu_pcie_bytes_per_s": 1e6, "gpu_pcie_capacity_bytes_per_s": 63e9}
    verdict_on, reason_on = classify({**row, "config_json": json.dumps({"cuda_graph": True})})
    verdict_off, reason_off = classify({**row, "config_json": json.dumps({"cuda_graph": False})})
    assert verdict_on == verdict_off == "latency-bound"
    assert "which CUDA graphs do not remove" in reason_on
    assert "which CUDA graphs do not remove" not in reason_off
    assert "run without CUDA graphs here (cuda_graph=false), so kernel launches add to it" in reason_off


def test_a_value_whose_other_configurations_failed_elsewhere_or_never_ran_is_no_pattern():
    # as the recorded nsa_backends sweep on SM120: fa3 is refused first, aiter next; flashmla_auto paired with
    # anything but fa3 or aiter was known to fail and never ran, so every judged flashmla_auto configuration is in
    # the fa3 or aiter group: it must not become the aiter group's pattern (it explains none of its members)
    def judged(prefill, decode):
        pair = (prefill, decode)
        if "fa3" in pair:
            return verdict("fa3", "trtllm").rows[0] | {"config_json": json.dumps(
                {"dsa_prefill_backend": prefill, "dsa_decode_backend": decode})}
        if "aiter" in pair:
            return verdict("aiter", "trtllm").rows[0] | {"config_json": json.dumps(
                {"dsa_prefill_backend": prefill, "dsa_decode_backend": decode})}
        return None if "flashmla_auto" in pair else verdict(prefill, decode).rows[0] | {"config_json": json.dumps(
            {"dsa_prefill_backend": prefill, "dsa_decode_backend": decode})}
    values = ("aiter", "fa3", "flashmla_auto", "tilelang", "trtllm")
    vs = []
    for p in values:
        for d in values:
            row = judged(p, d)
            if row is not None:
                label = f"prefill={p} decode={d}"
                row = dict(row, label=label, config_hash=label)
                outcome = "best" if row["trial_status"] == "ok" else "failed"
                vs.append(Verdict(label, label, outcome, None, "", None, [row]))
    groups = group_failures(vs)
    assert [(g.message, len(g.verdicts), g.pattern_text()) for g in groups] == [
        ("RuntimeError: FlashAttention-N (fa3) requires compute capability N (Hopper wgmma/TMA); this device is "
         "sm_120.", 9, "every configuration with dsa_decode_backend=fa3 or dsa_prefill_backend=fa3"),
        ("ModuleNotFoundError: No module named 'aiter'", 7,
         "every configuration with dsa_decode_backend=aiter or dsa_prefill_backend=aiter"),
    ]
