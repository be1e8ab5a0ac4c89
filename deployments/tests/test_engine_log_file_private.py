"""What holds for a secret's value that a real ``sim`` engine prints (sent to it as a request
id): every read through Ceiling (API tail, download) masks it, while the raw engine log file on
the node holds it as the engine wrote it, in an owner-only file (0600) inside an owner-only
directory (0700), the same for a directory an earlier version left readable by others."""
from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from controlplane.redaction import REDACTED
from deployments import services
from deployments.agent import deployment_launch, deployment_teardown
from deployments.models import Node, NumaNode, ServerProcess
from deployments.tests.test_agent_support import free_ports, wait_for
from deployments.topology import format_cpulist

USABLE = sorted(os.sched_getaffinity(0))
SECRET = "violet-lantern-quarry-5813"


@pytest.fixture
def launch(db, operator, admin_user, settings, tmp_path):
    """Launches a single ``sim`` server with a stored secret; torn down at the end."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    services.secret_create(user=admin_user, name="api-key", value=SECRET)
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(USABLE), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(USABLE))
    started = []

    def start(before=None) -> ServerProcess:
        (port,) = free_ports(1)
        spec = {
            "model": {"name": "sim/tiny"},
            "served_model_name": "tiny",
            "roles": {"single": {"host": "127.0.0.1", "port": port, "flags": {"time-scale": 0.05}}},
            "sim": {"profile": "demo-fast"},
            "startup_timeout_s": 30,
            "stop_grace_s": 5,
        }
        recipe = services.recipe_create(user=operator, name="logged", engine="sim", topology="single", node=node,
                                        spec=spec)
        deployment = services.deployment_create(recipe=recipe, user=operator)
        if before is not None:
            before(Path(settings.CEILING_LOG_DIR) / f"deployment-{deployment.pk}")
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        started.append(deployment)
        return ServerProcess.objects.get(deployment=deployment)

    yield start
    for deployment in started:
        deployment_teardown(deployment_id=deployment.pk)


def _print_secret_through_the_engine(row: ServerProcess) -> Path:
    port = row.ports["http"]
    wait_for(lambda: _health(port) == 200, timeout_s=20, what="the engine to answer")
    response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", trust_env=False, timeout=10,
                          json={"model": "tiny", "prompt": "hello", "max_tokens": 2, "rid": SECRET})
    assert response.status_code == 200
    log = Path(row.log_path)
    wait_for(lambda: f"rid={SECRET}" in log.read_text(), timeout_s=10, what="the engine to log the request")
    return log


def _health(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def test_the_raw_log_holds_what_the_engine_printed_owner_only_and_every_read_masks_it(launch, viewer_api, viewer):
    row = launch()
    log = _print_secret_through_the_engine(row)

    assert f"finished rid={SECRET} role=single" in log.read_text()  # the raw file: as the engine wrote it
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert oct(log.parent.stat().st_mode & 0o777) == "0o700"
    assert log.parent.name == f"deployment-{row.deployment_id}"

    tail = viewer_api.get(f"/api/processes/{row.pk}/log/?lines=50").json()["text"]
    assert f"finished rid={REDACTED} role=single" in tail and SECRET not in tail
    client = Client()
    client.force_login(viewer)
    download = client.get(reverse("deployments:process-log-download", args=[row.deployment_id, row.pk]))
    assert download.status_code == 200
    text = b"".join(download.streaming_content).decode() if download.streaming else download.content.decode()
    assert f"finished rid={REDACTED} role=single" in text and SECRET not in text


def test_a_deployment_log_directory_left_open_by_an_earlier_version_is_made_owner_only(launch):
    def left_open(directory: Path) -> None:
        directory.mkdir(parents=True)
        directory.chmod(0o755)
        (directory / "single0.log").write_text("an earlier run\n")
        (directory / "single0.log").chmod(0o644)

    row = launch(before=left_open)
    log = _print_secret_through_the_engine(row)

    assert oct(log.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert log.read_text().startswith("an earlier run\n")
