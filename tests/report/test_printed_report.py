"""What the console report prints, parsed cell by cell and compared with the rows it was given.

The mapping of header to column and the rounding are written out here, independently of grid/report/render.py: a
header over the wrong column, a wrong unit (E2E in s) or a number printed from another column fails.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from grid.storage.schema import judged_point_row
from grid.report.render import print_report
from grid.report.select import Verdict

# printed header -> (load-point column, divisor)
POINT_HEADERS = {
    "level": ("point_value", 1), "status": ("status", 1), "out tok/s": ("output_tok_per_s", 1),
    "total tok/s": ("total_tok_per_s", 1), "TTFT p50 ms": ("ttft_median_ms", 1), "TTFT p99 ms": ("ttft_p99_ms", 1),
    "TPOT p50 ms": ("tpot_median_ms", 1), "TPOT p99 ms": ("tpot_p99_ms", 1), "E2E p50 s": ("e2e_median_ms", 1000),
    "mean conc.": ("concurrency_mean", 1),
}


def rows():
    out = []
    for i, level in enumerate([1, 8, 64]):
        out.append(judged_point_row(
            {}, point_index=i, point_kind="concurrency", point_value=float(level),
            status="ok" if level < 64 else "partial",
            output_tok_per_s=123.456 * level, total_tok_per_s=999.96 * level, requests_per_s=1.2345,
            ttft_median_ms=12.5 + i, ttft_p99_ms=1234.4 * (i + 1), tpot_median_ms=5.55 + i / 10,
            tpot_p99_ms=None if i == 1 else 7.25 + i, e2e_median_ms=2345.0 + 1000 * i, concurrency_mean=0.95 * level,
            command="python -m sglang.launch_server --tp 8 --port 30000", bottleneck="latency-bound",
            bottleneck_evidence="SM 100%", completed=200))
    return out


VERDICTS = [
    Verdict("abc123def456", "prefill=trtllm decode=trtllm", "best", 1.0, "highest output tok/s 7901.2 at 64",
            None, rows()),
    Verdict("ffff", "prefill=fa3 decode=trtllm", "failed", None,
            "startup_exit: the server exited during startup with a long reason that wraps on a narrow terminal"),
    Verdict("eeee", "prefill=trtllm decode=flashmla_kv", "invalid", None, "garbage_output: probe 0"),
]


def render(width: int) -> str:
    console = Console(record=True, width=width)
    print_report(VERDICTS, console)
    return console.export_text()


@pytest.mark.parametrize("width", [80, 200])
def test_points_table_cells_equal_the_rows(printed, width):
    text = render(width)
    table = printed.parse_table(text, "Load points of the best configuration", "right")
    assert table.title == "Load points of the best configuration (abc123def456)"
    assert table.header == list(POINT_HEADERS)
    assert len(table.rows) == 3
    for row, cells in zip(VERDICTS[0].rows, table.records()):
        for header, (key, div) in POINT_HEADERS.items():
            if key == "status":
                assert cells[header] == row[key]
            else:
                value = None if row[key] is None else row[key] / div
                assert printed.close_to_printed(cells[header], value), (header, cells[header], value)


@pytest.mark.parametrize("width", [80, 200])
def test_verdict_table_outcome_per_configuration(printed, width):
    text = render(width)
    assert printed.best_label(text) == "prefill=trtllm decode=trtllm"
    table = printed.parse_table(text, "All configurations", "left")
    assert table.header == ["#", "configuration", "outcome", "why", "node"]
    assert {r["node"] for r in table.records()} == {"-"}  # rows recorded before node columns name no node
    got = {r["configuration"]: (r["#"], r["outcome"]) for r in table.records()}
    assert got == {"prefill=trtllm decode=trtllm": ("1", "best"), "prefill=fa3 decode=trtllm": ("2", "failed"),
                   "prefill=trtllm decode=flashmla_kv": ("3", "invalid")}
    why = {r["configuration"]: r["why"] for r in table.records()}
    assert why["prefill=fa3 decode=trtllm"] == VERDICTS[1].reason
    assert why["prefill=trtllm decode=trtllm"] == "highest output tok/s 7901.2 at 64; limited by: latency-bound at 64"


def test_parser_refuses_what_it_cannot_read(printed):
    with pytest.raises(AssertionError, match="no table titled"):
        printed.parse_table("nothing here", "Load points", "right")
    assert printed.best_label("No configuration qualified.") is None
    assert printed.close_to_printed("12", 12.4) and not printed.close_to_printed("12", 12.6)
    assert printed.close_to_printed("5.5", 5.549) and not printed.close_to_printed("5.5", 5.56)
    assert printed.close_to_printed("-", None) and not printed.close_to_printed("-", 0.0)
    assert not printed.close_to_printed("0.0", None)
