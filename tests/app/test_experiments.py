from grid.experiments import compare, log_value_near

ROWS = [
    {"config_hash": "a", "label": "burst", "point_index": 0, "output_tok_per_s": 140.0, "e2e_median_ms": 2000.0},
    {"config_hash": "b", "label": "graph", "point_index": 0, "output_tok_per_s": 230.0, "e2e_median_ms": None},
]
LOG = [
    {"config_hash": "b", "kind": "decode", "point_index": 0, "line_index": 0, "running_req": 60,
     "gen_throughput_tok_per_s": 350.0},
    {"config_hash": "b", "kind": "decode", "point_index": 0, "line_index": 1, "running_req": 23,
     "gen_throughput_tok_per_s": 190.0},
    {"config_hash": "b", "kind": "decode", "point_index": 0, "line_index": 2, "running_req": 21,
     "gen_throughput_tok_per_s": 170.0},
    {"config_hash": "a", "kind": "decode", "point_index": 0, "line_index": 0, "running_req": 22,
     "gen_throughput_tok_per_s": 999.0},
]


def test_compare_values_scales_and_missing():
    out = compare(ROWS, [
        {"condition": "burst", "metric": "output_tok_per_s", "unit": "tok/s", "seed": 144},
        {"condition": "burst", "metric": "e2e_median_ms", "name": "e2e_s", "unit": "s", "scale": 0.001, "seed": 2.1},
        {"condition": "graph", "metric": "e2e_median_ms", "seed": 1},
    ])
    assert out[0] == {"condition": "burst", "metric": "output_tok_per_s", "unit": "tok/s", "seed": 144.0,
                      "twin": 140.0}
    assert out[1]["metric"] == "e2e_s" and out[1]["twin"] == 2.0
    assert out[2]["twin"] is None


def test_log_snapshot_nearest_running_count():
    assert log_value_near(LOG, {"b"}, 22) == 190.0          # 23 and 21 tie: the first line wins
    assert log_value_near(LOG, {"b"}, 100) == 350.0
    assert log_value_near(LOG, {"c"}, 22) is None
    out = compare(ROWS, [{"condition": "graph", "metric": "server_gen_tok_per_s", "at_running": 22, "seed": 200}],
                  LOG)
    assert out[0]["twin"] == 190.0
