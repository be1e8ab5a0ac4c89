"""Inputs the kernels app refuses instead of coercing or ignoring: a job body's batches written as
text or booleans and a target compute capability written as a number or with spaces around it, a
grid subset given as one value instead of a list, the best-variant list's filters, an empty results
file ingested into an existing job; a pending job's progress total as its page shows it, and a
variant outside the grid quoted as the reason quotes its values."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from controlplane.jsonsafe import json_spelled
from controlplane.errors import InvalidInput
from kernels.models import KernelBenchmark, KernelJob
from kernels.services import kernel_job_create, kernel_job_ingest
from kernels.tests.conftest import H200_DEVICE, T32

JOBS = "/api/kernel-jobs/"
BEST = "/api/kernel-best/"


# --- POST /api/kernel-jobs/: integers are integers, text is text ---------------------------------


@pytest.mark.parametrize("batch, shown", [("1", 'the string "1"'), (True, "the boolean true"),
                                          (1.0, "the number 1 written with a decimal point or exponent (write 1)"), ([1], "the list [1]")])
def test_job_creation_refuses_a_batch_that_is_not_an_integer(operator_api, toy_package, h200_node, batch, shown):
    resp = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box", "batches": [1, batch]}, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json() == {"batches.1": [f"must be an integer (e.g. 8), got {shown}"]}
    assert not KernelJob.objects.exists()


@pytest.mark.parametrize("cc, shown", [(9.0, "the number 9"), (9, "the number 9"), (True, "the boolean true")])
def test_job_creation_refuses_a_compute_capability_written_as_a_number(operator_api, toy_package, h200_node, cc, shown):
    resp = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box", "cc": cc, "batches": ["4"]},
                             format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json() == {"cc": [f'must be a string (e.g. "9.0"), got {shown}'],
                           "batches.0": ['must be an integer (e.g. 8), got the string "4"']}
    assert not KernelJob.objects.exists()
    # the same values written as their types are taken
    ok = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box", "cc": "9.0", "batches": [4]},
                           format="json")
    assert ok.status_code == 201, ok.content
    assert (ok.json()["target_cc"], ok.json()["batches"]) == ("9.0", [4])


@pytest.mark.parametrize("cc", [" 9.0", "9.0 ", "9.0\n", "\t9.0", " "])
def test_job_creation_takes_a_compute_capability_as_written_without_trimming_it(operator_api, toy_package, h200_node,
                                                                                cc):
    resp = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box", "cc": cc}, format="json")
    assert resp.status_code == 400, resp.content
    # Quoted as every refusal quotes a value: control characters as code points (<U+000A>).
    assert resp.json() == {"cc": [f"{json_spelled(cc)} is not a compute capability such as 9.0 or 12.0"]}
    assert "\n" not in resp.json()["cc"][0] and "\t" not in resp.json()["cc"][0]
    assert not KernelJob.objects.exists()


# --- grid subsets: a list of values per parameter -------------------------------------------------


def test_a_grid_subset_value_that_is_not_a_list_is_refused(operator_api, toy_package, h200_node):
    resp = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box",
                                    "params": {"impl": "tiled", "BLOCK": 32, "num_warps": [4]}}, format="json")
    assert resp.status_code == 400, resp.content
    # the type named as a sweep grid names it (got the number 1)
    assert resp.json() == {"params.impl": ['must be a list of grid values (e.g. ["tiled"]), got the string "tiled"'],
                           "params.BLOCK": ["must be a list of grid values (e.g. [32]), got the number 32"]}
    assert not KernelJob.objects.exists()
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False, params_subset={"impl": "tiled"})
    assert err.value.errors == {"params.impl": ['must be a list of grid values (e.g. ["tiled"]), got the string "tiled"']}
    # the listed form is taken
    job = kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False, params_subset={"impl": ["tiled"]})
    assert job.params_subset == {"impl": ["tiled"]}


# --- GET /api/kernel-best/: filters are validated like every other list's -------------------------


def test_the_best_list_filters_on_a_batch_and_refuses_one_that_is_not_a_number(viewer_api, measured_job):
    every = viewer_api.get(BEST).json()
    assert every["count"] == 4
    resp = viewer_api.get(BEST, {"batch": "abc"})
    assert resp.status_code == 400 and resp.json() == {"batch": ["must be a whole number between 1 and 2147483647, got 'abc'"]}
    for bad in ("0", "-1", "1.5", "\uff11", "99999999999"):
        assert viewer_api.get(BEST, {"batch": bad}).status_code == 400, bad
    one = viewer_api.get(BEST, {"batch": 4}).json()["results"]
    assert {(b["shape"], b["batch"], b["key"]) for b in one} == {("small", 4, T32), ("wide", 4, T32)}
    assert viewer_api.get(BEST, {"batch": 8}).json()["count"] == 0   # a batch no row holds: nothing, not everything
    resp = viewer_api.get(f"{BEST}?batch=4&batch=1")
    assert resp.status_code == 400 and resp.json() == {"batch": ["is given 2 times (4, 1): give it once"]}


def test_the_best_lists_text_filters_are_validated_and_an_unknown_key_is_refused_as_elsewhere(viewer_api, measured_job):
    assert viewer_api.get(BEST, {"package": "toy_attn", "shape": "small", "device": "h200"}).json()["count"] == 2
    for key, limit in (("package", 63), ("device", 128), ("shape", 63)):
        resp = viewer_api.get(BEST, {key: "x" * (limit + 1)})
        assert resp.status_code == 400 and resp.json() == {
            key: [f"Ensure this field has no more than {limit} characters."]}, key
        resp = viewer_api.get(f"{BEST}?{key}=a&{key}=b")
        assert resp.status_code == 400 and resp.json() == {key: ["is given 2 times (a, b): give it once"]}
    # a key no list endpoint knows is refused by each of them alike, naming the keys it takes
    resp = viewer_api.get(JOBS, {"bogus": "1"})
    assert resp.status_code == 400 and resp.json() == {
        "bogus": ["unknown field 'bogus'; allowed: package, status, node, limit, offset, format"]}
    resp = viewer_api.get(BEST, {"bogus": "1"})
    assert resp.status_code == 400 and resp.json() == {
        "bogus": ["unknown field 'bogus'; allowed: package, device, shape, batch, limit, offset, format"]}


# --- a pending job's progress -----------------------------------------------------------------------


def test_a_pending_jobs_progress_total_in_the_api_is_the_one_its_page_shows(operator_api, viewer_api, viewer,
                                                                           toy_package, h200_node,
                                                                           django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        resp = operator_api.post(JOBS, {"package": "toy_attn", "node": "h200-box"}, format="json")
    assert resp.status_code == 201, resp.content
    job = resp.json()
    assert job["status"] == "pending" and job["variants_total"] == 7
    assert (job["progress_done"], job["progress_total"]) == (0, 7)
    assert viewer_api.get(f"{JOBS}{job['id']}/").json()["progress_total"] == 7
    page = Client()
    page.force_login(viewer)
    assert '<dd data-f="progress">0 / 7 variants</dd>' in page.get(f"/kernels/jobs/{job['id']}/").content.decode()
    # once a phase reports its own total, that is the one shown
    KernelJob.objects.filter(pk=job["id"]).update(status="benchmarking", phase="bench", progress_done=3,
                                                  progress_total=12)
    assert viewer_api.get(f"{JOBS}{job['id']}/").json()["progress_total"] == 12
    assert '<dd data-f="progress">3 / 12 measurements</dd>' in page.get(f"/kernels/jobs/{job['id']}/").content.decode()


# --- ingest: an empty results file stores nothing, and is refused -----------------------------------


def test_an_empty_results_list_is_refused_by_an_existing_job(measured_job, toy_package, tmp_path):
    before = KernelBenchmark.objects.count()
    message = f"the results file holds no measurement: there is nothing to store into kernel job #{measured_job.pk}"
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=measured_job, results={"device": H200_DEVICE, "results": []})
    assert err.value.errors == {"results": [message]}
    with pytest.raises(InvalidInput) as err:   # builds given with it are not stored either
        kernel_job_ingest(job=measured_job, results={"device": H200_DEVICE, "results": []}, builds=[])
    assert err.value.errors == {"results": [message + "; to store the builds alone, leave the results file out"]}
    path = tmp_path / "results.json"
    path.write_text('{"device": {"name": "NVIDIA H200", "cc": "9.0"}, "results": []}')
    with pytest.raises(CommandError) as cmd:
        call_command("kernel_job_ingest", str(measured_job.pk), str(path), stdout=StringIO())
    assert str(cmd.value) == f"nothing was stored: results: {message}"
    assert KernelBenchmark.objects.count() == before
    # a job waiting for its results stays waiting
    job = kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False)
    with pytest.raises(InvalidInput):
        kernel_job_ingest(job=job, results={"device": H200_DEVICE, "results": []})
    job.refresh_from_db()
    assert job.status == "pending" and job.started_at is None


# --- a variant outside the grid: the line quotes as its reason does -------------------------------


def test_a_variant_outside_the_grid_is_shown_with_its_values_quoted_as_the_reason_quotes_them(toy_package):
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False,
                          only=[{"impl": "tiled", "BLOCK": "32", "num_warps": 4}], only_ids=[5])
    assert err.value.errors == {"variants": [
        "variants.0 (variant_id 5): impl='tiled',BLOCK='32',num_warps=4 is not in toy_attn's grid: "
        "BLOCK='32' is not one of the grid's values [16, 32, 64]"]}
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False,
                          params_subset={"impl": ["baseline"]}, only=[{"impl": "tiled", "BLOCK": 32, "num_warps": 4}])
    assert err.value.errors == {"variants": [
        "variants.0: impl='tiled',BLOCK=32,num_warps=4 is not in toy_attn's grid: impl='tiled' is outside the "
        'job\'s params subset ["baseline"]']}
