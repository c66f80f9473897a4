"""Deployments in the search space (sweep.deployments): each configuration tried as aggregated replicas or
prefill-decode splits, their identity and labels, the checks before launch and the twin's forecast of each
(grid/sweep/space.py, grid/search/knowledge.py, grid/search/predict.py, grid/twin/deployment.py)."""

from __future__ import annotations

import pytest

from grid.compose import compose_spec
from grid.config.schema import ConfigError
from grid.engines.base import get_engine
from grid.search.knowledge import assess
from grid.search.predict import forecast
from grid.sweep.space import config_identity, expand

FEW = ["+sweep=pd_topology", "sweep.load.num_prompts=540"]


def test_a_sweep_of_deployments_plans_one_trial_each_with_its_label_and_identity(tmp_path):
    spec = compose_spec(FEW, str(tmp_path))
    plans = expand(spec)
    assert [p.label for p in plans] == ["1x TP8", "16x TP1", "4x TP4", "8P2D P:TP1 D:TP4", "4P2D P:TP2 D:TP4",
                                        "12P1D P:TP1 D:TP4", "8P2D P:TP1 D:TP8", "8P2D P:TP1 D:TP4 nixl",
                                        "1P1D P:TP8 D:TP8"]
    assert len({p.config_hash for p in plans}) == len(plans)
    # one server is an ordinary trial of its shape's settings, with the identity such a trial always had
    one = plans[0]
    assert one.deployment is None and one.settings["tp_size"] == 8
    assert "deployment" not in config_identity(spec, one.settings, one.load)
    pd = plans[3]
    assert pd.deployment is not None and pd.deployment.gpus == 16 and pd.deployment.router_policy == "round_robin"
    decode = pd.deployment.groups[1]
    assert pd.role_settings(decode)["tp_size"] == 4 and pd.settings["tp_size"] == 8  # the role's shape over the base


def test_a_deployment_that_is_not_one_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"sweep.deployments\[0\]: a disaggregated deployment needs prefill and "
                                          r"decode servers; it has no decode server"):
        expand(compose_spec(["+sweep=pd_topology", "sweep.deployments=[{groups: [{role: prefill, count: 2}], "
                             "router_policy: random}]"], str(tmp_path)))


def test_deployments_that_cannot_run_are_refused_before_launch_and_the_rest_forecast(tmp_path):
    spec = compose_spec(FEW, str(tmp_path))
    plans = {p.label: p for p in expand(spec)}
    known = assess(spec, get_engine(spec), list(plans.values()), "0.5.23")
    refused = {label: known[p.config_hash].refused for label, p in plans.items() if known[p.config_hash].refused}
    assert refused == {
        "8P2D P:TP1 D:TP8": "deployment 8P2D P:TP1 D:TP8 needs 24 GPUs; hardware h200_x16_roce has 16 (2 node(s) x 8)",
        "1P1D P:TP8 D:TP8": "the prefill server TP8: SGLang 0.5.23 would refuse it: Prefill server does not support "
                            "'fake' as the transfer backend",
        "8P2D P:TP1 D:TP4 nixl": "prefill TP1 to decode TP4: SGLang 0.5.23 starts both but fails their first KV "
                                 "transfer: PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA "
                                 "hybrid models yet. (rule pd_swa_hetero_attn_tp_nixl: disaggregation/nixl/conn.py (the "
                                 "SWA state sent per attention-TP rank))"}
    # the forecast of a deployment is its simulation: the same score as replaying its point through its servers
    from grid.metrics.loadpoint import SLO, summarize
    from grid.plan import point_of
    from grid.twin.deployment import deployment_model

    pd = plans["8P2D P:TP1 D:TP4"]
    f = forecast(spec, pd, "0.5.23")
    assert f is not None and f.gpus == 16
    model = deployment_model(pd.deployment, spec.model, spec.hardware, "0.5.23", pd.settings)
    slo = spec.objective.slo
    row = summarize(model.replay(point_of(pd.load, "rate", 45.0), 5000, 250),
                    SLO(slo.ttft_ms, slo.tpot_ms, slo.e2e_ms, slo.percentile))
    assert f.value == pytest.approx(row["goodput_req_per_s"], rel=1e-12) and f.value > 30
    # the aggregated replicas miss the end-to-end SLO at this rate, the split meets it (llm-d's verdict)
    assert forecast(spec, plans["16x TP1"], "0.5.23").value is None


def test_the_verdict_names_the_best_of_each_kind_and_what_disaggregation_changes(tmp_path):
    from grid.report.disaggregation import pd_verdict

    plans = {p.label: p for p in expand(compose_spec(FEW, str(tmp_path)))}
    one, replicas, pd = plans["1x TP8"], plans["16x TP1"], plans["8P2D P:TP1 D:TP4"]
    scores = {one.config_hash: 30.0, replicas.config_hash: 40.0, pd.config_hash: 44.0}
    assert pd_verdict([one, replicas, pd], scores, True, "req/s") == (
        "Aggregated vs disaggregated (the twin's forecast): best aggregated: 16x TP1 (40 req/s); best disaggregated: "
        "8P2D P:TP1 D:TP4 (44 req/s): disaggregation gains 10.0%")
    assert pd_verdict([one, replicas, pd], scores, False, "ms").endswith(
        "best aggregated: 1x TP8 (30 ms); best disaggregated: 8P2D P:TP1 D:TP4 (44 ms): disaggregation loses 46.7%")
    assert pd_verdict([one, pd], {pd.config_hash: 44.0}, True, "req/s").endswith(
        "best aggregated: none meets the SLOs (1x TP8); best disaggregated: 8P2D P:TP1 D:TP4 (44 req/s): only "
        "disaggregation meets the SLOs")
    assert "best aggregated: none of the 2 meets the SLOs" in pd_verdict([one, replicas, pd], {pd.config_hash: 44.0},
                                                                        True, "req/s")
    assert "best aggregated: none was tried" in pd_verdict([pd], {pd.config_hash: 44.0}, True, "req/s")
    assert pd_verdict([one, replicas], scores, True, "req/s") is None   # nothing disaggregated to compare


@pytest.mark.integration
def test_the_pd_topology_sweep_measures_deployments_on_the_twin_and_names_the_best_of_each_kind(tmp_path):
    """``+sweep=pd_topology`` end to end on the twin: the dry run places, refuses and forecasts; the run measures the
    aggregated baseline and the disaggregated deployments the search picks (each as one twin serving the deployment
    behind its router), records which deployment each row is, and the report names the best of each kind and writes
    the deployment files of the winner."""
    import json

    import pyarrow.parquet as pq
    import yaml

    from tests.grid_cli import run_grid

    out = " ".join(run_grid(*FEW, "dry_run=true", run_dir=tmp_path / "dry").stdout.split())
    assert "8P2D P:TP1 D:TP8 (" in out and "refused: deployment 8P2D P:TP1 D:TP8 needs 24 GPUs" in out
    assert "[decode 9: node 1, GPUs 4,5,6,7]" in out and "--disaggregation-mode decode" in out
    assert "twin forecast: goodput_req_per_s" in out
    assert "Aggregated vs disaggregated (the twin's forecast): best aggregated" in out
    assert "disaggregation gains" in out or "only disaggregation meets the SLOs" in out
    run_dir = tmp_path / "run"
    text = " ".join(run_grid(*FEW, run_dir=run_dir).stdout.split())
    points = pq.read_table(run_dir / "parquet" / "load_points").to_pylist()
    measured = {r["label"]: r for r in points if r["status"] != "not_run"}
    # the aggregated baseline is measured whatever the twin forecasts (the one with the most GPUs: 16x TP1)
    assert "16x TP1" in measured and any(" D:" in label for label in measured)
    assert json.loads(measured["16x TP1"]["deployment_json"])["groups"][0] == {
        "role": "aggregated", "count": 16, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}}
    assert all(r["status"] == "ok" and r["failed"] == 0 for r in measured.values())
    assert "Best configuration: 8P2D P:TP1 D:TP4" in text or "Best configuration: 4P2D P:TP2 D:TP4" in text
    assert "Aggregated vs disaggregated (measured): best aggregated: none meets the SLOs (16x TP1); best " \
           "disaggregated" in text and "only disaggregation meets the SLOs" in text
    assert "10 servers on 16 GPUs behind SGLang's router" in text or "6 servers on 16 GPUs" in text
    # the command under the answer runs the launch script on each node, not one server's command line
    assert "NODE=<this node: 0, 1> NODE0_HOST=<address of node 0> NODE1_HOST=<address of node 1> bash " \
           "deploy/launch.sh" in text and "-m grid.twin" not in text
    deploy = run_dir / "deploy"
    script = (deploy / "launch.sh").read_text()
    assert script.count("--disaggregation-mode prefill") + script.count("--disaggregation-mode decode") >= 6
    assert "sglang_router.launch_router" in script and "--pd-disaggregation" in script
    rbg = list(yaml.safe_load_all((deploy / "rbg.yaml").read_text()))
    assert {role["name"] for doc in rbg if doc for role in doc["spec"]["roles"]} >= {"prefill", "decode", "router"}


def test_the_aggregated_baseline_is_launched_first_whatever_its_forecast(tmp_path):
    """No aggregated deployment of pd_topology meets the SLOs in the twin's forecast, so the search would skip them
    all; the one with the most GPUs (16x TP1, the first of the two with 16) is measured first anyway."""
    from grid.search.plan import build
    from grid.search.policy import DONE

    spec = compose_spec(FEW, str(tmp_path))
    plans = expand(spec)
    sp = build(spec, get_engine(spec), plans, "0.5.23")
    label = {p.config_hash: p.label for p in plans}
    assert [label[c.config_hash] for c in sp.policy.candidates if c.baseline] == ["16x TP1"]
    assert sp.forecasts[next(p.config_hash for p in plans if p.label == "16x TP1")].value is None
    issued = []
    while (h := sp.policy.next()) != DONE:
        if h in sp.known and sp.known[h].refused:
            continue
        issued.append(label[h])
        sp.policy.running.discard(h)
        sp.policy.record(h, 40.0 if " D:" in label[h] else None)
    assert issued[0] == "16x TP1" and all(" D:" in x for x in issued[1:])
