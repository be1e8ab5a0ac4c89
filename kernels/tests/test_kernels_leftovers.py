"""Leftover defects of the kernels app: the what-if says at which shape and batch a stored speedup
was measured whatever batch it is; a cancelled job's ``progress_done`` counts every build it
stored; a variants file's ids keep their JSON type (number or text) in the API and JSON export."""
import csv
import io
import json

import pytest
from django.test import Client

from kernels.models import KernelBest, KernelBuild, KernelJob
from kernels.runnercall import RunnerStopped
from kernels.services import (
    kernel_builds_store,
    kernel_job_create,
    kernel_job_execute,
    kernel_job_from_measurement,
    kernel_results_store,
)
from kernels.tests.conftest import BASE, H200_DEVICE, T32, build_fact, result_row

# 1. The what-if's note on where a stored speedup was measured


@pytest.fixture
def batch4_best(measured_job):
    """A second job that measured only shape ``small`` at batch 4, its tiled variant 6x its baseline:
    it takes the small/batch=4 best from ``measured_job`` (4x there) and holds no other batch."""
    job = kernel_job_create(package=measured_job.package, node=measured_job.node, dispatch=False,
                            shapes=["small"], batches=[4])
    ids = {v.key: v.pk for v in job.variants.all()}
    kernel_builds_store(job_id=job.pk, payload=[build_fact(ids[BASE]), build_fact(ids[T32])])
    kernel_results_store(job_id=job.pk, payload={"device": H200_DEVICE, "results": [
        result_row(ids[BASE], "small", 4, median_us=120.0), result_row(ids[T32], "small", 4, median_us=20.0)]})
    best = KernelBest.objects.get(shape="small", batch=4)
    assert best.job_id == job.pk and best.speedup == pytest.approx(6.0)
    return best


def test_the_whatif_says_where_a_best_variants_speedup_was_measured_when_its_job_holds_one_batch(
        viewer, viewer_api, batch4_best, seed_pd_sweep):
    best = batch4_best
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": best.pk}).json()
    assert body["speedup"] == pytest.approx(6.0)
    assert body["notes"][0].startswith("the speedup 6.00× was measured at batch 4 of shape small; ")
    assert body["speedup_measured_at"] == {
        "best": best.pk, "job": best.job_id, "package": "toy_attn", "shape": "small", "batch": 4,
        "device_name": "NVIDIA H200", "cc": "9.0", "compiler": "triton 3.6.0"}
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&best={best.pk}").content.decode()
    assert '<p class="notice">the speedup 6.00× was measured at batch 4 of shape small; ' in html


def test_the_whatif_notes_the_batch_of_every_stored_speedup_and_of_no_given_one(viewer_api, measured_job,
                                                                                 seed_pd_sweep):
    for best in KernelBest.objects.filter(job=measured_job):
        body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": best.pk}).json()
        said = [n for n in body["notes"] if f"measured at batch {best.batch} of shape {best.shape}" in n]
        assert len(said) == 1, (best.shape_bucket, body["notes"])
        assert (body["speedup_measured_at"]["shape"], body["speedup_measured_at"]["batch"]) == (best.shape, best.batch)
    given = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 3}).json()
    assert given["speedup_measured_at"] is None and not any("measured at batch" in n for n in given["notes"])


# 2. progress_done of a job cancelled between a build and its progress line


@pytest.mark.parametrize("period_s", [None, 0.0], ids=["rate-limited", "every-line"])
def test_a_job_cancelled_after_a_build_before_its_progress_line_counts_that_build(toy_package, cpu_node,
                                                                                  monkeypatch, period_s):
    """The runner appends build 3 to ``builds.json.partial`` and is ended by the cancel before it
    prints "done: 3": the job keeps 3 builds and says 3 done. With every progress line written
    (``period_s`` 0), line 2 read after builds 1-3 were stored does not take the count back."""
    import kernels.services.jobs as jobs
    import kernels.services.progress as progress

    if period_s is not None:
        monkeypatch.setattr(jobs, "PROGRESS_PERIOD_S", period_s)
        monkeypatch.setattr(progress, "PROGRESS_PERIOD_S", period_s)
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    KernelJob.objects.filter(pk=job.pk).update(note="")
    ids = list(job.variants.order_by("ordinal").values_list("pk", flat=True))

    def runner(argv, *, out, on_progress=None, **kwargs):
        with open(out.with_name(out.name + ".partial"), "w") as lines:
            for pk in ids[:3]:
                lines.write(json.dumps(build_fact(pk)) + "\n")
        on_progress(1, len(ids))
        on_progress(2, len(ids))
        KernelJob.objects.filter(pk=job.pk).update(cancel_requested=True)
        raise RunnerStopped("stopped on request")

    monkeypatch.setattr(jobs, "runner_run", runner)
    assert kernel_job_execute(job_id=job.pk) == "cancelled"
    job.refresh_from_db()
    assert KernelBuild.objects.filter(variant__job=job).count() == 3
    assert (job.builds_ok, job.builds_failed, job.phase) == (3, 0, "compile")
    assert job.progress_done >= job.builds_ok + job.builds_failed
    assert (job.progress_done, job.progress_total) == (3, len(ids))


# 3. A variants file's ids keep their JSON type


TOY_VARIANTS = [{"impl": "baseline", "BLOCK": 16, "num_warps": 4}, {"impl": "tiled", "BLOCK": 32, "num_warps": 4}]


@pytest.mark.parametrize("file_ids", [[101, 102], ["101", "102"], ["a-1", 7]], ids=["numbers", "texts", "mixed"])
def test_a_variants_files_ids_keep_their_json_type_in_the_api_and_the_json_export(toy_package, viewer, viewer_api,
                                                                                   file_ids):
    variants = [{"variant_id": i, "params": p} for i, p in zip(file_ids, TOY_VARIANTS)]
    results = {"device": H200_DEVICE, "results": [result_row(file_ids[0], "small", 1, median_us=40.0),
                                                  result_row(file_ids[1], "small", 1, median_us=10.0)]}
    job = kernel_job_from_measurement(package=toy_package, variants=variants, results=results,
                                      builds=[build_fact(i) for i in file_ids])
    by_params = {json.dumps(p, sort_keys=True): i for i, p in zip(file_ids, TOY_VARIANTS)}

    def file_id(params):
        return by_params[json.dumps(params, sort_keys=True)]

    rows = viewer_api.get(f"/api/kernel-jobs/{job.pk}/variants/").json()["rows"]
    assert [r["source_variant_id"] for r in rows] == [file_id(r["params"]) for r in rows]
    assert {type(r["source_variant_id"]) for r in rows} == {type(i) for i in file_ids}
    export = json.loads(viewer_api.get(f"/api/kernel-jobs/{job.pk}/export/?format=json").content)
    params_of = {v.pk: v.params for v in job.variants.all()}
    assert export["rows"] and all(r["source_variant_id"] == file_id(params_of[r["variant_id"]]) for r in export["rows"])
    # CSV cells are text: the file's id as it reads
    text = viewer_api.get(f"/api/kernel-jobs/{job.pk}/export/?format=csv").content.decode()
    cells = {r["source_variant_id"] for r in csv.DictReader(io.StringIO(text))}
    assert cells == {str(i) for i in file_ids}
    # the job page's variant table names the file's id next to the job's, saying which file it is from
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/jobs/{job.pk}/").content.decode()
    for r in rows:
        assert (f'{r["id"]} <span class="muted small">(id {r["source_variant_id"]} in variants.json)</span>'
                in html)
