"""The form's Validate button applies every check Save applies (one function,
services.recipe_content_validate): a description over the limit is reported by both, and the
node's CPUs are judged next to the role's other errors, a description too long included."""
from __future__ import annotations

import html as html_lib
import json

import pytest

from deployments.examples import example_recipe
from deployments.models import Node, NumaNode, Recipe
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

LONG = "x" * 5000
CPUS_MISSING = "CPUs 2-999 do not exist on node local (it has 0-1)"


@pytest.fixture
def node(db):
    """The demo's local host: 2 CPUs on one NUMA node."""
    node = Node.objects.create(name="local", hostname="local", cpu_count=2, memory_total_bytes=8 * 2**30, tools={})
    NumaNode.objects.create(node=node, index=0, cpus="0-1", memory_total_bytes=8 * 2**30)
    return node


@pytest.fixture
def recipe(node):
    ex = example_recipe("local-sim-single")
    return Recipe.objects.create(name=ex["name"], description=ex["description"], engine="sim", topology="single",
                                 node=node, spec=ex["spec"], version=1)


def _data(node, spec: dict, **extra) -> dict:
    ex = example_recipe("local-sim-single")
    return {"name": ex["name"], "description": ex["description"], "engine": "sim", "topology": "single",
            "node": node.pk, "spec": json.dumps(spec, indent=2), **extra}


def _page(response) -> str:
    return html_lib.unescape(response.content.decode())


def test_validate_refuses_a_description_save_refuses_on_the_edit_and_create_forms(operator_client, node, recipe):
    spec = example_recipe("local-sim-single")["spec"]
    edit = _data(node, spec, description=LONG, expected_version="1")
    validated = _page(operator_client.post("/recipes/validate/", edit))
    assert "invalid" in validated and "Dry-run preview" not in validated
    assert "<li><code>description</code>: Use at most 4000 characters; got 5000.</li>" in validated
    saved = operator_client.post(f"/recipes/{recipe.pk}/edit/", edit)
    assert saved.status_code == 400
    assert "Use at most 4000 characters; got 5000." in _page(saved)

    create = _data(node, spec, name="another-one", description=LONG)
    validated = _page(operator_client.post("/recipes/validate/", create))
    assert "<li><code>description</code>: Use at most 4000 characters; got 5000.</li>" in validated
    created = operator_client.post("/recipes/new/", create)
    assert created.status_code == 400 and "Use at most 4000 characters; got 5000." in _page(created)
    assert not Recipe.objects.filter(name="another-one").exists()

    # At the limit both agree the other way: Validate previews, Save saves.
    at_limit = _data(node, spec, description="y" * 4000, expected_version="1")
    assert "<span class=\"tag ok\">valid</span> Dry-run preview" in _page(operator_client.post("/recipes/validate/",
                                                                                              at_limit))
    assert operator_client.post(f"/recipes/{recipe.pk}/edit/", at_limit).status_code == 302
    recipe.refresh_from_db()
    assert (recipe.version, len(recipe.description)) == (2, 4000)


@pytest.mark.parametrize("description", ["", LONG], ids=["description-fine", "description-too-long"])
def test_every_error_of_the_role_shows_at_once_with_the_cpus_the_node_lacks(operator_client, node, recipe,
                                                                             description):
    spec = json.loads(json.dumps(example_recipe("local-sim-single")["spec"]))
    spec["startup_timeout_s"] = -1
    spec["roles"]["single"].update({"tp": "abc", "port": -5, "cpus": "0-999"})
    data = _data(node, spec, expected_version="1", **({"description": description} if description else {}))
    expected = [
        "<li><code>spec.roles.single.tp</code>: must be an integer, got 'abc'</li>",
        f"<li><code>spec.roles.single.cpus</code>: {CPUS_MISSING}</li>",
        "<li><code>spec.roles.single.port</code>: must be between 1024 and 65535, got -5</li>",
        "<li><code>spec.startup_timeout_s</code>: must be between 1 and 86400, got -1</li>",
    ]
    saved = operator_client.post(f"/recipes/{recipe.pk}/edit/", data)
    validated = operator_client.post("/recipes/validate/", data)
    assert saved.status_code == 400
    for page in (_page(saved), _page(validated)):
        for line in expected:
            assert line in page
        assert ("Use at most 4000 characters; got 5000." in page) == bool(description)
    recipe.refresh_from_db()
    assert recipe.version == 1
