"""Inputs a new user tried that were taken or answered beside the point: a timed row of zero
repetitions, a results file that is not the runner's object, an id of another JSON type, a page
offset past any job, and a what-if page parameter given twice."""
from __future__ import annotations

import copy
import json

import pytest

from controlplane.errors import InvalidInput
from kernels.models import KernelBenchmark
from kernels.services import kernel_job_from_measurement, kernel_job_ingest, kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

CUDA = "sparse_mla_decode_cuda"


def _load(file: str):
    return json.loads((REAL_PACKAGES / CUDA / "results" / file).read_text())


@pytest.fixture
def job(db, settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    package = kernel_package_register(path=REAL_PACKAGES / CUDA)
    return kernel_job_from_measurement(package=package, variants=_load("h200-variants.json"),
                                       results=_load("h200-results.json"))


def _stored(job):
    return sorted(KernelBenchmark.objects.filter(variant__job=job).values_list("pk", "median_us", "reps"))


def test_a_timed_row_of_zero_repetitions_is_refused_and_nothing_changes(job):
    before = _stored(job)
    results = copy.deepcopy(_load("h200-results.json"))
    results["results"][0]["reps"] = 0
    results["results"][0]["median_us"] *= 30
    with pytest.raises(InvalidInput) as exc:
        kernel_job_ingest(job=job, results=results, source_variants=_load("h200-variants.json"))
    [message] = exc.value.errors["results.0"]
    assert "with reps 0: a timed row gives the number of timed repetitions, at least 1" in message
    assert _stored(job) == before


@pytest.mark.parametrize("payload, key, text", [
    ({}, "results.device", "is required"),
    ([{"variant_id": 1}], "results", "this one is a list"),
    ("x", "results", 'this one is str "x"'),
])
def test_a_results_file_that_is_not_the_runners_object_is_told_so(job, payload, key, text):
    with pytest.raises(InvalidInput) as exc:
        kernel_job_ingest(job=job, results=payload)
    assert text in exc.value.errors[key][0]
    assert not any(k.startswith("variants_sha256") for k in exc.value.errors)


def test_an_unknown_id_is_quoted_in_jsons_spelling(job):
    results = copy.deepcopy(_load("h200-results.json"))
    results["results"][0]["variant_id"] = True
    results["results"][1]["variant_id"] = None
    with pytest.raises(InvalidInput) as exc:
        kernel_job_ingest(job=job, results=results, source_variants=_load("h200-variants.json"))
    messages = [m for ms in exc.value.errors.values() for m in ms]
    assert any(m.startswith("variant_id true is not in the variants file") for m in messages), messages
    assert any(m.startswith("variant_id null is not in the variants file") for m in messages), messages
    assert not any("'True'" in m or "'None'" in m for m in messages)


def test_the_job_page_shows_the_first_page_for_an_offset_past_the_apis_bound(job, client, viewer):
    client.force_login(viewer)
    for offset in ("1000001", "99999999999999999999"):
        html = client.get(f"/kernels/jobs/{job.pk}/?offset={offset}").content.decode()
        assert f"offset: &#x27;{offset}&#x27; is above 1000000; the first page is shown." in html
        assert "No variant matches these filters" not in html
    assert "is above" not in client.get(f"/kernels/jobs/{job.pk}/?offset=1000000").content.decode()


def test_the_whatif_page_names_a_parameter_given_twice(job, client, viewer):
    client.force_login(viewer)
    html = client.get("/kernels/whatif/?speedup=2&speedup=3&share=0.5").content.decode()
    assert "speedup is given 2 times (2, 3): give it once." in html
    assert "3.000×" not in html


@pytest.mark.parametrize("body, key, text", [
    ({"batches": []}, "batches", "give at least one value, or leave the key out for the package's list"),
    ({"batches": [1, 1]}, "batches", "batch 1 is given twice: give each once"),
    ({"shapes": []}, "shapes", "give at least one value, or leave the key out for the package's list"),
    ({"shapes": ["v32", "v32"]}, "shapes", "shape 'v32' is given twice: give each once"),
])
def test_a_job_body_with_an_empty_or_repeating_list_makes_no_job(operator_api, body, key, text):
    from kernels.models import KernelJob

    before = KernelJob.objects.count()
    answer = operator_api.post("/api/kernel-jobs/", {"package": CUDA, "node": "local", "cc": "9.0", **body},
                               format="json")
    assert answer.status_code == 400, answer.content
    assert text in answer.json()[key][0]
    assert KernelJob.objects.count() == before


def test_a_cancel_with_a_body_is_refused_before_the_jobs_state(job, operator_api):
    answer = operator_api.post(f"/api/kernel-jobs/{job.pk}/cancel/", {"force": True}, format="json")
    assert answer.status_code == 400 and answer.json() == {"force": ["unknown field 'force'; allowed: none"]}
    # the job is done: an empty body gets the state's answer
    assert operator_api.post(f"/api/kernel-jobs/{job.pk}/cancel/", {}, format="json").status_code == 409


def test_a_cancel_with_an_empty_key_names_it_as_any_other_unknown_key(job, operator_api):
    answer = operator_api.generic("POST", f"/api/kernel-jobs/{job.pk}/cancel/", '{"": 1}',
                                  content_type="application/json")
    assert answer.status_code == 400 and answer.json() == {"": ["unknown field ''; allowed: none"]}


def test_a_grid_value_given_twice_in_a_job_body_is_refused(job, operator_api):
    from deployments.models import Node
    from kernels.models import KernelJob

    Node.objects.get_or_create(name="local", defaults={"hostname": "localhost"})
    before = KernelJob.objects.count()
    answer = operator_api.post("/api/kernel-jobs/", {"package": CUDA, "node": "local", "cc": "9.0",
                                                     "params": {"impl": ["baseline", "baseline"]}}, format="json")
    assert answer.status_code == 400
    assert answer.json()["params.impl"] == ["'baseline' is given twice: give each value once"], answer.json()
    assert KernelJob.objects.count() == before


@pytest.mark.parametrize("form, key, text", [
    ({"node": ["local", "local"]}, "node", "node is given 2 times (local, local): give it once."),
    ({"batches": "1,1"}, "batches", "Batch 1 is given twice: give each once."),
    ({"shapes": ["v32", "v32"]}, "shapes", "Shape &#x27;v32&#x27; is chosen twice: choose each once."),
    ({"params": "impl=baseline,baseline"}, "params", "&#x27;baseline&#x27; is given twice: give each value once"),
])
def test_the_job_form_refuses_what_the_api_refuses(db, settings, tmp_path, operator, client, form, key, text):
    from deployments.models import Node
    from kernels.models import KernelJob

    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    kernel_package_register(path=REAL_PACKAGES / CUDA)
    Node.objects.get_or_create(name="local", defaults={"hostname": "localhost"})
    client.force_login(operator)
    body = {"node": "local", "cc": "9.0", **form}
    answer = client.post(f"/kernels/packages/{CUDA}/jobs/new/", body)
    assert answer.status_code == 400, answer.status_code
    assert text in answer.content.decode()
    assert not KernelJob.objects.exists()


@pytest.mark.parametrize("builds, text", [
    ({}, "a builds file is the JSON list of build facts python -m kernels.runner compile writes; this one is an object"),
    ([], "the builds file holds no build: there is nothing to store"),
])
def test_a_builds_file_that_is_not_a_list_of_builds_is_told_so(job, builds, text):
    with pytest.raises(InvalidInput) as exc:
        kernel_job_ingest(job=job, builds=builds)
    assert exc.value.errors == {"builds": [text]}
    with pytest.raises(InvalidInput) as exc:
        kernel_job_ingest(job=job, results=_load("h200-results.json"), builds=builds,
                          source_variants=_load("h200-variants.json"))
    assert exc.value.errors == {"builds": [text]}
