"""Cancel decides on the row as stored when it changes it, not on what the request read earlier:
a deployment that becomes ready between the read and the change is refused with the same 409 as
one that was ready all along, and never gets a stop. Concurrent cancels racing the node agent's
own ready transition end with the deployment either ready and untouched, or cancelled before it
ever counted as ready."""
from __future__ import annotations

import threading
import time

import httpx
import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.authtoken.models import Token

from deployments import tasks
from deployments.agent import _deployment_maybe_ready
from deployments.api.views import DeploymentViewSet
from deployments.choices import DeploymentStatus
from deployments.models import Deployment, ProcessEvent
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

# A sim single-server recipe on the CPU-only node that renders a launch plan of one process, so
# the agent's ready check has a plan to count the process rows against.
SIM_SPEC = {"served_model_name": "sim-model", "model": {"name": "example-org/sim-model"},
            "sim": {"profile": "demo-fast"}, "startup_timeout_s": 5,
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 39123}}}


def ready_message(pk: int) -> str:
    return (f"Deployment #{pk} is ready; cancel only applies to a deployment that has not become ready yet "
            f"(pending or starting). Use stop (POST /api/deployments/{pk}/stop/) to stop it.")


@pytest.fixture
def sent_stops(monkeypatch) -> list[int]:
    """Ids of the deployments a stop task was sent for (the broker is not involved)."""
    sent: list[int] = []
    monkeypatch.setattr(tasks.deployment_stop_task, "apply_async",
                        lambda args, **kwargs: sent.append(args[0]))
    return sent


def becomes_ready_after_the_read(monkeypatch, row: Deployment) -> None:
    """Make the deployment become ready, the way the node agent marks it, right after the view
    has read it: the request holds a row that still looks cancellable."""
    real_get_object = DeploymentViewSet.get_object

    def read_then_ready(view):
        read = real_get_object(view)
        now = timezone.now()
        assert Deployment.objects.filter(pk=row.pk, status__in=[DeploymentStatus.PENDING, DeploymentStatus.STARTING],
                                         stop_requested=False).update(
            status=DeploymentStatus.READY, ready_at=now, updated_at=now) == 1
        return read

    monkeypatch.setattr(DeploymentViewSet, "get_object", read_then_ready)


@pytest.mark.django_db
@pytest.mark.parametrize("read_as", [DeploymentStatus.PENDING, DeploymentStatus.STARTING])
def test_it_refuses_a_deployment_that_became_ready_after_the_request_read_it(
        operator_api, monkeypatch, sent_stops, django_capture_on_commit_callbacks, read_as):
    row = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()), status=read_as)
    becomes_ready_after_the_read(monkeypatch, row)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = operator_api.post(f"/api/deployments/{row.pk}/cancel/")

    assert response.status_code == 409
    assert response.json() == {"detail": ready_message(row.pk), "code": "conflict"}
    row.refresh_from_db()
    assert (row.status, row.cancel_requested, row.reason) == (DeploymentStatus.READY, False, "")
    assert callbacks == [] and sent_stops == []
    assert not ProcessEvent.objects.filter(deployment=row).exists()


@pytest.mark.django_db
def test_it_still_cancels_a_starting_deployment_once_and_answers_a_repeat_with_202(
        operator_api, sent_stops, django_capture_on_commit_callbacks):
    row = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create()), status=DeploymentStatus.STARTING)

    with django_capture_on_commit_callbacks(execute=True):
        first = operator_api.post(f"/api/deployments/{row.pk}/cancel/")
        second = operator_api.post(f"/api/deployments/{row.pk}/cancel/")

    assert [first.status_code, second.status_code] == [202, 202]
    assert second.json()["status"] == "starting" and second.json()["cancel_requested"] is True
    assert sent_stops == [row.pk]
    assert list(ProcessEvent.objects.filter(deployment=row).values_list("kind", flat=True)) == ["cancel-requested"]


@pytest.mark.django_db
def test_the_agent_does_not_mark_ready_a_deployment_whose_cancel_won(operator_api, sent_stops):
    row = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(), spec=SIM_SPEC),
                                status=DeploymentStatus.STARTING)

    assert operator_api.post(f"/api/deployments/{row.pk}/cancel/").status_code == 202
    _deployment_maybe_ready(Deployment.objects.select_related("recipe", "node").get(pk=row.pk))

    row.refresh_from_db()
    assert (row.status, row.cancel_requested, row.ready_at) == (DeploymentStatus.STARTING, True, None)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_concurrent_cancels_racing_the_agents_ready_never_cancel_a_ready_deployment(
        live_server, operator, sent_stops):
    token = Token.objects.create(user=operator).key
    node = cpu_node_create()
    clients = 4
    # The agent's ready UPDATE starts this long after the cancels are sent: at once it usually
    # wins; later, the cancels usually do. Either way the outcome must be one of the two below.
    for round_, agent_delay_s in enumerate((0.0, 0.02, 0.5)):
        row = deployment_row_create(recipe=recipe_row_create(node=node, name=f"race-{round_}", spec=SIM_SPEC),
                                    status=DeploymentStatus.STARTING)
        start = threading.Barrier(clients + 1)
        answers: list[httpx.Response] = []
        agent_done: list[int] = []
        lock = threading.Lock()

        def cancel() -> None:
            with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Token {token}"},
                              timeout=60) as client:
                start.wait()
                response = client.post(f"/api/deployments/{row.pk}/cancel/")
            with lock:
                answers.append(response)

        def agent_marks_ready() -> None:
            try:
                deployment = Deployment.objects.select_related("recipe", "node").get(pk=row.pk)
                start.wait()
                time.sleep(agent_delay_s)
                _deployment_maybe_ready(deployment)
                agent_done.append(row.pk)
            finally:
                connection.close()

        threads = [threading.Thread(target=cancel) for _ in range(clients)]
        threads.append(threading.Thread(target=agent_marks_ready))
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)

        assert len(answers) == clients and agent_done == [row.pk]
        row.refresh_from_db()
        stops = ProcessEvent.objects.filter(deployment=row, kind="cancel-requested").count()
        if row.status == DeploymentStatus.READY:  # the agent won: every cancel refused, nothing stopped
            assert row.cancel_requested is False and stops == 0 and row.pk not in sent_stops
            assert [r.status_code for r in answers] == [409] * clients
            assert all(r.json() == {"detail": ready_message(row.pk), "code": "conflict"} for r in answers)
        else:  # a cancel won: the agent never marked it ready; one stop, every cancel answered 202
            assert (row.status, row.cancel_requested, row.ready_at) == (DeploymentStatus.STARTING, True, None)
            assert stops == 1 and sent_stops.count(row.pk) == 1
            assert [r.status_code for r in answers] == [202] * clients, [r.text for r in answers]
        Deployment.objects.filter(pk=row.pk).update(status=DeploymentStatus.STOPPED)
