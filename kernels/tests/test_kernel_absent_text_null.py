"""A kernel job's text that it does not have is null in the kernels API and the job's JSON export,
never ``""``: a pending job's ``reason``, ``note``, ``phase``, device and version texts, a build with
no error, a measurement with no error or timing; the CSV leaves the cell empty. Through a job made
by the API, then builds and results ingested as a job run elsewhere sends them."""
from __future__ import annotations

import csv
import io
import json

import pytest

from kernels.models import KernelJob
from kernels.services import kernel_job_ingest
from kernels.tests.conftest import H200_DEVICE, build_fact, result_row

pytestmark = pytest.mark.django_db

JOB_TEXTS = ("reason", "note", "phase", "compiler", "device_name", "device_cc", "driver_version", "cuda_version",
             "torch_version", "triton_version")


def _create(operator_api, django_capture_on_commit_callbacks) -> dict:
    with django_capture_on_commit_callbacks(execute=False):
        answer = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0"},
                                   format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def test_a_pending_job_answers_null_for_what_it_does_not_have(operator_api, toy_package, cpu_node,
                                                              django_capture_on_commit_callbacks):
    created = _create(operator_api, django_capture_on_commit_callbacks)
    # The node has no GPU, so the job has a note from the start (it only builds); the rest is null.
    absent = tuple(key for key in JOB_TEXTS if key != "note")
    assert {key: created[key] for key in absent} == dict.fromkeys(absent)
    assert created["note"].startswith("no GPU on node cpu-box: builds only")
    detail = operator_api.get(f"/api/kernel-jobs/{created['id']}/").json()
    assert {key: detail[key] for key in absent} == dict.fromkeys(absent)
    export = json.loads(operator_api.get(f"/api/kernel-jobs/{created['id']}/export/?format=json").content)["job"]
    assert (export["reason"], export["compiler"], export["device"]["name"]) == (None,) * 3


def test_a_build_without_error_and_a_measurement_without_bound_answer_null(operator_api, toy_package, cpu_node,
                                                                          django_capture_on_commit_callbacks):
    created = _create(operator_api, django_capture_on_commit_callbacks)
    job = KernelJob.objects.get(pk=created["id"])
    ids = [v.pk for v in job.variants.order_by("ordinal")]
    kernel_job_ingest(job=job, builds=[build_fact(pk) for pk in ids])
    kernel_job_ingest(job=job, results={"device": H200_DEVICE, "results": [result_row(ids[0], "small", 1,
                                                                                      median_us=20.0)]})
    table = operator_api.get(f"/api/kernel-jobs/{job.pk}/variants/").json()
    first = next(r for r in table["rows"] if r["id"] == ids[0])
    assert first["build"]["error"] is None and first["build"]["discard_reason"] is None
    assert first["build"]["compiler"] == "triton 3.6.0"
    cell = first["shapes"]["small"]
    assert (cell["error"], cell["timing"]) == (None, None) and cell["median_us"] == 20.0
    detail = operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()
    assert detail["device_name"] == "NVIDIA H200" and detail["reason"] is None
    rows = json.loads(operator_api.get(f"/api/kernel-jobs/{job.pk}/export/?format=json").content)["rows"]
    measured = next(r for r in rows if r["variant_id"] == ids[0] and r["shape"] == "small")
    assert (measured["build_error"], measured["discard_reason"], measured["timing"]) == (None, None, None)
    lines = list(csv.DictReader(io.StringIO(operator_api.get(f"/api/kernel-jobs/{job.pk}/export/?format=csv")
                                            .content.decode())))
    assert next(r for r in lines if r["variant_id"] == str(ids[0]) and r["shape"] == "small")["build_error"] == ""


def test_the_schema_says_they_may_be_null(viewer_api):
    props = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]["Job"]["properties"]
    for key in JOB_TEXTS + ("waiting_reason",):
        assert props[key].get("nullable") is True, key


def test_a_package_without_a_description_answers_null(viewer_api, toy_package):
    from kernels.models import KernelPackage

    assert viewer_api.get("/api/kernel-packages/toy_attn/").json()["description"] == "Two implementations, a small grid."
    KernelPackage.objects.filter(pk=toy_package.pk).update(description="")

    assert viewer_api.get("/api/kernel-packages/toy_attn/").json()["description"] is None
    assert [p["description"] for p in viewer_api.get("/api/kernel-packages/").json()["results"]] == [None]
