"""The exported per-request records reproduce a run's numbers: every row has its end time and
duration (failures too), its own ``tokens_estimated``, null for a count the server did not give,
and the JSON has every output event's time, from which throughput and ITL are recomputed exactly;
the per-request CSV stays flat. The run page's tok/s timeline divides each bucket by the time the
run covers of it, so it agrees with the summary, and the ITL CDF counts gaps, not requests.

Runs come from a real ``sim`` server through a real sweep, or from a real :class:`RecordStore`
file for a failure and a run shorter than a second."""
from __future__ import annotations

import csv
import io
import json
from array import array
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen.records import RecordStore, RequestOutcome
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import run_records, run_records_rows, sweep_create, sweep_execute
from benchmarks.services.runs import RECORDS_CSV_COLUMNS
from benchmarks.tests.sweep_support import sim_deployment_create
from benchmarks.views.charts import timeline_points
from benchmarks.tests.page_support import logged_in_client as _client, json_script as _json_script

MS = 1_000_000  # ns per ms
T0 = 70_000_000_000  # an arbitrary perf_counter_ns origin: records store absolute clock values


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    (tmp_path / "benchmarks").mkdir(exist_ok=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_it_exports_records_that_reproduce_throughput_and_itl(sim_url: str, operator, viewer, viewer_api) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": "32:16", "requests": 6})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    [run] = sweep.runs.all()
    s = run.summary

    page = viewer_api.get(f"/api/runs/{run.pk}/records/?limit=100").json()
    rows = page["rows"]
    assert page["count"] == len(rows) == 6
    assert min(r["start_ms"] for r in rows) == 0.0
    for r in rows:
        assert r["end_ms"] == pytest.approx(r["start_ms"] + r["duration_ms"])
        assert r["duration_ms"] >= r["e2e_ms"] > r["ttft_ms"] > 0
        assert r["tokens_estimated"] is False and r["input_tokens"] == 32 and r["output_tokens"] == 16
        assert len(r["event_ms"]) == r["events"] and r["event_ms"][0] == pytest.approx(r["ttft_ms"])
        assert r["event_ms"][-1] == pytest.approx(r["e2e_ms"])
    # Duration = the last end (the first start is 0); output tok/s and ITL from the rows alone.
    duration_s = max(r["end_ms"] for r in rows) / 1000
    assert duration_s == pytest.approx(s["duration_s"], rel=1e-9)
    ok = [r for r in rows if r["ok"]]
    assert sum(r["output_tokens"] for r in ok) / duration_s == pytest.approx(s["output_throughput_tok_s"], rel=1e-9)

    exported = json.loads(_client(viewer).get(reverse("benchmarks:run-export", args=[run.pk, "json"])).content)
    assert exported["records_note"] is None
    gaps = np.concatenate([np.diff(r["event_ms"]) for r in exported["records"] if r["ok"]])
    assert gaps.mean() / 1000 == pytest.approx(s["itl_s"]["mean"], rel=1e-9)
    assert np.percentile(gaps, 99) / 1000 == pytest.approx(s["itl_s"]["p99"], rel=1e-9)
    assert exported["records"] == run_records_rows(run=run, limit=100)["rows"]

    # The per-request CSV is flat: one line per request, no event times.
    response = _client(viewer).get(reverse("benchmarks:run-export", args=[run.pk, "records.csv"]))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(lines) == 6 and tuple(lines[0]) == RECORDS_CSV_COLUMNS and "event_ms" not in lines[0]
    assert [float(x["end_ms"]) for x in lines] == [r["end_ms"] for r in rows]

    # The timeline: each bucket over the time the run covers of it; weighted by those times it
    # averages to the summary's output tok/s.
    html = _client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    drawn = _json_script(html, "chart-timeline")["series"][0]["points"]
    points, _ = timeline_points(run_records(run=run))
    assert drawn == points if len(points) > 1 else drawn == [points[0], [pytest.approx(s["duration_s"], abs=1e-3), points[0][1]]]
    starts = [p[0] for p in points] + [s["duration_s"]]
    if len(points) > 1 and starts[-1] - starts[-2] < 0.5:
        starts[-2:] = [starts[-1]]
    widths = np.diff(starts)
    assert sum(p[1] * w for p, w in zip(points, widths)) == pytest.approx(s["output_tokens"], rel=1e-6)
    if s["duration_s"] < 1.0:
        assert points == [[0.0, pytest.approx(s["output_throughput_tok_s"], rel=1e-9)]]
    # The ITL CDF's samples are gaps; the others' are requests.
    assert _json_script(html, "chart-cdf-itl")["y"]["label"] == "fraction of gaps"
    for stem in ("ttft", "tpot", "e2e"):
        assert _json_script(html, f"chart-cdf-{stem}")["y"]["label"] == "fraction of requests"


def _outcome(start_ms: float, events_ms: list[float], index: int, end_ms: float, **fields) -> RequestOutcome:
    return RequestOutcome(
        scheduled=T0 + int(start_ms * MS), start=T0 + int(start_ms * MS), end=T0 + int(end_ms * MS), index=index,
        events=array("q", [T0 + int(e * MS) for e in events_ms]), **fields)


@pytest.fixture
def sweep(db) -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(name="records", status=SweepStatus.DONE, num_gpus=1)


def _run(sweep: BenchmarkSweep, store: RecordStore, name: str, summary: dict) -> BenchmarkRun:
    path = store.save(Path(settings.VAR_DIR) / "benchmarks" / name)
    return BenchmarkRun.objects.create(sweep=sweep, status=RunStatus.DONE, concurrency=1, input_len=16,
                                       output_len=3, num_requests=len(store), num_gpus=1, summary=summary,
                                       records_path=str(path))


def test_it_keeps_absent_counts_null_and_times_a_failure(sweep, viewer) -> None:
    store = RecordStore()
    # A success whose server gave no usage at all: input unknown, output counted from 3 events.
    store.add(_outcome(0, [100, 150, 200], 0, 201, event_tokens=array("H", [0, 0, 0]), output_tokens=3,
                       tokens_estimated=True, requested_input=16, requested_output=3, http_status=200, ok=True,
                       finish_reason="length"))
    # A failure 250 ms after its start, at 1 s into the run.
    store.add(_outcome(1000, [], 1, 1250, requested_input=16, requested_output=3, http_status=500,
                       error="HTTP 500: engine overloaded"))
    run = _run(sweep, store, "absent.npz", {"requests": 2, "successes": 1, "failures": 1, "duration_s": 1.25,
                                            "output_throughput_tok_s": 2.4})
    ok, failed = run_records_rows(run=run)["rows"]
    assert (ok["input_tokens"], ok["output_tokens"], ok["tokens_estimated"]) == (None, 3, True)
    assert ok["event_ms"] == [100.0, 150.0, 200.0] and ok["event_tokens"] == [None, None, None]
    assert (ok["end_ms"], ok["duration_ms"]) == (201.0, 201.0)
    assert (failed["start_ms"], failed["end_ms"], failed["duration_ms"]) == (1000.0, 1250.0, 250.0)
    assert (failed["input_tokens"], failed["output_tokens"], failed["ttft_ms"], failed["e2e_ms"]) == (None,) * 4
    assert failed["error"] == "HTTP 500: engine overloaded" and failed["event_ms"] == []
    lines = list(csv.DictReader(io.StringIO(
        _client(viewer).get(reverse("benchmarks:run-export", args=[run.pk, "records.csv"])).content.decode())))
    assert [(x["input_tokens"], x["end_ms"], x["duration_ms"], x["tokens_estimated"]) for x in lines] == [
        ("", "201.0", "201.0", "true"), ("", "1250.0", "250.0", "false")]
    assert len(run_records(run=run)) == 2


def test_it_draws_a_run_shorter_than_a_bucket_at_its_own_rate(sweep, viewer) -> None:
    # 3 tokens in 41 ms (the first request's start to its end): the summary's 3 / 0.041 = 73.2 tok/s.
    store = RecordStore()
    store.add(_outcome(0, [10, 25, 40], 0, 41, event_tokens=array("H", [1, 1, 1]), output_tokens=3, input_tokens=16,
                       requested_input=16, requested_output=3, http_status=200, ok=True, finish_reason="length"))
    run = _run(sweep, store, "short.npz", {"requests": 1, "successes": 1, "failures": 0, "duration_s": 0.041,
                                           "output_throughput_tok_s": 3 / 0.041})
    points, estimated = timeline_points(run_records(run=run))
    assert points == [[0.0, pytest.approx(3 / 0.041)]] and estimated is False
    html = _client(viewer).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    # On the page the one rate is drawn across the run (a lone dot at 0 on a made-up axis says nothing).
    chart = _json_script(html, "chart-timeline")
    assert chart["series"][0]["points"] == [[0.0, pytest.approx(73.17, abs=0.01)], [0.041, pytest.approx(73.17, abs=0.01)]]
    assert chart["note"] == "the run lasted 0.041 s, under 1.5 buckets of 1 s: one rate over the whole run, drawn across it"


def test_it_divides_the_last_bucket_by_the_part_of_it_the_run_lasted(sweep) -> None:
    # 1.6 s: 10 tokens in the first second, 3 in the last 0.6 s (5 tok/s, not 3); and 2.2 s,
    # whose last 0.2 s would be a spike on its own, merged into the second before it.
    store = RecordStore()
    store.add(_outcome(0, [50 + 100 * k for k in range(10)] + [1100, 1300, 1500], 0, 1600,
                       event_tokens=array("H", [1] * 13), output_tokens=13, input_tokens=16, requested_input=16,
                       requested_output=13, http_status=200, ok=True, finish_reason="length"))
    assert timeline_points(store) == ([[0.0, 10.0], [1.0, pytest.approx(3 / 0.6)]], False)
    longer = RecordStore()
    longer.add(_outcome(0, [500, 1500, 2100], 0, 2200, event_tokens=array("H", [2, 2, 2]), output_tokens=6,
                        input_tokens=16, requested_input=16, requested_output=6, http_status=200, ok=True,
                        finish_reason="length"))
    assert timeline_points(longer) == ([[0.0, 2.0], [1.0, pytest.approx(4 / 1.2)]], False)
