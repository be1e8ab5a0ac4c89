"""Who may do what through the API: 401 without credentials, 403 without the role, and the
viewer < operator < admin ladder on nodes, recipes, secrets, deployments and processes."""
from __future__ import annotations

import pytest
from django.urls import include, path
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from rest_framework.authtoken.models import Token
from rest_framework.routers import DefaultRouter
from rest_framework.test import APIClient

from deployments.api.urls import register
from deployments.models import Node, Recipe, Secret
from deployments.tests.factories import (
    deployment_row_create,
    recipe_row_create,
    secret_row_create,
    seed_node_create,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def node() -> Node:
    return seed_node_create()


@pytest.fixture
def recipe(node) -> Recipe:
    return recipe_row_create(node=node)


@pytest.fixture
def secret() -> Secret:
    return secret_row_create()


READ_URLS = [
    "/api/nodes/",
    "/api/recipes/",
    "/api/deployments/",
    "/api/processes/",
]


@pytest.mark.parametrize("url", READ_URLS + ["/api/secrets/"])
def test_it_answers_401_with_www_authenticate_when_no_token_is_sent(anon_api, url):
    response = anon_api.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_it_answers_401_for_writes_without_credentials(anon_api, node):
    response = anon_api.post("/api/recipes/", {"name": "x"}, format="json")
    assert response.status_code == 401
    assert Recipe.objects.count() == 0


def test_it_answers_401_for_a_wrong_token(node):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0000000000000000000000000000000000000000")
    response = client.get("/api/nodes/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


def test_it_accepts_the_bearer_keyword(viewer, node):
    token, _ = Token.objects.get_or_create(user=viewer)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.key}")
    response = client.get("/api/nodes/")
    assert response.status_code == 200
    assert [n["name"] for n in response.json()["results"]] == ["seed-8gpu"]


def test_it_accepts_a_session_login(viewer, node):
    client = APIClient()
    assert client.login(username="vera-viewer", password="correct-horse-battery")
    response = client.get(f"/api/nodes/{node.pk}/")
    assert response.status_code == 200
    assert response.json()["name"] == "seed-8gpu"


def test_it_enforces_csrf_on_session_writes(operator, node):
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username="oscar-operator", password="correct-horse-battery")
    response = client.post("/api/recipes/", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


@pytest.mark.parametrize("url", READ_URLS)
def test_it_refuses_reads_to_a_user_without_a_role(outsider_api, recipe, url):
    response = outsider_api.get(url)
    assert response.status_code == 403
    assert response.json()["detail"] == "This needs the viewer role; your account has no role."


def test_it_refuses_an_outsider_the_detail_and_history_of_a_recipe(outsider_api, recipe):
    for url in (f"/api/recipes/{recipe.pk}/", f"/api/recipes/{recipe.pk}/versions/"):
        assert outsider_api.get(url).status_code == 403


@pytest.mark.parametrize("url", READ_URLS)
def test_it_lets_a_viewer_read(viewer_api, recipe, url):
    deployment_row_create(recipe=recipe)
    response = viewer_api.get(url)
    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_it_refuses_a_viewer_creating_a_recipe(viewer_api, node):
    response = viewer_api.post(
        "/api/recipes/",
        {"name": "tiny", "engine": "sim", "topology": "single", "node": node.name, "spec": {}},
        format="json",
    )
    assert response.status_code == 403
    assert Recipe.objects.count() == 0


def test_it_refuses_a_viewer_editing_reverting_or_deleting_a_recipe(viewer_api, recipe):
    base = f"/api/recipes/{recipe.pk}/"
    assert viewer_api.patch(base, {"description": "changed"}, format="json").status_code == 403
    assert viewer_api.put(base, {"description": "changed"}, format="json").status_code == 403
    assert viewer_api.post(base + "revert/", {"version": 1}, format="json").status_code == 403
    assert viewer_api.delete(base).status_code == 403
    recipe.refresh_from_db()
    assert (recipe.description, recipe.version) == ("", 1)


def test_it_lets_a_viewer_read_history_diff_and_dry_run_routes(viewer_api, recipe):
    # Reads are allowed; the stored (unvalidated) recipe has one version, so a diff of v1
    # with itself is empty.
    response = viewer_api.get(f"/api/recipes/{recipe.pk}/diff/?a=1&b=1")
    assert response.status_code == 200
    assert response.json() == {"a": 1, "b": 1, "changes": []}


@pytest.mark.parametrize("api_name", ["viewer_api", "operator_api"])
def test_it_keeps_secrets_away_from_non_admins(request, api_name, secret):
    api = request.getfixturevalue(api_name)
    assert api.get("/api/secrets/").status_code == 403
    assert api.get(f"/api/secrets/{secret.pk}/").status_code == 403
    assert api.post("/api/secrets/", {"name": "other", "value": "s3cr3t-value"}, format="json").status_code == 403
    assert api.patch(f"/api/secrets/{secret.pk}/", {"value": "new-value"}, format="json").status_code == 403
    assert api.delete(f"/api/secrets/{secret.pk}/").status_code == 403
    secret.refresh_from_db()
    assert secret.plaintext() == "hf_abcdefghijklmnopqrstuvwx"
    assert Secret.objects.count() == 1


def test_it_lets_an_admin_manage_secrets_without_ever_returning_a_value(admin_api):
    created = admin_api.post(
        "/api/secrets/", {"name": "hf-token", "value": "hf_zyxwvutsrqponmlkjihgfedc", "description": "HF"}, format="json"
    )
    assert created.status_code == 201
    body = created.json()
    assert "value" not in body
    assert body["name"] == "hf-token"
    pk = body["id"]

    listed = admin_api.get("/api/secrets/")
    assert "hf_zyxwvutsrqponmlkjihgfedc" not in listed.content.decode()
    assert [s["name"] for s in listed.json()["results"]] == ["hf-token"]

    patched = admin_api.patch(f"/api/secrets/{pk}/", {"value": "hf_newnewnewnewnewnewnewnew"}, format="json")
    assert patched.status_code == 200
    assert "value" not in patched.json()
    assert Secret.objects.get(pk=pk).plaintext() == "hf_newnewnewnewnewnewnewnew"

    assert admin_api.delete(f"/api/secrets/{pk}/").status_code == 204
    assert not Secret.objects.exists()


def test_it_refuses_a_duplicate_secret_name_with_a_field_error(admin_api, secret):
    response = admin_api.post("/api/secrets/", {"name": secret.name, "value": "another-value"}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["name"]


@pytest.mark.parametrize("api_name", ["viewer_api", "operator_api"])
def test_it_lets_only_admins_remove_nodes(request, api_name, node):
    api = request.getfixturevalue(api_name)
    assert api.delete(f"/api/nodes/{node.pk}/").status_code == 403
    assert Node.objects.filter(pk=node.pk).exists()


def test_it_lets_an_admin_remove_an_unused_node_but_not_one_with_recipes(admin_api, node):
    spare = seed_node_create(name="spare")
    recipe_row_create(node=node)
    assert admin_api.delete(f"/api/nodes/{spare.pk}/").status_code == 204
    response = admin_api.delete(f"/api/nodes/{node.pk}/")
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert list(Node.objects.values_list("name", flat=True)) == ["seed-8gpu"]


def test_it_has_no_write_routes_for_deployments_and_processes(admin_api, recipe):
    deployment = deployment_row_create(recipe=recipe)
    # Deploying is POST /api/deployments/ with a recipe; without one it is a 400, not a route miss.
    assert admin_api.post("/api/deployments/", {}, format="json").status_code == 400
    assert admin_api.delete(f"/api/deployments/{deployment.pk}/").status_code == 405
    assert admin_api.post("/api/processes/", {}, format="json").status_code == 405


def test_it_serves_the_openapi_schema_to_a_signed_in_user(viewer_api):
    response = viewer_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    for path in (
        "/api/recipes/",
        "/api/recipes/{id}/versions/",
        "/api/recipes/{id}/versions/{version}/",
        "/api/recipes/{id}/diff/",
        "/api/recipes/{id}/revert/",
        "/api/recipes/{id}/dry-run/",
        "/api/nodes/",
        "/api/secrets/",
        "/api/deployments/",
        "/api/processes/",
    ):
        assert path in paths, path
    create_400 = paths["/api/recipes/"]["post"]["responses"]["400"]
    assert "dotted field path" in create_400["description"]
    secret_props = schema["components"]["schemas"]["Secret"]["properties"]
    assert "value" not in secret_props
    assert "value" in schema["components"]["schemas"]["SecretRequest"]["properties"]


def test_it_refuses_the_schema_without_credentials(anon_api):
    assert anon_api.get("/api/schema/").status_code in (401, 403)


def test_it_generates_the_deployments_schema_without_warnings():
    router = DefaultRouter()
    register(router)
    GENERATOR_STATS.reset()
    generator = SchemaGenerator(patterns=[path("api/", include(router.urls))])
    with GENERATOR_STATS.silence():
        schema = generator.get_schema(request=None, public=True)
    assert schema["paths"]
    assert dict(GENERATOR_STATS._warn_cache) == {}
    assert dict(GENERATOR_STATS._error_cache) == {}


def test_it_generates_the_whole_projects_schema_without_errors_or_warnings():
    # Every app's API (recipes, sweeps, kernels, what-if...): a view the generator cannot describe
    # is silently left out of the schema, so its absence would go unnoticed without this.
    GENERATOR_STATS.reset()
    generator = SchemaGenerator()
    with GENERATOR_STATS.silence():
        schema = generator.get_schema(request=None, public=True)
    assert "/api/kernel-whatif/" in schema["paths"] and "/api/sweeps/" in schema["paths"]
    assert dict(GENERATOR_STATS._warn_cache) == {}
    assert dict(GENERATOR_STATS._error_cache) == {}
