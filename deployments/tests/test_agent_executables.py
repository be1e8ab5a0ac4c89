"""The node agent runs only the executables of its own host configuration: a node row whose
``tools["python"]`` names another program (editable in the database, not in the admin) changes
nothing it starts, a plan naming a program outside ``CEILING_EXECUTABLES`` is refused before
anything starts, and the admin shows ``tools`` read-only. Launches run in-process against real
``sim`` engines under the real shim, as the other agent tests do."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from deployments import agent, services
from deployments.agent import deployment_launch, deployment_teardown
from deployments.choices import DeploymentStatus, ProcessStatus
from deployments.models import Node, NumaNode, ServerProcess
from deployments.supervisor import SpawnError, process_find_by_tag, process_spawn
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.topology import format_cpulist

USABLE = sorted(os.sched_getaffinity(0))
NUMACTL = "/usr/bin/numactl"
needs_numactl = pytest.mark.skipif(not os.access(NUMACTL, os.X_OK), reason="numactl is not installed here")


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "marker"


@pytest.fixture
def script(tmp_path, marker) -> Path:
    """An executable that would leave ``marker`` behind if anything ran it."""
    path = tmp_path / "not-python.sh"
    path.write_text(f"#!/bin/sh\necho ran > {marker}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def _deployment(operator, settings, tmp_path, tools: dict):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools=tools)
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": str(USABLE[0]), "host": "127.0.0.1", "port": port, "flags": {"time-scale": 0.05}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    recipe = services.recipe_create(user=operator, name="exe", engine="sim", topology="single", node=node, spec=spec)
    return services.deployment_create(recipe=recipe, user=operator)


@pytest.mark.parametrize("numactl", [False, pytest.param(True, marks=needs_numactl)], ids=["bare", "numactl"])
def test_the_agent_runs_its_own_interpreter_whatever_the_node_row_says(operator, settings, tmp_path, script, marker, numactl):
    tools = {"python": str(script), **({"numactl": NUMACTL} if numactl else {})}
    deployment = _deployment(operator, settings, tmp_path, tools)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        row = ServerProcess.objects.get(deployment=deployment)
        wait_for(lambda: b"listening" in Path(row.log_path).read_bytes(), timeout_s=15, what="the engine log")

        own_python = settings.CEILING_EXECUTABLES["python"]
        assert str(script) not in row.argv
        engine = row.argv[row.argv.index("--") + 1] if numactl else row.argv[0]
        assert engine == own_python
        assert row.argv[0] == (NUMACTL if numactl else own_python)
        assert row.status == ProcessStatus.SPAWNED and row.pin_method == ("numactl" if numactl else "sched_setaffinity")
        assert Path(f"/proc/{row.pid}/exe").resolve() == Path(own_python).resolve()
        assert not marker.exists()
    finally:
        deployment_teardown(deployment_id=deployment.pk)


@pytest.mark.parametrize("numactl", [False, pytest.param(True, marks=needs_numactl)], ids=["bare", "numactl"])
def test_a_plan_naming_a_foreign_program_is_refused_before_anything_starts(operator, settings, tmp_path, script, marker,
                                                                           monkeypatch, numactl):
    tools = {"numactl": NUMACTL} if numactl else {}
    deployment = _deployment(operator, settings, tmp_path, tools)
    # A renderer that put another program into the argv: the spawn allowlist still holds.
    monkeypatch.setattr(agent, "agent_executables", lambda: {**settings.CEILING_EXECUTABLES, "python": str(script)})

    assert deployment_launch(deployment_id=deployment.pk) == "failed"

    deployment.refresh_from_db()
    row = ServerProcess.objects.get(deployment=deployment)
    refusal = f"refused to run {str(script)!r}: not an executable of this host's configuration"
    assert deployment.status == DeploymentStatus.FAILED
    assert deployment.reason.startswith(f"single failed: could not start: {refusal}")
    assert row.status == ProcessStatus.FAILED and row.reason.startswith(f"could not start: {refusal}")
    assert row.pid is None and row.start_ticks is None
    assert process_find_by_tag(row.tag) == []
    assert deployment.events.filter(kind="failed", message__contains=str(script)).exists()
    assert not marker.exists()


def test_the_spawn_allowlist_resolves_names_on_the_callers_path_not_the_specs(tmp_path, script, marker):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").symlink_to(script)
    log = tmp_path / "x.log"
    spec = {"argv": ["python3", "-c", "pass"], "env": {"PATH": str(fake_bin)}, "pin_method": "none"}

    with pytest.raises(SpawnError, match=r"refused to run 'python3': not an executable of this host's configuration"):
        process_spawn(spec=spec, log_path=log, log_max_bytes=4096, tag="exe-allow-0001", allowed_executables={"python3"})
    with pytest.raises(SpawnError, match=rf"refused to run '{script}'"):
        process_spawn(spec={"argv": [str(script)]}, log_path=log, log_max_bytes=4096, tag="exe-allow-0002",
                      allowed_executables={sys.executable})

    assert not marker.exists() and not log.exists()


@needs_numactl
def test_the_spawn_allowlist_refuses_numactl_without_a_marked_program(tmp_path, script, marker):
    spec = {"argv": [NUMACTL, "--localalloc", str(script)], "pin_method": "numactl"}

    with pytest.raises(SpawnError, match="refused to run numactl without '--'"):
        process_spawn(spec=spec, log_path=tmp_path / "x.log", log_max_bytes=4096, tag="exe-allow-0003",
                      allowed_executables={NUMACTL, sys.executable})
    assert not marker.exists()


def test_the_admin_shows_a_nodes_tools_read_only(db, script):
    node = Node.objects.create(name="here", hostname="here", cpu_count=1, tools={"python": "/opt/engines/bin/python"})
    client = Client()
    client.force_login(User.objects.create_superuser("sam-super", "sam@example.test", "correct-horse-battery"))

    html = client.get(reverse("admin:deployments_node_change", args=[node.pk])).content.decode()

    assert 'name="tools"' not in html
    assert "/opt/engines/bin/python" in html
    assert 'name="hostname"' in html  # the page is the change form, other fields still editable
    response = client.post(reverse("admin:deployments_node_change", args=[node.pk]), {
        "name": "here", "hostname": "here", "cpu_count": "1", "memory_total_bytes": "0",
        "tools": f'{{"python": "{script}"}}', "driver_version": "", "cuda_version": "", "topology": "{}",
        "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0", "numa_nodes-TOTAL_FORMS": "0", "numa_nodes-INITIAL_FORMS": "0",
    })
    node.refresh_from_db()
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert node.tools == {"python": "/opt/engines/bin/python"}
