"""Benchmark pages name a sweep's deployment by the name its recipe had when it was deployed, as
the deployment list, the wall and the API do, with the name the recipe was given later after it
("(now ...)"); the snapshot taken at a sweep's start keeps the deployed name."""
from __future__ import annotations

import pytest
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.page_support import page_text as _page
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.models import Deployment, Recipe

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment() -> Deployment:
    """Ready deployment of probe-sim-b v1; the recipe renamed probe-renamed since."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="probe-sim-b")
    Deployment.objects.filter(pk=deployment.pk).update(recipe_name="probe-sim-b")
    Recipe.objects.filter(pk=deployment.recipe_id).update(name="probe-renamed", version=2)
    return Deployment.objects.select_related("recipe", "node").get(pk=deployment.pk)


@pytest.fixture
def sweep(deployment) -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(deployment=deployment, grid={"concurrency": [1]}, name="probe sweep",
                                         topology="single", engine="sim")


def test_the_sweep_page_and_the_sweep_list_name_the_deployment_as_deployed(viewer, operator, deployment, sweep):
    link = f'<a href="{reverse("deployments:deployment-detail", args=[deployment.pk])}">#{deployment.pk} probe-sim-b</a>'
    hint = ' <span class="muted small recipe-renamed">(now probe-renamed)</span>'
    detail = _page(viewer, reverse("benchmarks:sweep-detail", args=[sweep.pk]))
    assert link + hint in detail
    index = _page(viewer, reverse("benchmarks:index"))
    assert link + hint in index
    buttons = _page(operator, reverse("benchmarks:index"))
    assert f'?deployment={deployment.pk}">#{deployment.pk} probe-sim-b (now probe-renamed)</a>' in buttons


def test_the_sweep_form_and_the_deployment_pick_name_it_as_deployed(operator, deployment):
    form = _page(operator, f'{reverse("benchmarks:sweep-create")}?deployment={deployment.pk}')
    assert f'deployment #{deployment.pk} probe-sim-b <span class="muted small recipe-renamed">(now probe-renamed)</span></h1>' in form
    assert "(e.g. probe-sim-b c=1,8,16 256/256)" in form
    pick = _page(operator, reverse("benchmarks:sweep-create"))
    assert ('<td>probe-sim-b <span class="muted small">v1</span> <span class="muted small recipe-renamed">'
            '(now probe-renamed)</span></td>') in pick


def test_the_snapshot_at_sweep_start_keeps_the_deployed_name(deployment, sweep, monkeypatch):
    monkeypatch.setattr(sweep_services, "server_info_fetch", lambda *, base_url: {})
    snap = sweep_services.sweep_snapshot(sweep=sweep, deployment=deployment)
    assert (snap["deployment_id"], snap["recipe"], snap["recipe_version"]) == (deployment.pk, "probe-sim-b", 1)
