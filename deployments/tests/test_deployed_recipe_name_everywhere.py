"""Wherever a deployment is named for people (the list, the wall, the deploy message, the
timeline, a warning naming another deployment, ``manage.py undeploy``), it goes by the name its
recipe had at the deployed version, with the current name after it where the recipe was renamed
since; a dry-run of an older version names the recipe as it was named at that version."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from benchmarks.tests.page_support import page_text as _page
from deployments import services
from deployments.models import Deployment, ProcessEvent
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import renamed_pending_deployment, sim_single_recipe

pytestmark = pytest.mark.django_db


@pytest.fixture
def renamed(operator, django_capture_on_commit_callbacks) -> Deployment:
    """A pending deployment of probe-sim-b v1; the recipe renamed probe-renamed (v2) since."""
    return renamed_pending_deployment(user=operator, name="probe-sim-b", renamed_to="probe-renamed",
                                      on_commit=django_capture_on_commit_callbacks)


def test_the_model_names_it_as_deployed_with_the_current_name_after(renamed):
    assert renamed.deployed_recipe_name == "probe-sim-b"
    assert renamed.recipe_renamed_to == "probe-renamed"
    assert renamed.deployed_recipe_label() == "probe-sim-b (now probe-renamed)"
    assert renamed.deployed_recipe_label(version=True) == "probe-sim-b v1 (now probe-renamed)"
    Deployment.objects.filter(pk=renamed.pk).update(recipe_name="")  # a row never given one
    bare = Deployment.objects.get(pk=renamed.pk)
    assert (bare.deployed_recipe_label(version=True), bare.recipe_renamed_to) == ("probe-renamed v1", "")


def test_the_list_and_the_wall_add_the_current_name(viewer, renamed):
    hint = '<span class="muted small recipe-renamed">(now probe-renamed)</span>'
    listing = _page(viewer, reverse("deployments:deployment-list"))
    assert f'">probe-sim-b</a> {hint}</td>' in listing
    wall = _page(viewer, reverse("deployments:wall-tiles"))
    assert f'title="#{renamed.pk} probe-sim-b (now probe-renamed)">#{renamed.pk} probe-sim-b {hint}</h3>' in wall


def test_the_timeline_keeps_the_deployed_name_and_a_warning_names_the_other_deployment_as_deployed(operator, renamed):
    created = ProcessEvent.objects.get(deployment=renamed, kind="created").message
    assert created == f"{operator.username} deployed probe-sim-b v1 on node {renamed.node.name}"
    # The recipe's own deployment is not its neighbour: a second recipe on the same CPU is.
    other = sim_single_recipe(node=renamed.node, user=operator, name="neighbour")
    warnings = services.recipe_plan(recipe=other, warn_ports=True).warnings
    assert any(f"deployment #{renamed.pk} (recipe 'probe-sim-b' (now 'probe-renamed'), pending)" in w
               for w in warnings), warnings


def test_the_deploy_message_names_the_deployed_version(operator, django_capture_on_commit_callbacks):
    recipe = sim_single_recipe(node=cpu_node_create(), user=operator, name="probe-msg")
    client = Client()
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(reverse("deployments:recipe-deploy", args=[recipe.pk]), follow=True)
    deployment = Deployment.objects.get(recipe=recipe)
    assert f"Deployment #{deployment.pk} of probe-msg v1 created." in response.content.decode()


def test_undeploy_names_each_deployment_as_deployed(renamed):
    out = io.StringIO()
    call_command("undeploy", "--node", renamed.node.name, "--wait", "0", stdout=out)
    assert f"deployment #{renamed.pk} (probe-sim-b v1 (now probe-renamed)): stopped" in out.getvalue()


def test_a_dry_run_of_an_older_version_names_the_recipe_as_it_was_then(viewer_api, viewer, renamed):
    recipe = renamed.recipe
    old = viewer_api.get(f"/api/recipes/{recipe.pk}/dry-run/?version=1").json()
    assert (old["recipe_name"], old["version"]) == ("probe-sim-b", 1)
    current = viewer_api.get(f"/api/recipes/{recipe.pk}/dry-run/").json()
    assert (current["recipe_name"], current["version"]) == ("probe-renamed", 2)
    out = io.StringIO()
    call_command("dryrun", "probe-renamed", "--version", "1", "--json", stdout=out)
    assert json.loads(out.getvalue())["recipe_name"] == "probe-sim-b"
    out = io.StringIO()
    call_command("dryrun", "probe-renamed", "--version", "1", stdout=out)
    assert out.getvalue().startswith("recipe probe-sim-b v1 (now probe-renamed): ")
    page = _page(viewer, f'{reverse("deployments:recipe-dry-run", args=[recipe.pk])}?version=1')
    assert '>probe-sim-b</a> <span class="tag">v1</span> <span class="muted small">(now probe-renamed)</span></h1>' in page


def test_the_api_lists_deployments_by_their_name_as_deployed(viewer_api, operator, renamed,
                                                             django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        services.deployment_stop(deployment=renamed, user=operator)
        again = services.deployment_create(recipe=renamed.recipe, user=operator)  # v2, as probe-renamed

    def ids(query: str) -> list[int]:
        response = viewer_api.get(f"/api/deployments/?{query}")
        assert response.status_code == 200, response.json()
        return [row["id"] for row in response.json()["results"]]

    assert ids("recipe_name=probe-sim-b") == [renamed.pk]
    assert ids("recipe_name=probe-renamed") == [again.pk]
    assert ids("recipe_name=probe-renamed&status=stopped") == []
    assert ids("recipe_name=probe") == [] and ids("recipe_name=PROBE-SIM-B") == []  # exact, not a search
    # A row that never kept its name goes by the recipe's current one, as its pages show it.
    Deployment.objects.filter(pk=renamed.pk).update(recipe_name="")
    assert ids("recipe_name=probe-renamed") == [again.pk, renamed.pk]
    # A misspelt key is still refused, naming the keys the list takes.
    refused = viewer_api.get("/api/deployments/?recipename=probe-sim-b")
    assert refused.status_code == 400
    assert "recipe_name" in refused.json()["recipename"][0], refused.json()
