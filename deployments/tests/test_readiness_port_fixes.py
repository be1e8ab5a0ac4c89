"""Readiness probes never take the port they probe, and recipes warn about ports in the
ephemeral range.

A connection to a port of the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``)
while nothing listens there can be given that very port as its source port and connect to itself
(TCP simultaneous open); the socket then holds the port and the engine's bind fails. Real sockets
throughout: a plain connect loop is shown to self-connect (and the raw check to reset it), the
probe's own connections are shown never to, and a real ``sim`` engine binds a port that was
probed thousands of times before it listened.
"""
from __future__ import annotations

import dataclasses
import json
import socket
import struct
import subprocess
import sys
import time

import pytest

from deployments.discovery import read_port_settings
from deployments.examples import local_node_facts_example
from deployments.launch import launch_plan_render
from deployments.readiness import (
    IP_LOCAL_PORT_RANGE,
    ephemeral_port_range,
    process_readiness,
    source_port_options,
    tcp_listening,
)
from deployments.nodes import node_register
from deployments.recipes import recipe_warnings
from deployments.tests.test_agent_support import wait_for
from deployments.topology import NodeFacts, node_facts_from_row

SIM = [sys.executable, "-m", "deployments.engines.sim_server", "--model-name", "tiny", "--profile", "demo-fast"]
# Seconds a plain connect loop may take to hit a self-connection; on the development host it
# took 3,038 attempts (well under a second), in a user's run 5,614.
SELF_CONNECT_WITHIN_S = 60.0


def _free_ephemeral_port() -> int:
    """An even port inside the kernel's ephemeral range that was free a moment ago. Even: since
    Linux 4.6 ``connect()`` draws even source ports first and ``bind(0)`` odd ones
    (net/ipv4/inet_hashtables.c, ``__inet_hash_connect``), so an even port is the one a
    connection can land on."""
    low, high = ephemeral_port_range() or (32768, 60999)
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        port += port % 2
        if low <= port <= high and _bindable(port):
            return port
    raise AssertionError("no free even port in the ephemeral range")


def _bindable(port: int) -> bool:
    """Whether a listener could take ``port`` now: a bind without ``SO_REUSEADDR``, which fails
    while any socket (connected, or a ``TIME_WAIT`` remnant) still holds the port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _http_checks(port: int) -> list[dict]:
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port}},
        "sim": {"profile": "demo-fast"},
    }
    plan = launch_plan_render(engine="sim", topology="single", spec=spec, node=local_node_facts_example())
    return plan.process("single").readiness


def _kernel_takes_the_range_option() -> bool:
    try:
        with socket.socket() as s:
            s.setsockopt(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, 0)
    except OSError:
        return False
    return True


def test_it_reads_the_kernel_ephemeral_range():
    low, high = ephemeral_port_range()
    text = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
    assert (low, high) == (int(text[0]), int(text[1]))
    assert ephemeral_port_range("/nonexistent") is None


def test_the_source_range_leaves_out_the_probed_port_and_is_the_larger_side():
    if not _kernel_takes_the_range_option():
        pytest.skip("this kernel has no IP_LOCAL_PORT_RANGE (Linux 6.3+)")
    for port, expected in ((42698, (42699, 60999)), (50000, (32768, 49999)), (32769, (32770, 60999)),
                           (32768, (32769, 60999)), (60999, (32768, 60998))):
        ((level, name, value),) = source_port_options("127.0.0.1", port, ephemeral=(32768, 60999))
        (packed,) = struct.unpack("=I", value)
        assert (level, name) == (socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE)
        assert (packed & 0xFFFF, packed >> 16) == expected
    # Outside the range the kernel never picks the port as a source port: nothing to set.
    assert source_port_options("127.0.0.1", 8000, ephemeral=(32768, 60999)) == []
    assert source_port_options("127.0.0.1", 61000, ephemeral=(32768, 60999)) == []


def test_the_kernel_keeps_a_probe_connection_inside_its_source_range():
    # Connections to a real listener, each from a socket with the options of a target port: the
    # source ports the kernel hands out all lie in the narrowed range, never on the target.
    if not _kernel_takes_the_range_option():
        pytest.skip("this kernel has no IP_LOCAL_PORT_RANGE (Linux 6.3+)")
    target = _free_ephemeral_port()
    ((level, name, value),) = source_port_options("127.0.0.1", target)
    (packed,) = struct.unpack("=I", value)
    low, high = packed & 0xFFFF, packed >> 16
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        for _ in range(200):
            with socket.socket() as client:
                client.setsockopt(level, name, value)
                client.connect(server.getsockname())
                source = client.getsockname()[1]
                server.accept()[0].close()
            assert low <= source <= high and source != target


def test_a_plain_connect_loop_self_connects_and_the_raw_check_resets_it_at_once():
    # Without the source range (options=[]), connecting to a free ephemeral port sooner or
    # later connects to itself; the raw check sees it, resets it and reports "not listening".
    port = _free_ephemeral_port()
    deadline = time.monotonic() + SELF_CONNECT_WITHIN_S
    attempts = 0
    while True:
        listening, why = tcp_listening("127.0.0.1", port, options=[])
        attempts += 1
        assert not listening
        if "reset at once" in why:
            break
        if time.monotonic() > deadline:
            pytest.skip(f"no self-connection in {attempts} attempts on this host")
    assert why == (f"nothing listens on 127.0.0.1:{port} yet (the probe's connection got port {port} as its own "
                   "source port and was reset at once)")
    # The reset left nothing behind (no connection, no TIME_WAIT): a listener can bind now.
    assert _bindable(port)


def test_probing_a_free_ephemeral_port_many_times_never_holds_it():
    if not _kernel_takes_the_range_option():
        pytest.skip("this kernel has no IP_LOCAL_PORT_RANGE (Linux 6.3+)")
    port = _free_ephemeral_port()
    checks = _http_checks(port)
    # 60,000 probes: a plain connect loop self-connects about once in 18,000 attempts here.
    for _ in range(60_000):
        result = process_readiness(checks=checks, alive=True, role="single")
        assert result.ok is False and result.kind == "http"
        assert result.detail == f"http://127.0.0.1:{port}/health: nothing listens on 127.0.0.1:{port} yet " \
                                "(Connection refused)", result.detail
    assert _bindable(port)


@pytest.mark.slow
def test_an_engine_binds_an_ephemeral_port_probed_while_it_starts():
    # The agent's loop in miniature: probe as fast as possible while the real sim server starts
    # on a port of the ephemeral range; it binds, and the probes then see it ready.
    port = _free_ephemeral_port()
    checks = _http_checks(port)
    for _ in range(5_000):
        process_readiness(checks=checks, alive=True, role="single")
    proc = subprocess.Popen([*SIM, "--role", "single", "--port", str(port), "--startup-delay-s", "0.5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        result = wait_for(lambda: proc.poll() is not None
                          or (r := process_readiness(checks=checks, alive=True, role="single")).ok and r,
                          timeout_s=30, what="the sim server to be ready", every_s=0)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert result.ok and result.kind == "generate"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_recipe_on_an_ephemeral_port_carries_a_plan_warning():
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": "0", "port": 31000, "bootstrap_port": 42698},
            "decode": {"cpus": "1", "port": 31001},
            "router": {"port": 31080},
        },
        "sim": {"profile": "demo-fast"},
    }
    node = local_node_facts_example()
    plan = launch_plan_render(engine="sim", topology="pd", spec=spec, node=node)
    assert plan.warnings == [
        "prefill: port 42698 is inside the ephemeral port range 32768-60999 (the Linux default of "
        "net.ipv4.ip_local_port_range; the node did not report its own), where any outgoing connection on the "
        "node may take it as its source port before the engine binds it (\"address already in use\"); use a "
        "port outside that range or reserve it with net.ipv4.ip_local_reserved_ports"]
    spec["roles"]["prefill"]["bootstrap_port"] = 31998
    spec["roles"]["router"]["flags"] = {"prometheus-port": 50000, "policy": "random"}
    spec["roles"]["router"]["port"] = 50001
    warnings = launch_plan_render(engine="sim", topology="pd", spec=spec, node=node).warnings
    assert [w.split(" are inside")[0] for w in warnings] == ["router: ports 50000, 50001"]
    spec["roles"]["router"] = {"port": 31080}
    assert launch_plan_render(engine="sim", topology="pd", spec=spec, node=node).warnings == []
    assert recipe_warnings(spec={"roles": {"single": {"port": 8080, "flags": {}}}}, node=node) == []


def test_the_warning_uses_the_node_s_own_range_and_skips_its_reserved_ports(tmp_path):
    ipv4 = tmp_path / "sys" / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_port_range").write_text("40000\t49999\n")
    (ipv4 / "ip_local_reserved_ports").write_text("42000-42010,45000\n")
    settings = read_port_settings(procfs_root=tmp_path)
    assert settings == {"local_port_range": (40000, 49999), "reserved_ports": ((42000, 42010), (45000, 45000))}
    node = dataclasses.replace(local_node_facts_example(), **settings)
    # The facts survive the trip through the stored topology (JSON lists) and a Node row.
    stored = json.loads(json.dumps(node.to_dict()))
    assert NodeFacts.from_dict(stored).local_port_range == (40000, 49999)
    assert NodeFacts.from_dict(stored).reserved_ports == ((42000, 42010), (45000, 45000))
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": "0", "port": 42005, "bootstrap_port": 45000},   # both reserved
            "decode": {"cpus": "1", "port": 35000},                             # below this node's range
            "router": {"port": 49999},                                          # its last port
        },
        "sim": {"profile": "demo-fast"},
    }
    warnings = launch_plan_render(engine="sim", topology="pd", spec=spec, node=node).warnings
    assert len(warnings) == 1
    assert warnings[0].startswith("router: port 49999 is inside the ephemeral port range 40000-49999 "
                                  "(node local's net.ipv4.ip_local_port_range)")


def test_unreadable_or_malformed_port_settings_are_not_reported(tmp_path):
    assert read_port_settings(procfs_root=tmp_path / "missing") == {}
    ipv4 = tmp_path / "sys" / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_port_range").write_text("60999 32768\n")
    (ipv4 / "ip_local_reserved_ports").write_text("9000-8000\n")
    assert read_port_settings(procfs_root=tmp_path) == {}
    assert NodeFacts.from_dict({"name": "n", "local_port_range": "junk", "reserved_ports": [[1]]}).local_port_range is None


@pytest.mark.django_db
def test_a_registered_node_keeps_its_port_settings():
    facts = dataclasses.replace(local_node_facts_example(), name="portnode", local_port_range=(20000, 30000),
                                reserved_ports=((20500, 20510),))
    node = node_register(facts=facts)
    node.refresh_from_db()
    again = node_facts_from_row(node)
    assert again.local_port_range == (20000, 30000)
    assert again.reserved_ports == ((20500, 20510),)


def test_discovery_of_this_host_reports_its_range_and_a_captured_host_does_not(tmp_path):
    from deployments.discovery import discover_node

    live = discover_node(name="here", nvml=None)
    assert live.local_port_range == ephemeral_port_range()
    captured = discover_node(name="there", sysfs_root=tmp_path, nvml=None)
    assert captured.local_port_range is None and captured.reserved_ports == ()
