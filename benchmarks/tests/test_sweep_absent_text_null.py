"""A sweep's text that it does not have is null in the sweep API and its JSON export, never ``""``
(``reason``, ``served_model_name``, ``topology``, ``engine``, ``current_point``,
``worker``, ``queue_note``); the CSV export leaves a cell empty and the sweep's page shows what it
did. Through a sweep created by the API."""
from __future__ import annotations

import csv
import io
import json

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": ["8:8"], "requests_per_concurrency": 2}
ABSENT = ("reason", "current_point", "worker", "queue_note")
DESCRIBED = ("served_model_name", "topology", "engine")


def test_a_finished_sweep_answers_null_for_what_it_does_not_have(operator_api, django_capture_on_commit_callbacks):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    with django_capture_on_commit_callbacks(execute=False):
        created = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert created.status_code == 201, created.content
    sweep_id = created.json()["id"]
    BenchmarkSweep.objects.filter(pk=sweep_id).update(status=SweepStatus.DONE, served_model_name="", topology="",
                                                      engine="", worker="", current_point="", reason="")
    detail = operator_api.get(f"/api/sweeps/{sweep_id}/").json()
    assert {key: detail[key] for key in ABSENT + DESCRIBED} == dict.fromkeys(ABSENT + DESCRIBED)
    listed = next(s for s in operator_api.get("/api/sweeps/").json()["results"] if s["id"] == sweep_id)
    assert {key: listed[key] for key in ABSENT + DESCRIBED} == dict.fromkeys(ABSENT + DESCRIBED)
    export = json.loads(operator_api.get(f"/api/sweeps/{sweep_id}/export/?format=json").content)["sweep"]
    assert {key: export[key] for key in ("reason",) + DESCRIBED} == dict.fromkeys(("reason",) + DESCRIBED)
    assert detail["name"] and export["name"] == detail["name"]  # every sweep is named


def test_a_sweep_with_a_failed_point_keeps_its_texts_and_its_csv_cell_stays_empty(viewer_api):
    sweep = BenchmarkSweep.objects.create(name="night", grid={}, status=SweepStatus.FAILED, reason="deployment down",
                                          served_model_name="tiny", topology="single", engine="sim")
    BenchmarkRun.objects.create(sweep=sweep, source="measured", status="failed", concurrency=1, input_len=8,
                                output_len=8, summary={})
    detail = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (detail["name"], detail["reason"], detail["served_model_name"], detail["topology"], detail["engine"]) == (
        "night", "deployment down", "tiny", "single", "sim")
    export = json.loads(viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json").content)
    assert export["sweep"]["reason"] == "deployment down" and export["runs"][0]["served_model_name"] is None
    rows = list(csv.DictReader(io.StringIO(viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=csv")
                                           .content.decode())))
    assert rows[0]["served_model_name"] == ""


def test_the_schema_says_they_may_be_null(viewer_api):
    schemas = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    for key in ABSENT + DESCRIBED:
        assert schemas["Sweep"]["properties"][key].get("nullable") is True, key
    for key in ("reason",) + DESCRIBED:
        assert schemas["SweepExportSweep"]["properties"][key].get("nullable") is True, key
