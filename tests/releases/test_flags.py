import pytest

from grid.releases.flags import SettingError, check_setting, parse_version, to_argv


def test_parse_version():
    assert parse_version("0.5.13.post1") == (0, 5, 13)
    assert parse_version("0.5.9") == (0, 5, 9)
    with pytest.raises(ValueError, match="not an SGLang version"):
        parse_version("latest")


@pytest.mark.parametrize("version, flag", [("0.5.9", "--nsa-decode-backend"), ("0.5.12", "--nsa-decode-backend"),
                                           ("0.5.13", "--dsa-decode-backend"), ("0.5.23", "--dsa-decode-backend")])
def test_dsa_backend_flag_renamed_at_0_5_13(version, flag):
    assert to_argv({"dsa_decode_backend": "trtllm"}, parse_version(version)) == [flag, "trtllm"]


@pytest.mark.parametrize("version, argv", [
    ("0.5.9", ["--disable-cuda-graph"]),
    ("0.5.14", ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]),
])
def test_cuda_graph_off_per_version(version, argv):
    assert to_argv({"cuda_graph": False}, parse_version(version)) == argv
    assert to_argv({"cuda_graph": True}, parse_version(version)) == []


def test_cuda_graph_max_bs_renamed_at_0_5_14():
    assert to_argv({"cuda_graph_max_bs": 64}, (0, 5, 13)) == ["--cuda-graph-max-bs", "64"]
    assert to_argv({"cuda_graph_max_bs": 64}, (0, 5, 20)) == ["--cuda-graph-max-bs-decode", "64"]


def test_dp_attention_per_version():
    s = {"dp_size": 8, "enable_dp_attention": True}
    assert to_argv(s, (0, 5, 9)) == ["--dp-size", "8", "--enable-dp-attention"]
    assert to_argv(s, (0, 5, 22)) == ["--attn-dp-size", "8"]
    assert to_argv({"dp_size": 2}, (0, 5, 22)) == ["--dp-size", "2"]


def test_values_pass_through_exactly():
    # commas, '=' and JSON stay one argument
    argv = to_argv({"reasoning_parser": 'a,b={"x": 1}', "mem_fraction_static": 0.92}, (0, 5, 9))
    assert argv == ["--mem-fraction-static", "0.92", "--reasoning-parser", 'a,b={"x": 1}']


def test_check_setting_errors_name_key_and_choices():
    with pytest.raises(SettingError, match=r"server.dsa_decode_backend='nope'.*allowed values: flashmla_sparse"):
        check_setting("dsa_decode_backend", "nope", (0, 5, 9))
    with pytest.raises(SettingError, match=r"server.bogus: unknown setting; allowed settings: .*tp_size"):
        check_setting("bogus", 1, (0, 5, 9))
    with pytest.raises(SettingError, match="expected an integer"):
        check_setting("tp_size", "8", (0, 5, 9))
    with pytest.raises(SettingError, match="above the maximum"):
        check_setting("mem_fraction_static", 1.5, (0, 5, 9))
    # flashinfer_sparse_mla only exists from the 0.5.13 rename on
    with pytest.raises(SettingError):
        check_setting("dsa_decode_backend", "flashinfer_sparse_mla", (0, 5, 9))
    assert check_setting("dsa_decode_backend", "flashinfer_sparse_mla", (0, 5, 23)) == "flashinfer_sparse_mla"
    assert check_setting("schedule_conservativeness", 1, (0, 5, 9)) == 1.0
