"""Every config file composes and validates; every sweep expands and renders command lines for both engines."""

from pathlib import Path

import pytest

from grid.compose import command_line_load_wins, compose_spec
from grid.config.schema import ConfigError
from grid.engines.base import get_engine
from grid.sweep.space import expand

CONF = Path(__file__).resolve().parents[2] / "conf"
SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (CONF / "hardware").glob("*.yaml"))


def spec_for(overrides, tmp_path):
    return compose_spec(overrides, tmp_path)


def test_every_sweep_file_is_expected():
    assert set(SWEEPS) >= {"nsa_backends", "mem_fraction", "cuda_graph", "torch_compile", "two_batch_overlap",
                           "schedule_policy", "moe_runner", "seed_tuning"}


@pytest.mark.parametrize("sweep", SWEEPS)
def test_sweep_composes_and_dry_runs(sweep, tmp_path):
    spec = spec_for([f"+sweep={sweep}"], tmp_path)
    assert spec.name == sweep and spec.run_dir == str(tmp_path)
    plans = expand(spec)
    assert plans and len({p.config_hash for p in plans}) == len(plans)
    for p in plans:
        argv = get_engine(spec).launch_plan(p, 30000).argv
        assert argv[1:3] == ["-m", "grid.twin"] and all(isinstance(a, str) for a in argv)
    sg = spec.model_copy(update={"engine": spec.engine.model_copy(update={"kind": "sglang", "version": "0.5.23"})})
    launched = 0
    for p in plans:
        if p.deployment is not None and get_engine(sg).deployment_refusal(p) is not None:
            continue  # refused before launch (a deployment larger than the hardware, or across nodes): no command
        launched += 1
        plan = get_engine(sg).launch_plan(p, 30000)
        # a deployment: each server's command, and SGLang's router (the trial's endpoint) in argv
        servers = [m.argv for m in plan.members] if plan.members else [plan.argv]
        assert plan.members or p.deployment is None
        if plan.members:
            assert plan.argv[1:3] == ["-m", "sglang_router.launch_router"]
        for argv in servers:
            assert argv[1:3] == ["-m", "sglang.launch_server"]
            assert "--nsa-prefill-backend" not in argv and "--cuda-graph-max-bs" not in argv
    assert launched > 0


def test_nsa_sweep_is_every_pair(tmp_path):
    plans = expand(spec_for(["+sweep=nsa_backends"], tmp_path))
    assert len(plans) == 49
    assert plans[0].label == "prefill=flashmla_sparse decode=flashmla_sparse"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("hardware", HARDWARE)
def test_every_model_and_hardware_validates(model, hardware, tmp_path):
    # a CPU host runs real SGLang (the twin refuses it: tests/engines/test_sglang_plan.py)
    cpu = ["engine=sglang", "engine.version=0.5.23", "model.path=/models/x"] if hardware == "cpu_host" else []
    spec = spec_for([f"model={model}", f"hardware={hardware}", *cpu], tmp_path)
    assert spec.model.num_layers > 0 and spec.hardware.gpu_count >= 1
    assert spec.server["tp_size"] == spec.hardware.gpu_count


def test_seed_session_experiment_composes(tmp_path):
    spec = spec_for(["+experiment=seed_session"], tmp_path)
    plans = expand(spec)
    assert [p.label for p in plans][:2] == ["single_stream_2048", "burst32_no_graph"]
    assert plans[0].load.output_len == 2048 and plans[1].load.range_ratio == 0.0
    assert spec.experiment["kind"] == "seed_replay"


def test_ordinary_overrides(tmp_path):
    spec = spec_for(["+sweep=mem_fraction", "~sweep.load", "load.concurrency=[1,8]", "sweep.grid.mem_fraction_static=[0.8,0.9]"],
                    tmp_path)
    plans = expand(spec)
    assert [p.settings["mem_fraction_static"] for p in plans] == [0.8, 0.9]
    assert plans[0].load.concurrency == [1, 8]


def test_command_line_load_wins_over_the_sweeps_load(tmp_path):
    # conf/sweep/cuda_graph.yaml sets load.concurrency [8, 48, 96, 160]; the user's load.concurrency was typed last
    spec = spec_for(["+sweep=cuda_graph", "load.concurrency=[1,8]"], tmp_path)
    assert spec.sweep.load == {}
    assert [p.load.concurrency for p in expand(spec)] == [[1, 8]] * 6
    # the sweep's block still applies where the command line says nothing of that key
    kept = spec_for(["+sweep=cuda_graph", "load.repeats=2"], tmp_path)
    assert kept.sweep.load == {"concurrency": [8, 48, 96, 160]}
    assert {(tuple(p.load.concurrency), p.load.repeats) for p in expand(kept)} == {((8, 48, 96, 160), 2)}


def test_command_line_load_wins_notes_what_it_replaced():
    cfg = {"load": {"concurrency": [1, 8]}, "sweep": {"name": "s", "load": {"concurrency": [8, 48], "input_len": 64}}}
    out, notes = command_line_load_wins(cfg, ["+sweep=s", "load.concurrency=[1,8]", "sweep.load.input_len=32"])
    assert out["sweep"]["load"] == {"input_len": 64}
    assert notes == ["load.concurrency=[1,8] from the command line replaces the sweep's [8, 48]"]
    assert cfg["sweep"]["load"] == {"concurrency": [8, 48], "input_len": 64}  # the input is not changed
    assert command_line_load_wins(cfg, ["sweep.load.concurrency=[1]", "load.repeats=2"]) == (cfg, [])
    assert command_line_load_wins({"load": {}}, ["load.concurrency=[1]"]) == ({"load": {}}, [])


@pytest.mark.parametrize("overrides, message", [
    (["+server.bogus=1"], "server.bogus: unknown setting; allowed settings: attention_backend, "),
    (["+sweep=cuda_graph", "+sweep.grid.cuda_graphh=[true]"],
     "server.cuda_graphh: unknown setting; did you mean server.cuda_graph.; allowed settings: attention_backend, "),
    (["server.tp_size=abc"], "server.tp_size: expected an integer"),
    (["+sweep=nsa_backends", "sweep.grid.dsa_decode_backend=[nope]"],
     "server.dsa_decode_backend='nope' is not accepted by SGLang 0.5.9; allowed values: flashmla_sparse"),
    (["engine=sglang", "model.path=null"], "model.path: required with engine=sglang"),
    (["engine.kind=tpu"], "engine.kind"),
    (["+load.bogus=3"], "load.bogus: unknown key"),
    # a sweep's load block is checked as load settings: the closest key is a load setting, named from sweep.load
    (["+sweep=cuda_graph", "+sweep.load.concurency=[8]"],
     "sweep.load.concurency: unknown key; did you mean sweep.load.concurrency?"),
    (["+sweep=cuda_graph", "+sweep.load.repeat=3"], "sweep.load.repeat: unknown key; did you mean sweep.load.repeats?"),
    (["load.concurrency=[8,64,8]"], "load.concurrency: 8 listed more than once in [8, 64, 8]; to measure a level "
                                    "again set load.repeats"),
    (["load.concurrency=[]", "load.request_rate=[4,4.0]"], "load.request_rate: 4.0 listed more than once"),
    (["load.concurrency=8"], "load.concurrency: expected a list, got 8: write load.concurrency=[8]"),
    (["load.concurrency=[0]"], "load.concurrency: every concurrency level must be an integer >= 1, got [0]"),
    (["load.request_rate=[4,-2]"], "load.request_rate: every request rate must be > 0 req/s"),
    (["load.request_rate=[nan]"], "load.request_rate: every request rate must be > 0 req/s"),
    (["objective.kind=nope"], "objective.kind: unknown objective 'nope'; allowed: max_capacity, max_goodput, "
                              "max_output_throughput, min_tpot"),
    (["objective=max_capacity", "objective.slo.ttft_ms=null", "objective.slo.tpot_ms=null"],
     "objective.kind=max_capacity needs an SLO: set objective.slo.ttft_ms, tpot_ms or e2e_ms"),
    # without SLOs every goodput is 0: the whole sweep ran to report "goodput needs an SLO" for each configuration
    (["objective=max_goodput", "objective.slo.ttft_ms=null", "objective.slo.tpot_ms=null"],
     "objective.kind=max_goodput needs an SLO: set objective.slo.ttft_ms, tpot_ms or e2e_ms (goodput counts the "
     "requests per second that meet them)"),
    (["objective.slo.ttft_ms=-1"], "objective.slo.ttft_ms"),
    (["+sweep=mem_fraction", "sweep.grid.mem_fraction_static=[]"], "sweep.grid.mem_fraction_static"),
])
def test_bad_input_is_refused_with_key(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        spec_for(overrides, tmp_path)


def test_versions_outside_the_catalog_get_a_note():
    from grid.releases.flags import NEWEST_KNOWN, catalog_note

    assert catalog_note("0.5.9") is None and catalog_note(NEWEST_KNOWN) is None
    assert catalog_note(f"{NEWEST_KNOWN}.post1") is None
    assert "newer than the newest release" in catalog_note("9.9.9")
    assert "older than the oldest release" in catalog_note("0.4.10")
    assert catalog_note("external") is None  # engine=openai without a version: nothing is planned from the catalog


def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="run_dir: .*a-file/run cannot be written"):
        spec_for([], blocker / "run")


def test_sweep_level_load_applies_under_each_entrys_load(tmp_path):
    from grid.sweep.space import expand

    spec = spec_for(["+sweep=schedule_policy"], tmp_path)
    plans = expand(spec)
    assert len(plans) == 5 and {p.settings["max_running_requests"] for p in plans} == {16}
    for p in plans:
        assert p.load.concurrency == [] and p.load.request_rate == [0.5, 1.5]
        assert p.load.range_ratio == 0.25 and p.load.num_prompts == 96
    over = spec_for(["+sweep=schedule_policy", "~sweep.grid",
                     "+sweep.configs=[{label: x, schedule_policy: lof, load: {num_prompts: 8}}]"], tmp_path)
    (only,) = expand(over)
    assert only.load.num_prompts == 8 and only.load.request_rate == [0.5, 1.5] and only.label == "x"
    with pytest.raises(ConfigError, match=r"sweep\.load\.request_rate: every request rate must be > 0"):
        spec_for(["+sweep=schedule_policy", "sweep.load.request_rate=[0]"], tmp_path)


def test_each_shipped_sweep_loads_what_it_varies(tmp_path):
    mem = expand(spec_for(["+sweep=mem_fraction"], tmp_path))[0].load
    assert mem.concurrency == [64, 128] and (mem.input_len, mem.output_len) == (4096, 512)
    assert 128 * (4096 + 512) > 498_000        # more than the largest pool the seed measured (0.92: 498K tokens)
    graphs = expand(spec_for(["+sweep=cuda_graph"], tmp_path))
    caps = [p.settings.get("cuda_graph_max_bs") for p in graphs if p.settings.get("cuda_graph_max_bs")]
    assert max(graphs[0].load.concurrency) > max(caps) and min(graphs[0].load.concurrency) < min(caps)


@pytest.mark.parametrize("typed,kept", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("localhost:8000", "http://localhost:8000"),
    ("  http://gpu-node:30000/ ", "http://gpu-node:30000"),
    ("http://gpu-node:8000/v1", "http://gpu-node:8000"),              # the OpenAI SDK's base_url
    ("http://gpu-node:8000/v1/", "http://gpu-node:8000"),
    ("https://gw.example.com/v1/chat/completions", "https://gw.example.com"),
    ("http://127.0.0.1:30000/generate", "http://127.0.0.1:30000"),
    ("http://gw.example.com/sglang/v1", "http://gw.example.com/sglang"),  # a gateway's prefix stays
    ("[::1]:8000", "http://[::1]:8000"),
])
def test_a_server_address_as_users_type_it(typed, kept, tmp_path):
    from grid.config.schema import server_address

    assert server_address(typed) == kept
    spec = spec_for(["engine=openai", f"engine.base_url='{typed}'"], tmp_path)
    assert spec.engine.base_url == kept


@pytest.mark.parametrize("typed,why", [
    ("ftp://host:21", "the scheme must be http or https"),
    ("http://:8000", "no host"),
    ("http://host:8000/v1?x=1", "no query or fragment"),
    ("http://host:80a", "the port is not a number"),
])
def test_a_server_address_that_cannot_be_one_names_the_key(typed, why, tmp_path):
    with pytest.raises(ConfigError, match=rf"engine.base_url=.*{why}"):
        spec_for(["engine=openai", f"engine.base_url='{typed}'"], tmp_path)
