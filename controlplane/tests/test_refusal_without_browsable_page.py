"""An action that judges its own ``?format=`` and does not offer the browsable page (an export, a
process's log download) answers its refusals in JSON, whatever format or ``Accept`` asked for the
page; the comparison, which offers ``api``, still shows its refusals on it
(:class:`controlplane.drf_defaults.FormatNegotiation`)."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> BenchmarkRun:
    return BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8, summary={})


def test_it_refuses_an_exports_api_format_in_json(viewer_api, run):
    sweep = BenchmarkSweep.objects.create(name="s", status="done", grid={"concurrency": [1]})
    for url in (f"/api/runs/{run.pk}/export/", f"/api/sweeps/{sweep.pk}/export/"):
        for headers in ({}, {"HTTP_ACCEPT": "text/html"}):
            answer = viewer_api.get(url, {"format": "api"}, **headers)
            assert answer.status_code == 400 and answer["Content-Type"] == "application/json", url
            assert answer.json() == {"format": ["must be one of csv, json; got 'api'"]}


def test_it_answers_an_export_to_a_browser_as_the_json_file(viewer_api, run):
    answer = viewer_api.get(f"/api/runs/{run.pk}/export/", HTTP_ACCEPT="text/html")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/json"
    missing = viewer_api.get("/api/runs/999999/export/", HTTP_ACCEPT="text/html")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json"
    assert missing.json() == {"detail": "no benchmark run with id 999999"}


def test_it_answers_a_log_downloads_errors_in_json_to_a_browser(viewer_api):
    process = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create())).processes.get()
    missing = viewer_api.get("/api/processes/424242/log/download/", HTTP_ACCEPT="text/html")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json"
    assert set(missing.json()) == {"detail"}
    no_log = viewer_api.get(f"/api/processes/{process.pk}/log/download/", HTTP_ACCEPT="text/html")
    assert no_log.status_code == 404 and no_log.json() == {"detail": "No log file for this process."}
    page = viewer_api.get(f"/api/processes/{process.pk}/log/download/", {"format": "api"}, HTTP_ACCEPT="text/html")
    assert page.status_code == 400 and page["Content-Type"] == "application/json"
    assert page.json() == {"format": ["the log downloads as text/plain only: leave format out; got 'api'"]}


def test_it_still_shows_the_comparisons_refusal_on_the_browsable_page(viewer_api):
    page = viewer_api.get("/api/runs/compare/", {"ids": "x", "format": "api"})
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    browser = viewer_api.get("/api/runs/compare/", {"ids": "x"}, HTTP_ACCEPT="text/html")
    assert browser.status_code == 400 and browser["Content-Type"].startswith("text/html")
    csv = viewer_api.get("/api/runs/compare/", {"ids": "x", "format": "csv"}, HTTP_ACCEPT="text/html")
    assert csv.status_code == 400 and csv["Content-Type"] == "application/json"
