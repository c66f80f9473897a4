import pytest

from grid.config.schema import ObjectiveSpec, SLOSpec
from grid.report.select import headline, rank


def row(h, label, idx, level, out, status="ok", trial="ok", ttft99=100.0, err=None, log=None):
    return {"config_hash": h, "label": label, "point_index": idx, "point_value": level, "status": status,
            "trial_status": trial, "trial_error_class": err, "trial_error_message": "m" if err else None,
            "log_tail": log, "output_tok_per_s": out, "ttft_p99_ms": ttft99, "tpot_median_ms": 50.0,
            "goodput_req_per_s": None, "error_class": None}


ROWS = [
    row("a", "A", 0, 1, 10.0), row("a", "A", 1, 64, 200.0),
    row("b", "B", 0, 1, 12.0), row("b", "B", 1, 64, 180.0, ttft99=5000.0),
    row("c", "C", 0, 1, None, status="not_run", trial="failed", err="startup_exit",
        log="[x] RuntimeError: Unsupported architecture\n[x] exiting"),
    row("d", "D", 0, 1, None, status="not_run", trial="invalid", err="garbage_output"),
]


def test_rank_max_throughput_no_slo():
    v = rank(ROWS, ObjectiveSpec())
    assert [x.label for x in v] == ["A", "B", "D", "C"]
    assert v[0].outcome == "best" and v[0].score == 200.0
    assert v[1].reason == "180.0 tok/s at level 64 vs best 200.0 (-10.0%)"
    tied = rank([*ROWS, row("e", "E", 0, 64, 199.0)], ObjectiveSpec())
    assert tied[0].label == "A" and "1 other configuration within 1%" in tied[0].reason
    assert tied[1].label == "E" and "a tie" in tied[1].reason and "a tie" not in tied[2].reason
    assert v[2].outcome == "invalid" and v[3].outcome == "failed"
    assert "Unsupported architecture" in v[3].reason


def test_rank_with_slo_excludes_points():
    v = rank(ROWS, ObjectiveSpec(slo=SLOSpec(ttft_ms=1000)))
    best = v[0]
    assert best.label == "A" and best.score == 200.0
    b = next(x for x in v if x.label == "B")
    assert b.score == 12.0            # its 64-stream point missed the TTFT SLO


def test_rank_unknown_objective():
    with pytest.raises(ValueError, match="allowed: max_goodput, max_output_throughput, min_tpot"):
        rank(ROWS, ObjectiveSpec(kind="fastest"))


def test_headline():
    assert headline("[2026 TP0] loading\n[2026 TP0] ValueError: bad\n[2026] exit") == "ValueError: bad"
    assert headline("[t] server_args=ServerArgs(enable_nan_detection=False, error=1)") == ""
    assert headline(None) == ""
