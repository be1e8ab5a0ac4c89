"""A kernel job's cancel records who asked, through the API and the page, whether the job was
pending ("cancelled by oscar-operator before it started") or running ("cancelled by
oscar-operator"), as a sweep's cancel does."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

import kernels.services.jobs as jobs
from kernels.models import KernelJob
from kernels.runnercall import RunnerStopped
from kernels.services import kernel_job_create, kernel_job_execute


def _cancel_by_api(operator_api, job: KernelJob) -> None:
    assert operator_api.post(f"/api/kernel-jobs/{job.pk}/cancel/").status_code == 200


def _cancel_by_page(operator, job: KernelJob) -> None:
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("kernels:job-cancel", args=[job.pk]), follow=True)
    assert response.status_code == 200 and f"Cancellation of kernel job #{job.pk} requested." in response.content.decode()


@pytest.fixture(params=["api", "page"])
def cancel(request, operator_api, operator):
    return (lambda job: _cancel_by_api(operator_api, job)) if request.param == "api" else (
        lambda job: _cancel_by_page(operator, job))


def test_a_running_job_cancelled_names_who_asked(toy_package, cpu_node, monkeypatch, cancel):
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)

    def runner(argv, *, should_stop, **kwargs):
        assert KernelJob.objects.get(pk=job.pk).status == "building"
        cancel(job)
        assert should_stop()
        raise RunnerStopped("stopped on request")

    monkeypatch.setattr(jobs, "runner_run", runner)
    assert kernel_job_execute(job_id=job.pk) == "cancelled"
    job.refresh_from_db()
    assert (job.status, job.reason) == ("cancelled", "cancelled by oscar-operator")


def test_a_pending_job_cancelled_names_who_asked(toy_package, cpu_node, cancel):
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    cancel(job)
    job.refresh_from_db()
    assert (job.status, job.reason) == ("cancelled", "cancelled by oscar-operator before it started")
    assert kernel_job_execute(job_id=job.pk) == "cancelled"  # a late delivery keeps the reason
    job.refresh_from_db()
    assert job.reason == "cancelled by oscar-operator before it started"


def test_a_job_whose_task_sees_the_cancel_first_names_who_asked(toy_package, cpu_node, operator):
    """The cancel's flag is set and the task claims before the cancel ends the pending row."""
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    KernelJob.objects.filter(pk=job.pk).update(cancel_requested=True, cancelled_by=operator.get_username())
    assert kernel_job_execute(job_id=job.pk) == "cancelled"
    job.refresh_from_db()
    assert job.reason == "cancelled by oscar-operator before it started"
