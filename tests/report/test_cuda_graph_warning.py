"""The warning for a sweep whose base turns CUDA graphs off quotes what the twin forecasts on the run's hardware,
not a blanket claim: on the PCIe VM (GLM-5, 8x RTX PRO 6000) graphs change the decode step by nothing, on one H100
(Llama-3.1-8B) eager launches lengthen it."""

from grid.compose import compose_spec
from grid.report.context import base_warnings, cuda_graph_forecast
from grid.sweep.space import expand

TRTLLM = {"dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm"}
HEAD = ("The sweep's base turns CUDA graphs off (cuda_graph=false) for every configuration: decode runs kernel by "
        "kernel; ")


def test_pcie_vm_forecasts_no_gain_from_cuda_graphs(tmp_path):
    spec = compose_spec(["+sweep=nsa_backends"], tmp_path)
    load = expand(spec)[0].load
    steps = cuda_graph_forecast(spec, {**spec.server, **spec.sweep.base, **TRTLLM}, load.concurrency, load.input_len,
                                load.output_len)
    assert [(b, round(off, 2), round(on, 2)) for b, off, on in steps] == [
        (8, 101.71, 101.71), (32, 131.1, 131.1), (64, 156.07, 156.07)]
    assert base_warnings(spec, TRTLLM, load) == [
        HEAD + "on rtx_pro_6000_x8_vm the twin forecasts decode steps (TPOT) 0.0% longer without CUDA graphs than "
        "with them at batch 8, 32, 64 (the twin's performance model, docs/twin.md; kernel launches cost only "
        "where they exceed the GPU's own time per step), so on this hardware the numbers should hold with CUDA graphs too (confirm with "
        "cuda_graph=true on GPUs before quoting them for a deployment)."]


def test_single_h100_forecasts_the_eager_cost(tmp_path):
    spec = compose_spec(["+sweep=nsa_backends", "model=llama3_1_8b", "hardware=h100_x1"], tmp_path)
    load = expand(spec)[0].load
    steps = cuda_graph_forecast(spec, {**spec.server, **spec.sweep.base}, [8, 64], load.input_len, load.output_len)
    gains = [round((off - on) / on * 100, 1) for _, off, on in steps]
    assert gains == [30.6, 9.1]
    assert base_warnings(spec, TRTLLM, load) == [
        HEAD + "on h100_x1 the twin forecasts decode steps (TPOT) 9.1-30.6% longer without CUDA graphs than with "
        "them at batch 8, 32, 64 (the twin's performance model, docs/twin.md; kernel launches cost only where they "
        "exceed the GPU's own time per step): absolute throughput and TPOT are worse than a deployment with CUDA "
        "graphs by about that; compare configurations with each other, not with production numbers."]
    assert base_warnings(compose_spec(["model=llama3_1_8b", "hardware=h100_x1"], tmp_path)) == []
