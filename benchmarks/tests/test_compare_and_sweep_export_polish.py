"""The comparison and the sweep export say things the way the rest of their output does: the
compare CSV's ``best_for`` names the CSV's own columns, no failures against none reads as no
change, and the sweep's JSON export carries the request counts the sweep API gives, under the
same keys."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_export_json
from benchmarks.views.common import ROW_DECIMALS

pytestmark = pytest.mark.django_db


def _run(sweep: BenchmarkSweep, ordinal: int, *, scale: float) -> BenchmarkRun:
    # Every latency of the second run is half the first's, so it is named best for each.
    def dist(seconds: float) -> dict[str, float]:
        return {"mean": seconds * scale, "p50": seconds * scale, "p90": 2 * seconds * scale,
                "p99": 3 * seconds * scale}

    summary = {"requests": 100, "successes": 100, "failures": 0, "duration_s": 10.0,
               "output_throughput_tok_s": 500.0 / scale, "request_throughput_req_s": 10.0 / scale,
               "ttft_s": dist(0.1), "tpot_s": dist(0.01), "itl_s": dist(0.01), "e2e_s": dist(1.0)}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=4,
                                       input_len=128, output_len=64, num_gpus=2, summary=summary)


@pytest.fixture
def pair(db) -> tuple[BenchmarkRun, BenchmarkRun]:
    sweep = BenchmarkSweep.objects.create(name="pair", status=SweepStatus.DONE)
    return _run(sweep, 0, scale=1.0), _run(sweep, 1, scale=0.5)


def test_best_for_names_the_csv_columns_of_the_metrics(viewer_api, pair) -> None:
    slow, fast = pair
    response = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}&format=csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    best_for = rows[1]["best_for"].split(";")
    assert best_for == [
        "output_throughput_tok_s", "tok_s_per_gpu", "request_throughput_req_s",
        "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
        "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99",
        "itl_per_gap_ms_mean", "itl_per_gap_ms_p50", "itl_per_gap_ms_p90", "itl_per_gap_ms_p99",
        "e2e_ms_mean", "e2e_ms_p50", "e2e_ms_p90", "e2e_ms_p99"]
    assert set(best_for) <= set(rows[1]) and rows[0]["best_for"] == ""


def test_no_failures_against_none_is_no_change(viewer_api, client, viewer, pair) -> None:
    slow, fast = pair
    body = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}").json()
    failures = next(f for f in body["fields"] if f["key"] == "failures")
    assert failures["values"] == [0, 0] and failures["deltas_pct"] == [0.0, 0.0]
    rows = list(csv.DictReader(io.StringIO(
        viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}&format=csv").content.decode())))
    assert [r["failures_delta_pct"] for r in rows] == ["0.0", "0.0"]

    client.force_login(viewer)
    page = client.get(reverse("benchmarks:compare"), {"runs": f"{slow.pk},{fast.pk}"}).content.decode()
    row = page.split('<tr class="delta"><td>failures</td>')[1].split("</tr>")[0]
    # as an unchanged throughput reads
    assert row == '<td class="num small">baseline</td><td class="num small">0 %</td>'


def test_failures_against_no_failures_have_no_percentage(viewer_api, pair) -> None:
    slow, fast = pair
    fast.summary = {**fast.summary, "requests": 102, "failures": 2}
    fast.save(update_fields=["summary"])
    body = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}").json()
    failures = next(f for f in body["fields"] if f["key"] == "failures")
    assert failures["values"] == [0, 2] and failures["deltas_pct"] == [0.0, None]


def test_the_sweep_json_export_has_the_request_counts_of_the_sweep_api(viewer_api, client, viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="stopped", status=SweepStatus.CANCELLED, grid={"concurrency": [1, 2]},
                                          requests_total=40, requests_done=23)
    BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.FAILED, concurrency=1,
                                summary={"requests": 12, "successes": 10, "failures": 2, "aborted": 1})
    BenchmarkRun.objects.create(sweep=sweep, ordinal=1, status=RunStatus.CANCELLED, concurrency=2,
                                summary={"requests": 15, "successes": 13, "failures": 2,
                                         "partial": {"aborted": 2}})
    api = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    exported = json.loads(sweep_export_json(sweep=sweep))["sweep"]
    keys = ("requests_total", "requests_done", "requests_cancelled", "requests_aborted")
    assert {k: exported[k] for k in keys} == {k: api[k] for k in keys} == {
        "requests_total": 40, "requests_done": 23, "requests_cancelled": 2, "requests_aborted": 3}
    # the sweep page's download and the API's export are that JSON
    client.force_login(viewer)
    for response in (client.get(reverse("benchmarks:sweep-export", args=[sweep.pk, "json"])),
                     viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json")):
        assert response.status_code == 200
        assert {k: json.loads(response.content)["sweep"][k] for k in keys} == {k: api[k] for k in keys}


def test_the_page_shows_each_runs_roles_one_line_per_role(client, viewer, pair) -> None:
    slow, fast = pair
    roles = {"prefill": {"gpus": [0, 1], "tp": 2, "port": 30000}, "decode": {"gpus": [2, 3], "tp": 2, "port": 30001},
             "router": {"host": "0.0.0.0", "port": 30080, "flags": {"prometheus-port": 29000}}}
    for run, spec in ((slow, {"roles": roles}), (fast, {"roles": {"single": {"cpus": "0-1", "port": 8080}}})):
        run.snapshot = {"topology": "pd" if "router" in spec["roles"] else "single", "spec": spec}
        run.save(update_fields=["snapshot"])
    client.force_login(viewer)
    page = client.get(reverse("benchmarks:compare"), {"runs": f"{slow.pk},{fast.pk}"}).content.decode()
    row = page.split("<td>roles <span")[1].split("</tr>")[0]
    assert row.split('<td class="num mono small">')[1:] == [
        "decode: gpus=[2,3] port=30001 tp=2\n"
        "prefill: gpus=[0,1] port=30000 tp=2\n"
        "router: flags={&quot;prometheus-port&quot;:29000} host=0.0.0.0 port=30080</td>",
        "single: cpus=0-1 port=8080</td>"]


def test_the_results_table_and_the_comparison_take_their_decimal_places_from_one_mapping(
        client, viewer, pair, monkeypatch) -> None:
    slow, fast = pair
    client.force_login(viewer)

    def ttft_p99_texts() -> tuple[str, str]:
        table = client.get(reverse("benchmarks:sweep-results", args=[slow.sweep_id])).content.decode()
        cell = table.split(f'id="run-{slow.pk}"')[1].split("</tr>")[0].split('<td class="num">')[9].split("<")[0]
        page = client.get(reverse("benchmarks:compare"), {"runs": f"{slow.pk},{fast.pk}"}).content.decode()
        compared = page.split("<td>TTFT p99 (ms)</td>")[1].split("</td>")[0].rsplit(">", 1)[1]
        return cell, compared

    assert ttft_p99_texts() == ("300.0", "300.0")
    monkeypatch.setitem(ROW_DECIMALS, "ttft_ms", 3)
    assert ttft_p99_texts() == ("300.000", "300.000")
