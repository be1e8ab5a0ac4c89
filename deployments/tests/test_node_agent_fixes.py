"""Node agent fixes, against real processes: per-thread pinning drift, a second agent of the
same node refused, and timeline wording after an agent restart (a stop resumed during the
grace period, a stop during a restart back-off, readiness seen after adoption)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from deployments import services
from deployments.agent import (
    agent_lock_path,
    deployment_check,
    deployment_launch,
    deployment_teardown,
    node_reconcile,
)
from deployments.choices import ProcessStatus
from deployments.models import Deployment, Node, NumaNode, ProcessEvent, ServerProcess
from deployments.pinning import pinning_verify, thread_bindings
from deployments.supervisor import process_spawn, process_stop
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    ROOT,
    agent_env,
    agents,
    deployer,
    free_ports,
    node_of,
    sim_single_recipe,
    wait_for,
    wait_status,
)
from deployments.topology import format_cpulist

USABLE = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(USABLE) < 2, reason="thread drift needs two usable CPUs")
SLEEPER = str(Path(__file__).with_name("progs") / "sleeper.py")

# An engine-like program: the main thread starts one worker thread, which pins itself to the
# CPU given as argv[1] (nothing when "-"), prints its thread id and sleeps.
THREADED = """
import os, sys, threading, time
def work():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
        fh.write("worker")
    if sys.argv[1] != "-":
        os.sched_setaffinity(0, {int(sys.argv[1])})
    print(f"worker tid {threading.get_native_id()}", flush=True)
    time.sleep(300)
threading.Thread(target=work, name="worker", daemon=True).start()
time.sleep(300)
"""


def spawn_threaded(tag: str, log: Path, *, self_pin: str = "-", cpus: str = "") -> tuple:
    spec = {"argv": [sys.executable, "-c", THREADED, self_pin], "env": {},
            "pin_method": "sched_setaffinity", "cpus": cpus or str(USABLE[0])}
    handle = process_spawn(spec=spec, log_path=log, log_max_bytes=65536, tag=tag)
    line = wait_for(lambda: next((ln for ln in log.read_text().splitlines() if ln.startswith("worker tid ")), None),
                    timeout_s=10, what="the worker thread", every_s=0.02)
    return handle, int(line.split()[-1])


# --- 1. per-thread pinning ----------------------------------------------------------------


@needs_two_cpus
def test_spawn_verification_names_a_thread_that_pinned_itself_outside_the_recipe(tag, tmp_path):
    intended, other = str(USABLE[0]), str(USABLE[1])
    handle, tid = spawn_threaded(tag, tmp_path / "p.log", self_pin=other)

    result = pinning_verify(handle, expected_cpus=intended, expected_mems=None)

    assert not result.ok
    assert result.effective.cpus == intended  # the main thread alone looks right
    assert f"thread {tid} (worker) on CPUs {other}" in result.reason, result.reason
    process_stop(handle, grace_s=1)


def test_thread_reading_is_bounded_and_rotates(tag, tmp_path):
    handle, tid = spawn_threaded(tag, tmp_path / "p.log")
    every = thread_bindings(handle.pid)
    assert set(every.per_tid) == {handle.pid, tid} and every.next_start == 0
    first = thread_bindings(handle.pid, limit=1)
    second = thread_bindings(handle.pid, start=first.next_start, limit=1)
    assert first.total == 2 and set(first.per_tid) | set(second.per_tid) == {handle.pid, tid}
    process_stop(handle, grace_s=1)


@pytest.fixture
def here(db):
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    return node


@needs_two_cpus
def test_the_monitor_records_one_thread_moved_by_taskset_and_its_return(here, operator, tag, tmp_path):
    intended, other = str(USABLE[0]), str(USABLE[1])
    (port,) = free_ports(1)
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": intended, "host": "127.0.0.1", "port": port}}, "sim": {"profile": "demo-fast"}}
    recipe = services.recipe_create(user=operator, name="threads", engine="sim", topology="single", node=here, spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)  # stays pending
    handle, tid = spawn_threaded(tag, tmp_path / "p.log")
    row = ServerProcess.objects.create(
        deployment=deployment, role="single", ordinal=0, status=ProcessStatus.SPAWNED, pid=handle.pid,
        start_ticks=handle.start_ticks, pgid=handle.pgid, tag=tag, cpus=intended, pin_method="sched_setaffinity",
        effective_cpus=intended, pinning_verified=True, log_path=str(tmp_path / "p.log"), started_at=timezone.now())

    node_reconcile(node_name=here.name)
    row.refresh_from_db()
    assert (row.effective_cpus, row.pinning_verified) == (intended, True)

    subprocess.run(["taskset", "-pc", other, str(tid)], check=True, capture_output=True)
    node_reconcile(node_name=here.name)
    row.refresh_from_db()
    assert row.pinning_verified is False
    assert row.effective_cpus == format_cpulist({USABLE[0], USABLE[1]})
    drift = list(ProcessEvent.objects.filter(process=row, kind="pin-drift").values_list("message", flat=True))
    assert len(drift) == 1 and f"thread {tid} (worker) on CPUs {other}, intended {intended}" in drift[0], drift

    node_reconcile(node_name=here.name)  # nothing new: no second event
    assert ProcessEvent.objects.filter(process=row, kind="pin-drift").count() == 1

    subprocess.run(["taskset", "-pc", intended, str(tid)], check=True, capture_output=True)
    node_reconcile(node_name=here.name)
    row.refresh_from_db()
    assert (row.effective_cpus, row.pinning_verified) == (intended, True)
    restored = ProcessEvent.objects.filter(process=row, kind="pinned").last()
    assert restored is not None and f"thread {tid} back within CPUs {intended}" in restored.message
    process_stop(handle, grace_s=1)


# --- 2. one agent per node ----------------------------------------------------------------


def test_a_second_agent_of_the_same_node_refuses_to_start_and_adopts_nothing(agents, deployer):
    first = agents()
    node = node_of(first)
    deployment = services.deployment_create(recipe=sim_single_recipe(node=node, user=deployer), user=deployer)
    wait_status(deployment, "ready")
    lock = agent_lock_path(first.name)
    assert lock.read_text().split()[0] == str(first.proc.pid)

    second = subprocess.run([sys.executable, str(ROOT / "manage.py"), "node_agent", "--name", first.name],
                            cwd=ROOT, env=first.env, capture_output=True, text=True, timeout=120)

    assert second.returncode != 0
    assert f"node agent '{first.name}' is already running: pid {first.proc.pid} on " in second.stderr, second.stderr
    assert "last heartbeat" in second.stderr
    assert not ProcessEvent.objects.filter(deployment=deployment, kind="adopted").exists()
    assert first.proc.poll() is None
    assert Node.objects.get(pk=node.pk).agent_pid == first.proc.pid

    # A killed agent leaves its lock file behind; the kernel dropped the lock, so a restart runs
    # and adopts the engines.
    first.kill()
    assert lock.exists()
    restarted = agents()
    assert restarted.proc.poll() is None
    wait_for(lambda: ProcessEvent.objects.filter(deployment=deployment, kind="adopted").exists(),
             timeout_s=30, what="adoption by the restarted agent")


def test_an_agent_that_shuts_down_cleanly_takes_its_node_offline_at_once(agents, deployer, settings):
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 300  # so only the shutdown mark can take it offline
    agent = agents()
    node = node_of(agent)
    assert Node.objects.get(pk=node.pk).agent_online
    agent.stop()  # SIGTERM: a warm shutdown
    assert agent.proc.returncode == 0, agent.log_text()[-2000:]
    row = Node.objects.get(pk=node.pk)
    assert row.agent_stopped_at is not None and row.agent_stopped_at >= row.agent_heartbeat_at
    assert not row.agent_online
    deployment = services.deployment_create(recipe=sim_single_recipe(node=row, user=deployer), user=deployer)
    reason = services.deployment_waiting_reason(deployment=deployment)
    assert reason == (f"waiting for node agent {row.name} (stopped at "
                      f"{row.agent_stopped_at.isoformat(timespec='seconds')}; last heartbeat "
                      f"{row.agent_heartbeat_at.isoformat(timespec='seconds')})")
    # Started again, it is online with its first heartbeat and runs what waited for it.
    agents()
    wait_for(lambda: Node.objects.get(pk=node.pk).agent_online, timeout_s=30, what="the restarted agent online")
    assert Node.objects.get(pk=node.pk).agent_stopped_at is None  # its heartbeat cleared the mark
    wait_status(deployment, "ready")
    assert services.deployment_waiting_reason(deployment=Deployment.objects.get(pk=deployment.pk)) == ""


def test_an_agent_refuses_a_node_served_from_another_host(db):
    Node.objects.create(name="twin", hostname="elsewhere.example", agent_heartbeat_at=timezone.now(), agent_pid=4242)

    with pytest.raises(CommandError) as caught:
        call_command("node_agent", name="twin")

    message = str(caught.value)
    assert "served by an agent on host 'elsewhere.example'" in message and "(agent pid 4242)" in message
    assert Node.objects.get(name="twin").hostname == "elsewhere.example"  # nothing registered
    # The refusal released the lock: a real start on this host would not be blocked by it.
    import fcntl
    with open(agent_lock_path("twin"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


# --- 3. timeline wording --------------------------------------------------------------------


def test_a_stop_resumed_after_an_earlier_sigterm_keeps_its_grace_and_times_from_the_first(tag, tmp_path):
    log = tmp_path / "stubborn.log"
    spec = {"argv": [sys.executable, SLEEPER, "--ignore-term"], "env": {}}
    handle = process_spawn(spec=spec, log_path=log, log_max_bytes=65536, tag=tag)
    wait_for(lambda: "ready" in log.read_text(), timeout_s=10, what="the sleeper")
    os.killpg(handle.pgid, signal.SIGTERM)  # the stop of an agent that then died
    first_at = time.time()
    wait_for(lambda: Path(f"{log}.exit.stop").exists(), timeout_s=5, what="the shim's stop record")
    time.sleep(2.0)

    result = process_stop(handle, grace_s=3.0, log_path=log)

    assert result.outcome == "killed"
    assert result.duration_s < 2.5, result.duration_s  # about 1 s of the 3 s grace was left
    assert 2.9 <= result.ended_after_s <= 4.0, result.ended_after_s
    # the stop's own record of the first SIGTERM is a few ms after first_at, so it may fall in the next second
    assert any(f"first sent at {time.strftime('%H:%M:%S', time.localtime(first_at + dt))} by an earlier stop"
               in result.reason for dt in (0.0, 1.0)), result.reason
    assert f"ended {result.ended_after_s:.2f} s after the first (killed by signal 9 (SIGKILL))" in result.reason
    assert "SIGKILL needed after 3s grace from the first SIGTERM at " in result.reason, result.reason


def test_a_stop_alone_still_times_from_its_own_sigterm(tag, tmp_path):
    log = tmp_path / "stubborn.log"
    handle = process_spawn(spec={"argv": [sys.executable, SLEEPER, "--ignore-term"], "env": {}},
                           log_path=log, log_max_bytes=65536, tag=tag)
    wait_for(lambda: "ready" in log.read_text(), timeout_s=10, what="the sleeper")
    result = process_stop(handle, grace_s=1.0, log_path=log)
    assert result.outcome == "killed" and "earlier stop" not in result.reason
    assert 0.9 <= result.ended_after_s < 2.0


@pytest.fixture
def sim_here(here, operator, settings, tmp_path):
    """A sim single deployment factory on node ``here`` pinned to the first usable CPU."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    made = []

    def make(*, time_scale: float = 0.05, restart: dict | None = None):
        (port,) = free_ports(1)
        spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
                "roles": {"single": {"cpus": str(USABLE[0]), "host": "127.0.0.1", "port": port,
                                     "flags": {"time-scale": time_scale}}},
                "sim": {"profile": "demo-fast"}, "startup_timeout_s": 60, "stop_grace_s": 5}
        if restart:
            spec["restart"] = restart
        recipe = services.recipe_create(user=operator, name=f"sim-{len(made)}", engine="sim", topology="single",
                                        node=here, spec=spec)
        deployment = services.deployment_create(recipe=recipe, user=operator)
        made.append(deployment)
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        return deployment

    yield make
    for deployment in made:
        deployment_teardown(deployment_id=deployment.pk)


def test_stopping_during_a_restart_back_off_says_the_process_crashed_and_a_restart_was_pending(sim_here):
    deployment = sim_here(restart={"policy": "on-failure", "max_failures": 5, "window_s": 600, "backoff_initial_s": 60, "backoff_max_s": 60})
    row = ServerProcess.objects.get(deployment=deployment)
    wait_for(lambda: (deployment_check(deployment_id=deployment.pk),
                      ServerProcess.objects.get(pk=row.pk).status == ProcessStatus.READY)[1],
             timeout_s=30, what="ready", every_s=0.2)
    os.kill(row.pid, signal.SIGKILL)
    wait_for(lambda: (deployment_check(deployment_id=deployment.pk),
                      ServerProcess.objects.get(pk=row.pk).next_restart_at is not None)[1],
             timeout_s=10, what="the crash to be handled", every_s=0.1)
    crash = ProcessEvent.objects.filter(process=row, kind="crashed").last()

    assert deployment_teardown(deployment_id=deployment.pk) == "stopped"

    stopped = ProcessEvent.objects.filter(process=row, kind="stopped").last().message
    at = timezone.localtime(crash.at).strftime("%H:%M:%S")
    assert stopped.startswith(f"single: not running (crashed at {at}, restart 1 was pending (due "), stopped
    assert "never started" not in stopped


def test_ready_after_adoption_says_what_the_time_is_measured_from(sim_here):
    deployment = sim_here(time_scale=2.0)  # the sim takes about 2 s to become ready
    row = ServerProcess.objects.get(deployment=deployment)
    node_reconcile(node_name=deployment.node.name, at_startup=True)  # as a restarted agent does
    assert ProcessEvent.objects.filter(process=row, kind="adopted").exists()
    wait_for(lambda: (deployment_check(deployment_id=deployment.pk),
                      ServerProcess.objects.get(pk=row.pk).status == ProcessStatus.READY)[1],
             timeout_s=30, what="ready", every_s=0.2)
    ready = ProcessEvent.objects.filter(process=row, kind="ready").last().message
    assert "after adoption by the restarted agent (" in ready and "s after spawn, a time that includes up to" in ready, ready
