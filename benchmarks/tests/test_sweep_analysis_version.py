"""A sweep's stored analysis carries the version of the analysis that made it
(:data:`benchmarks.analysis.ANALYSIS_VERSION`): one stored under another version, or under none,
is computed again from the sweep's runs when it is read (and stored in its place); one of the
current version is served as stored."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.analysis import ANALYSIS_VERSION
from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_export_json, sweep_report_text
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.test_export_import import _measured_run

pytestmark = pytest.mark.django_db

STALE = "Throughput is limited by the stale analysis at c=1."


def _stored(**version) -> dict:
    """A report as an older analysis stored it: its own finding and an older running-batch source."""
    return {"lengths": {"256/256": {"fit": {"batch_source": "concurrency"}, "findings": [STALE], "excluded": []}},
            "findings": [STALE], "compared_with": None, "errors": {}, "notes": [], **version}


def _sweep(analysis: dict) -> BenchmarkSweep:
    sweep = BenchmarkSweep.objects.create(name="s", status=SweepStatus.DONE, topology="single", num_gpus=4,
                                          served_model_name="m", ended_at=timezone.now(), analysis=analysis)
    for ordinal, (c, tok_s) in enumerate(((1, 9.95), (8, 24.5), (16, 25.5))):
        _measured_run(sweep, c=c, tok_s=tok_s, ordinal=ordinal)
    return sweep


@pytest.mark.parametrize("version", [{"version": ANALYSIS_VERSION - 1}, {}], ids=["older", "missing"])
def test_a_report_of_an_older_or_no_version_is_computed_again_and_stored(viewer_api, version) -> None:
    sweep = _sweep(_stored(**version))
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/").json()
    assert body["version"] == ANALYSIS_VERSION and body["provisional"] is False
    assert STALE not in body["findings"]
    assert any(f.startswith("The ceiling is about 25.5 tok/s") for f in body["findings"]), body["findings"]
    assert body["lengths"]["256/256"]["fit"]["batch_source"] != "concurrency"
    sweep.refresh_from_db()
    assert sweep.analysis["version"] == ANALYSIS_VERSION and sweep.analysis["findings"] == body["findings"]


def test_the_page_the_export_and_the_text_report_read_the_report_computed_again(viewer) -> None:
    for read in (lambda s: logged_in_client(viewer).get(reverse("benchmarks:sweep-detail", args=[s.pk])).content
                 .decode(),
                 lambda s: json.dumps(json.loads(sweep_export_json(sweep=s))["analysis"]),
                 lambda s: sweep_report_text(sweep=s)):
        sweep = _sweep(_stored())
        text = read(sweep)
        assert STALE not in text and "The ceiling is about 25.5 tok/s" in text
        sweep.refresh_from_db()
        assert sweep.analysis["version"] == ANALYSIS_VERSION


def test_a_report_of_the_current_version_is_served_as_stored(viewer_api, viewer, monkeypatch) -> None:
    sweep = _sweep(_stored(version=ANALYSIS_VERSION))

    def never(**_):
        raise AssertionError("a report of the current version was computed again")

    monkeypatch.setattr(sweep_services, "sweep_analyse", never)
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/").json()
    assert body["findings"] == [STALE] and body["version"] == ANALYSIS_VERSION
    assert STALE in logged_in_client(viewer).get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert json.loads(sweep_export_json(sweep=sweep))["analysis"]["findings"] == [STALE]
    sweep.refresh_from_db()
    assert sweep.analysis == _stored(version=ANALYSIS_VERSION)


def test_a_failure_computing_it_again_serves_the_stored_report_with_a_note(viewer_api, monkeypatch) -> None:
    sweep = _sweep(_stored(version=ANALYSIS_VERSION - 1))

    def broken(*, sweep: BenchmarkSweep) -> dict:
        raise ValueError("a run's summary has no throughput")

    monkeypatch.setattr(sweep_services, "sweep_analyse", broken)
    response = viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert STALE in body["findings"]
    assert body["notes"][-1] == (f"made by an older analysis (version {ANALYSIS_VERSION - 1}); computing it again with "
                                 f"version {ANALYSIS_VERSION} failed: ValueError: a run's summary has no throughput")
    sweep.refresh_from_db()
    assert sweep.analysis["version"] == ANALYSIS_VERSION - 1  # left as it was, to be tried again
