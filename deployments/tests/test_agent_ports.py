"""Port clashes: who listens on a port (``/proc/net/tcp{,6}`` and ``/proc/<pid>/fd``), the
agent's free-port check before a spawn, the readiness rule that only the process's own socket
counts, and the 409 of a deploy whose ports an active deployment already uses."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from deployments import services
from deployments.agent import _cause_text, _port_owner_problem, port_busy_reason
from deployments.models import Deployment, ServerProcess
from deployments.supervisor.procfs import port_listeners, proc_socket_inodes, tcp_listen_inodes
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import free_ports


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A plain TCP listener of this test process on a free port of 127.0.0.1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def test_it_finds_the_listening_socket_and_its_holder_in_procfs(listener):
    port = listener.getsockname()[1]
    inode = os.fstat(listener.fileno()).st_ino

    assert tcp_listen_inodes(port) == {inode}
    assert inode in proc_socket_inodes(os.getpid())
    assert port_listeners(port) == ({inode}, {os.getpid()})

    listener.close()
    assert tcp_listen_inodes(port) == set()
    assert port_listeners(port) == (set(), set())


def test_it_ignores_a_connected_socket_that_is_not_listening(listener):
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    try:
        # The client's own port carries an ESTABLISHED socket only, never a LISTEN one.
        assert tcp_listen_inodes(client.getsockname()[1]) == set()
    finally:
        client.close()


def test_it_names_the_holder_of_a_busy_port_and_passes_a_free_one(listener):
    port = listener.getsockname()[1]
    me = os.getpid()

    reason = port_busy_reason(host="127.0.0.1", port=port)
    assert reason.startswith(f"port {port} on 127.0.0.1 is already in use by pid {me} (")
    # A wildcard bind clashes with a listener on one address too.
    assert port_busy_reason(host="0.0.0.0", port=port).startswith(f"port {port} on 0.0.0.0 is already in use")

    listener.close()
    assert port_busy_reason(host="127.0.0.1", port=port) == ""


def test_it_passes_a_port_left_only_with_time_wait_connections():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end of the connection enters TIME_WAIT
    client.close()
    server.close()

    assert port_busy_reason(host="127.0.0.1", port=port) == ""


def test_it_counts_an_answer_only_from_the_process_tree_that_owns_the_port(listener):
    port = listener.getsockname()[1]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        foreign = ServerProcess(role="single", pid=other.pid, pgid=other.pid, ports={"http": port})
        problem = _port_owner_problem(foreign)
        assert problem.startswith(f"port {port} is served by pid {os.getpid()} (")
        assert problem.endswith(", not by this process")

        # This test process holds the socket: as the row's process it owns the port; as the
        # shim (group leader) of a tree it owns it through its descendant.
        assert _port_owner_problem(ServerProcess(role="single", pid=os.getpid(), ports={"http": port})) == ""
        assert _port_owner_problem(ServerProcess(role="single", pid=other.pid, pgid=os.getpid(),
                                                 ports={"http": port})) == ""
    finally:
        other.kill()
        other.wait()


def test_it_words_an_engine_bind_failure_as_a_port_clash():
    line = ("sim_server: cannot listen: [Errno 98] error while attempting to bind on address "
            "('127.0.0.1', 31080): address already in use")
    assert _cause_text(line) == "port 31080 on 127.0.0.1 already in use"
    assert _cause_text("ERROR: [Errno 98] 0.0.0.0:8000: address already in use") == \
        "port 8000 on 0.0.0.0 already in use"
    assert _cause_text("RuntimeError: CUDA out of memory") == "RuntimeError: CUDA out of memory"


# --- the deploy API ------------------------------------------------------------------------


@pytest.fixture
def node(db):
    return cpu_node_create(name="cpu-box")


def _sim_single(user, node, name: str, port: int):
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port}},
        "sim": {"profile": "demo-fast"},
    }
    return services.recipe_create(user=user, name=name, engine="sim", topology="single", node=node, spec=spec)


def _sim_pd(user, node, name: str, ports: list[int]):
    http_p, http_d, boot, router = ports
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": "0", "host": "127.0.0.1", "port": http_p, "bootstrap_port": boot},
            "decode": {"cpus": "1", "host": "127.0.0.1", "port": http_d},
            "router": {"host": "127.0.0.1", "port": router},
        },
        "sim": {"profile": "demo-fast"},
    }
    return services.recipe_create(user=user, name=name, engine="sim", topology="pd", node=node, spec=spec)


def test_it_answers_409_naming_the_port_when_an_active_deployment_uses_it(operator_api, operator, node):
    ports = free_ports(4)
    pd = _sim_pd(operator, node, "local-sim-pd", ports)
    first = operator_api.post("/api/deployments/", {"recipe": pd.pk}, format="json")
    assert first.status_code == 201
    clash = _sim_single(operator, node, "sim-on-router-port", ports[3])

    response = operator_api.post("/api/deployments/", {"recipe": clash.pk}, format="json")

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Port {ports[3]} (single http port) is already used by the router of deployment #{first.json()['id']} "
        "(recipe 'local-sim-pd', pending) on node 'cpu-box'; stop that deployment or choose another port."
    )
    assert not Deployment.objects.filter(recipe=clash).exists()
    # The dry-run says so before anyone presses Deploy.
    plan = operator_api.get(f"/api/recipes/{clash.pk}/dry-run/").json()["plan"]
    # (free ports lie in the ephemeral range, so the plan also warns about that first)
    assert (f"port {ports[3]} (single http port) is in use by the router of deployment #{first.json()['id']} "
            "(recipe 'local-sim-pd', pending) on node 'cpu-box': a deploy now would be refused") in plan["warnings"]
    own = operator_api.get(f"/api/recipes/{pd.pk}/dry-run/").json()["plan"]["warnings"]
    assert not [w for w in own if "is in use by" in w]  # its own ports


def test_it_answers_409_for_a_bootstrap_port_and_deploys_once_the_other_stopped(operator_api, operator, node):
    ports = free_ports(4)
    pd = _sim_pd(operator, node, "local-sim-pd", ports)
    first = services.deployment_create(recipe=pd, user=operator)
    clash = _sim_single(operator, node, "sim-on-bootstrap", ports[2])

    response = operator_api.post("/api/deployments/", {"recipe": clash.pk}, format="json")
    assert response.status_code == 409
    assert f"Port {ports[2]} (single http port) is already used by the prefill of deployment #{first.pk}" \
        in response.json()["detail"]

    services.deployment_stop(deployment=first, user=operator)  # pending: cancelled at once
    assert operator_api.post("/api/deployments/", {"recipe": clash.pk}, format="json").status_code == 201
