"""After a rename, a deployment's recipe is found by the name it has now: the API gives that name
beside the name as deployed, the commands tell an earlier name for what it is and name the one to
give, a sweep's heading adds the current name after the deployed one, and an empty
``?recipe_name=`` is refused rather than read as no filter."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_report_text
from deployments import services
from deployments.models import Deployment
from deployments.tests.test_agent_support import renamed_pending_deployment, sim_single_recipe

pytestmark = pytest.mark.django_db


@pytest.fixture
def renamed(operator, django_capture_on_commit_callbacks) -> Deployment:
    """A pending deployment of t1b v1; the recipe renamed t1b-renamed (v2) since."""
    return renamed_pending_deployment(user=operator, name="t1b", renamed_to="t1b-renamed",
                                      on_commit=django_capture_on_commit_callbacks)


def test_a_deployment_in_the_api_names_its_recipe_as_deployed_and_as_named_now(viewer_api, renamed):
    body = viewer_api.get(f"/api/deployments/{renamed.pk}/").json()
    assert (body["recipe_name"], body["recipe_current_name"]) == ("t1b", "t1b-renamed")
    listed = viewer_api.get("/api/deployments/?recipe_name=t1b").json()["results"]
    assert [(r["id"], r["recipe_current_name"]) for r in listed] == [(renamed.pk, "t1b-renamed")]
    schema = viewer_api.get("/api/schema/?format=json").json()
    field = schema["components"]["schemas"]["Deployment"]["properties"]["recipe_current_name"]
    assert field["readOnly"] is True and "renamed" in field["description"]


def test_an_empty_recipe_name_filter_is_refused_naming_it(viewer_api, renamed):
    refused = viewer_api.get("/api/deployments/?recipe_name=")
    assert refused.status_code == 400
    assert refused.json() == {"recipe_name": ["filter 'recipe_name' is empty: give a value or leave it out"]}
    # given, it filters; left out, every deployment is listed
    assert viewer_api.get("/api/deployments/").json()["count"] == 1
    assert viewer_api.get("/api/deployments/?recipe_name=%20").json()["count"] == 0


def test_sweep_and_dryrun_tell_an_earlier_name_and_the_name_to_give(renamed):
    told = "recipe 't1b' was renamed 't1b-renamed' (at v2); use that name"
    with pytest.raises(CommandError) as err:
        call_command("sweep", "t1b", stdout=io.StringIO())
    assert str(err.value) == told and err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("dryrun", "t1b", stdout=io.StringIO())
    assert str(err.value) == told and err.value.returncode == 2
    # a name no recipe ever had is still no such recipe
    with pytest.raises(CommandError) as err:
        call_command("dryrun", "never-named", stdout=io.StringIO())
    assert str(err.value) == "no recipe named 'never-named'"
    # the current name is taken as ever
    out = io.StringIO()
    call_command("dryrun", "t1b-renamed", stdout=out)
    assert out.getvalue().startswith("recipe t1b-renamed v2: ")


def test_an_earlier_name_of_several_recipes_names_each(operator, renamed):
    other = sim_single_recipe(node=renamed.node, user=operator, name="t1b")
    services.recipe_update(recipe=other, user=operator, name="t1b-other")
    with pytest.raises(CommandError) as err:
        call_command("dryrun", "t1b", stdout=io.StringIO())
    assert str(err.value) == ("recipe 't1b' was renamed: 't1b-other' (at v2), 't1b-renamed' (at v2); "
                              "use one of those names")
    # once another recipe is named so again, the name is that recipe's
    services.recipe_update(recipe=other, user=operator, name="t1b")
    out = io.StringIO()
    call_command("dryrun", "t1b", stdout=out)
    assert out.getvalue().startswith("recipe t1b v3: ")


def test_a_sweep_heading_adds_the_current_name_after_the_deployed_one(viewer, renamed):
    sweep = BenchmarkSweep.objects.create(deployment=renamed, name="t1b c=1 16/16", status="done")
    named = BenchmarkSweep.objects.create(deployment=renamed, name="warm chat", status="done")
    assert sweep.name_label == "t1b (now t1b-renamed) c=1 16/16"
    assert named.name_label == "warm chat"
    assert sweep_report_text(sweep=sweep).splitlines()[0] == (
        f"Sweep #{sweep.pk} t1b (now t1b-renamed) c=1 16/16 — done")
    client = Client()
    client.force_login(viewer)
    hint = '<span class="muted small recipe-renamed">(now t1b-renamed)</span>'
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert f'<h1>Sweep #{sweep.pk} <span class="muted">·</span> t1b {hint} c=1 16/16</h1>' in page
    listing = client.get(reverse("benchmarks:index")).content.decode()
    assert f"#{sweep.pk} t1b {hint} c=1 16/16</a>" in listing
    assert f"#{named.pk} warm chat</a>" in listing
    deployment_page = client.get(reverse("deployments:deployment-detail", args=[renamed.pk])).content.decode()
    assert f"#{sweep.pk} t1b {hint} c=1 16/16</a>" in deployment_page
