"""grid.twin.uncertainty: the spread of the twin's calibration errors by metric, model kind and GPU family."""

from __future__ import annotations

import math

import pytest

from grid.twin.uncertainty import gpu_family, hardware_family, spread_table, uncertainty

from ._specs import hardware


def test_spread_table_rms_and_fallback_cells():
    t = spread_table([("ttft_ms", True, "hopper", 0.3), ("ttft_ms", True, "hopper", -0.4),
                      ("ttft_ms", False, "hopper", 0.1), ("tpot_ms", False, "ampere", -0.05)])
    assert t["ttft_ms/moe/hopper"] == {"rows": 2, "rms_rel_error": round(math.sqrt((0.09 + 0.16) / 2), 3)}
    assert t["ttft_ms/*/hopper"] == {"rows": 3, "rms_rel_error": round(math.sqrt((0.09 + 0.16 + 0.01) / 3), 3)}
    assert t["ttft_ms/dense/hopper"]["rows"] == 1
    assert t["tpot_ms/*/*"] == {"rows": 1, "rms_rel_error": 0.05}


def test_gpu_family_by_sm_version():
    assert [gpu_family(sm) for sm in (80, 86, 89, 90, 100, 120)] == \
        ["ampere", "ampere", "ada", "hopper", "blackwell", "blackwell"]
    with pytest.raises(ValueError, match="SM80"):
        gpu_family(75)


def test_a_server_across_nodes_has_its_own_family():
    assert hardware_family(hardware("h100_x8")) == "hopper"
    assert hardware_family(hardware("h100_x16_ib")) == "hopper-multinode"
    # the tt-inference-server#356 rows (TP16 over two H100 nodes) make their own cell; single-node Hopper keeps its own
    assert uncertainty("tpot_ms", moe=True, gpu="hopper-multinode") > uncertainty("tpot_ms", moe=True, gpu="hopper")
    with pytest.raises(ValueError, match="one of .* \\(with '-multinode' across nodes\\)"):
        uncertainty("tpot_ms", moe=True, gpu="volta-multinode")


def test_uncertainty_reads_the_table_and_falls_back():
    # MoE on Hopper has its own TTFT cell (InferenceX #870, sglang#4918/#5571 rows): the widest spread
    moe_h = uncertainty("ttft_ms", moe=True, gpu="hopper")
    assert moe_h == uncertainty("ttft_ms", moe=True, gpu=90)
    assert moe_h > uncertainty("ttft_ms", moe=False, gpu="hopper") > 0
    # no Blackwell row in the published set: the metric's spread over every row
    assert uncertainty("tpot_ms", moe=True, gpu=120) == uncertainty("tpot_ms", moe=False, gpu="blackwell")
    # a one-row cell (input tok/s, dense, Hopper) is not a spread: the family cell answers
    assert uncertainty("input_tok_per_s", moe=False, gpu="hopper") == uncertainty("input_tok_per_s", moe=True,
                                                                                 gpu="hopper")


def test_uncertainty_rejects_unknown_names():
    with pytest.raises(ValueError, match="metric 'itl_ms'"):
        uncertainty("itl_ms", moe=False, gpu="hopper")
    with pytest.raises(ValueError, match="gpu 'volta'"):
        uncertainty("ttft_ms", moe=False, gpu="volta")
