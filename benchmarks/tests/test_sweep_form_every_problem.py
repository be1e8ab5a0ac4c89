"""The sweep form lists every problem at once, as the API's 400 does: a bad SLO does not hide a
concurrency or a length pair given twice."""
from __future__ import annotations

import html as html_lib

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from deployments.choices import DeploymentStatus
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(operator) -> Client:
    return logged_in_client(operator)


@pytest.fixture
def deployment(db):
    node = cpu_node_create()
    recipe = recipe_row_create(node=node, name="local-sim-single", spec={"sim": {"gpus_modelled": 4}})
    return deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)


def test_repeats_and_a_bad_slo_are_all_named(operator_api, operator_client, deployment):
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1, 1], "lengths": [[16, 8], [16, 8]], "slo": {"ttft_s": -0.005}}}, format="json")
    assert api.status_code == 400, api.content
    assert {"grid.concurrency", "grid.lengths", "grid.slo.ttft_s"} <= api.json().keys(), api.json()

    response = operator_client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1,1", "lengths": "16:8, 16:8", "requests": "", "duration": "",
        "rates": "", "slo_ttft_ms": "-5", "slo_tpot_ms": "", "slo_e2e_ms": ""})
    assert response.status_code == 400
    page = html_lib.unescape(response.content.decode())
    assert api.json()["grid.slo.ttft_s"] == ["must be seconds > 0, got -0.005"]
    assert "must be more than 0 ms, got -5 ms" in page   # the API's -0.005 s, said in the field's ms
    assert "-0.005" not in page
    assert api.json()["grid.concurrency"][0] in page
    assert api.json()["grid.lengths"][0] in page
    assert not BenchmarkSweep.objects.exists()
