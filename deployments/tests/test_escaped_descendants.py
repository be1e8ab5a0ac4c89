"""A descendant of an engine that escaped its process group and session (a double fork and
``setsid()``, so it is reparented and leads a session of its own) is part of the pinning proof
and ends with the deployment, however the deployment ends: stopped, failed at launch, failed
after a crash whose pid was reused. Driven in-process against real ``sim`` engines under the
real shim; the engine's interpreter is a wrapper that leaves such a grandchild behind before it
execs the real one."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deployments import services
from deployments.agent import deployment_check, deployment_launch, deployment_teardown, node_reconcile
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.supervisor import process_find_by_tag
from deployments.supervisor.procfs import proc_start_ticks, proc_stat
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.tests.test_agent_supervision import USABLE, node  # noqa: F401 - fixture

needs_two_cpus = pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable CPUs")


def gone(pid: int) -> bool:
    info = proc_stat(pid)
    return info is None or not info.running


@pytest.fixture
def escaping_python(settings, tmp_path):
    """Make the engine interpreter a wrapper that double-forks a grandchild, which calls
    ``setsid()`` (moving itself onto ``escapee.cpus`` when set), appends its pid to
    ``escapee.pids`` and sleeps; the wrapper then execs the real interpreter. Every escapee
    still alive at the end is killed, so a failing test leaves no orphan."""
    pids = tmp_path / "escapee.pids"
    wrapper = tmp_path / "python-with-escapee"
    state = {"cpus": None}

    def write(cpus: int | None) -> None:
        move = f"        os.sched_setaffinity(0, {{{cpus}}})\n" if cpus is not None else ""
        wrapper.write_text(
            f"#!{sys.executable}\n"
            "import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            f"{move}"
            f"        fd = os.open({str(pids)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
            "        os.write(fd, b'%d\\n' % os.getpid())\n"
            "        os.close(fd)\n"
            "        time.sleep(600)\n"
            "        os._exit(0)\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            f"os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
        )
        wrapper.chmod(0o755)
        state["cpus"] = cpus

    write(None)
    settings.CEILING_EXECUTABLES = {**settings.CEILING_EXECUTABLES, "python": str(wrapper)}

    class Escapees:
        move_to = staticmethod(write)

        @staticmethod
        def listed() -> list[int]:
            return [int(line) for line in pids.read_text().split()] if pids.exists() else []

        @staticmethod
        def wait(count: int = 1) -> int:
            """The pid of escapee number ``count`` once it has written it."""
            found = wait_for(lambda: len(Escapees.listed()) >= count and Escapees.listed(), timeout_s=20,
                             what=f"escapee {count}")
            return found[count - 1]

    yield Escapees
    for pid in Escapees.listed():
        try:
            if str(wrapper) in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


@pytest.fixture
def deploy(node, operator, settings, tmp_path, escaping_python):
    """Create a single ``sim`` deployment pinned to the first usable CPU with restart policy
    ``restart`` and return it unlaunched; torn down at the end whatever the test did."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    made = []

    def make(restart: str = "never"):
        (port,) = free_ports(1)
        spec = {
            "model": {"name": "sim/tiny"},
            "served_model_name": "tiny",
            "roles": {"single": {"cpus": str(USABLE[0]), "host": "127.0.0.1", "port": port,
                                 "flags": {"time-scale": 0.05}}},
            "sim": {"profile": "demo-fast"},
            "startup_timeout_s": 30,
            "stop_grace_s": 5,
            "restart": {"policy": restart, "backoff_initial_s": 0.1},
        }
        recipe = services.recipe_create(user=operator, name=f"escapes-{len(made)}", engine="sim",
                                        topology="single", node=node, spec=spec)
        deployment = services.deployment_create(recipe=recipe, user=operator)
        made.append(deployment)
        return deployment

    yield make
    for deployment in made:
        deployment_teardown(deployment_id=deployment.pk)


def row_of(deployment) -> ServerProcess:
    return ServerProcess.objects.get(deployment=deployment)


def escaped_from(row: ServerProcess, pid: int) -> None:
    """Assert ``pid`` left the engine's session and group and was reparented to the shim."""
    info = wait_for(lambda: (i := proc_stat(pid)) and i.ppid == row.pgid and i, timeout_s=10, what="reparenting")
    assert info.sid == info.pgid == pid != row.pgid


def test_it_stops_a_double_forked_grandchild_with_the_deployment(deploy, escaping_python):
    deployment = deploy()
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    row = row_of(deployment)
    escapee = escaping_python.wait()
    escaped_from(row, escapee)

    assert deployment_teardown(deployment_id=deployment.pk) == "stopped"

    wait_for(lambda: gone(escapee), timeout_s=10, what="the escapee to end")
    assert process_find_by_tag(row.tag) == []
    assert gone(row.pgid)  # the shim too


@needs_two_cpus
def test_it_fails_the_launch_when_an_escaped_grandchild_left_the_recipes_cpus(deploy, escaping_python, settings):
    escaping_python.move_to(USABLE[1])
    # The binding is proved right after spawn; give the wrapper time to leave its grandchild.
    settings.CEILING_FAULT_PAUSE_AFTER_SPAWN_S = 2.0
    deployment = deploy()

    assert deployment_launch(deployment_id=deployment.pk) == "failed"

    escapee = escaping_python.wait()
    deployment.refresh_from_db()
    row = row_of(deployment)
    assert row.status == ProcessStatus.FAILED
    assert deployment.status == "failed"
    assert f"pinning mismatch: pid {escapee} (" in deployment.reason
    assert f"descendant: expected CPUs {USABLE[0]}, effective {USABLE[1]}" in deployment.reason
    wait_for(lambda: gone(escapee), timeout_s=10, what="the escapee to end")
    assert process_find_by_tag(row.tag) == []


@pytest.fixture
def unrelated():
    """A process of this user that has nothing to do with any deployment."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        wait_for(lambda: proc_start_ticks(proc.pid), timeout_s=10, what="the unrelated process")
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _engine_dies_and_its_pid_is_reused(row: ServerProcess, other: subprocess.Popen) -> None:
    """SIGKILL the engine alone (its escaped grandchild and the shim live on) and make the row's
    pid name ``other``, as if the kernel had handed the engine's pid to it."""
    os.kill(row.pid, signal.SIGKILL)
    wait_for(lambda: gone(row.pid), timeout_s=10, what="the engine to end")
    ServerProcess.objects.filter(pk=row.pk).update(pid=other.pid)


@pytest.mark.parametrize("noticed_by", ["monitor", "reconcile"])
def test_it_stops_the_escapee_of_an_engine_whose_pid_was_reused_and_fails_clean(
        deploy, escaping_python, unrelated, noticed_by):
    deployment = deploy(restart="never")
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    row = row_of(deployment)
    escapee = escaping_python.wait()
    escaped_from(row, escapee)

    _engine_dies_and_its_pid_is_reused(row, unrelated)
    if noticed_by == "monitor":
        deployment_check(deployment_id=deployment.pk)
    else:
        node_reconcile(node_name="here", at_startup=True)

    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert f"pid {unrelated.pid} now belongs to another process" in deployment.reason
    wait_for(lambda: gone(escapee), timeout_s=15, what="the escapee to end")
    assert process_find_by_tag(row.tag) == []
    assert gone(row.pgid)
    assert unrelated.poll() is None  # never signalled


def test_it_stops_the_escapee_of_a_reused_pid_before_the_restart(deploy, escaping_python, unrelated):
    deployment = deploy(restart="on-failure")
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    row = row_of(deployment)
    first = escaping_python.wait()
    escaped_from(row, first)

    _engine_dies_and_its_pid_is_reused(row, unrelated)
    deployment_check(deployment_id=deployment.pk)

    wait_for(lambda: gone(first), timeout_s=15, what="the first escapee to end")
    assert process_find_by_tag(row.tag) == []  # the old tree's tag: nothing of it is left
    restarted = row_of(deployment)
    assert restarted.status == ProcessStatus.PENDING and restarted.tag != row.tag
    # The back-off is 0.1 s; each monitor pass spawns the engine again once it is due.
    wait_for(lambda: (deployment_check(deployment_id=deployment.pk), len(escaping_python.listed()) >= 2)[1],
             timeout_s=20, what="the restart")
    second = escaping_python.wait(2)
    assert deployment_teardown(deployment_id=deployment.pk) == "stopped"
    wait_for(lambda: gone(second), timeout_s=10, what="the second escapee to end")
    assert unrelated.poll() is None
