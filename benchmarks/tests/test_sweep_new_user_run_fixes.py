"""What a new user's run of the benchmark sweeps found: a point stopped during its warm-up counted
by what it sent, the follow line's phases in order, the stop's own words, plural nouns, the sweep
list's wording and the runs list's numbers. Checked on real rows, pages and exports."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_follow_line
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


def _sweep(operator, **grid) -> BenchmarkSweep:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9",
                                       recipe_name=f"sim-single-{BenchmarkSweep.objects.count()}")
    return sweep_create(deployment=deployment, user=operator,
                        grid={"concurrency": [4], "lengths": "64:64", "requests": 64, **grid})


def _running(sweep: BenchmarkSweep, progress: dict) -> BenchmarkRun:
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.RUNNING, current_point="c=4 64/64",
                                                      started_at=timezone.now())
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=4,
                                       input_len=64, output_len=64, num_requests=64, progress=progress)


def test_a_run_row_with_no_report_yet_reads_starting_not_sending(operator) -> None:
    sweep = _sweep(operator)
    run = _running(sweep, {})
    line = sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    assert "running, starting c=4 64/64," in line and "sending" not in line and "(point" not in line
    # A row reset with only the point's limits (no phase, no counts) is not sending either.
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"duration_s": None, "total_sent_so_far": False,
                                                            "updated_at": "2026-01-01T00:00:00Z"})
    line = sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    assert "running, starting c=4 64/64," in line and "sending" not in line
    # Its prompts, then its warm-up, then its measured requests: only the last reads sending.
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"phase": "preparing prompts", "prepared": 3, "total": 11})
    assert "preparing prompts for c=4 64/64, 3/11 prompts built" in sweep_follow_line(
        sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"done": 5, "total": 64, "failed": 0, "aborted": 0})
    assert "running, sending c=4 64/64, points 0/1 done, requests 0/64 done (point 5/64)" in sweep_follow_line(
        sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)


WARMED = {"ended_during": "warming up", "warmup_done": 1, "warmup_total": 2, "warmup_elapsed_s": 0.4,
          "requests_sent": 0, "duration_s": None, "total_sent_so_far": False, "updated_at": "2026-01-01T00:00:00Z"}


def test_a_point_stopped_while_warming_up_counts_what_it_sent_not_its_plan(operator, viewer, viewer_api,
                                                                           client) -> None:
    from benchmarks.services import sweeps as sweep_services
    from benchmarks.sweeps import results_table_lines

    sweep = _sweep(operator, requests=4, warmup=2)
    run = _running(sweep, WARMED)
    BenchmarkRun.objects.filter(pk=run.pk).update(num_requests=4)
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(requests_total=4)
    stop = f"oscar-operator requested a stop of deployment #{sweep.deployment_id} at 2026-01-01 00:00:00 UTC"
    assert sweep_services._finish(sweep.pk, SweepStatus.FAILED, f"{stop} during point c=4 64/64; the sweep stopped")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.reason.startswith("stopped while warming up (1/2 warm-up requests ended), before its first measured "
                                 f"request (0 of 4 planned requests sent): {stop}"), run.reason
    assert run.reason.endswith(f"{stop} during point c=4 64/64; the sweep stopped"), run.reason
    # The sweep's own reason says the phase too.
    assert BenchmarkSweep.objects.get(pk=sweep.pk).reason == (
        f"{stop} during point c=4 64/64; the sweep stopped while warming up")
    # The API, the page's results table, the terminal's and the CSV all say 0 sent, its plan apart.
    api = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (api["requests_done"], api["requests_total"]) == (0, 0)
    client.force_login(viewer)
    table = client.get(reverse("benchmarks:sweep-results", args=[sweep.pk])).content.decode()
    assert '<td class="num">0 sent of 4 planned</td>' in table
    lines = results_table_lines([run], num_gpus=4)
    row = lines[2].split()
    assert row[:4] == ["4", "!", "0", "[1]"], lines
    assert any("[1] requests: 0 sent of 4 planned" in line for line in lines), lines
    body = client.get(reverse("benchmarks:sweep-export", args=[sweep.pk, "csv"])).content.decode()
    (exported,) = list(csv.DictReader(io.StringIO(body)))
    assert (exported["requests"], exported["num_requests"]) == ("0", "4")
    metrics = viewer_api.get(f"/api/runs/{run.pk}/").json()["metrics"]
    assert metrics["requests"] == 0
    # Having sent nothing, none succeeded, failed or was aborted: 0 each, not unknown, in the API,
    # the CSV, the run page and the terminal's failures column.
    assert (metrics["successes"], metrics["failures"], metrics["aborted"]) == (0, 0, 0)
    assert (exported["successes"], exported["failures"], exported["aborted"]) == ("0", "0", "0")
    assert row[-2:] == ["0", "-"], lines
    page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert '<tr><td>Successful requests</td><td class="num">0</td></tr>' in page
    assert '<td class="num failures">0</td>' in page


@pytest.mark.parametrize("status", [SweepStatus.FAILED, SweepStatus.CANCELLED])
def test_a_sweep_stopped_while_warming_up_says_so_on_its_page_and_the_list_as_its_run_page_does(
        operator, viewer, client, status) -> None:
    from benchmarks.services import sweeps as sweep_services

    sweep = _sweep(operator, requests=4, warmup=2)
    run = _running(sweep, WARMED)
    assert sweep_services._finish(sweep.pk, status, "cancelled by oscar" if status == SweepStatus.CANCELLED
                                  else "deployment #1 is stopping; the sweep stopped")
    assert viewer_api_reason(viewer, sweep) == ("cancelled by oscar while warming up" if status == SweepStatus.CANCELLED
                                                else "deployment #1 is stopping; the sweep stopped while warming up")
    client.force_login(viewer)
    how = "was cancelled" if status == SweepStatus.CANCELLED else "failed"
    why = f"(the sweep {how} while warming up, before its first measured request)"
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    cell = page.split('class="requests-done"')[1].split("</dd>")[0]
    assert cell == f'>none sent <span class="muted small">{why}</span>'
    index = client.get(reverse("benchmarks:index")).content.decode()
    row = index.split(f'href="/benchmarks/sweeps/{sweep.pk}/"')[1].split("</tr>")[0]
    assert f'none sent <span class="muted small">{why}</span>' in row
    run_page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "before its first measured request" in run_page and "The point stopped while warming up" in run_page


def viewer_api_reason(viewer, sweep: BenchmarkSweep) -> str:
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(viewer)
    return api.get(f"/api/sweeps/{sweep.pk}/").json()["reason"]


@pytest.mark.parametrize(("progress", "reason"), [
    ({"ended_during": "preparing prompts", "prepared": 3, "total": 11, "requests_sent": 0},
     "cancelled by oscar while preparing prompts"),
    ({"done": 5, "total": 64, "failed": 0, "aborted": 0}, "cancelled by oscar"),
])
def test_the_sweeps_reason_names_the_phase_only_where_its_point_stopped_in_one(operator, progress, reason) -> None:
    from benchmarks.services import sweeps as sweep_services

    sweep = _sweep(operator)
    run = _running(sweep, progress)
    assert sweep_services._finish(sweep.pk, SweepStatus.CANCELLED, "cancelled by oscar")
    assert BenchmarkSweep.objects.get(pk=sweep.pk).reason == reason
    run.refresh_from_db()
    assert run.reason.endswith(": cancelled by oscar" if "ended_during" in progress else "cancelled by oscar")
    assert "while preparing prompts" not in run.reason.split(": ", 1)[-1]


def _failed_point(sweep: BenchmarkSweep, errors: dict, *, aborted: int, requests: int, reason: str) -> BenchmarkRun:
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.FAILED, reason=reason,
                                                      requests_total=requests, ended_at=timezone.now())
    return BenchmarkRun.objects.create(
        sweep=sweep, ordinal=0, status=RunStatus.FAILED, concurrency=4, input_len=64, output_len=64,
        num_requests=64, reason=reason, output_tok_s=5222.25,
        summary={"requests": requests, "successes": requests - aborted, "failures": 0, "aborted": aborted,
                 "errors": errors, "ended_by": "deployment_down", "output_throughput_tok_s": 5222.25,
                 "request_throughput_req_s": 1.0, "duration_s": 1.0})


def test_requests_a_stop_aborted_read_as_the_stop_on_both_lines_and_a_crash_as_the_deployment_going_down(
        operator, viewer, client) -> None:
    client.force_login(viewer)
    sweep = _sweep(operator)
    stop = f"oscar-operator requested a stop of deployment #{sweep.deployment_id} at 2026-01-01 00:00:00 UTC"
    _failed_point(sweep, {f"aborted: {stop}": 4}, aborted=4, requests=6, reason=f"{stop} during point c=4 64/64")
    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
    assert "4 aborted in flight by a stop (not failures of the server)" in page
    assert "4 aborted in flight by a stop (not counted as done)" in page
    assert "went down" not in page
    crashed = _sweep(operator)
    down = "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    _failed_point(crashed, {f"aborted: {down}": 2}, aborted=2, requests=6, reason=f"{down} during point c=4 64/64")
    page = client.get(reverse("benchmarks:sweep-progress", args=[crashed.pk])).content.decode()
    assert "2 aborted in flight when the deployment went down (not failures of the server)" in page
    assert "2 aborted in flight when the deployment went down (not counted as done)" in page


def _aborted_lines(page: str) -> tuple[str, str, str]:
    """The run page's aborted row (label and cell), its note under the failures and the
    error-adjusted table's heading, each as one line of text."""
    row = page.split("<td>Aborted requests")[1].split("</tr>")[0]
    note = page.split('<p class="aborted-note">')[1].split("</p>")[0]
    head = page.split("<th>Error-adjusted (ms)")[1].split("</th>")[0]
    return row, note, head


@pytest.mark.parametrize("cause", ["stop", "crash", "cancel"])
def test_the_run_pages_aborted_requests_name_what_ended_them_as_the_sweeps_outcome_does(
        operator, viewer, client, cause) -> None:
    client.force_login(viewer)
    sweep = _sweep(operator)
    stop = f"oscar-operator requested a stop of deployment #{sweep.deployment_id} at 2026-01-01 00:00:00 UTC"
    down = "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    why = {"stop": stop, "crash": down, "cancel": "the sweep was cancelled"}[cause]
    run = _failed_point(sweep, {f"aborted: {why}": 2, "HTTP 500: boom": 1}, aborted=2, requests=6,
                        reason=f"{why} during point c=4 64/64")
    BenchmarkRun.objects.filter(pk=run.pk).update(summary={
        **run.summary, "failures": 1, "successes": 3,
        "error_adjusted": {"ttft_s": {"p50": 0.1, "p90": 0.2, "p99": None},
                           "e2e_s": {"p50": 0.3, "p90": 0.4, "p99": None}, "failures": 1, "aborted": 2}})
    if cause == "cancel":
        BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.CANCELLED, reason="cancelled by oscar")
        BenchmarkRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, summary={
            **BenchmarkRun.objects.get(pk=run.pk).summary, "ended_by": "cancelled"})
    words = {"stop": "by a stop", "crash": "when the deployment went down", "cancel": "by the cancel"}[cause]
    outcome = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
    assert f"2 aborted in flight {words} (not failures of the server)" in outcome
    page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    row, note, head = _aborted_lines(page)
    assert f'ended in flight {words}: neither successes nor failures</div>' in row
    assert f'<td class="num aborted">2 of 6 aborted in flight {words}</td>' in row
    assert note == f"2 of 6 aborted in flight {words}: neither successes nor failures of the server."
    assert f"2 aborted in flight {words} left out (not failures)" in head
    others = {"by a stop", "when the deployment went down", "by the cancel"} - {words}
    assert not any(other in text for other in others for text in (row, note, head))


def test_counts_take_their_noun_in_number_and_later_points_are_named_only_when_there_were_some() -> None:
    from benchmarks.services.sweeps import _later_points_text
    from benchmarks.sweeps import counted

    assert (counted(1, "point"), counted(1, "request"), counted(0, "request"), counted(4000, "request")) == (
        "1 point", "1 request", "0 requests", "4,000 requests")
    assert _later_points_text(0) == ""
    assert _later_points_text(1) == " and the later point was not run"
    assert _later_points_text(7) == " and the 7 later points were not run"
    js = (Path(__file__).resolve().parents[2] / "static" / "ceiling" / "dashboards.js").read_text()
    assert '"updated " + CeilingLive.clockUtc' not in js   # under "Last update": the time alone


def test_the_sweep_list_says_none_sent_and_the_runs_list_marks_failed_runs_and_separates_thousands(
        operator, viewer, client) -> None:
    client.force_login(viewer)
    never = _sweep(operator)
    BenchmarkSweep.objects.filter(pk=never.pk).update(status=SweepStatus.FAILED, requests_total=0, requests_done=0,
                                                      reason="deployment #1 is stopping; the sweep stopped")
    failed = _sweep(operator)
    _failed_point(failed, {}, aborted=0, requests=6, reason="single #0 killed by signal 9 during point c=4 64/64")
    done = _sweep(operator)
    BenchmarkSweep.objects.filter(pk=done.pk).update(status=SweepStatus.DONE)
    BenchmarkRun.objects.create(sweep=done, ordinal=0, status=RunStatus.DONE, concurrency=4, input_len=64,
                                output_len=64, num_requests=64, output_tok_s=5222.25,
                                summary={"requests": 64, "successes": 64, "failures": 0,
                                         "output_throughput_tok_s": 5222.25, "request_throughput_req_s": 1.0})
    page = client.get(reverse("benchmarks:index")).content.decode()
    row = page.split(f'href="/benchmarks/sweeps/{never.pk}/"')[1].split("</tr>")[0]
    # no point had started: no phase, in the run page's words
    assert "none sent" in row and "0 / 0" not in row
    assert "(the sweep failed before its first measured request)" in row
    runs = page.split('<table class="runs">')[1].split("</table>")[0]
    failed_row = runs.split(f"#{failed.runs.get().pk} ")[1].split("</tr>")[0]
    assert 'class="num muted not-measured" title="not a measurement: single #0 killed by signal 9' in failed_row
    assert "5,222.2<div class=\"small\">not a measurement</div>" in failed_row
    done_row = runs.split(f"#{done.runs.get().pk} ")[1].split("</tr>")[0]
    assert '<td class="num">5,222.2</td>' in done_row and "not-measured" not in done_row


def test_the_docs_crash_example_is_what_a_crash_whose_requests_the_server_cut_off_reads(operator) -> None:
    """Requests a dying server cut off are its failures and done (none aborted): the reason the docs
    quote is the one the code writes for them."""
    from benchmarks.services import sweeps as sweep_services

    sweep = _sweep(operator)
    deployment = sweep.deployment
    type(deployment).objects.filter(pk=deployment.pk).update(status="failed")
    summary = {"requests": 6, "successes": 0, "failures": 6, "aborted": 0,
               "errors": {"cannot connect to 127.0.0.1:9 (connection reset)": 3,
                          "cannot connect to 127.0.0.1:9 (server closed the connection)": 2,
                          "cannot connect to 127.0.0.1:9 (connection refused)": 1}}
    down = "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    reason = sweep_services._went_down_reason(summary, "c=6 64/64", deployment, down=down, healthy=None, health="")
    assert reason == (f"{down} during point c=6 64/64: 6 of 6 requests failed (commonest: 3 x cannot connect to "
                      f"127.0.0.1:9 (connection reset)); deployment #{deployment.pk} was marked failed at that moment")
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text().split())
    assert (f"{down} during point c=6 64/64: 6 of 6 requests failed (commonest: 3 x cannot connect to …); "
            "deployment #4 was marked failed at that moment`, 6/6 done and `requests_aborted` 0") in docs
    assert "a crash's reason says `2 aborted in flight" not in docs


def _chart_empty(page: str, chart_id: str) -> str:
    import json

    block = page.split(f'<script id="{chart_id}" type="application/json">')[1].split("</script>")[0]
    return json.loads(block)["empty"]


def test_a_measured_run_without_records_says_why_not_that_it_was_imported(operator, viewer, client,
                                                                           tmp_path) -> None:
    client.force_login(viewer)

    def empties(run: BenchmarkRun) -> set[str]:
        page = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
        return {_chart_empty(page, c) for c in ("chart-cdf-ttft", "chart-cdf-e2e", "chart-timeline")}

    sweep = _sweep(operator, requests=4, warmup=2)
    run = _running(sweep, WARMED)
    assert empties(run) == {"no per-request records yet (they are stored when the point ends)."}
    BenchmarkRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED)
    assert empties(run) == {"no per-request records (the point stopped while warming up, before its first measured "
                            "request)."}
    BenchmarkRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, progress={"done": 2, "failed": 0})
    assert empties(run) == {"no per-request records (the point was cancelled before they were stored)."}
    BenchmarkRun.objects.filter(pk=run.pk).update(status=RunStatus.DONE, records_path=str(tmp_path / "gone.npz"))
    assert empties(run) == {"no per-request records (this run's records file is missing or unreadable)."}
    imported = BenchmarkRun.objects.create(source="imported", status=RunStatus.DONE, concurrency=4, input_len=64,
                                           output_len=64, summary={"successes": 4, "output_throughput_tok_s": 1.0})
    # an imported run draws no empty charts: one line says its file held only aggregate figures
    page = client.get(reverse("benchmarks:run-detail", args=[imported.pk])).content.decode()
    assert 'id="chart-cdf-ttft"' not in page
    assert ("The imported file held only aggregate figures, not per-request records: output throughput, shown in "
            "the summary above.") in page
