"""A sweep of one point has one run, and a comparison needs two: the sweep lists and the sweep
page do not link to a comparison of that sweep alone (it could only answer 400)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


def _sweep(deployment, points: int) -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(deployment=deployment, grid={"concurrency": list(range(1, points + 1))},
                                         points_total=points, status="done")


def test_a_one_point_sweep_gets_no_compare_link_and_a_two_point_one_does(client, viewer):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    one, two = _sweep(deployment, 1), _sweep(deployment, 2)
    client.force_login(viewer)
    viewer_client = client
    index = viewer_client.get(reverse("benchmarks:index")).content.decode()
    assert f"?sweeps={two.pk}\"" in index and f"?sweeps={one.pk}\"" not in index
    assert "one point" in index
    page = viewer_client.get(reverse("benchmarks:sweep-detail", args=[one.pk])).content.decode()
    assert f"?sweeps={one.pk}" not in page and "Compare…" in page
    page = viewer_client.get(reverse("benchmarks:sweep-detail", args=[two.pk])).content.decode()
    assert f"?sweeps={two.pk}" in page
