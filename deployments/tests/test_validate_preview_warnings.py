"""The recipe form's Validate preview lists the warnings a saved recipe's dry-run lists, by the same
function (``services.plan_warnings_now``): a copy of a recipe (``/recipes/new/?from=<id>``) whose
ports a ready deployment holds, and whose CPUs it pins, hears it before Save, not first from
Deploy's 409. The edit form's preview does not count the edited recipe's own deployment."""
from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from deployments import services
from deployments.choices import DeploymentStatus
from deployments.examples import example_recipe
from deployments.models import Deployment, Recipe
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]


@pytest.fixture(autouse=True)
def cpu_box_is_this_host(settings):
    """The node the recipes are on (``cpu-box``) is this host, as local-sim-pd's is: its routers bind
    127.0.0.1, which on another node would add the plan's loopback warning to those compared here."""
    settings.CEILING_NODE_NAME = "cpu-box"


@pytest.fixture
def source(operator, django_capture_on_commit_callbacks) -> Recipe:
    """``local-sim-pd`` (ports 31000, 31001, 31080, 31081 and 31998; CPUs 0 and 1) on a CPU node,
    with a ready deployment of it holding them."""
    example = example_recipe("local-sim-pd")
    recipe = services.recipe_create(user=operator, name=example["name"], engine="sim", topology="pd",
                                    node=cpu_node_create(), spec=example["spec"])
    with django_capture_on_commit_callbacks(execute=False):  # no agent here
        deployment = services.deployment_create(recipe=recipe, user=operator)
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.READY)
    return recipe


def _form_values(response) -> dict:
    form = response.context["form"]
    return {bf.html_name: bf.value() for bf in form if bf.value() is not None}


def _warnings(response) -> list[str]:
    text = response.content.decode()
    return [html.unescape(w).strip() for w in re.findall(r'<span class="tag warn">warning</span>(.*?)</li>', text, re.S)]


def test_the_preview_of_a_copy_warns_as_the_saved_copys_dry_run_does(operator_client, operator_api, source):
    held = Deployment.objects.get(recipe=source)
    values = _form_values(operator_client.get(reverse("deployments:recipe-create") + f"?from={source.pk}"))

    preview = operator_client.post(reverse("deployments:recipe-validate"), values)

    assert preview.status_code == 200 and 'id="validate-ok"' in preview.content.decode()
    shown = _warnings(preview)
    on = f"(recipe 'local-sim-pd', ready) on node 'cpu-box': a deploy now would be refused"
    assert shown == [
        f"port 31998 (prefill bootstrap port) is in use by the prefill of deployment #{held.pk} {on}",
        f"port 31000 (prefill http port) is in use by the prefill of deployment #{held.pk} {on}",
        f"port 31001 (decode http port) is in use by the decode of deployment #{held.pk} {on}",
        f"port 31080 (router http port) is in use by the router of deployment #{held.pk} {on}",
        f"port 31081 (router metrics port, --prometheus-port) is in use by the router of deployment #{held.pk} {on}",
        f"prefill CPU 0 is also pinned by the prefill of deployment #{held.pk} (recipe 'local-sim-pd', ready): the "
        "two share it, which skews either one's benchmark numbers while both serve",
        f"decode CPU 1 is also pinned by the decode of deployment #{held.pk} (recipe 'local-sim-pd', ready): the "
        "two share it, which skews either one's benchmark numbers while both serve",
    ]
    # saved as it stands, its dry-run (API and page) says the same, and Deploy refuses
    assert operator_client.post(reverse("deployments:recipe-create"), values).status_code == 302
    copy = Recipe.objects.get(name="local-sim-pd-copy")
    assert operator_api.get(f"/api/recipes/{copy.pk}/dry-run/").json()["plan"]["warnings"] == shown
    assert _warnings(operator_client.get(reverse("deployments:recipe-dry-run", args=[copy.pk]))) == shown
    assert operator_api.post("/api/deployments/", {"recipe": copy.pk}, format="json").status_code == 409


def test_the_edit_forms_preview_leaves_out_the_recipes_own_deployment(operator_client, source):
    values = _form_values(operator_client.get(reverse("deployments:recipe-edit", args=[source.pk])))

    preview = operator_client.post(reverse("deployments:recipe-validate") + f"?recipe={source.pk}", values)

    assert 'id="validate-ok"' in preview.content.decode()
    assert _warnings(preview) == []


def test_a_preview_on_a_free_node_has_no_such_warning(operator_client, source):
    values = _form_values(operator_client.get(reverse("deployments:recipe-create") + f"?from={source.pk}"))
    values["node"] = cpu_node_create(name="other-box").pk

    preview = operator_client.post(reverse("deployments:recipe-validate"), values)

    assert 'id="validate-ok"' in preview.content.decode()
    # No port or CPU held there; other-box is not this host, so its loopback router is said to be out of reach.
    assert _warnings(preview) == [
        "the entry URL http://127.0.0.1:31080 is loopback on node 'other-box': it answers only there, so clients on "
        "this host, a sweep included, cannot reach it; bind the router role's host to 0.0.0.0 or to the node's own "
        "address"]
