"""Fault tests of deploy and supervision: real node agents (``manage.py node_agent``
subprocesses), real engines (the ``sim`` server, the real sglang-router), real Redis, real
signals. Each test states the outcome it asserts and bounds every wait.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import Deployment, ServerProcess
from deployments.supervisor import process_find_by_tag
from deployments.supervisor.procfs import proc_stat
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    engines_under,
    free_ports,
    node_of,
    sim_pd_recipe,
    sim_single_recipe,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.slow

# A restart after SIGKILL: crash seen within a monitor tick (0.2 s), 0.5 s back-off, the sim's
# 0.05 s startup delay and one probe; 15 s leaves room for a loaded 2-core machine.
RESTART_WITHIN_S = 15.0


def _generate(url_base: str) -> httpx.Response:
    return httpx.post(f"{url_base}/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}},
                      timeout=10, trust_env=False)


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def _row(deployment: Deployment, role: str = "single") -> ServerProcess:
    return ServerProcess.objects.get(deployment=deployment, role=role)


def test_it_restarts_an_engine_killed_with_sigkill_within_the_stated_time(agents, deployer, tmp_path):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer,
                               restart={"policy": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2})
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    first = _row(deployment)

    killed_at = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)

    def restarted_and_ready():
        row = _row(deployment)
        return row if row.status == ProcessStatus.READY and row.pid != first.pid else None

    row = wait_for(restarted_and_ready, timeout_s=RESTART_WITHIN_S, what="the engine to be restarted and ready")
    took = time.monotonic() - killed_at
    assert took < RESTART_WITHIN_S
    assert row.restart_count == 1
    assert wait_status(deployment, "ready").status == "ready"
    kinds = list(deployment.events.filter(process=row).values_list("kind", "message"))
    assert ("crashed", "single: killed by signal 9 (SIGKILL)") in kinds
    assert any(k == "restarting" and "restart 1 in 0.5s" in m for k, m in kinds)
    assert _generate(deployment.entry_url).status_code == 200
    assert engines_under(tmp_path) == [row.pid]
    # Back to ready: the crash lives on in the timeline, not as the ready process's reason.
    assert row.reason == ""
    ready_messages = list(deployment.events.filter(kind="ready", process=None).values_list("message", flat=True))
    assert ready_messages[0].startswith("the 1 process is ready, ")
    assert re.fullmatch(r"ready again after restart, \d+\.\d\ds after the crash", ready_messages[-1])


def test_it_fails_at_once_when_another_program_holds_the_port(agents, deployer, tmp_path):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer,
                               restart={"policy": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2})
    port = recipe.spec["roles"]["single"]["port"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed")
        assert engines_under(tmp_path) == []

    me = f"pid {os.getpid()} ({proc_stat(os.getpid()).comm})"
    assert deployment.reason == f"single failed: port {port} on 127.0.0.1 is already in use by {me}"
    row = _row(deployment)
    assert row.status == ProcessStatus.FAILED and row.pid is None
    kinds = [k for k, in deployment.events.values_list("kind")]
    assert "ready" not in kinds and "spawned" not in kinds
    assert ("failed", f"single: port {port} on 127.0.0.1 is already in use by {me}") in \
        list(deployment.events.filter(process=row).values_list("kind", "message"))


def test_it_never_reports_ready_when_the_port_answers_for_another_server(agents, deployer, tmp_path):
    # Another sim server (not a deployment, so no 409) answers /health and /generate on the
    # port; the deployed engine dies of the clash. Before it is spawned the agent sees the port
    # taken; should the holder appear only after that check, readiness still refuses an answer
    # from a socket outside the process tree (unit-tested in test_agent_ports).
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)
    port = recipe.spec["roles"]["single"]["port"]
    squatter = subprocess.Popen(
        [sys.executable, "-m", "deployments.engines.sim_server", "--role", "single", "--host", "127.0.0.1",
         "--port", str(port), "--model-name", "tiny", "--profile", "demo-fast", "--time-scale", "0.05"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/health") == 200, timeout_s=20, what="the squatter")
        deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed")
        assert f"single failed: port {port} on 127.0.0.1 is already in use by pid {squatter.pid}" in deployment.reason
        assert not deployment.events.filter(kind="ready").exists()
        assert engines_under(tmp_path) == []
    finally:
        squatter.kill()
        squatter.wait()


def test_it_kills_an_engine_that_ignores_sigterm_after_the_grace_period(agents, deployer, tmp_path):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer, env={"CEILING_SIM_IGNORE_SIGTERM": "1"},
                               stop_grace_s=2)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    pid = _row(deployment).pid

    started = time.monotonic()
    services.deployment_stop(deployment=deployment, user=deployer)
    wait_status(deployment, "stopped", timeout_s=30)
    took = time.monotonic() - started

    row = _row(deployment)
    assert row.status == ProcessStatus.KILLED
    assert row.end_reason == "killed after grace"
    assert 2.0 <= took < 2.0 + 10.0
    assert proc_stat(pid) is None or not proc_stat(pid).running
    assert engines_under(tmp_path) == []


def test_it_kills_a_child_that_escaped_with_setsid_on_stop(agents, deployer, tmp_path):
    # The engine's interpreter is a wrapper that first leaves a child in its own session
    # (setsid), carrying the environment tag, then execs the real interpreter.
    pidfile = tmp_path / "escaped.pid"
    wrapper = tmp_path / "python-with-escapee"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
        "    os._exit(0)\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    agent = agents(CEILING_ENGINE_PYTHON=str(wrapper))
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    escaped = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), timeout_s=10, what="the escapee"))
    row = _row(deployment)
    assert proc_stat(escaped).sid != row.pgid  # it really left the engine's session

    services.deployment_stop(deployment=deployment, user=deployer)
    wait_status(deployment, "stopped", timeout_s=30)

    info = proc_stat(escaped)
    assert info is None or not info.running
    assert process_find_by_tag(_row(deployment).tag) == []


def test_it_keeps_engines_serving_through_an_agent_sigkill_and_adopts_them(agents, deployer, tmp_path):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    before = _row(deployment)

    agent.kill()
    assert _generate(deployment.entry_url).status_code == 200  # serving with no agent at all
    agents()

    wait_for(lambda: deployment.events.filter(kind="adopted").exists(), timeout_s=30, what="adoption")
    time.sleep(1.0)  # a few monitor ticks: nothing may be respawned
    after = _row(deployment)
    assert (after.pid, after.start_ticks, after.status) == (before.pid, before.start_ticks, ProcessStatus.READY)
    assert after.restart_count == 0
    assert engines_under(tmp_path) == [before.pid]
    assert wait_status(deployment, "ready").status == "ready"
    assert _generate(deployment.entry_url).status_code == 200


def test_it_runs_exactly_one_engine_after_an_agent_sigkill_mid_launch(agents, deployer, tmp_path):
    # The agent pauses between spawning the engine and recording its pid: the worst moment
    # to die, an engine running that no row names.
    agent = agents(CEILING_FAULT_PAUSE_AFTER_SPAWN_S="60")
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)
    deployment = services.deployment_create(recipe=recipe, user=deployer)
    row = wait_for(lambda: ServerProcess.objects.filter(deployment=deployment).first(), timeout_s=20,
                   what="the process row")
    wait_for(lambda: engines_under(tmp_path), timeout_s=20, what="the engine to be spawned")
    row.refresh_from_db()
    assert row.pid is None and process_find_by_tag(row.tag)

    agent.kill()
    agents(CEILING_FAULT_PAUSE_AFTER_SPAWN_S="0")
    wait_status(deployment, "ready")

    row.refresh_from_db()
    assert engines_under(tmp_path) == [row.pid]
    assert row.restart_count == 0
    assert deployment.events.filter(kind="adopted", process=row).exists()
    assert not deployment.events.filter(kind="spawned", process=row).exists()


def test_it_never_signals_an_unrelated_process_that_reused_a_recorded_pid(agents, deployer, tmp_path):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer,
                               restart={"policy": "on-failure", "backoff_initial_s": 0.2})
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    row = _row(deployment)

    # While the agent is down the engine dies and its pid is taken by something unrelated.
    agent.kill()
    for found in process_find_by_tag(row.tag):
        os.kill(found.pid, signal.SIGKILL)
    wait_for(lambda: not engines_under(tmp_path), timeout_s=10, what="the engine to die")
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        ServerProcess.objects.filter(pk=row.pk).update(pid=unrelated.pid, pgid=unrelated.pid)
        agents()
        restarted = wait_for(
            lambda: (r := _row(deployment)).status == ProcessStatus.READY and r.pid != unrelated.pid and r,
            timeout_s=RESTART_WITHIN_S, what="a fresh engine")
        services.deployment_stop(deployment=deployment, user=deployer)
        wait_status(deployment, "stopped")

        assert unrelated.poll() is None  # never signalled, neither by reconcile nor by the stop
        assert restarted.restart_count == 1
        crashed = deployment.events.get(kind="crashed", process=row)
        assert f"pid {unrelated.pid} now belongs to another process" in crashed.message
    finally:
        unrelated.kill()
        unrelated.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path):
    """A private redis-server on a free port (never the machine's shared one), restartable.
    The test process's Celery app sends to it for the test's duration."""
    from controlplane.celery import app

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    (port,) = free_ports(1)
    url = f"redis://127.0.0.1:{port}/0"
    state: dict[str, subprocess.Popen] = {}

    def start() -> None:
        state["proc"] = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                          "--appendonly", "no", "--dir", str(tmp_path)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _redis_ping(port), timeout_s=10, what="redis-server")

    def stop() -> None:
        proc = state.get("proc")
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)

    def use(broker: str) -> None:
        # Fresh pools for the new URL; the old ones are left open for whoever still holds them.
        # The app reads Django settings under the CELERY namespace, so the key carries it.
        app.conf["CELERY_BROKER_URL"] = broker
        app._pool = None
        app.amqp._producer_pool = None

    start()
    old = app.conf.broker_url
    use(url)
    assert app.connection_for_write().as_uri() == url
    yield type("Redis", (), {"url": url, "port": port, "start": staticmethod(start), "stop": staticmethod(stop)})
    use(old)
    stop()


def _redis_ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def test_it_reconnects_after_a_redis_restart_and_completes_pending_work(agents, deployer, own_redis, tmp_path):
    agent = agents(REDIS_URL=own_redis.url, CEILING_AGENT_PENDING_GRACE_S="3")
    node = node_of(agent)
    first = wait_status(services.deployment_create(recipe=sim_single_recipe(node=node, user=deployer, name="a"),
                                                   user=deployer), "ready")

    own_redis.stop()
    # Work requested while the broker is down: the row says what is wanted.
    services.deployment_stop(deployment=first, user=deployer)
    own_redis.start()
    wait_status(first, "stopped", timeout_s=30)

    # After the restart the agent's worker consumes again: a deploy arrives through the queue.
    second = services.deployment_create(recipe=sim_single_recipe(node=node, user=deployer, name="b"), user=deployer)
    wait_status(second, "ready", timeout_s=30)
    wait_for(lambda: agent.log_text().count("deployment_start_task[") >= 2 * 2, timeout_s=10,
             what="the agent's worker to log the second start task")
    assert engines_under(tmp_path) == [_row(second).pid]


def test_it_launches_once_and_answers_409_to_a_concurrent_second_deploy(agents, deployer, operator, tmp_path):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)
    token = Token.objects.create(user=operator).key
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def deploy() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        barrier.wait(timeout=10)
        codes.append(client.post("/api/deployments/", {"recipe": recipe.pk}, format="json").status_code)
        from django.db import connection

        connection.close()

    threads = [threading.Thread(target=deploy) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(codes) == [201, 409]
    deployment = Deployment.objects.get(recipe=recipe)
    wait_status(deployment, "ready")
    assert ServerProcess.objects.filter(deployment=deployment).count() == 1
    assert deployment.events.filter(kind="spawned").count() == 1
    assert engines_under(tmp_path) == [_row(deployment).pid]


def test_it_never_calls_ready_an_engine_that_lists_models_but_fails_generation(agents, deployer):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer, env={"CEILING_SIM_FAIL_GENERATE": "1"},
                               startup_timeout_s=4)
    deployment = services.deployment_create(recipe=recipe, user=deployer)
    row = wait_for(lambda: ServerProcess.objects.filter(deployment=deployment, pid__isnull=False).first(),
                   timeout_s=20, what="the spawn")
    base = f"http://127.0.0.1:{row.ports['http']}"
    wait_for(lambda: _status(f"{base}/health") == 200, timeout_s=10, what="/health")
    assert _status(f"{base}/v1/models") == 200
    assert _generate(base).status_code == 500

    wait_status(deployment, "failed", timeout_s=30)
    row.refresh_from_db()
    assert row.status == ProcessStatus.FAILED and row.ready_at is None and deployment.ready_at is None
    assert "not ready after 4s" in row.reason and "HTTP 500" in row.reason
    assert "simulated generation failure" in deployment.reason
    assert not deployment.events.filter(kind="ready").exists()


def test_it_keeps_pd_not_ready_while_prefill_is_still_starting(agents, deployer):
    agent = agents()
    # demo-fast starts in 1 s of model time: decode after 0.05 s, prefill after 8 s.
    recipe = sim_pd_recipe(node=node_of(agent), user=deployer, prefill_time_scale=8.0, decode_time_scale=0.05)
    deployment = services.deployment_create(recipe=recipe, user=deployer)
    wait_for(lambda: _row(deployment, "decode").status == ProcessStatus.READY if ServerProcess.objects.filter(
        deployment=deployment, role="decode").exists() else False, timeout_s=20, what="decode to be ready")

    prefill = wait_for(lambda: (p := _row(deployment, "prefill")) and "503" in p.probe_detail and p,
                       timeout_s=10, what="prefill's /health to answer 503")
    deployment.refresh_from_db()
    router = _row(deployment, "router")
    assert deployment.status == "starting"
    assert prefill.status == ProcessStatus.SPAWNED and prefill.ready_at is None
    assert router.status == ProcessStatus.SPAWNED

    wait_status(deployment, "ready", timeout_s=40)
    assert deployment.ready_at >= _row(deployment, "prefill").ready_at
    services.deployment_stop(deployment=deployment, user=deployer)
    wait_status(deployment, "stopped", timeout_s=40)
    order = [e.process.role for e in deployment.events.filter(kind__in=["stopped", "killed"], process__isnull=False)]
    assert order == ["router", "decode", "prefill"]
