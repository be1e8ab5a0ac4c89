"""Deploy, stop, cancel, timeline and log tail through the API and the services, and the node
side's launch/teardown/reconcile run in-process against real engine processes (no agent
subprocess here; the fault tests run one)."""
from __future__ import annotations

import os
import signal
import time

import pytest
from django.core.management import call_command

from deployments import services
from deployments.agent import deployment_launch, deployment_teardown, node_reconcile
from deployments.choices import ProcessStatus
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import free_ports, wait_for


@pytest.fixture
def node(db):
    return cpu_node_create(name="cpu-box")


@pytest.fixture
def recipe(node, operator, settings, tmp_path):
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    (port,) = free_ports(1)
    spec = {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port, "flags": {"time-scale": 0.05}}},
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    return services.recipe_create(user=operator, name="api-sim", engine="sim", topology="single", node=node, spec=spec)


def test_it_deploys_through_the_api_and_says_it_waits_for_an_absent_agent(operator_api, recipe):
    response = operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending"
    assert body["recipe_version"] == 1
    assert body["waiting_reason"] == "waiting for node agent cpu-box (last heartbeat never)"
    assert body["entry_url"] == f"http://127.0.0.1:{recipe.spec['roles']['single']['port']}"
    events = operator_api.get(f"/api/deployments/{body['id']}/events/").json()["results"]
    assert [e["kind"] for e in events if e["kind"] != "warning"] == ["created"]
    # The dry-run's warnings are on the record too (a free port lies in the ephemeral range).
    plan_warnings = operator_api.get(f"/api/recipes/{recipe.pk}/dry-run/").json()["plan"]["warnings"]
    assert [e["message"] for e in events if e["kind"] == "warning"] == plan_warnings
    assert "oscar-operator deployed api-sim v1 on node cpu-box" == events[0]["message"]


def test_it_answers_409_to_a_second_deploy_while_one_is_active(operator_api, recipe):
    assert operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json").status_code == 201
    second = operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json")

    assert second.status_code == 409
    assert "already has an active deployment on node 'cpu-box'" in second.json()["detail"]
    assert Deployment.objects.filter(recipe=recipe).count() == 1


def test_it_refuses_deploy_and_stop_to_a_viewer(viewer_api, recipe, operator):
    deployment = services.deployment_create(recipe=recipe, user=operator)

    assert viewer_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json").status_code == 403
    assert viewer_api.post(f"/api/deployments/{deployment.pk}/stop/").status_code == 403
    assert viewer_api.get(f"/api/deployments/{deployment.pk}/").status_code == 200


def test_it_cancels_a_pending_deployment_and_a_late_start_task_does_nothing(operator_api, recipe):
    created = operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json").json()

    response = operator_api.post(f"/api/deployments/{created['id']}/cancel/")

    assert response.status_code == 202
    assert response.json()["status"] == "stopped"
    assert response.json()["reason"] == "cancelled by oscar-operator before it became ready"
    assert deployment_launch(deployment_id=created["id"]) == "skipped (stopped)"
    assert not ServerProcess.objects.filter(deployment_id=created["id"]).exists()
    # A new deploy is allowed once the previous one is over.
    assert operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json").status_code == 201


def test_it_launches_once_when_the_start_task_runs_twice_and_tears_down(recipe, operator, operator_api, tmp_path):
    deployment = services.deployment_create(recipe=recipe, user=operator)
    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        row = ServerProcess.objects.get(deployment=deployment)
        assert deployment_launch(deployment_id=deployment.pk) == "launched"

        again = ServerProcess.objects.get(deployment=deployment)
        assert (again.pid, again.start_ticks) == (row.pid, row.start_ticks)
        assert deployment.events.filter(kind="spawned").count() == 1
        assert again.status == ProcessStatus.SPAWNED
        assert again.effective_cpus == "0" and again.pinning_verified is True
        assert again.pin_method == "sched_setaffinity"

        wait_for(lambda: b"listening" in open(again.log_path, "rb").read(), timeout_s=10, what="the engine log")
        log = operator_api.get(f"/api/processes/{again.pk}/log/?lines=5").json()
        assert log["lines"] == 5 and "sim server role=single" in log["text"]
        assert operator_api.get(f"/api/processes/{again.pk}/log/?lines=0").status_code == 400
    finally:
        assert deployment_teardown(deployment_id=deployment.pk) == "stopped"
    deployment.refresh_from_db()
    row = ServerProcess.objects.get(deployment=deployment)
    assert deployment.status == "stopped" and deployment.ended_at is not None
    assert (row.status, row.end_reason) == (ProcessStatus.EXITED, "terminated")
    assert deployment_teardown(deployment_id=deployment.pk) == "skipped (stopped)"


def test_it_reconciles_a_dead_engine_from_the_command(recipe, operator, tmp_path):
    deployment = services.deployment_create(recipe=recipe, user=operator)
    deployment_launch(deployment_id=deployment.pk)
    row = ServerProcess.objects.get(deployment=deployment)
    os.kill(row.pid, signal.SIGKILL)
    wait_for(lambda: os.path.exists(f"{row.log_path}.exit"), timeout_s=10, what="the shim's exit record")

    call_command("reconcile", name="cpu-box")

    row.refresh_from_db()
    deployment.refresh_from_db()
    # The recipe's restart policy is the default "never": the deployment fails with the reason.
    assert row.status == ProcessStatus.FAILED
    assert row.reason.startswith("killed by signal 9 (SIGKILL); restart policy is 'never'")
    assert deployment.status == "failed" and deployment.reason.startswith("single failed: killed by signal 9 (SIGKILL)")


def test_it_adopts_a_running_engine_at_agent_start_up(recipe, operator):
    deployment = services.deployment_create(recipe=recipe, user=operator)
    deployment_launch(deployment_id=deployment.pk)
    try:
        counts = node_reconcile(node_name="cpu-box", at_startup=True)
        assert counts["adopted"] == 1
        assert deployment.events.filter(kind="adopted").count() == 1
        assert ServerProcess.objects.get(deployment=deployment).status == ProcessStatus.SPAWNED
    finally:
        deployment_teardown(deployment_id=deployment.pk)


def test_it_stops_processes_of_a_stop_requested_deployment_found_by_reconcile(recipe, operator):
    deployment = services.deployment_create(recipe=recipe, user=operator)
    deployment_launch(deployment_id=deployment.pk)
    pid = ServerProcess.objects.get(deployment=deployment).pid
    services.deployment_stop(deployment=deployment, user=operator)  # task message goes nowhere here

    counts = node_reconcile(node_name="cpu-box")

    assert counts["stopped"] == 1
    deployment.refresh_from_db()
    assert deployment.status == "stopped"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")
