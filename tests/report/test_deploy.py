"""The deployment files of the best configuration (grid/report/deploy.py): parsed back, as a user's tools read them."""

from __future__ import annotations

import shlex
import subprocess

import yaml

from grid.report.deploy import Server, files

SG = ("python", "-m", "sglang.launch_server", "--model-path", "openai/gpt-oss-120b")


def _pd() -> list[Server]:
    prefill = [Server("prefill", i, 0, (i,), (*SG, "--tp-size", "1", "--disaggregation-mode", "prefill"))
               for i in range(8)]
    decode = [Server("decode", 8 + j, 1, tuple(range(4 * j, 4 * j + 4)),
                     (*SG, "--tp-size", "4", "--disaggregation-mode", "decode")) for j in range(2)]
    return prefill + decode


def _files(servers, policy="round_robin"):
    return files("pd topology 8P2D", servers, policy, image="lmsysorg/sglang:latest",
                 entrypoint="python -m grid.run +sweep=pd_topology engine=sglang", hardware="h200_x16_roce",
                 nodes=2, gpus_per_node=8)


def test_a_prefill_decode_deployment_launches_each_server_on_its_gpus_and_the_router_in_front(tmp_path):
    out = _files(_pd())
    script = tmp_path / "launch.sh"
    script.write_text(out["launch.sh"])
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    lines = out["launch.sh"].splitlines()
    assert "  CUDA_VISIBLE_DEVICES=3 " + shlex.join([*SG, "--tp-size", "1", "--disaggregation-mode", "prefill",
                                                       "--host", "0.0.0.0", "--port", "30003",
                                                       "--disaggregation-bootstrap-port", "9001"]) + " &" in lines
    assert any(line.startswith("  CUDA_VISIBLE_DEVICES=4,5,6,7 ") and "--port 30009" in line for line in lines)
    router = next(line for line in lines if "sglang_router.launch_router" in line).split()
    assert router[3] == "--pd-disaggregation" and router.count("--prefill") == 8 and router.count("--decode") == 2
    assert router[router.index("--prefill") + 1:router.index("--prefill") + 3] == [
        '"http://${NODE0_HOST:-127.0.0.1}:30000"', "8998"]
    assert '"http://${NODE1_HOST:-127.0.0.1}:30009"' in router and router[router.index("--policy") + 1] == "round_robin"


def test_the_manifests_hold_every_role_its_gpus_and_the_router_after_them():
    out = _files(_pd())
    lws = list(yaml.safe_load_all(out["lws.yaml"]))
    assert [(d["kind"], d["metadata"]["name"], d["spec"]["replicas"]) for d in lws] == [
        ("LeaderWorkerSet", "pd-topology-8p2d-prefill", 8), ("LeaderWorkerSet", "pd-topology-8p2d-decode", 2)]
    container = lws[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 4}} and "--disaggregation-mode" in container["command"]
    rbg = yaml.safe_load(out["rbg.yaml"])
    assert (rbg["apiVersion"], rbg["kind"]) == ("workloads.x-k8s.io/v1alpha1", "RoleBasedGroup")
    roles = {r["name"]: r for r in rbg["spec"]["roles"]}
    assert list(roles) == ["prefill", "decode", "router"] and roles["router"]["dependencies"] == ["prefill", "decode"]
    command = roles["router"]["template"]["spec"]["containers"][0]["command"]
    assert "http://pd-topology-8p2d-prefill-7:30007" in command and "http://pd-topology-8p2d-decode-1:30009" in command
    job = yaml.safe_load(out["rayjob.yaml"])
    workers = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert (job["kind"], job["spec"]["entrypoint"]) == ("RayJob", "python -m grid.run +sweep=pd_topology engine=sglang")
    assert workers["replicas"] == 2 and workers["rayStartParams"]["resources"] == \
        """'{"grid_node": 1, "grid_hw:h200_x16_roce": 1}'"""
    assert workers["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 8}}


def test_one_server_needs_no_router():
    out = _files([Server("aggregated", 0, 0, tuple(range(8)), (*SG, "--tp-size", "8"))], policy=None)
    assert "sglang_router" not in out["launch.sh"] and "router" not in out["rbg.yaml"]
    assert [r["name"] for r in yaml.safe_load(out["rbg.yaml"])["spec"]["roles"]] == ["aggregated"]


def test_a_server_spanning_two_nodes_starts_on_each_with_its_rank(tmp_path):
    argv = (*SG, "--tp-size", "16", "--nnodes", "2")
    out = _files([Server("aggregated", 0, 0, tuple(range(8)), argv, nodes=2)], policy=None)
    script = tmp_path / "launch.sh"
    script.write_text(out["launch.sh"])
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    starts = [line for line in out["launch.sh"].splitlines() if "sglang.launch_server" in line]
    assert len(starts) == 2 and all(line.count("--nnodes") == 1 for line in starts)
    assert '--dist-init-addr "${NODE0_HOST:-127.0.0.1}:20000" --nnodes 2 --node-rank 1' in starts[1]
    lws = yaml.safe_load(out["lws.yaml"])
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    command = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
    assert command[command.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    assert command[command.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
