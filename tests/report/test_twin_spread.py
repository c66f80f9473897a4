"""The report says when the twin's decision rests on a difference smaller than its calibration spread
(grid.report.context.twin_spread_note, grid.twin.uncertainty)."""

from __future__ import annotations

from grid.compose import compose_spec
from grid.report.context import twin_spread_note
from grid.report.select import Verdict
from grid.twin.uncertainty import gpu_family, uncertainty


def _verdicts(best: float, second: float) -> list[Verdict]:
    return [Verdict("a", "cfg-a", "best", best, ""), Verdict("b", "cfg-b", "lost", second, ""),
            Verdict("c", "cfg-c", "failed", None, "")]


def test_note_when_the_lead_is_inside_the_spread(tmp_path):
    spec = compose_spec([], tmp_path)
    assert spec.engine.kind == "sim" and spec.objective.kind == "max_output_throughput"
    sigma = uncertainty("output_tok_per_s", moe=spec.model.is_moe, gpu=spec.hardware.sm_version)
    lead = sigma / 2  # best ahead by half the spread
    (line,) = twin_spread_note(spec, _verdicts(100.0, 100.0 * (1 - lead)))
    assert f"ahead of the next (cfg-b) by {lead * 100:.1f}%" in line
    assert f"({sigma * 100:.0f}% RMS over its published calibration rows, docs/twin.md)" in line
    assert gpu_family(spec.hardware.sm_version) in line
    # a lead below 0.1% keeps two significant figures, as the ranking's "vs best (-0.0076%)" does, not "0.0%"
    (line,) = twin_spread_note(spec, _verdicts(73.46, 73.4544))
    assert "ahead of the next (cfg-b) by 0.0076%, less than" in line


def test_no_note_when_the_lead_exceeds_it_or_nothing_to_compare(tmp_path):
    spec = compose_spec([], tmp_path)
    sigma = uncertainty("output_tok_per_s", moe=spec.model.is_moe, gpu=spec.hardware.sm_version)
    assert twin_spread_note(spec, _verdicts(100.0, 100.0 * (1 - sigma) - 1)) == []
    assert twin_spread_note(spec, _verdicts(100.0, None)[:1]) == []
    goodput = spec.model_copy(update={"objective": spec.objective.model_copy(update={"kind": "max_goodput"})})
    assert twin_spread_note(goodput, _verdicts(100.0, 99.9)) == []


def test_no_note_for_real_servers(tmp_path):
    spec = compose_spec(["engine=sglang"], tmp_path)
    assert twin_spread_note(spec, _verdicts(100.0, 99.9)) == []
