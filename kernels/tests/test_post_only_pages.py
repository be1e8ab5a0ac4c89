"""Addresses that only act on POST (form actions) answer a GET, e.g. a reload after a form error,
with a redirect to the page that holds the form, never a blank 405, and a GET changes nothing."""
from __future__ import annotations

import pytest
from django.test import Client

from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create
from kernels.models import KernelJob


@pytest.mark.django_db
def test_a_get_of_a_form_action_goes_back_to_the_form_and_acts_on_nothing(operator, measured_job):
    client = Client()
    client.force_login(operator)
    recipe = recipe_row_create(node=cpu_node_create(), name="posted")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)
    KernelJob.objects.filter(pk=measured_job.pk).update(status="benchmarking")
    package = measured_job.package.name
    for url, target in (
        (f"/deployments/{deployment.pk}/stop/", f"/deployments/{deployment.pk}/"),
        (f"/recipes/{recipe.pk}/deploy/", f"/recipes/{recipe.pk}/"),
        ("/recipes/validate/", "/recipes/new/"),
        (f"/kernels/packages/{package}/jobs/new/", f"/kernels/packages/{package}/"),
        (f"/kernels/jobs/{measured_job.pk}/cancel/", f"/kernels/jobs/{measured_job.pk}/"),
    ):
        answer = client.get(url)
        assert (answer.status_code, answer["Location"]) == (302, target), url
        assert client.put(url).status_code == 405, url
    assert Deployment.objects.get(pk=deployment.pk).stop_requested is False
    assert Deployment.objects.filter(recipe=recipe).count() == 1
    assert KernelJob.objects.get(pk=measured_job.pk).status == "benchmarking"
    assert KernelJob.objects.count() == 1
