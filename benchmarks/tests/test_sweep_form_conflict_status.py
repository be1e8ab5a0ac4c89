"""The sweep form answers a sweep the deployment's state refuses (another sweep already active on
it) with the API's 409 and the API's reason, the form re-rendered with what was typed; a form with
input errors still gets the 400 first, as the API judges a body first. An active sweep whose cancel
was asked for is named as being cancelled, with the time of the ask, in both."""
from __future__ import annotations

import html as html_lib
from datetime import timedelta
from datetime import timezone as dt_timezone

import pytest
from django.urls import reverse
from django.utils import timezone

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
    # what a sweep not started yet waits for, as its page and the API's queue_note say it
    note = {SweepStatus.PENDING: " (queued for a benchmark worker)",
            SweepStatus.WAITING: f" (waiting for the deployment to be ready: deployment #{deployment.pk} is starting)",
            SweepStatus.RUNNING: ""}[status]
    said = (f"sweep #{busy.pk} is already {status} on deployment #{deployment.pk}{note}; wait for it or cancel it "
            "first (concurrent sweeps would skew each other)")
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1, 8], "lengths": "16:8", "requests": 8}}, format="json")
    assert (api.status_code, api.json()) == (409, {"detail": said, "code": "conflict"})
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {"deployment": deployment.pk, **FORM})
    assert (form.status_code, form.context["errors"]) == (409, {"detail": [said]})
    assert BenchmarkSweep.objects.count() == 1


def _create_both(operator_api, operator, deployment):
    """A new sweep of ``deployment`` asked for through the API and through the form."""
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1, 8], "lengths": "16:8", "requests": 8}}, format="json")
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {"deployment": deployment.pk, **FORM})
    return api, form


@pytest.mark.parametrize("status", [SweepStatus.WAITING, SweepStatus.RUNNING])
def test_a_new_sweep_right_after_a_cancel_is_told_the_active_one_is_being_cancelled(
        operator_api, operator, busy, status) -> None:
    """The cancel answers 200 with the sweep still active (its task stops it at its next check);
    a sweep started meanwhile is refused saying so and when the cancel was asked, not told to
    cancel what was just cancelled."""
    BenchmarkSweep.objects.filter(pk=busy.pk).update(status=status)
    deployment = busy.deployment
    cancel = operator_api.post(f"/api/sweeps/{busy.pk}/cancel/")
    assert cancel.status_code == 200, cancel.json()
    assert (cancel.json()["status"], cancel.json()["cancel_requested"]) == (status, True)
    asked = BenchmarkSweep.objects.get(pk=busy.pk).cancel_requested_at
    assert asked is not None and abs((timezone.now() - asked).total_seconds()) < 60

    api, form = _create_both(operator_api, operator, deployment)

    said = (f"sweep #{busy.pk} on deployment #{deployment.pk} is being cancelled (cancel requested at "
            f"{asked.astimezone(dt_timezone.utc):%H:%M:%S} UTC); start the new sweep once it has stopped, "
            "in a few seconds")
    assert (api.status_code, api.json()) == (409, {"detail": said, "code": "conflict"})
    assert (form.status_code, form.context["errors"]) == (409, {"detail": [said]})
    assert said in html_lib.unescape(form.content.decode())
    assert BenchmarkSweep.objects.count() == 1


def test_a_second_cancel_keeps_the_time_of_the_first(operator_api, busy) -> None:
    first = timezone.now() - timedelta(seconds=20)
    BenchmarkSweep.objects.filter(pk=busy.pk).update(cancel_requested=True, cancel_requested_at=first)

    assert operator_api.post(f"/api/sweeps/{busy.pk}/cancel/").status_code == 200

    assert BenchmarkSweep.objects.get(pk=busy.pk).cancel_requested_at == first


@pytest.mark.parametrize("status", [SweepStatus.PENDING, SweepStatus.WAITING, SweepStatus.RUNNING])
@pytest.mark.parametrize(("ago", "when", "soon"), [
    (timedelta(seconds=5), "%H:%M:%S", True),
    (timedelta(minutes=5), "%H:%M:%S", False),        # asked a while ago: no promise of seconds
    (timedelta(days=2), "%Y-%m-%d %H:%M:%S", False),  # not today: the date too
    (None, None, True),                               # a row older than the column: no time to name
])
def test_the_being_cancelled_refusal_names_the_time_it_was_asked(operator_api, operator, busy, status, ago, when,
                                                                 soon) -> None:
    asked = timezone.now() - ago if ago is not None else None
    if ago is not None and ago < timedelta(days=1) and asked.astimezone(dt_timezone.utc).date() != \
            timezone.now().astimezone(dt_timezone.utc).date():
        when = "%Y-%m-%d %H:%M:%S"  # run just after midnight UTC: that was yesterday
    BenchmarkSweep.objects.filter(pk=busy.pk).update(status=status, cancel_requested=True, cancel_requested_at=asked)
    deployment = busy.deployment

    api, form = _create_both(operator_api, operator, deployment)

    at = f" (cancel requested at {asked.astimezone(dt_timezone.utc).strftime(when)} UTC)" if asked else ""
    said = (f"sweep #{busy.pk} on deployment #{deployment.pk} is being cancelled{at}; start the new sweep once it "
            f"has stopped{', in a few seconds' if soon else ''}")
    assert (api.status_code, api.json()) == (409, {"detail": said, "code": "conflict"})
    assert (form.status_code, form.context["errors"]) == (409, {"detail": [said]})
    assert BenchmarkSweep.objects.count() == 1


def test_once_the_cancelled_sweep_has_stopped_a_new_one_starts(operator_api, busy) -> None:
    assert operator_api.post(f"/api/sweeps/{busy.pk}/cancel/").status_code == 200
    BenchmarkSweep.objects.filter(pk=busy.pk).update(status=SweepStatus.CANCELLED, ended_at=timezone.now())

    created = operator_api.post("/api/sweeps/", {"deployment": busy.deployment.pk, "grid": {
        "concurrency": [1, 8], "lengths": "16:8", "requests": 8}}, format="json")

    assert created.status_code == 201, created.json()
