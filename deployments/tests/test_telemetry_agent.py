"""State changes and samples from the node agent reach the deployment's and node's groups on
the real channel layer: ``deployment.status`` and ``health.change`` (forced) from the agent's
transitions run in-process against a real ``sim`` engine, and ``node.sample`` /
``deployment.sample`` from the sampler thread of a real ``manage.py node_agent``."""
from __future__ import annotations

import time

import httpx
import pytest

from controlplane import realtime
from deployments import services
from deployments.agent import _apply, deployment_check, deployment_launch, deployment_teardown
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    free_ports,
    node_of,
    sim_single_recipe,
    wait_for,
    wait_status,
)
from deployments.tests.test_telemetry_sampler import Inbox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _no_rate_bound(settings):
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


@pytest.fixture
def recipe(db, operator, settings, tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = cpu_node_create(name="tel-agent-box")
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port, "flags": {"time-scale": 0.05}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    return services.recipe_create(user=operator, name="tel-sim", engine="sim", topology="single", node=node,
                                  spec=spec)


def _changes(messages: list[dict], type_: str) -> list[tuple]:
    picked = [m["data"] for m in messages if m["type"] == type_]
    if type_ == "deployment.status":
        return [d["status"] for d in picked]
    return [(d["from"], d["to"]) for d in picked]


def test_it_broadcasts_status_and_health_changes_as_the_agent_makes_them(recipe, operator):
    deployment = services.deployment_create(recipe=recipe, user=operator)
    inbox = Inbox(realtime.deployment_group(deployment.pk))
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        wait_for(lambda: deployment_check(deployment_id=deployment.pk) or
                 ServerProcess.objects.get(deployment=deployment).status == ProcessStatus.READY,
                 timeout_s=30, what="the sim to be ready")
        deployment_check(deployment_id=deployment.pk)
        row = ServerProcess.objects.select_related("deployment").get(deployment=deployment)
        # Two failed liveness checks, then a good one.
        _apply(row, "unhealthy", "GET /health: HTTP 500", None)
        _apply(row, "unhealthy", "GET /health: HTTP 500", None)
        _apply(row, "ready", "GET /health: 200", None)
        assert deployment_teardown(deployment_id=deployment.pk) == "stopped"
        messages = inbox.take(lambda m: m["type"] == "deployment.status" and m["data"]["status"] == "stopped")
    finally:
        inbox.close()
    assert _changes(messages, "deployment.status") == ["starting", "ready", "stopping", "stopped"]
    assert _changes(messages, "health.change") == [
        ("pending", "starting"), ("starting", "healthy"), ("healthy", "unhealthy"), ("unhealthy", "healthy"),
        ("healthy", "stopped"),
    ]
    unhealthy = next(m for m in messages if m["type"] == "health.change" and m["data"]["to"] == "unhealthy")
    assert unhealthy["data"] == {"process_id": row.pk, "role": "single", "from": "healthy", "to": "unhealthy",
                                 "detail": "failed (1/3): GET /health: HTTP 500"}
    ready = next(m for m in messages if m["type"] == "deployment.status" and m["data"]["status"] == "ready")
    assert ready["data"]["deployment_id"] == deployment.pk
    assert ready["data"]["reason"].startswith("the 1 process is ready")
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_it_samples_from_a_real_node_agent_and_keeps_history(agents, deployer, viewer_api):
    agent = agents(CEILING_SAMPLER_HZ="4", CEILING_TELEMETRY_FLUSH_S="1", CEILING_REALTIME_MIN_INTERVAL_S="0")
    node = node_of(agent)
    recipe = sim_single_recipe(node=node, user=deployer, name="tel-e2e")
    deployment = services.deployment_create(recipe=recipe, user=deployer)
    inbox = Inbox(realtime.deployment_group(deployment.pk), realtime.node_group(node.name))
    try:
        wait_status(deployment, "ready")
        row = ServerProcess.objects.get(deployment=deployment)
        port = recipe.spec["roles"]["single"]["port"]
        for _ in range(3):
            resp = httpx.post(f"http://127.0.0.1:{port}/generate", json={
                "text": "hi", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}, timeout=30,
                trust_env=False)
            assert resp.status_code == 200
            time.sleep(0.3)
        messages = inbox.take(lambda m: m["type"] == "deployment.sample" and m["data"]["processes"][0]["engine"][
            "generation_tokens_total"] == 120.0 and m["data"]["status"] == "ready", timeout_s=15)
    finally:
        inbox.close()
    samples = [m for m in messages if m["type"] == "deployment.sample"]
    assert samples, [m["type"] for m in messages]
    (proc,) = samples[-1]["data"]["processes"]
    assert proc["id"] == row.pk and proc["pid"] == row.pid and proc["health"] == "healthy"
    assert proc["rss_bytes"] > 0 and proc["gpu_memory_bytes"] is None  # this host has no GPU
    assert any(m["data"]["tok_s"] for m in samples)
    node_samples = [m["data"] for m in messages if m["type"] == "node.sample"]
    assert node_samples and node_samples[-1]["node"] == node.name and node_samples[-1]["interval_s"] == 0.25

    def history():
        body = viewer_api.get(f"/api/deployments/{deployment.pk}/telemetry/").json()
        return body if any(body["history"]["tok_s"]) else None

    body = wait_for(history, timeout_s=10, what="rollups of the deployment in the history")
    assert str(row.pk) in body["history"]["processes"]
    assert body["latest"]["deployment.sample"]["data"]["deployment_id"] == deployment.pk
