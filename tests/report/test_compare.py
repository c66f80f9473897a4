"""grid.compare on two recorded runs (Parquet written with grid's own writers): an SGLang upgrade changes every
config hash, so configurations are matched by settings; exact deltas, thresholds and verdicts."""


from tests.sweep.test_measure import spec_for  # noqa: E402

from grid.storage.schema import judged_point_row, load_point_row
from grid.compare import main  # noqa: E402
from grid.report.compare import (  # noqa: E402
    MIN_MEASURED_THRESHOLD_PERCENT,
    compare,
    default_threshold,
    load_shape_differences,
    markdown,
    spread_percent,
)
from grid.storage.parquet import read_table  # noqa: E402
from grid.sweep.space import expand  # noqa: E402
from report.recorded import record  # noqa: E402

SWEEP = ("+sweep=mem_fraction", "sweep.grid.mem_fraction_static=[0.8,0.85,0.9,0.95]")
CRASH = ("failed", "server_crash", "server exited with code 1 during load point 0", "Traceback\nRuntimeError: x\n")


def two_runs(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    plans_a = expand(spec_for(a_dir, *SWEEP))
    plans_b = expand(spec_for(b_dir, *SWEEP, "engine.version=0.5.23"))
    record(a_dir, plans_a, [{1: (100.0, 10.0, 50.0), 4: (400.0, 12.0, 80.0)},
                            {1: (100.0, 10.0, 50.0), 4: (400.0, 12.0, 80.0)},
                            {1: (100.0, 10.0, 50.0)},
                            CRASH], version="0.5.9")
    record(b_dir, plans_b, [{1: (102.0, 10.0, 52.0), 4: (460.0, 11.0, 86.0)},    # +15% tok/s, TTFT +7.5% (noise)
                            {1: (100.0, 10.0, 50.0), 4: (400.0, 14.0, 80.0)},    # TPOT +16.7%
                            CRASH,
                            {1: (90.0, 11.0, 50.0)}], version="0.5.23")
    return a_dir, b_dir, plans_a, plans_b


def test_upgrade_comparison_exact(tmp_path):
    a_dir, b_dir, plans_a, plans_b = two_runs(tmp_path)
    assert plans_a[0].config_hash != plans_b[0].config_hash      # the version is part of the hash
    cmp = compare(read_table(a_dir, "load_points").to_pylist(), read_table(b_dir, "load_points").to_pylist())
    assert (cmp.versions_a, cmp.versions_b, cmp.spread_measured) == (["0.5.9"], ["0.5.23"], False)
    assert [(c.label, c.matched_by, c.change) for c in cmp.configs] == [
        ("mem_fraction_static=0.8", "settings", "faster"),
        ("mem_fraction_static=0.85", "settings", "slower"),
        ("mem_fraction_static=0.9", "settings", "broke"),
        ("mem_fraction_static=0.95", "settings", "fixed"),
    ]
    faster = {(d.level, d.metric): d for d in cmp.configs[0].diffs}
    tok = faster[("concurrency 4", "output_tok_per_s")]
    assert (tok.a, tok.b, tok.delta_percent, tok.threshold_percent, tok.spread_source, tok.verdict) == \
        (400.0, 460.0, 15.0, 5.0, "unknown", "better")
    ttft = faster[("concurrency 4", "ttft_median_ms")]
    assert (ttft.delta_percent, ttft.verdict) == (7.5, "within spread")           # inside the 10% steady default
    assert faster[("concurrency 1", "output_tok_per_s")].verdict == "within spread"  # +2%
    tpot = {(d.level, d.metric): d for d in cmp.configs[1].diffs}[("concurrency 4", "tpot_median_ms")]
    assert (round(tpot.delta_percent, 3), tpot.verdict) == (16.667, "worse")
    assert cmp.configs[2].diffs == [] and cmp.configs[3].diffs == []


def test_cli_prints_and_writes_markdown(tmp_path, capsys):
    a_dir, b_dir, _, _ = two_runs(tmp_path)
    out = tmp_path / "cmp.md"
    assert main([str(a_dir), str(b_dir), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text == out.read_text()
    assert text.splitlines()[0] == f"# {a_dir} (SGLang 0.5.9) vs {b_dir} (SGLang 0.5.23)"
    assert text.splitlines()[2].startswith("Spread unknown (no repeated load points in either run): a difference "
                                           "counts only beyond the default thresholds, steady state: output tok/s 5%, TPOT p50 ms 5%")
    assert "- **broke** (1): `mem_fraction_static=0.9`" in text
    assert "- **fixed** (1): `mem_fraction_static=0.95`" in text
    assert ("| `mem_fraction_static=0.8` | settings | ok -> ok | concurrency 4 | output tok/s | 400 | 460 | +15.0% | "
            "5.0% (unknown) | better |") in text
    # why it broke: the error class beside the status (grid.compare on a run whose configurations were all refused
    # printed a bare "ok -> invalid")
    assert "| `mem_fraction_static=0.9` | settings | ok -> failed (server_crash) | | | | | | | broke |" in text
    assert "| `mem_fraction_static=0.95` | settings | failed (server_crash) -> ok | | | | | | | fixed |" in text
    assert main([str(a_dir), str(tmp_path / "nothing")]) == 2


def row(h, idx, level, tok, status="ok", version="1"):
    return judged_point_row({}, **{
        "config_hash": h, "label": h, "config_json": f'{{"tag": "{h}"}}', "trial_status": status, "status": "ok",
        "point_index": idx, "point_kind": "concurrency", "point_value": level, "output_tok_per_s": tok,
        "engine_version": version})


def test_repeated_load_points_set_the_threshold():
    assert spread_percent([98.0, 102.0]) == 4.0 and spread_percent([5.0]) is None
    a = [row("x", 0, 8, 98.0), row("x", 1, 8, 102.0), row("y", 0, 8, 100.0)]    # x repeated: 4% spread
    b = [row("x", 0, 8, 103.0), row("y", 0, 8, 103.5)]
    cmp = compare(a, b)
    assert cmp.spread_measured
    x, y = ({d.metric: d for d in c.diffs}["output_tok_per_s"] for c in cmp.configs)
    assert (x.a, x.b, x.delta_percent, x.threshold_percent, x.verdict) == (100.0, 103.0, 3.0, 4.0, "within spread")
    # y was not repeated: the largest spread measured in either run (4%) applies, not the 5% default
    assert (round(y.delta_percent, 9), y.threshold_percent, y.spread_source, y.verdict) == (3.5, 4.0, "measured",
                                                                                 "within spread")
    assert compare(a, [row("x", 0, 8, 105.0)]).configs[0].change == "faster"
    assert [c.change for c in compare(a, [row("z", 0, 8, 1.0)]).configs] == ["only in A", "only in A", "only in B"]


def test_repeats_on_both_sides_decide_by_confidence_intervals():
    # A: 98, 100, 102 (95% CI 95.0 .. 105.0); B1: 104, 106, 108 (101 .. 111): overlap, within spread although +6%;
    # B2: 111, 112, 113 (109.5 .. 114.5): no overlap, faster
    a = [{**row("x", i, 8, v), "repeat_index": i} for i, v in enumerate((98.0, 100.0, 102.0))]
    b1 = [{**row("x", i, 8, v), "repeat_index": i} for i, v in enumerate((104.0, 106.0, 108.0))]
    b2 = [{**row("x", i, 8, v), "repeat_index": i} for i, v in enumerate((111.0, 112.0, 113.0))]
    d = {x.metric: x for x in compare(a, b1).configs[0].diffs}["output_tok_per_s"]
    assert (d.a, d.b, d.delta_percent, d.spread_source, d.verdict, d.repeats_a, d.repeats_b) == \
        (100.0, 106.0, 6.0, "confidence", "within spread", 3, 3)
    d = {x.metric: x for x in compare(a, b2).configs[0].diffs}["output_tok_per_s"]
    assert (d.delta_percent, d.spread_source, d.verdict) == (12.0, "confidence", "better")


def test_default_thresholds_follow_how_both_sides_were_measured():
    steady, whole = load_point_row({}, window_kind="steady_state"), load_point_row({}, window_kind="all_requests")
    assert default_threshold("output_tok_per_s", [steady, steady], [steady]) == 5.0
    assert default_threshold("output_tok_per_s", [steady], [whole]) == 10.0
    assert default_threshold("ttft_median_ms", [steady], [steady]) == 10.0
    # a row from before window_kind existed
    assert default_threshold("ttft_median_ms", [load_point_row({})], [steady]) == 70.0


def test_runs_measured_differently_are_named_before_the_table(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    plans_a = expand(spec_for(a_dir, *SWEEP))
    plans_b = expand(spec_for(b_dir, *SWEEP, "load.closed_loop_start=together"))
    record(a_dir, plans_a, [{1: (100.0, 10.0, 50.0)}] * 4)
    record(b_dir, plans_b, [{1: (100.0, 10.0, 686.0)}] * 4)                       # TTFT +1272%
    rows = [read_table(d, "load_points").to_pylist() for d in (a_dir, b_dir)]
    assert main([str(a_dir), str(b_dir)]) == 0
    rows[1] = [{**r, "input_len": 8192} for r in rows[1]]  # A: 32, typed on the command line, wins over the sweep's 4096
    cmp = compare(*rows)
    assert cmp.load_differences == [
        "measurement window (window_kind; load.closed_loop_start: steady_state = staggered, all_requests = together):"
        " A steady_state; B all_requests",
        "input length ISL (input_len, tokens): A 32; B 8192",
    ]
    ttft = {d.metric: d for d in cmp.configs[0].diffs}["ttft_median_ms"]
    assert (ttft.delta_percent, ttft.threshold_percent, ttft.verdict) == (1272.0, 70.0, "worse")
    text = markdown(cmp)
    head = text.splitlines()
    assert head[2].startswith("**Warning: the two runs were measured differently**")
    assert head[4] == ("- measurement window (window_kind; load.closed_loop_start: steady_state = staggered, "
                       "all_requests = together): A steady_state; B all_requests")
    assert head[5] == "- input length ISL (input_len, tokens): A 32; B 8192"
    assert text.index("**Warning") < text.index("| configuration |")
    assert compare(rows[0], rows[0]).load_differences == []
    a_twice = rows[0] + [{**r, "repeat_index": 1} for r in rows[0]]
    assert load_shape_differences(rows[0], a_twice) == ["repeats per load level (load.repeats): A 1; B 2"]


def test_a_measured_spread_of_zero_is_floored():
    # two identical repeats (a deterministic twin) measure a 0% spread; the threshold is floored at 1%
    a = [row("x", 0, 8, 100.0), row("x", 1, 8, 100.0)]
    d = {x.metric: x for x in compare(a, [row("x", 0, 8, 100.5)]).configs[0].diffs}["output_tok_per_s"]
    assert (d.delta_percent, d.threshold_percent, d.spread_source, d.verdict) == \
        (0.5, MIN_MEASURED_THRESHOLD_PERCENT, "measured", "within spread")
    assert MIN_MEASURED_THRESHOLD_PERCENT == 1.0
    d = {x.metric: x for x in compare(a, [row("x", 0, 8, 101.5)]).configs[0].diffs}["output_tok_per_s"]
    assert (d.delta_percent, d.threshold_percent, d.verdict) == (1.5, 1.0, "better")
    # a spread measured above the floor is kept
    d = {x.metric: x for x in compare([row("x", 0, 8, 98.0), row("x", 1, 8, 102.0)],
                                      [row("x", 0, 8, 103.0)]).configs[0].diffs}["output_tok_per_s"]
    assert d.threshold_percent == 4.0
    assert "at least 1% (MIN_MEASURED_THRESHOLD_PERCENT" in markdown(compare(a, [row("x", 0, 8, 100.5)]))
