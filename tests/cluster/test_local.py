"""The arguments grid gives ray.init (grid/cluster/local.py): its own loopback-only local cluster by default,
whatever RAY_ADDRESS or a `ray start` says; a free dashboard port when the configured one is held."""

import socket

import pytest

from grid.cluster.local import LOOPBACK_SWITCH, ray_init_args
from grid.config.schema import RaySpec
from tests.timing import slack


def test_default_starts_own_local_cluster_on_loopback(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    init = ray_init_args(RaySpec(dashboard=False, num_cpus=3), "grid", "grid_node")
    assert init.local and init.kwargs["address"] == "local"  # never the "latest cluster" nor RAY_ADDRESS
    assert init.kwargs["_node_ip_address"] == "127.0.0.1" and init.env == {LOOPBACK_SWITCH: "0"}
    assert init.kwargs["num_cpus"] == 3 and init.kwargs["resources"] == {"grid_node": 1}
    assert "dashboard_port" not in init.kwargs and init.notes == []
    # the job's workers (server actor, trials, the servers they start) at niceness 0, not Ray's 15
    assert init.kwargs["runtime_env"] == {"env_vars": {"RAY_worker_niceness": "0"}}


def test_ray_address_env_is_ignored_and_said(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    init = ray_init_args(RaySpec(dashboard=False), "grid", "grid_node")
    assert init.kwargs["address"] == "local"
    assert init.notes == ["RAY_ADDRESS=10.1.2.3:6379 is ignored: with ray.address unset grid starts its own local "
                          "Ray cluster (set ray.address to join a cluster)"]


def test_joining_a_cluster_is_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    init = ray_init_args(RaySpec(address="auto"), "grid", "grid_node")
    assert not init.local and init.kwargs["address"] == "auto" and init.env == {}
    assert not {"num_cpus", "resources", "_node_ip_address", "dashboard_port"} & set(init.kwargs)
    assert init.kwargs["runtime_env"] == {"env_vars": {"RAY_worker_niceness": "0"}}  # a joined cluster's too


def test_held_dashboard_port_moves_to_a_free_one(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    held = holder.getsockname()[1]
    try:
        init = ray_init_args(RaySpec(dashboard_port=held), "grid", "grid_node")
        port = init.kwargs["dashboard_port"]
        assert port != held and init.kwargs["dashboard_host"] == "127.0.0.1"
        assert init.notes == [f"ray.dashboard_port {held} is in use by another process; the Ray dashboard uses "
                              f"port {port}"]
    finally:
        holder.close()
    free = ray_init_args(RaySpec(dashboard_port=held), "grid", "grid_node")
    assert free.kwargs["dashboard_port"] == held and free.notes == []


def test_an_address_where_nothing_listens_is_refused_at_once():
    import time

    from grid.cluster.local import RayInit, RayStartError, gcs_unreachable, start_ray

    # ray.init(address="127.0.0.1:1") retried for more than 6 minutes (Ray 2.60) instead of exiting 2 as the README says
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # bound once, now nothing listens there
    t0 = time.monotonic()
    with pytest.raises(RayStartError) as err:
        start_ray(RayInit({"address": f"127.0.0.1:{port}"}))
    assert str(err.value) == (f"cannot join the Ray cluster at ray.address=127.0.0.1:{port}: nothing answers at "
                              f"127.0.0.1:{port} (Connection refused)")
    assert err.value.setting == "ray.address" and time.monotonic() - t0 < 5 * slack()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    try:
        assert gcs_unreachable(f"127.0.0.1:{listening.getsockname()[1]}") is None
        assert gcs_unreachable(f"ray://127.0.0.1:{listening.getsockname()[1]}") is None
    finally:
        listening.close()
    assert gcs_unreachable("auto") is None and gcs_unreachable("local") is None


def test_rays_token_enabled_notice_is_dropped_and_its_disabled_warning_kept():
    """Ray 2.59+ logs a WARNING each time ray.init starts a local cluster with token authentication on; grid's
    dashboard line says the same, so the filter start_ray installs drops it (Ray's own functions log both here)."""
    import logging

    from ray._private.authentication import authentication_token_setup as setup

    from grid.cluster.local import TOKEN_NOTICE, keep_ray_record

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(TOKEN_NOTICE[0])
    assert logger is setup.logger
    logger.addHandler(handler)
    logger.addFilter(keep_ray_record)
    try:
        setup._warn_token_auth_enabled()
        setup._warn_token_auth_disabled()
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(keep_ray_record)
    assert len(seen) == 1 and seen[0].startswith("Token authentication is disabled for this Ray cluster")
