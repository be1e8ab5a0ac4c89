"""A run has two durations: the point's time limit (the run's ``duration_s``, as the grid set it)
and how long it took (``measured_duration_s``). Wherever the measured time is given (the API's
run, its ``metrics`` and ``summary``, the run and sweep JSON exports, the CSV export) it is under
``measured_duration_s``; the summary and the metrics keep it under their older name ``duration_s``
too, so readers of stored rows read what they always read."""
from __future__ import annotations

import csv
import io
import json

import pytest

from benchmarks.choices import RunStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import run_export_csv, run_export_json, sweep_export_json

pytestmark = pytest.mark.django_db


def _timed_run(sweep: BenchmarkSweep | None = None) -> BenchmarkRun:
    # stored as older rows were: the measured time under the summary's duration_s alone
    summary = {"requests": 40, "successes": 40, "failures": 0, "duration_s": 29.5,
               "output_throughput_tok_s": 100.0, "request_throughput_req_s": 1.3, "ended_by": "duration"}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, concurrency=4, input_len=8,
                                       output_len=8, duration_s=30.0, num_gpus=1, summary=summary)


def test_the_api_gives_the_measured_time_under_its_own_name_everywhere(viewer_api) -> None:
    run = _timed_run()
    body = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert body["duration_s"] == 30.0   # the time limit
    assert body["measured_duration_s"] == 29.5
    assert body["metrics"]["measured_duration_s"] == 29.5 and body["metrics"]["duration_s"] == 29.5
    assert body["summary"]["measured_duration_s"] == 29.5 and body["summary"]["duration_s"] == 29.5
    run.refresh_from_db()
    assert "measured_duration_s" not in run.summary   # the stored row is read, not rewritten


def test_the_json_exports_give_both_durations_as_the_api_does(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="timed", grid={"concurrency": [4], "duration_s": 30}, status="done",
                                          num_gpus=1)
    run = _timed_run(sweep)
    api = viewer_api.get(f"/api/runs/{run.pk}/").json()
    for exported in (json.loads(run_export_json(run=run)), json.loads(sweep_export_json(sweep=sweep))["runs"][0]):
        assert exported["duration_s"] == api["duration_s"] == 30.0
        assert exported["measured_duration_s"] == api["measured_duration_s"] == 29.5
        assert exported["metrics"]["measured_duration_s"] == 29.5
        assert exported["summary"]["measured_duration_s"] == exported["summary"]["duration_s"] == 29.5
    [row] = list(csv.DictReader(io.StringIO(run_export_csv(run=run))))
    assert row["measured_duration_s"] == "29.5"


def test_a_run_without_a_measured_time_gives_null(viewer_api) -> None:
    run = BenchmarkRun.objects.create(status=RunStatus.RUNNING, concurrency=1, input_len=8, output_len=8,
                                      duration_s=30.0, summary={})
    body = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert body["measured_duration_s"] is None and body["metrics"]["measured_duration_s"] is None
    assert json.loads(run_export_json(run=run))["measured_duration_s"] is None
