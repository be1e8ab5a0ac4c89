"""Requests a cancel ends in flight are aborted, not failed: the sweep page's outcome line says they
were cancelled, the results table counts them apart ("1 of 1 aborted in flight by the cancel", not "1 failed of 1"), the
run metrics (API), the run's stored summary (API and Export JSON) and the CSV give ``failures`` (the
server's) and ``aborted`` apart, and the ceiling analysis does not leave a point out "for failures"
that only a stop cut. Neither is ever a success.

Against a real ``sim`` engine process (``sim_url``, the shared module fixture); the sweep runs in a
thread of the test as the Celery task would run it."""
from __future__ import annotations

import csv
import io
import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.analysis import SweepPoint, ceiling_analyse
from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_cancel, sweep_create, sweep_execute, sweep_export_csv
from benchmarks.sweeps import failure_counts, results_table_rows, summary_point
from benchmarks.tests.sweep_support import sim_deployment_create
from benchmarks.views.sweep_pages import request_outcomes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _run_and_cancel(operator, deployment, grid: dict, ready) -> BenchmarkSweep:
    sweep = sweep_create(deployment=deployment, user=operator, grid=grid)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    deadline = time.monotonic() + 60
    while True:
        run = sweep.runs.filter(ordinal=0).first()
        if run is not None and ready(run.progress or {}):
            break
        assert time.monotonic() < deadline, "the first point never got under way"
        time.sleep(0.02)
    sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    thread.join(60)
    assert result["status"] == SweepStatus.CANCELLED
    sweep.refresh_from_db()
    return sweep


def test_a_point_cancelled_with_its_only_request_in_flight_reads_cancelled_not_failed(
        sim_url: str, operator, operator_api) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    # c=1, then c=2: cancelled while c=1's first long request is in flight, none finished yet
    sweep = _run_and_cancel(
        operator, deployment, {"concurrency": [1, 2], "lengths": [[16, 1024]], "requests": 2},
        lambda p: int(p.get("done") or 0) == 0 and (p.get("elapsed_s") or 0) >= 0.2)
    [run] = sweep.runs.all()
    assert run.status == RunStatus.CANCELLED
    s = run.summary
    # as stored: the aborted request is no failure of the server (requests = successes + failures + aborted)
    assert (s["requests"], s["successes"], s["failures"], s["aborted"]) == (1, 0, 0, 1)
    assert failure_counts(s) == (0, 1)

    assert request_outcomes([sweep.pk])[sweep.pk] == {"successes": 0, "failures": 0, "aborted": 1, "requests": 1}
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    outcome = page.split('class="requests-failed"')[1].split("</dd>")[0]
    assert "0 of 1 request succeeded" in outcome and '<span class="tag warn">' in outcome
    assert "1 aborted in flight by the cancel (not failures of the server)" in outcome
    assert "no request finished: the sweep was cancelled with every one in flight" in outcome
    assert "every request failed" not in page and "failed of" not in page
    # the results table: no failure, the aborted request under its own heading with its reason
    assert page.split('<td class="num failures">')[1].split("</td>")[0] == "0"
    cell = page.split('<td class="num aborted">')[1].split("</td>")[0]
    assert '<span class="warn">1 of 1 aborted in flight by the cancel, 1 not sent</span>' in cell
    assert "1 × aborted: the sweep was cancelled" in cell

    body = operator_api.get(f"/api/runs/{run.pk}/").json()
    for counts in (body["metrics"], body["summary"], operator_api.get(f"/api/runs/{run.pk}/export/?format=json").json()[
            "summary"]):
        assert (counts["requests"], counts["successes"], counts["failures"], counts["aborted"]) == (1, 0, 0, 1)
    [row] = csv.DictReader(io.StringIO(sweep_export_csv(sweep=sweep)))
    assert (row["requests"], row["successes"], row["failures"], row["aborted"]) == ("1", "0", "0", "1")
    # the text report's failures column
    assert results_table_rows([run], num_gpus=4)[0][9] == "0 (+1 aborted)"


def test_a_point_with_successes_and_aborted_requests_is_not_left_out_for_failures(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    # c=2, 10 requests of ~1.3 s: cancelled once 2 have completed, with 2 in flight
    sweep = _run_and_cancel(operator, deployment, {"concurrency": [2], "lengths": [[16, 256]], "requests": 10},
                            lambda p: int(p.get("done") or 0) >= 2)
    [run] = sweep.runs.all()
    s = run.summary
    assert s["successes"] >= 2 and s["aborted"] >= 1 and s["failures"] == 0
    p = summary_point(summary=s, concurrency=2, request_rate=None, input_len=16, output_len=256, num_gpus=4,
                      flags=[])
    assert (p["completed"], p["failed"], p["aborted"]) == (s["successes"], 0, s["aborted"])
    # Read as a whole point (its partial flag aside), it is analysed: its aborted requests are no
    # failures of the server, so no "N of M requests failed" exclusion.
    report = ceiling_analyse([SweepPoint.from_summary(p)], num_gpus=4, topology="single")
    assert report.excluded == [] and report.failed_excluded == [] and report.failed_requests == 0
    assert [pt.concurrency for pt in report.points] == [2]
    # aborted requests are not successes: the success share is over every request sent
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    outcome = page.split('class="requests-failed"')[1].split("</dd>")[0]
    assert f"{s['successes']} of {s['requests']} requests succeeded" in outcome
    assert f"{s['aborted']} aborted in flight by the cancel (not failures of the server)" in outcome
    assert "failed" not in outcome.replace('class="requests-failed"', "")
    assert page.split('<td class="num failures">')[1].split("</td>")[0] == "0"
    cell = page.split('<td class="num aborted">')[1].split("</td>")[0]
    assert (f'<span class="warn">{s["aborted"]} of {s["requests"]} aborted in flight by the cancel, '
            f'{s["not_sent"]} not sent</span>') in cell


def test_a_summary_stored_with_its_aborted_requests_among_failures_reads_them_apart(operator_api) -> None:
    # Stored before `failures` left the aborted requests out: requests = successes + failures.
    sweep = BenchmarkSweep.objects.create(name="old", status=SweepStatus.CANCELLED, grid={"concurrency": [2]})
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.CANCELLED, concurrency=2,
                                      summary={"requests": 5, "successes": 2, "failures": 3, "aborted": 2})
    assert failure_counts(run.summary) == (1, 2)
    body = operator_api.get(f"/api/runs/{run.pk}/").json()
    exported = operator_api.get(f"/api/runs/{run.pk}/export/?format=json").json()
    for counts in (body["metrics"], body["summary"], exported["metrics"], exported["summary"]):
        assert (counts["requests"], counts["successes"], counts["failures"], counts["aborted"]) == (5, 2, 1, 2)
    assert request_outcomes([sweep.pk])[sweep.pk] == {"successes": 2, "failures": 1, "aborted": 2, "requests": 5}
    # one stored since: the same counts as they are
    run.summary = {"requests": 5, "successes": 2, "failures": 1, "aborted": 2}
    run.save(update_fields=["summary"])
    assert failure_counts(run.summary) == (1, 2)
    assert operator_api.get(f"/api/runs/{run.pk}/").json()["summary"]["failures"] == 1
    assert request_outcomes([sweep.pk])[sweep.pk] == {"successes": 2, "failures": 1, "aborted": 2, "requests": 5}
