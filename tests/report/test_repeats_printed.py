"""The console report of a sweep with load.repeats=3: each row says its repeat, each distinct diagnosis prints once.

Rows follow the recorded nsa_backends sweep (prefill=tilelang decode=tilelang, concurrency 8 and 64, 3 repeats each;
evidence shortened to its first figures).
"""

from __future__ import annotations

from rich.console import Console

from grid.storage.schema import judged_point_row
from grid.report.render import diagnosis_lines, print_report
from grid.report.select import Verdict

EVIDENCE = {8: ["PCIe 218 MB/s of 63 GB/s, SM 99%"] * 3,
            64: ["PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.1", "PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.3",
                 "PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.3"]}
TOK = {8: [73.397, 73.250, 73.363], 64: [298.127, 298.545, 297.744]}


def rows():
    out = []
    for repeat in range(3):
        for j, level in enumerate((8, 64)):
            out.append(judged_point_row({}, point_index=2 * repeat + j, repeat_index=repeat, point_kind="concurrency",
                            point_value=float(level), status="ok", output_tok_per_s=TOK[level][repeat],
                            trial_status="ok", bottleneck="latency-bound",
                            bottleneck_evidence=EVIDENCE[level][repeat], command="python -m sglang.launch_server"))
    return out


def verdict():
    r = rows()
    return Verdict("h", "prefill=tilelang decode=tilelang", "best", 298.139, "highest", r[-1], r)


def test_diagnosis_once_per_distinct_text_per_level():
    assert diagnosis_lines(verdict()) == [
        "concurrency 8 (repeats 0, 1, 2): latency-bound — PCIe 218 MB/s of 63 GB/s, SM 99%",
        "concurrency 64 (repeat 0): latency-bound — PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.1",
        "concurrency 64 (repeats 1, 2): latency-bound — PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.3",
    ]
    once = Verdict("h", "x", "best", 1.0, "", None, rows()[:2])   # one repeat: no repeat named
    assert diagnosis_lines(once) == ["concurrency 8: latency-bound — PCIe 218 MB/s of 63 GB/s, SM 99%",
                                     "concurrency 64: latency-bound — PCIe 1.17 GB/s of 63 GB/s, SM 96%, queued 4.1"]


def test_load_points_table_has_a_repeat_column():
    console = Console(record=True, width=200)
    print_report([verdict()], console)
    text = console.export_text()
    table = text[text.index("Load points of the best"):text.index("What limits")]
    body = [line.split() for line in table.splitlines()[1:] if line.strip() and line.split()[0][0].isdigit()]
    # level, repeat, status, out tok/s: one row per repeat, in the order measured
    assert [cells[:4] for cells in body] == [
        ["8", "0", "ok", "73.4"], ["64", "0", "ok", "298.1"], ["8", "1", "ok", "73.2"], ["64", "1", "ok", "298.5"],
        ["8", "2", "ok", "73.4"], ["64", "2", "ok", "297.7"]]
    assert table.count("rep") == 1
    assert text.count("latency-bound — PCIe 218 MB/s") == 1
