"""Requests a stop ends in flight count the same way whichever stop it was: a cancel, or the
sweep's deployment going down under the point. Neither counts them in ``requests_done`` (the
requests that finished); both count them in ``requests_aborted``, a cancel also in
``requests_cancelled``. Against a real ``sim`` engine process, the sweep run in a thread of the
test as the Celery task would run it."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_cancel, sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import Deployment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _wait_for_done(sweep: BenchmarkSweep, done: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        run = sweep.runs.first()
        if run is not None and int((run.progress or {}).get("done") or 0) >= done:
            return
        assert time.monotonic() < deadline, f"the point never finished {done} requests"
        time.sleep(0.05)


@pytest.mark.parametrize("stop", ["cancel", "deployment stopping"])
def test_requests_aborted_in_flight_are_never_counted_done(sim_url: str, operator, operator_api, stop: str) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    # 10 requests of ~1.3 s, two at a time: stopped once 2 have completed, with 2 in flight
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 256]], "requests": 10})
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    _wait_for_done(sweep, 2)
    if stop == "cancel":
        sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    else:
        Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPING)
    thread.join(60)
    cancelled = stop == "cancel"
    assert result["status"] == (SweepStatus.CANCELLED if cancelled else SweepStatus.FAILED)

    sweep.refresh_from_db()
    [run] = sweep.runs.all()
    assert run.status == (RunStatus.CANCELLED if cancelled else RunStatus.FAILED)
    s = run.summary
    assert s["ended_by"] == ("cancelled" if cancelled else "deployment_down")
    assert s["aborted"] >= 1 and s["successes"] >= 2
    assert s["requests"] == s["successes"] + s["failures"] + s["aborted"] < 10 and s["failures"] == 0
    # done: the requests that finished (here every failure is an abort), never the aborted ones
    assert sweep.requests_done == s["requests"] - s["aborted"] == s["successes"]
    assert sweep.requests_total == s["requests"]  # what was sent, aborted ones included: not the 10 planned

    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (body["requests_done"], body["requests_aborted"]) == (s["successes"], s["aborted"])
    assert body["requests_cancelled"] == (s["aborted"] if cancelled else 0)

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
    cell = page.split('class="requests-done"')[1].split("</dd>")[0]
    assert f"{s['successes']} finished of {s['requests']} sent" in cell
    if cancelled:
        assert f"{s['aborted']} aborted in flight by the cancel (not counted as done)" in cell
        assert "when the deployment went down" not in cell
    else:
        assert f"{s['aborted']} aborted in flight when the deployment went down (not counted as done)" in cell
        assert "by the cancel" not in cell
    # The run's live counts (the API's progress) count the aborted requests apart, as the summary
    # and the sweep's requests_done do: done are those that finished, failed none of them.
    progress = operator_api.get(f"/api/runs/{run.pk}/").json()["progress"]
    assert (progress["done"], progress["failed"], progress["aborted"]) == (s["successes"], 0, s["aborted"])
    # The run's row counts the same requests in the same words as the progress line and the API:
    # under its own heading, none under the failures'.
    detail = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert '>Failures <span class="unit">(requests)</span></th>' in detail
    assert '>Aborted <span class="unit">(requests)</span></th>' in detail
    assert detail.split('<td class="num failures">')[1].split("</td>")[0] == "0"
    row = detail.split('<td class="num aborted">')[1].split("</td>")[0]
    stopped_by = "by the cancel" if cancelled else "when the deployment went down"
    assert f"{s['aborted']} of {s['requests']} aborted in flight {stopped_by}" in row
    # The run page: no failed request, the aborted ones in their own row and section.
    page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    failed = page.split("<td>Failed requests")[1].split("</tr>")[0]
    assert '<td class="num failures">0</td>' in failed
    aborted = page.split("<td>Aborted requests")[1].split("</tr>")[0]
    assert f"{s['aborted']} of {s['requests']} aborted in flight {stopped_by}" in aborted
    failures = page.split("<h2>Failures</h2>")[1].split("<h2>Aborted requests</h2>")[0]
    assert "No failed requests." in failures and "aborted:" not in failures
    assert '<td class="mono small">aborted: ' in page.split("<h2>Aborted requests</h2>")[1].split("<h2>")[0]
    assert "cancelled in flight" not in detail
