"""A sweep is refused for a deployment whose node agent is offline (no heartbeat within
``CEILING_HEARTBEAT_TIMEOUT_S``, or shut down since): the load goes out from the control plane's
worker, but only the agent watches the processes, so "ready" is only as last seen. The API answers
409 as for a deployment being stopped, the form shows the reason, ``manage.py sweep`` refuses it;
each names the node and its last heartbeat in UTC."""
from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils.html import escape

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.models import Node

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}
SEEN = datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt_timezone.utc)


def _reason(deployment, seen: str) -> str:
    return (f"node agent local of deployment #{deployment.pk} is offline ({seen}): the sweep sends its load from "
            "the control plane's worker, but only the agent watches the deployment's processes, so its state is "
            "only as last seen and a server that ended would go unnoticed while the points are measured; start "
            "the agent on local (manage.py node_agent), then sweep again")


@pytest.fixture
def offline(db):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="agent-gone")
    Node.objects.filter(name="local").update(agent_heartbeat_at=SEEN)
    return deployment


def test_the_api_refuses_it_with_a_409_naming_the_node_and_its_last_heartbeat(operator_api, offline) -> None:
    answer = operator_api.post("/api/sweeps/", {"deployment": offline.pk, "grid": GRID}, format="json")
    assert answer.status_code == 409, answer.content
    assert answer.json() == {"detail": _reason(offline, "last heartbeat 2026-03-04 05:06:07 UTC"),
                             "code": "conflict"}
    assert not BenchmarkSweep.objects.exists()


def test_a_bad_grid_is_still_a_400_first(operator_api, offline) -> None:
    answer = operator_api.post("/api/sweeps/", {"deployment": offline.pk, "grid": {**GRID, "concurrency": [0]}},
                               format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()) == ["grid.concurrency.0"]


def test_an_agent_never_seen_or_shut_down_is_named_so(operator_api, offline) -> None:
    Node.objects.filter(name="local").update(agent_heartbeat_at=None)
    answer = operator_api.post("/api/sweeps/", {"deployment": offline.pk, "grid": GRID}, format="json")
    assert (answer.status_code, answer.json()["detail"]) == (409, _reason(offline, "last heartbeat never"))

    now = datetime.now(dt_timezone.utc).replace(microsecond=0)
    Node.objects.filter(name="local").update(agent_heartbeat_at=now, agent_stopped_at=now + timedelta(seconds=1))
    answer = operator_api.post("/api/sweeps/", {"deployment": offline.pk, "grid": GRID}, format="json")
    stamp = "%Y-%m-%d %H:%M:%S UTC"
    assert (answer.status_code, answer.json()["detail"]) == (409, _reason(
        offline, f"stopped at {(now + timedelta(seconds=1)).strftime(stamp)}; last heartbeat {now.strftime(stamp)}"))
    assert not BenchmarkSweep.objects.exists()


def test_the_form_shows_the_reason_and_starts_nothing(operator, offline) -> None:
    response = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": offline.pk, "concurrency": "1", "lengths": "64:16", "requests": "4"})
    assert response.status_code == 409   # as the API answers the same state
    assert escape(_reason(offline, "last heartbeat 2026-03-04 05:06:07 UTC")) in response.content.decode()
    assert not BenchmarkSweep.objects.exists()


def test_the_command_refuses_it(offline) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("sweep", "agent-gone", "--lengths", "64:16", stdout=io.StringIO())
    assert str(refused.value) == _reason(offline, "last heartbeat 2026-03-04 05:06:07 UTC")
    assert not BenchmarkSweep.objects.exists()


def test_it_is_created_once_the_agent_heartbeats(operator_api, offline, django_capture_on_commit_callbacks) -> None:
    Node.objects.filter(name="local").update(agent_heartbeat_at=datetime.now(dt_timezone.utc))
    with django_capture_on_commit_callbacks(execute=False):
        answer = operator_api.post("/api/sweeps/", {"deployment": offline.pk, "grid": GRID}, format="json")
    assert answer.status_code == 201, answer.content
