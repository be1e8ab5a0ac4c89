"""The sweep form answers a sweep the deployment's state refuses (another sweep already active on
it) with the API's 409 and the API's reason, the form re-rendered with what was typed; a form with
input errors still gets the 400 first, as the API judges a body first."""
from __future__ import annotations

import html as html_lib

import pytest
from django.urls import reverse

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db

FORM = {"concurrency": "1, 8", "lengths": "16:8", "requests": "8"}


@pytest.fixture
def busy():
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                       recipe_name="busy-sim")
    return BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING)


def test_the_form_answers_a_conflict_with_the_apis_409_and_reason(operator_api, operator, busy) -> None:
    deployment = busy.deployment
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1, 8], "lengths": "16:8", "requests": 8}}, format="json")
    assert api.status_code == 409
    reason = api.json()["detail"]
    assert reason.startswith(f"sweep #{busy.pk} is already running on deployment #{deployment.pk}; ")

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {"deployment": deployment.pk, **FORM})

    assert form.status_code == 409
    assert form.context["errors"] == {"detail": [reason]}
    page = html_lib.unescape(form.content.decode())
    assert reason in page
    assert 'name="concurrency" value="1, 8"' in page   # the form re-rendered with what was typed
    assert BenchmarkSweep.objects.count() == 1


def test_input_errors_still_get_the_400_first(operator_api, operator, busy) -> None:
    deployment = busy.deployment
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [0], "lengths": "16:8", "requests": 8}}, format="json")
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"),
                                           {"deployment": deployment.pk, **FORM, "concurrency": "0"})
    assert (api.status_code, form.status_code) == (400, 400)
    assert form.context["errors"]["concurrency"] == [f"item 1: {m}" for m in api.json()["grid.concurrency.0"]]
    assert BenchmarkSweep.objects.count() == 1


@pytest.mark.parametrize("status", [SweepStatus.PENDING, SweepStatus.WAITING, SweepStatus.RUNNING])
def test_the_conflict_states_the_active_sweeps_own_status(operator_api, operator, busy, status) -> None:
    """A second sweep created right after the first, still pending, is told it is pending, not
    running: the API's 409 and the form name the active sweep's status as stored."""
    BenchmarkSweep.objects.filter(pk=busy.pk).update(status=status)
    deployment = busy.deployment
    said = (f"sweep #{busy.pk} is already {status} on deployment #{deployment.pk}; wait for it or cancel it first "
            "(concurrent sweeps would skew each other)")
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1, 8], "lengths": "16:8", "requests": 8}}, format="json")
    assert (api.status_code, api.json()) == (409, {"detail": said, "code": "conflict"})
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {"deployment": deployment.pk, **FORM})
    assert (form.status_code, form.context["errors"]) == (409, {"detail": [said]})
    assert BenchmarkSweep.objects.count() == 1
