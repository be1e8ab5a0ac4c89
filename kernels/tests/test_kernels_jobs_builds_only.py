"""A kernel job for an explicit compute capability on a node without a GPU of it: the variants are
built (compile-only, as CI does) and their build facts recorded, none is checked or timed. The
answer that creates the job already says so (its ``note``), the job page says so, and the job ends
done with the "builds only" note, never benchmarking and never waiting for a GPU.

The runner is replaced by the stand-in of conftest (``runner``: build facts for every variant, the
steps it was asked for); task messages are captured instead of published (``sent``)."""
from __future__ import annotations

from django.test import Client

from kernels.models import KernelJob
from kernels.services import kernel_job_cancel, kernel_job_create, kernel_job_waiting_reason
from kernels.tasks import kernel_job_run_task

BUILDS_ONLY = ("no GPU on node cpu-box: builds only: 7 variants are built for compute capability 9.0 and the "
               "build facts recorded (registers, spills, shared memory, tensor-core use), but none is checked "
               "against the reference or timed, and the job ends done after the builds. The builds run one after "
               "another and the compile step is stopped after 3600 s (CEILING_KERNEL_STEP_TIMEOUT_S): restrict "
               "the grid with params to build fewer")


def test_the_answer_that_creates_it_says_the_node_has_no_gpu_and_what_the_job_will_do(
        toy_package, online, operator_api, settings):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0"},
                             format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["status"] == "pending" and body["variants_total"] == 7
    assert body["note"] == BUILDS_ONLY
    assert body["waiting_reason"] is None  # nothing holds it: it starts when its agent takes it
    # the step timeout it names is the one the compile runs under
    settings.CEILING_KERNEL_STEP_TIMEOUT_S = 600
    again = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box", "cc": "9.0",
                                                     "params": {"impl": ["baseline"], "num_warps": [4]}}, format="json").json()
    assert again["note"].startswith("no GPU on node cpu-box: builds only: 1 variant is built for compute "
                                    "capability 9.0 and the build facts recorded ")
    assert "the compile step is stopped after 600 s (CEILING_KERNEL_STEP_TIMEOUT_S)" in again["note"]


def test_without_cc_it_is_still_refused_on_a_node_without_a_gpu(toy_package, online, operator_api):
    resp = operator_api.post("/api/kernel-jobs/", {"package": "toy_attn", "node": "cpu-box"}, format="json")
    assert resp.status_code == 400
    assert resp.json()["cc"] == [
        "give the target compute capability (e.g. 9.0): node cpu-box has no GPU to take it from"]


def test_a_node_with_a_gpu_of_another_compute_capability_is_named_up_front(toy_package, online):
    from deployments.models import Gpu

    Gpu.objects.create(node=online, index=0, name="NVIDIA A100", compute_capability="8.0",
                       memory_total_bytes=80 * 2**30)
    job = kernel_job_create(package=toy_package, node=online, cc="9.0")
    assert job.note.startswith("no GPU on node cpu-box: builds only (its GPUs are compute capability 8.0, "
                               "the target is 9.0): 7 variants are built ")


def test_a_node_with_a_gpu_of_the_target_gets_no_note(toy_package, h200_node):
    assert kernel_job_create(package=toy_package, node=h200_node, cc="9.0").note == ""


def test_it_builds_records_the_builds_and_ends_done_without_benchmarking(toy_package, online, runner, sent):
    job = kernel_job_create(package=toy_package, node=online, cc="9.0")
    seen = {}

    def while_building():
        row = KernelJob.objects.get(pk=job.pk)
        seen["building"] = (row.status, row.note)
        # a note the builds add (e.g. a limit not checked) is kept when the job ends
        KernelJob.objects.filter(pk=job.pk).update(note=row.note + "; shared memory was not checked")

    runner.during[job.pk] = while_building
    assert kernel_job_run_task(job.pk) == "done"
    assert runner.steps == ["compile"]  # never bench
    assert seen["building"] == ("building", BUILDS_ONLY)
    job.refresh_from_db()
    assert (job.status, job.reason, job.builds_ok, job.benchmarks_total) == ("done", "", 7, 0)
    assert job.note == "no GPU on node cpu-box: builds only; shared memory was not checked"
    assert kernel_job_waiting_reason(job=job) == ""


def test_the_job_page_says_it_builds_only_from_the_start(toy_package, online, viewer):
    job = kernel_job_create(package=toy_package, node=online, cc="9.0")
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/jobs/{job.pk}/").content.decode()
    assert "no GPU on node cpu-box: builds only: 7 variants are built" in html
    assert "none: not benchmarked, no GPU of compute capability 9.0 on node cpu-box (builds only)" in html


def test_a_node_that_has_a_gpu_of_the_target_by_the_time_it_runs_is_benchmarked(toy_package, online, runner, sent):
    from deployments.models import Gpu

    job = kernel_job_create(package=toy_package, node=online, cc="9.0")
    Gpu.objects.create(node=online, index=0, name="NVIDIA H200", compute_capability="9.0",
                       memory_total_bytes=141 * 2**30)
    kernel_job_run_task(job.pk)  # the stand-in's bench output is no results file: the job fails there
    assert runner.steps == ["compile", "bench"]
    job.refresh_from_db()
    assert "builds only" not in job.note


def test_cancelled_before_it_started_it_drops_the_builds_only_note(toy_package, online):
    job = kernel_job_create(package=toy_package, node=online, cc="9.0")
    job = kernel_job_cancel(job=job)
    assert job.status == "cancelled" and job.note == ""
