"""A deployment that ended before its processes wrote a log, or before any process was started,
says so on its page instead of promising a log that will never come ("does not exist (yet)")."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from deployments.choices import DeploymentStatus
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create


@pytest.fixture
def log_dir(settings, tmp_path) -> Path:
    root = tmp_path / "logs"
    root.mkdir()
    settings.CEILING_LOG_DIR = root
    return root


def _get(user, name: str, *args) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name, args=list(args)))
    assert response.status_code == 200
    return response.content.decode()


def _page(user, deployment) -> str:
    return _get(user, "deployments:deployment-detail", deployment.pk)


@pytest.mark.django_db
def test_a_failed_deployment_says_its_process_never_wrote_a_log(viewer, log_dir):
    recipe = recipe_row_create(node=cpu_node_create(), name="never-started")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    ServerProcess.objects.filter(deployment=deployment).update(log_path=str(log_dir / "never-written.log"))
    logs = _page(viewer, deployment).split('id="deployment-logs"')[1]
    assert "The log file does not exist (yet)." not in logs
    assert "The deployment ended failed before this process wrote any log." in logs
    assert "refreshed every 2 s" not in logs


@pytest.mark.django_db
def test_a_stopped_deployment_with_a_log_still_shows_it(viewer, log_dir):
    recipe = recipe_row_create(node=cpu_node_create(), name="ran-a-while")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    path = log_dir / "single.log"
    path.write_text("engine started\nengine stopped\n", encoding="utf-8")
    ServerProcess.objects.filter(deployment=deployment).update(log_path=str(path))
    logs = _page(viewer, deployment).split('id="deployment-logs"')[1]
    assert "engine stopped" in logs and "before this process wrote any log" not in logs


@pytest.mark.django_db
def test_a_deployment_that_ended_before_any_process_says_there_are_no_logs(viewer):
    recipe = recipe_row_create(node=cpu_node_create(), name="no-process")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    ServerProcess.objects.filter(deployment=deployment).delete()
    logs = _page(viewer, deployment).split('id="deployment-logs"')[1]
    assert "The deployment was stopped before any process was started, so there are no logs." in logs
    assert "No process logs yet." not in logs


@pytest.mark.django_db
def test_a_running_deployment_keeps_the_live_log_panel(viewer, log_dir):
    recipe = recipe_row_create(node=cpu_node_create(), name="starting-up")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STARTING)
    ServerProcess.objects.filter(deployment=deployment).update(log_path=str(log_dir / "not-yet.log"))
    logs = _page(viewer, deployment).split('id="deployment-logs"')[1]
    assert "The log file does not exist (yet)." in logs
    assert 'hx-trigger="processes-changed from:body"' in _page(viewer, deployment)



@pytest.mark.django_db
def test_the_partials_a_page_left_open_reloads_say_the_same_once_it_ended(viewer, log_dir):
    # A page opened while the deployment ran re-fetches these partials when it ends: they must
    # not fall back to "yet" wording that promises a log or a process that will never come.
    recipe = recipe_row_create(node=cpu_node_create(), name="ended-while-watched")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    process = ServerProcess.objects.filter(deployment=deployment).first()
    ServerProcess.objects.filter(pk=process.pk).update(log_path=str(log_dir / "never-written.log"))
    tail = _get(viewer, "deployments:process-log", deployment.pk, process.pk)
    assert "The deployment ended failed before this process wrote any log." in tail
    assert "does not exist (yet)" not in tail and "hx-get" not in tail

    ServerProcess.objects.filter(pk=process.pk).update(log_path="")
    tail = _get(viewer, "deployments:process-log", deployment.pk, process.pk)
    assert ("The deployment ended failed before this process wrote any log "
            "(no log file was recorded for it).") in tail
    assert "No log file recorded yet." not in tail

    ServerProcess.objects.filter(deployment=deployment).delete()
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED)
    logs = _get(viewer, "deployments:deployment-logs", deployment.pk)
    assert "The deployment was stopped before any process was started, so there are no logs." in logs
    assert "No process logs yet." not in logs and "hx-get" not in logs
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert "No processes: the deployment ended before the node agent started any." in live
    assert "No processes yet." not in live


@pytest.mark.django_db
def test_the_partials_of_a_running_deployment_keep_the_live_wording(viewer, log_dir):
    recipe = recipe_row_create(node=cpu_node_create(), name="still-starting")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STARTING)
    ServerProcess.objects.filter(deployment=deployment).delete()
    logs = _get(viewer, "deployments:deployment-logs", deployment.pk)
    assert "No process logs yet." in logs and 'hx-trigger="processes-changed from:body"' in logs
    assert "No processes yet. The node agent creates them" in _get(viewer, "deployments:deployment-live", deployment.pk)


@pytest.mark.django_db
def test_a_deployment_no_agent_started_says_how_long_it_waited_and_never_ran(viewer):
    recipe = recipe_row_create(node=cpu_node_create(), name="never-picked-up")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.PENDING)
    ServerProcess.objects.filter(deployment=deployment).delete()
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert "<dd>not started yet; waiting " in live and "Serving for" not in live
    assert "not started yet; waiting " in _get(viewer, "deployments:deployment-list")
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED)
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert ">Serving</dt><dd>never started; ended " in live


def _duration_cell(html: str, pk: int) -> str:
    import re

    row = re.search(rf"<tr>\s*<td>{pk}</td>.*?</tr>", html, re.S).group(0)
    return re.findall(r'<td class="small">(.*?)</td>', row, re.S)[2].strip()


@pytest.mark.django_db
def test_a_deployment_that_failed_before_any_process_was_spawned_never_started_as_a_cancelled_one(viewer):
    from django.utils import timezone

    recipe = recipe_row_create(node=cpu_node_create(), name="port-taken")
    now = timezone.now()
    cancelled = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)  # cancelled while pending
    failed = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    ran = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    ServerProcess.objects.filter(deployment__in=[cancelled, failed]).delete()
    Deployment.objects.filter(pk=cancelled.pk).update(ended_at=now)
    # the node agent took it (started_at) and failed it at once: a port in use, no process spawned
    Deployment.objects.filter(pk__in=[failed.pk, ran.pk]).update(started_at=now - timezone.timedelta(seconds=200),
                                                                 ended_at=now)
    # never ready: the time it ran counts from Created, as every other duration before Ready
    Deployment.objects.filter(pk=ran.pk).update(created_at=now - timezone.timedelta(seconds=205))
    ServerProcess.objects.filter(deployment=ran).update(started_at=now - timezone.timedelta(seconds=199))

    listed = _get(viewer, "deployments:deployment-list")

    assert _duration_cell(listed, cancelled.pk) == "never started; ended 0 s after created"
    assert _duration_cell(listed, failed.pk) == "never started; ended 0 s after created"
    assert _duration_cell(listed, ran.pk) == "never ready; ran 3 min 25 s from created"
    assert (">Serving</dt><dd>never started; ended 0 s after created</dd>"
            in _get(viewer, "deployments:deployment-live", failed.pk))
    assert (">Serving</dt><dd>never ready; ran 3 min 25 s from created</dd>"
            in _get(viewer, "deployments:deployment-live", ran.pk))
