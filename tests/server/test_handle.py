"""Every server handle grid has is a ServerHandle (grid/server/handle.py), and the launch's request and result are
plain data that survive pickling (they cross Ray between the trial and the node's actor)."""

import pickle

from grid.cluster.actor import ActorServer
from grid.server.external import ExternalServer
from grid.server.handle import LaunchRequest, LaunchResult, ServerHandle
from grid.server.infra import GuardedServer
from grid.server.session import ServerSession


def test_every_handle_has_the_protocols_methods():
    session = ServerSession()
    for handle in (session, ExternalServer("http://127.0.0.1:9"), ActorServer(None, "n1"), GuardedServer(session)):
        assert isinstance(handle, ServerHandle), type(handle).__name__


def test_request_and_result_pickle_as_they_are():
    request = LaunchRequest(["python", "-m", "grid.twin", "--port", "30001"], {"A": "1"}, 30001, "/tmp/x.log", 20.0,
                            600.0, "generate", "m", api_key="secret", label="cfg", startup_time_scale=50.0)
    result = LaunchResult("failed", "startup_oom", "server exited with code 1 before it was ready", 30001,
                          "http://127.0.0.1:30001", exit_code=1, log_tail="CUDA out of memory",
                          infra_retries=["port_in_use: 30000 taken at launch; retried on 30001"])
    assert pickle.loads(pickle.dumps(request)) == request
    assert pickle.loads(pickle.dumps(result)) == result


def test_a_lost_actor_launches_nothing_and_answers_as_gone():
    """GuardedServer over an ActorServer whose actor could not be had: launch is ``skipped``/``actor_lost`` on the
    requested port, every other call answers as for a server that is gone, and the loss is remembered."""
    lost = ActorServer(None, "n1")
    lost.lost = "node n1 left the Ray cluster"
    guarded = GuardedServer(lost)
    assert guarded.pick_port(30000) == (30000, [])
    request = LaunchRequest([], {}, 30000, "", 1.0, 1.0, "generate", "m")
    assert guarded.launch(request) == LaunchResult("skipped", "actor_lost", "node n1 left the Ray cluster", 30000)
    assert guarded.lost_in == "pick_port" and guarded.lost is not None and guarded.lost.error_class == "actor_lost"
    assert (guarded.alive(), guarded.exit_code(), guarded.log_tail(), guarded.log_size(), guarded.read_log(0),
            guarded.server_info(), guarded.stop()) == (False, None, "", 0, "", None, None)
