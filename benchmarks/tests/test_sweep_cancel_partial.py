"""A sweep cancelled while a point runs keeps what that point completed: the point is stored
cancelled with its records and a summary marked partial (completed vs planned requests), shown as
such in the results table and the exports, and left out of the ceiling analysis and of every
comparison's best run.

Against a real ``sim`` engine process (``sim_url``, the shared module fixture); the sweep runs in
a thread of the test as the Celery task would run it (the behaviour lives in the service)."""
from __future__ import annotations

import csv
import io
import json
import threading
import time
from pathlib import Path

import pytest

from benchmarks.analysis import PARTIAL_FLAG, SweepPoint, ceiling_analyse
from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import RecordStore
from benchmarks.models import BenchmarkSweep
from benchmarks.services import (
    runs_compare, sweep_analysis, sweep_cancel, sweep_create, sweep_execute, sweep_export_csv, sweep_export_json,
    sweep_report_text,
)
from benchmarks.sweeps import summary_point
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _wait_for_done(sweep: BenchmarkSweep, ordinal: int, done: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        run = sweep.runs.filter(ordinal=ordinal).first()
        if run is not None and int((run.progress or {}).get("done") or 0) >= done:
            return
        assert time.monotonic() < deadline, f"point {ordinal} never finished {done} requests"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_it_keeps_a_partial_summary_of_the_point_a_cancel_stopped(sim_url: str, operator, operator_api) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    # c=1 runs 5 requests to the end; c=2 (10 requests of ~1.3 s, two at a time) is cancelled
    # once 2 of them have completed, with 2 in flight.
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2], "lengths": [[16, 256]], "requests_per_concurrency": 5})
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    _wait_for_done(sweep, ordinal=1, done=2)
    sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    thread.join(60)
    assert result["status"] == SweepStatus.CANCELLED

    sweep.refresh_from_db()
    whole, cut = sweep.runs.order_by("ordinal")
    assert whole.status == RunStatus.DONE and PARTIAL_FLAG not in whole.flags
    assert cut.status == RunStatus.CANCELLED
    s = cut.summary
    part = s["partial"]
    # What completed before the cancel is kept, counted against the plan; the requests the
    # cancel ended in flight are aborted ("aborted: ..."), never successes nor failures.
    assert part["planned"] == 10 and part["reason"] == "the sweep was cancelled"
    assert part["completed"] == s["successes"] >= 2
    assert part["sent"] == s["requests"] == s["successes"] + s["aborted"] < 10
    assert part["aborted"] == s["aborted"] >= 1 and s["failures"] == 0
    assert part["not_sent"] == 10 - s["requests"]
    assert s["ended_by"] == "cancelled" and s["flags"][PARTIAL_FLAG] is True
    assert set(s["errors"]) == {"aborted: the sweep was cancelled"}
    assert s["output_throughput_tok_s"] > 0 and s["ttft_s"]["count"] == s["successes"]
    assert PARTIAL_FLAG in cut.flags
    assert cut.reason == (f"sweep cancelled while this point ran; partial: {s['successes']}/10 completed, cancelled "
                          "(kept for the record, not analysed or ranked)")
    # The point's last live report says what is stored: the mean since start is its output
    # throughput (the successes' tokens and those the aborted requests had streamed, over the
    # measured duration), on the row and in the API.
    assert s["output_throughput_basis"] == "completed_and_aborted" and s["output_tokens_aborted"] > 0
    assert (cut.progress["output_tokens"], cut.progress["elapsed_s"]) == (
        s["output_tokens"] + s["output_tokens_aborted"], s["duration_s"])
    assert cut.progress["tok_s_mean"] == s["output_throughput_tok_s"]
    api = operator_api.get(f"/api/runs/{cut.pk}/").json()
    assert api["progress"]["tok_s_mean"] == api["metrics"]["output_throughput_tok_s"] == s["output_throughput_tok_s"]
    records = RecordStore.load(cut.records_path)
    assert len(records) == s["requests"] and int(records.column("ok").sum()) == s["successes"]
    # Requests done are the ones that finished: the whole point's 5 and the cut point's successes;
    # the ones the cancel ended in flight are counted apart, on the page and in the API.
    assert sweep.requests_done == 5 + s["requests"] - s["aborted"] == 5 + s["successes"]
    from benchmarks.views import sweep_progress

    progress = sweep_progress(sweep)
    assert (progress["requests_done"], progress["requests_cancelled"]) == (5 + s["successes"], s["aborted"])

    # Shown as partial: the text report, the CSV and the JSON export.
    report = sweep_report_text(sweep=sweep)
    # its requests are what it sent, the aborted ones included, as the page and the API count them
    assert f"requests: {s['requests']} sent of 10 planned" in report and PARTIAL_FLAG in report
    rows = {int(r["run_id"]): r for r in csv.DictReader(io.StringIO(sweep_export_csv(sweep=sweep)))}
    assert rows[cut.pk]["status"] == "cancelled" and PARTIAL_FLAG in rows[cut.pk]["flags"]
    assert (rows[cut.pk]["num_requests"], rows[cut.pk]["successes"]) == ("10", str(s["successes"]))
    exported = {r["id"]: r for r in json.loads(sweep_export_json(sweep=sweep))["runs"]}
    assert exported[cut.pk]["summary"]["partial"] == part and PARTIAL_FLAG in exported[cut.pk]["flags"]

    # Never ranked, never in a ceiling.
    compared = runs_compare(runs=[whole, cut])
    assert [e["rankable"] for e in compared["runs"]] == [True, False]
    assert all(best in (whole.pk, None) for best in compared["best"].values())
    assert compared["best"]["output_throughput_tok_s"] == whole.pk
    analysis = sweep_analysis(sweep=sweep)
    assert analysis["provisional"] is True
    assert all(len(report["points"]) == 1 for report in analysis["lengths"].values()), analysis
    point = SweepPoint.from_summary(summary_point(
        summary=s, concurrency=cut.concurrency, request_rate=None, input_len=16, output_len=256, num_gpus=4,
        flags=cut.flags))
    done_point = SweepPoint.from_summary(summary_point(
        summary=whole.summary, concurrency=1, request_rate=None, input_len=16, output_len=256, num_gpus=4,
        flags=whole.flags))
    report = ceiling_analyse([done_point, point], num_gpus=4, topology="single")
    assert "c=2 (cancelled partway: a partial point)" in report.excluded
    assert [p.concurrency for p in report.points] == [1]
