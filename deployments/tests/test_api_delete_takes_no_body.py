"""``DELETE`` of a node, a recipe or a secret takes no body, as stop and cancel do: an empty one or
``{}`` deletes; a key (``{"force": true}``, a typo) is a 400 under its own name, judged before the
409 of a record still in use, and nothing is deleted."""
from __future__ import annotations

import pytest

from deployments.models import Node, Recipe, Secret
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = pytest.mark.django_db


def delete(api, url: str, body: str | None):
    if body is None:
        return api.delete(url)
    return api.generic("DELETE", url, body, content_type="application/json")


@pytest.fixture
def secret(admin_api) -> Secret:
    response = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefghijklmnop"}, format="json")
    assert response.status_code == 201, response.content
    return Secret.objects.get(name="hf-token")


def test_a_delete_with_a_key_is_refused_at_its_name_and_deletes_nothing(admin_api, secret):
    node = cpu_node_create(name="spare")
    recipe = recipe_row_create(node=cpu_node_create(name="other"))
    for url in (f"/api/nodes/{node.name}/", f"/api/recipes/{recipe.pk}/", f"/api/secrets/{secret.pk}/"):
        response = delete(admin_api, url, '{"force": true}')
        assert response.status_code == 400, (url, response.content)
        assert response.json() == {"force": ["unknown field 'force'; allowed: none"]}
    assert Node.objects.filter(name="spare").exists()
    assert Recipe.objects.filter(pk=recipe.pk).exists() and Secret.objects.filter(pk=secret.pk).exists()


def test_the_body_is_judged_before_a_node_in_use_is_refused(admin_api):
    node = cpu_node_create(name="busy")
    recipe_row_create(node=node)
    assert delete(admin_api, "/api/nodes/busy/", '{"force": true}').json() == {
        "force": ["unknown field 'force'; allowed: none"]}
    assert delete(admin_api, "/api/nodes/busy/", None).status_code == 409


@pytest.mark.parametrize("body", [None, "{}"])
def test_an_empty_body_or_an_empty_object_deletes(admin_api, secret, body):
    node = cpu_node_create(name="spare")
    recipe = recipe_row_create(node=cpu_node_create(name="other"))
    for url in (f"/api/nodes/{node.pk}/", f"/api/recipes/{recipe.pk}/", f"/api/secrets/{secret.pk}/"):
        response = delete(admin_api, url, body)
        assert response.status_code == 204, (url, response.content)
    assert not Node.objects.filter(name="spare").exists()
    assert not Recipe.objects.filter(pk=recipe.pk).exists() and not Secret.objects.exists()


def test_an_unknown_record_is_still_a_404_whatever_the_body(admin_api):
    assert delete(admin_api, "/api/recipes/424242/", '{"force": true}').status_code == 404
