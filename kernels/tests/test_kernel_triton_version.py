"""A Triton kernel job's ``triton_version`` names the Triton that built its variants as soon as
its builds are stored (the compiler ``"triton 3.6.0"``), not only once results name the device's
Triton; a CUDA job's stays null. In the API, the job page and the service."""
from __future__ import annotations

import pytest

from kernels.models import KernelJob
from kernels.services import kernel_builds_store, kernel_job_create, kernel_results_store
from kernels.tests.conftest import H200_DEVICE, build_fact, result_row
from kernels.views import _target_context

pytestmark = pytest.mark.django_db


def _built_job(package) -> KernelJob:
    job = kernel_job_create(package=package, node=None, cc="9.0", dispatch=False)
    kernel_builds_store(job_id=job.pk, payload=[build_fact(v.pk) for v in job.variants.all()])
    job.refresh_from_db()
    return job


def test_builds_by_triton_set_the_jobs_triton_version(toy_package, operator_api):
    job = _built_job(toy_package)
    assert (job.compiler, job.triton_version) == ("triton 3.6.0", "3.6.0")
    detail = operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()
    assert (detail["compiler"], detail["triton_version"]) == ("triton 3.6.0", "3.6.0")
    assert detail["torch_version"] is None  # only results measured on a device name torch


def test_results_keep_the_version_the_builds_named(toy_package):
    job = _built_job(toy_package)
    first = job.variants.order_by("ordinal").first()
    kernel_results_store(job_id=job.pk, payload={"device": H200_DEVICE, "results": [
        result_row(first.pk, "small", 1, median_us=20.0)]})
    job.refresh_from_db()
    assert (job.compiler, job.triton_version, job.torch_version) == ("triton 3.6.0", "3.6.0", "2.9.0")


def test_a_job_stored_before_builds_set_it_reads_the_version_from_its_compiler(toy_package, operator_api):
    job = _built_job(toy_package)
    KernelJob.objects.filter(pk=job.pk).update(triton_version="")
    assert operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()["triton_version"] == "3.6.0"
    job.refresh_from_db()
    assert _target_context(job)["software"][-1] == "Triton 3.6.0"  # the job page's Software line


def test_a_job_without_a_triton_compiler_has_no_triton_version(toy_package, operator_api):
    job = kernel_job_create(package=toy_package, node=None, cc="9.0", dispatch=False)
    assert job.known_triton_version == ""
    assert operator_api.get(f"/api/kernel-jobs/{job.pk}/").json()["triton_version"] is None
    KernelJob.objects.filter(pk=job.pk).update(compiler="nvcc 13.0")
    job.refresh_from_db()
    assert job.known_triton_version == ""
