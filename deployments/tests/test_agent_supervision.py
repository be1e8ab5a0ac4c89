"""What the node agent notices about a running engine after launch, driven in-process against
real ``sim`` engines under the real shim: pinning that drifted (``sched_setaffinity`` from
outside), an engine killed by someone else's signal, and a killed log shim. The monitor's pass
(:func:`deployment_check`) and the reconcile (:func:`node_reconcile`) are called directly, as
the agent's loop and start-up call them."""
from __future__ import annotations

import os
import signal

import httpx
import pytest

from deployments import services
from deployments.agent import deployment_check, deployment_launch, deployment_teardown, node_reconcile
from deployments.choices import ProcessStatus
from deployments.models import Node, NumaNode, ServerProcess
from deployments.supervisor.procfs import proc_stat
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.topology import format_cpulist

USABLE = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(USABLE) < 2, reason="drift needs two usable CPUs; this host lets the tests use one")


@pytest.fixture
def node(db):
    """A CPU-only node (no numactl, so pinning is ``sched_setaffinity``) whose one NUMA node
    holds exactly the CPUs this test process may use."""
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    return node


@pytest.fixture
def launched(node, operator, settings, tmp_path):
    """A single ``sim`` server pinned to the first usable CPU, launched in-process; torn down
    (SIGTERM, grace, SIGKILL) at the end whatever the test did to it."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": str(USABLE[0]), "host": "127.0.0.1", "port": port,
                             "flags": {"time-scale": 0.05}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    recipe = services.recipe_create(user=operator, name="watched", engine="sim", topology="single", node=node, spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    yield deployment
    deployment_teardown(deployment_id=deployment.pk)


def row_of(deployment) -> ServerProcess:
    return ServerProcess.objects.get(deployment=deployment)


def events(deployment, kind: str) -> list[str]:
    return list(deployment.events.filter(kind=kind).values_list("message", flat=True))


def gone(pid: int) -> bool:
    info = proc_stat(pid)
    return info is None or not info.running


@needs_two_cpus
def test_it_records_pinning_that_drifted_after_launch_on_the_next_monitor_pass(launched):
    intended = str(USABLE[0])
    row = row_of(launched)
    assert (row.effective_cpus, row.pinning_verified) == (intended, True)

    os.sched_setaffinity(row.pid, USABLE)
    deployment_check(deployment_id=launched.pk)

    row.refresh_from_db()
    everywhere = format_cpulist(USABLE)
    assert (row.effective_cpus, row.pinning_verified) == (everywhere, False)
    assert row.status in (ProcessStatus.SPAWNED, ProcessStatus.READY)  # moved, not stopped
    assert events(launched, "pin-drift") == [f"single: pinning drifted: CPUs {intended} → {everywhere}, intended {intended}"]

    deployment_check(deployment_id=launched.pk)
    assert len(events(launched, "pin-drift")) == 1  # recorded once, not every tick

    os.sched_setaffinity(row.pid, {USABLE[0]})
    deployment_check(deployment_id=launched.pk)
    row.refresh_from_db()
    assert (row.effective_cpus, row.pinning_verified) == (intended, True)
    assert events(launched, "pinned")[-1] == f"single: pinning restored: CPUs {everywhere} → {intended}, intended {intended}"


@needs_two_cpus
def test_it_rereads_the_binding_when_a_restarted_agent_adopts_the_engine(launched):
    row = row_of(launched)
    other = USABLE[1]
    os.sched_setaffinity(row.pid, {other})

    counts = node_reconcile(node_name="here", at_startup=True)

    row.refresh_from_db()
    assert counts["adopted"] == 1
    assert (row.effective_cpus, row.pinning_verified) == (str(other), False)
    assert events(launched, "pin-drift") == [f"single: pinning drifted: CPUs {USABLE[0]} → {other}, intended {USABLE[0]}"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_it_names_the_signal_that_killed_an_engine_from_outside(launched, sig):
    row = row_of(launched)
    os.kill(row.pid, sig)
    # No waiting for the shim's exit record: the monitor may look in the moment before it exists.
    wait_for(lambda: gone(row.pid), timeout_s=10, what="the engine to end")

    deployment_check(deployment_id=launched.pk)

    row.refresh_from_db()
    launched.refresh_from_db()
    how = f"killed by signal {int(sig)} ({sig.name})"
    assert (row.status, row.exit_code) == (ProcessStatus.FAILED, -int(sig))
    assert row.reason.startswith(f"{how}; restart policy is 'never'")
    assert events(launched, "crashed") == [f"single: {how}"]
    assert launched.status == "failed" and launched.reason.startswith(f"single failed: {how}")
    assert "exit code 0" not in row.reason and "exited with code" not in row.reason


def health(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def test_it_records_a_killed_log_shim_once_and_leaves_the_engine_running(launched):
    row = row_of(launched)
    shim, port = row.pgid, row.ports["http"]
    assert proc_stat(row.pid).ppid == shim
    wait_for(lambda: health(port) == 200, timeout_s=10, what="the engine to answer")

    os.kill(shim, signal.SIGKILL)
    wait_for(lambda: proc_stat(row.pid).ppid != shim, timeout_s=10, what="the engine to be reparented")
    deployment_check(deployment_id=launched.pk)
    deployment_check(deployment_id=launched.pk)

    row.refresh_from_db()
    assert events(launched, "log-lost") == [
        f"single: log capture stopped: shim pid {shim} was killed by signal 9 (SIGKILL); the engine "
        f"(pid {row.pid}) still runs, but its output is no longer written to {row.log_path}"]
    assert row.status in (ProcessStatus.SPAWNED, ProcessStatus.READY)
    assert not gone(row.pid)
    assert health(port) == 200  # still serving, only unlogged
