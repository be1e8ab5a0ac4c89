"""How a sweep's outcome reads, as a new user met it: a sweep of points limited by time
gives no request total until it knows one, never one behind the requests done (API and
``manage.py sweep``); a point stopped partway is listed with its reason in the failed sweep's
analysis; a failure the sweep expects (its deployment went down) is one warning line with the
reason, while an unexpected error keeps its traceback. Against a real ``sim`` server process."""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from benchmarks.api.serializers import SweepSerializer
from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_analysis, sweep_create, sweep_execute, sweep_follow_line
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


# --- the sweep's request total is never behind the requests done -----------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_time_limited_sweep_shows_no_request_total_until_it_knows_one(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2], "lengths": [[16, 8]], "duration_s": 1.5})
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    seen = []
    lines = []
    while thread.is_alive():
        row = BenchmarkSweep.objects.get(pk=sweep.pk)
        body = SweepSerializer(row).data
        seen.append((body["status"], body["requests_done"], body["requests_total"]))
        if row.status == SweepStatus.RUNNING and row.points_done == 1:
            lines.append(sweep_follow_line(sweep=row, elapsed_s=0))
        time.sleep(0.05)
    thread.join()
    assert result["status"] == SweepStatus.DONE
    # The stored column grows behind the count while the points run (a first run's "265/224"); the
    # API gives no total until the sweep is done, then the requests it sent.
    assert all(total is None for status, _, total in seen if status != SweepStatus.DONE), seen
    assert any(done > 0 for status, done, _ in seen if status == SweepStatus.RUNNING), seen
    body = SweepSerializer(BenchmarkSweep.objects.get(pk=sweep.pk)).data
    assert body["requests_total"] == body["requests_done"] > 0
    assert lines and all(re.search(r", requests \d+ done( \(point [^)]*\))?, total not known: points limited by time",
                                   line) for line in lines), lines
    assert not any(re.search(r"requests \d+/\d+", line) for line in lines)


@pytest.mark.django_db
def test_a_total_that_a_time_limit_can_only_shorten_is_given_while_the_sweep_runs() -> None:
    # A request count as well as a time limit: the count is the most a point sends.
    capped = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, requests_total=40, requests_done=12,
                                           grid={"concurrency": [1, 4], "lengths": [[16, 8]], "requests": 20,
                                                 "duration_s": 5.0})
    timed = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, requests_total=224, requests_done=265,
                                          grid={"concurrency": [1, 4], "request_rates": [2.0], "lengths": [[16, 8]],
                                                "requests_per_concurrency": 2, "duration_s": 5.0})
    assert (SweepSerializer(capped).data["requests_total"], SweepSerializer(timed).data["requests_total"]) == (40, None)
    assert sweep_follow_line(sweep=timed, elapsed_s=0).endswith(
        ", requests 265 done, total not known: points limited by time")
    BenchmarkSweep.objects.filter(pk=timed.pk).update(status=SweepStatus.DONE, requests_total=439, requests_done=439)
    assert SweepSerializer(BenchmarkSweep.objects.get(pk=timed.pk)).data["requests_total"] == 439


# --- a point stopped partway: listed in the analysis; the failure is a warning ----------


def _stop_deployment_during_point(sweep: BenchmarkSweep, deployment, ordinal: int) -> dict:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    deadline = time.monotonic() + 30
    while True:
        run = sweep.runs.filter(ordinal=ordinal).first()
        if run is not None and (run.progress or {}).get("output_tokens"):
            break
        assert time.monotonic() < deadline, "the point never reported progress"
        time.sleep(0.05)
    deployment.status = DeploymentStatus.STOPPING
    deployment.save(update_fields=["status"])
    thread.join(30)
    return result


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_failed_sweep_lists_the_point_stopped_partway_and_logs_a_warning_without_a_traceback(
        sim_url: str, operator, caplog) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 4], "lengths": [[16, 128]], "requests_per_concurrency": 4})
    with caplog.at_level(logging.INFO, logger="benchmarks"):
        assert _stop_deployment_during_point(sweep, deployment, ordinal=1)["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    assert sweep.reason.startswith(f"deployment #{deployment.pk} is stopping during point c=4 16/128: ")
    stopped = sweep.runs.get(ordinal=1)
    assert stopped.status == RunStatus.FAILED and stopped.summary["ended_by"] == "deployment_down"

    analysis = sweep_analysis(sweep=sweep)
    assert analysis["provisional"] is True
    assert analysis["lengths"]["16/128"]["excluded"] == [f"c=4 (stopped partway, failed: {stopped.reason})"]
    # "the sweep failed (why)", never "the sweep was failed"
    assert analysis["notes"][0] == (f"provisional: the sweep failed ({sweep.reason}); these findings cover only the "
                                    "finished points, not the ones it never ran or stopped partway")
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert (f"Provisional: the sweep failed ({escape(sweep.reason)}); these findings cover only the finished "
            "points.") in page
    assert "was failed" not in page

    records = [r for r in caplog.records if r.name == "benchmarks.services.sweeps" and "failed" in r.getMessage()]
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in records] == [
        (logging.WARNING, f"sweep {sweep.pk} failed: {sweep.reason}", None)]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_sweep_stopped_in_its_first_point_names_that_point_in_its_analysis(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 256]], "requests": 64})
    assert _stop_deployment_during_point(sweep, deployment, ordinal=0)["status"] == SweepStatus.FAILED
    stopped = sweep.runs.get()
    analysis = sweep_analysis(sweep=BenchmarkSweep.objects.get(pk=sweep.pk))
    assert analysis["lengths"] == {} and analysis["notes"] == ["no run finished"]
    assert analysis["errors"] == {
        "16/256": f"no finished point with output; left out: c=2 (stopped partway, failed: {stopped.reason})"}


@pytest.mark.django_db
def test_an_expected_failure_is_one_warning_line_with_its_reason(operator, caplog) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    deployment.status, deployment.reason = DeploymentStatus.FAILED, "single #0 exited with code 1"
    deployment.save(update_fields=["status", "reason"])
    with caplog.at_level(logging.INFO, logger="benchmarks"):
        assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    reason = f"deployment #{deployment.pk} is failed: single #0 exited with code 1; nothing to benchmark"
    assert BenchmarkSweep.objects.get(pk=sweep.pk).reason == reason
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records
            if r.name == "benchmarks.services.sweeps"] == [(logging.WARNING, f"sweep {sweep.pk} failed: {reason}", None)]
    assert "Traceback" not in caplog.text


@pytest.mark.django_db
def test_an_unexpected_error_is_still_logged_with_its_traceback(operator, monkeypatch, caplog) -> None:
    from benchmarks.services import sweeps as sweep_services

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sweep_services, "_wait_ready", broken)
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    with caplog.at_level(logging.INFO, logger="benchmarks"):
        assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    [record] = [r for r in caplog.records if r.name == "benchmarks.services.sweeps"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert BenchmarkSweep.objects.get(pk=sweep.pk).reason == "RuntimeError: disk full"
