"""Node selection by hardware, the NVML cross-check, trial resources and the run-directory status (no Ray)."""

import os
import socket

import pyarrow as pa
import pyarrow.parquet as pq

from grid.cluster.node import hardware_mismatch, hw_resource, node_hardware, pick_nodes
from grid.config.schema import RaySpec
from grid.status import clear_running, main, mark_running, read_status, render, write_plan
from grid.storage.schema import LOAD_POINTS_SCHEMA
from grid.plan import TrialPlan


def node(i, *hw):
    return {"NodeID": f"{i:02d}" * 28, "Alive": True,
            "Resources": {"grid_node": 1.0, "CPU": 4.0, **{hw_resource(h): 1.0 for h in hw}}}


def test_sweep_nodes_are_those_of_its_hardware():
    nodes = [node(1, "h200_x8"), node(2, "rtx_pro_6000_x8"), node(3, "h200_x8")]
    assert node_hardware(nodes[0]["Resources"]) == ["h200_x8"]
    chosen, why = pick_nodes(nodes, "h200_x8", any_hardware=False)
    assert [n["NodeID"][:2] for n in chosen] == ["01", "03"] and why is None
    assert pick_nodes(nodes, "h200_x8", any_hardware=True)[0] == nodes


def test_no_matching_node_names_what_the_nodes_declare():
    chosen, why = pick_nodes([node(1, "h200_x8"), node(2, "h200_x8"), node(3)], "a100_x1", any_hardware=False)
    assert chosen == []
    assert "hardware=a100_x1 (resource 'grid_hw:a100_x1')" in why
    assert "(none): 1 node, h200_x8: 2 nodes" in why and "ray.any_hardware=true" in why


def test_nvml_names_checked_against_the_declared_hardware():
    assert hardware_mismatch("NVIDIA H200", ["NVIDIA H200"] * 8) is None
    assert hardware_mismatch("NVIDIA H200", None) is None  # the twin: no NVML to ask
    assert hardware_mismatch("NVIDIA H200", ["NVIDIA H100 80GB HBM3"]) == (
        "its GPUs are NVIDIA H100 80GB HBM3 (NVML), not NVIDIA H200")


def test_trials_request_the_sweep_hardware_unless_any_hardware(monkeypatch):
    from grid.sweep.driver import HW_REQUEST, trial_resources

    class Spec:
        hardware = type("H", (), {"name": "h200_x8"})
        ray = RaySpec()

    assert trial_resources(Spec) == {"cpu": 0, "grid_node": 1, "grid_hw:h200_x8": HW_REQUEST}
    Spec.ray = RaySpec(any_hardware=True)
    assert trial_resources(Spec) == {"cpu": 0, "grid_node": 1}


def test_a_trial_of_a_deployment_across_nodes_holds_a_slot_on_each(tmp_path):
    from rich.console import Console

    from grid.compose import compose_spec
    from grid.sweep.driver import HW_REQUEST, Plan, too_few_nodes, trial_placement
    from grid.sweep.space import expand

    spec = compose_spec(["+sweep=pd_topology", "engine=sglang", "engine.version=0.5.23", "hardware=h200_x16_roce",
                         f"model.path={tmp_path}/m", "engine.python=py",
                         "sweep.deployments=[{groups:[{role:aggregated,count:16,tp:1}],router_policy:round_robin},"
                         "{groups:[{role:aggregated,count:8,tp:1}],router_policy:round_robin}]"], tmp_path / "run")
    one = {"grid_node": 1.0, "grid_hw:h200_x16_roce": HW_REQUEST}
    assert (trial_placement(spec, 1).bundles, trial_placement(spec, 1).strategy) == ([one], "PACK")
    assert (trial_placement(spec, 2).bundles, trial_placement(spec, 2).strategy) == ([one, one], "STRICT_SPREAD")
    plans = expand(spec)
    plan = Plan(list(plans), list(plans), {})
    console = Console(record=True, width=200)
    assert too_few_nodes(spec, plan, 2, console) == [] and len(plan.todo) == len(plans)
    wide = [p.config_hash for p in plans if p.deployment.servers == 16]
    assert too_few_nodes(spec, plan, 1, console) == wide and len(wide) == len(plans) // 2
    assert all(p.deployment.servers == 8 for p in plan.todo)
    assert "needs 2 nodes of hardware=h200_x16_roce; the Ray cluster has 1 (it runs when" in \
        console.export_text()
    # with a search: left out of its queue with the reason (search.json, grid.status), not counted as measured
    from grid.engines.base import get_engine
    from grid.sweep.driver import plan_search

    plan = Plan(list(plans), list(plans), {})
    search = plan_search(spec, get_engine(spec), plan, "0.5.23")
    assert too_few_nodes(spec, plan, 1, console) == wide
    assert search.policy.skipped == {wide[0]: "needs 2 nodes of hardware=h200_x16_roce; the Ray cluster has 1"}
    assert wide[0] not in search.policy.measured and wide[0] not in search.policy.issued
    assert wide[0] not in [c.config_hash for c in search.policy.queue]


def _plan(i):
    return TrialPlan(index=i, settings={}, load=None, label=f"cfg={i}", config_hash=f"h{i:011d}")


def test_status_counts_done_running_left_per_node(tmp_path, capsys):
    plans = [_plan(i) for i in range(4)]
    write_plan(tmp_path, plans, "run1", "h200_x8")
    row = {n: None for n in LOAD_POINTS_SCHEMA.names}
    lp = tmp_path / "parquet" / "load_points"
    lp.mkdir(parents=True)
    for p, status, host in ((plans[0], "ok", "a"), (plans[1], "failed", "b"), (plans[2], "skipped", "b")):
        rows = [{**row, "config_hash": p.config_hash, "trial_status": status, "node_hostname": host,
                 "node_id": host * 56}]
        pq.write_table(pa.Table.from_pylist(rows, schema=LOAD_POINTS_SCHEMA), lp / f"{p.config_hash}.parquet")
    mark_running(tmp_path, plans[3], {"node_id": "c" * 56, "node_hostname": "c"}, "t3")
    status = read_status(tmp_path)
    assert status.driver_alive is True  # this process wrote the plan
    assert [m["label"] for m in status.running] == ["cfg=3"] and status.left == ["cfg=2"]  # skipped runs again
    text = render(status)
    assert text.splitlines()[0] == "2 done, 1 running, 1 left of 4 configurations"
    assert "  node c (cccccccccccc): 0 done; running: cfg=3" in text and "  node b (bbbbbbbbbbbb): 2 done" in text
    clear_running(tmp_path, plans[3])
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("2 done, 0 running, 2 left of 4")


def test_status_counts_what_the_search_did_not_launch_apart_from_what_is_left(tmp_path):
    import json

    plans = [_plan(i) for i in range(4)]
    write_plan(tmp_path, plans, "run1", "h200_x8")
    row = {n: None for n in LOAD_POINTS_SCHEMA.names}
    lp = tmp_path / "parquet" / "load_points"
    lp.mkdir(parents=True)
    rows = [{**row, "config_hash": plans[0].config_hash, "trial_status": "ok", "node_hostname": "a", "node_id": "a" * 56}]
    pq.write_table(pa.Table.from_pylist(rows, schema=LOAD_POINTS_SCHEMA), lp / f"{plans[0].config_hash}.parquet")
    known = "known to fail here, and a configuration already measured a score"
    (tmp_path / "search.json").write_text(json.dumps({"search": "twin_guided", "skipped": {
        plans[1].config_hash: {"label": "cfg=1", "reason": known},
        plans[2].config_hash: {"label": "cfg=2", "reason": known},
        plans[3].config_hash: {"label": "cfg=3", "reason": "the twin forecasts no load point meeting the SLOs"}}}))
    status = read_status(tmp_path)
    assert status.left == [] and status.not_launched == {"cfg=1": known, "cfg=2": known,
                                                         "cfg=3": "the twin forecasts no load point meeting the SLOs"}
    assert render(status).splitlines() == [
        "1 done, 0 running, 0 left, 3 not launched by the search of 4 configurations; complete: nothing left to run",
        "  done: ok 1",
        "  node a (aaaaaaaaaaaa): 1 done",
        f"  not launched by the search: 2 ({known})",
        "  not launched by the search: 1 (the twin forecasts no load point meeting the SLOs)"]
    # a configuration the search held back in an earlier run but that is running now is not "not launched"
    mark_running(tmp_path, plans[3], {"node_id": "c" * 56, "node_hostname": "c"}, "t3")
    assert render(read_status(tmp_path)).splitlines()[0] == (
        "1 done, 1 running, 0 left, 2 not launched by the search of 4 configurations")


def test_status_of_a_killed_driver_says_interrupted(tmp_path):
    plans = [_plan(0)]
    write_plan(tmp_path, plans, "run1", "h200_x8")
    import json

    path = tmp_path / "status" / "plan.json"
    data = json.loads(path.read_text())
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)  # a pid that no longer lives
    data.update(driver_pid=child, driver_host=socket.gethostname())
    path.write_text(json.dumps(data))
    mark_running(tmp_path, plans[0], {"node_id": "a" * 56, "node_hostname": "a"}, "t0")
    assert render(read_status(tmp_path)).startswith("0 done, 1 interrupted (driver gone), 0 left of 1")


def test_status_without_a_sweep_exits_2(tmp_path):
    assert main([str(tmp_path)]) == 2
