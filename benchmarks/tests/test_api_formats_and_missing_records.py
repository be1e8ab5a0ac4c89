"""An export's format outside csv and json is a 400 in the wording of every other format refusal;
the comparison downloads as CSV with ?format=csv, the CSV the comparison page gives; a run without
per-request records is a 404 in the API as on its page, with the same reason, and one still running
a 409 saying they are written when it ends."""
from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun, BenchmarkSweep


@pytest.fixture
def runs(db):
    sweep = BenchmarkSweep.objects.create(name="s", engine="sim", topology="single", status="done")
    summary = {"ttft_ms": {"mean": 50.0, "p99": 80.0}, "completed": 10}
    made = [BenchmarkRun.objects.create(sweep=sweep, status="done", concurrency=c, input_len=8, output_len=8,
                                        summary={**summary, "output_throughput_tok_s": 100.0 * c}) for c in (1, 2)]
    imported = BenchmarkRun.objects.create(source="imported", status="done", concurrency=1, input_len=8, output_len=8,
                                           summary=summary, original_text="{}", original_filename="bench.json")
    return sweep, made, imported


def test_an_export_names_the_formats_it_serves(viewer_api, runs):
    sweep, (run, _), _ = runs
    for url in (f"/api/runs/{run.pk}/export/?format=xml", f"/api/sweeps/{sweep.pk}/export/?format=xml"):
        answer = viewer_api.get(url)
        assert answer.status_code == 400 and answer.json() == {"format": ["must be one of csv, json; got 'xml'"]}, url
    assert viewer_api.get(f"/api/runs/{run.pk}/export/?format=csv").status_code == 200


def test_the_comparison_downloads_the_csv_of_its_page(viewer_api, viewer, runs):
    _, (a, b), _ = runs
    answer = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=csv")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/csv"
    assert answer["Content-Disposition"] == f'attachment; filename="compare-{a.pk}-{b.pk}.csv"'
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert [(int(r["run_id"]), r["baseline"]) for r in rows] == [(a.pk, "true"), (b.pk, "false")]
    page = Client()
    page.force_login(viewer)
    same = page.get(f"/benchmarks/compare/?ids={a.pk},{b.pk}&format=csv")
    assert same.status_code == 200 and same.content == answer.content
    # a format name in any case, on the page as in the API
    for upper in (page.get(f"/benchmarks/compare/?ids={a.pk},{b.pk}&format=CSV"),
                  viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=Csv")):
        assert upper.status_code == 200 and upper.content == answer.content
    # json stays the default; any other format is named with those served
    assert viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}").json()["baseline"] == a.pk
    refused = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=xml")
    assert refused.status_code == 400 and refused.json() == {"format": ["must be one of json, csv, api; got 'xml'"]}


def test_a_run_without_records_is_a_404_with_the_reason_the_page_gives(viewer_api, viewer, runs):
    _, (measured, _), imported = runs
    answer = viewer_api.get(f"/api/runs/{imported.pk}/records/")
    assert answer.status_code == 404
    assert answer.json() == {"detail": f"run #{imported.pk} has no per-request records (imported: see its original file)"}
    page = Client()
    page.force_login(viewer)
    assert page.get(f"/benchmarks/runs/{imported.pk}/export.records.csv").status_code == 404
    # a measured run whose records were never written: the same 404
    answer = viewer_api.get(f"/api/runs/{measured.pk}/records/")
    assert answer.status_code == 404 and answer.json() == {"detail": f"run #{measured.pk} has no per-request records"}
    # a bad page is still a 400 naming the parameter
    assert viewer_api.get(f"/api/runs/{imported.pk}/records/?limit=0").status_code == 400


def test_a_running_run_says_its_records_come_when_it_ends_rather_than_that_it_has_none(viewer_api, viewer, runs):
    sweep, _, _ = runs
    running = BenchmarkRun.objects.create(sweep=sweep, status="running", concurrency=4, input_len=8, output_len=8)
    reason = f"run #{running.pk} is still running; its per-request records are written when it ends"
    for url in (f"/api/runs/{running.pk}/records/", f"/api/runs/{running.pk}/records.json"):
        answer = viewer_api.get(url)
        assert answer.status_code == 409, url
        assert answer.json() == {"detail": reason, "code": "conflict"}, url
    exported = viewer_api.get(f"/api/runs/{running.pk}/export/?format=json").json()
    assert (exported["records"], exported["records_note"]) == (None, reason)
    page = Client()
    page.force_login(viewer)
    refused = page.get(f"/benchmarks/runs/{running.pk}/export.records.csv")
    assert refused.status_code == 409
    assert f"<p>Run #{running.pk} is still running; its per-request records are written when it ends.</p>" \
        in refused.content.decode()
    detail = page.get(f"/benchmarks/runs/{running.pk}/").content.decode()
    assert "export.records.csv" not in detail
    assert '<span class="muted small records-pending">Per-request records are written when the run ends</span>' in detail
    # once it ended without records, the answer is the lasting 404 again
    BenchmarkRun.objects.filter(pk=running.pk).update(status="failed")
    answer = viewer_api.get(f"/api/runs/{running.pk}/records/")
    assert answer.status_code == 404 and answer.json() == {"detail": f"run #{running.pk} has no per-request records"}
    assert "records-pending" not in page.get(f"/benchmarks/runs/{running.pk}/").content.decode()
