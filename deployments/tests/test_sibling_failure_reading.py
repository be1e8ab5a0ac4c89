"""Processes the agent stops because a sibling crashed read as such on the deployment page:
with a real ``sim`` PD deployment (router, prefill, decode) launched in-process, a SIGKILL of the
decode engine fails the deployment, and the router's and prefill's timeline entries and Health
cells say the deployment failed (and which process ended how), never "stopped on request"."""
from __future__ import annotations

import html
import os
import signal

import pytest
from django.test import Client

from deployments import services
from deployments.agent import deployment_check, deployment_launch, deployment_teardown
from deployments.choices import ProcessStatus
from deployments.models import Node, NumaNode, ServerProcess
from deployments.supervisor.procfs import proc_stat
from deployments.supervisor.process import process_find_by_tag
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.topology import format_cpulist

USABLE = sorted(os.sched_getaffinity(0))


def _gone(pid: int) -> bool:
    info = proc_stat(pid)
    return info is None or not info.running


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_siblings_of_a_crashed_engine_read_as_stopped_because_the_deployment_failed(db, operator, viewer, settings,
                                                                                  tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    http_p, http_d, boot, router, prom = free_ports(5)   # the metrics port too: router + 1 may be taken
    cpu = str(USABLE[0])
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": cpu, "host": "127.0.0.1", "port": http_p, "bootstrap_port": boot,
                        "flags": {"time-scale": 0.05}},
            "decode": {"cpus": cpu, "host": "127.0.0.1", "port": http_d, "flags": {"time-scale": 0.05}},
            "router": {"host": "127.0.0.1", "port": router, "flags": {"prometheus-port": prom}},
        },
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    recipe = services.recipe_create(user=operator, name="local-sim-pd", engine="sim", topology="pd", node=node,
                                    spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        rows = {row.role: row for row in ServerProcess.objects.filter(deployment=deployment)}
        for row in rows.values():
            wait_for(lambda row=row: process_find_by_tag(row.tag), timeout_s=30, what=f"the {row.role} engine")
        decode = rows["decode"]
        os.kill(decode.pid, signal.SIGKILL)
        wait_for(lambda: _gone(decode.pid), timeout_s=10, what="the decode engine to end")
        deployment_check(deployment_id=deployment.pk)
    finally:
        deployment_teardown(deployment_id=deployment.pk)

    deployment.refresh_from_db()
    assert deployment.status == "failed"
    assert deployment.reason.startswith("decode failed: killed by signal 9 (SIGKILL)")
    pages = Client()
    pages.force_login(viewer)
    page = html.unescape(pages.get(f"/deployments/{deployment.pk}/").content.decode())
    assert "stopped on request" not in page
    for role in ("router", "prefill"):
        row = ServerProcess.objects.get(deployment=deployment, role=role)
        assert row.status in (ProcessStatus.EXITED, ProcessStatus.KILLED)
        assert row.reason == f"stopped because the deployment failed: {deployment.reason}"
        (stopped,) = deployment.events.filter(process=row, kind__in=("stopped", "killed")).values_list(
            "message", flat=True)
        assert f"stopped because the deployment failed: {deployment.reason}; sent SIGTERM, ended " in stopped
        assert stopped in page
        from deployments.views.deployment_pages import _health_view
        from django.utils import timezone

        cell = _health_view(row, timezone.now())["text"]
        assert cell.startswith(f"down (stopped because the deployment failed: {deployment.reason}; this process: ")
        assert cell in page
