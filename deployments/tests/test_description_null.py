"""A recipe's and a secret's description that is empty is null in every API
answer, never ``""`` (the list, the detail, a write's answer, a recipe version and a diff), and a
body may give ``""`` or null for none: both are stored as no description. The schema marks the
field nullable (a kernel package's too, whose answer
``kernels/tests/test_kernel_absent_text_null.py`` checks)."""
from __future__ import annotations

import pytest

from deployments.models import Recipe, Secret
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 39123}}, "sim": {"profile": "demo-fast"}}


@pytest.mark.parametrize("given", ["", None, "absent"])
def test_a_recipe_without_a_description_answers_null_everywhere(admin_api, given):
    cpu_node_create(name="cpu-box")
    body = {"name": "plain", "engine": "sim", "topology": "single", "node": "cpu-box", "spec": SPEC}
    if given != "absent":
        body["description"] = given

    created = admin_api.post("/api/recipes/", body, format="json")

    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    assert Recipe.objects.get(pk=pk).description == ""
    assert created.json()["description"] is None
    assert admin_api.get(f"/api/recipes/{pk}/").json()["description"] is None
    assert [r["description"] for r in admin_api.get("/api/recipes/").json()["results"]] == [None]
    assert admin_api.get(f"/api/recipes/{pk}/versions/1/").json()["description"] is None


def test_a_recipe_description_set_and_cleared_with_null(admin_api):
    cpu_node_create(name="cpu-box")
    pk = admin_api.post("/api/recipes/", {"name": "plain", "engine": "sim", "topology": "single", "node": "cpu-box",
                                          "spec": SPEC, "description": "first"}, format="json").json()["id"]

    cleared = admin_api.patch(f"/api/recipes/{pk}/", {"description": None}, format="json")

    assert cleared.status_code == 200, cleared.json()
    assert cleared.json()["description"] is None
    assert Recipe.objects.get(pk=pk).description == ""
    diff = admin_api.get(f"/api/recipes/{pk}/diff/?a=1&b=2").json()["changes"]
    assert [c for c in diff if c["path"] == "description"] == [
        {"path": "description", "change": "changed", "old": "first", "new": None}]
    kept = admin_api.patch(f"/api/recipes/{pk}/", {"description": "again"}, format="json").json()
    assert kept["description"] == "again"


def test_a_description_of_another_type_is_still_refused(admin_api):
    cpu_node_create(name="cpu-box")
    refused = admin_api.post("/api/recipes/", {"name": "plain", "engine": "sim", "topology": "single",
                                               "node": "cpu-box", "spec": SPEC, "description": 5}, format="json")
    assert refused.status_code == 400
    assert refused.json()["description"] == ["must be a string, got the number 5"]


@pytest.mark.parametrize("given", ["", None])
def test_a_secret_without_a_description_answers_null(admin_api, given):
    created = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefghijklmnop", "description": given},
                             format="json")

    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    assert created.json()["description"] is None
    assert Secret.objects.get(pk=pk).description == ""
    assert admin_api.get(f"/api/secrets/{pk}/").json()["description"] is None
    assert [r["description"] for r in admin_api.get("/api/secrets/").json()["results"]] == [None]
    described = admin_api.patch(f"/api/secrets/{pk}/", {"description": "the hub token"}, format="json").json()
    assert described["description"] == "the hub token"
    cleared = admin_api.patch(f"/api/secrets/{pk}/", {"description": given}, format="json")
    assert cleared.status_code == 200 and cleared.json()["description"] is None
    assert Secret.objects.get(pk=pk).description == ""


def test_the_schema_marks_the_descriptions_nullable(viewer_api):
    schemas = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    for name in ("Recipe", "RecipeVersionDetail", "Secret", "Package"):
        assert schemas[name]["properties"]["description"].get("nullable") is True, name
    for name in ("RecipeWriteRequest", "SecretRequest", "PatchedSecretUpdateRequest"):
        assert schemas[name]["properties"]["description"].get("nullable") is True, name


@pytest.mark.django_db
def test_the_description_limit_is_documented_in_the_schema_and_enforced(admin_api):
    from pathlib import Path

    from deployments.examples import example_recipe

    docs = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    assert "free text of at most 4000 characters (a longer one is refused)" in docs
    schema = admin_api.get("/api/schema/?format=json").json()
    field = schema["components"]["schemas"]["RecipeWriteRequest"]["properties"]["description"]
    assert field["maxLength"] == 4000
    assert field["description"] == 'free text of at most 4000 characters; "" or null for none'
    cpu_node_create(name="local")
    payload = example_recipe("local-sim-single")
    payload["description"] = "x" * 4001
    refused = admin_api.post("/api/recipes/", payload, format="json")
    assert refused.status_code == 400
    assert "description" in refused.json()


def test_the_diff_page_shows_no_description_as_absent_not_as_empty_text(admin_api, admin_user, client):
    cpu_node_create(name="cpu-box")
    pk = admin_api.post("/api/recipes/", {"name": "plain", "engine": "sim", "topology": "single", "node": "cpu-box",
                                          "spec": SPEC}, format="json").json()["id"]
    admin_api.patch(f"/api/recipes/{pk}/", {"description": "now"}, format="json")
    assert [c for c in admin_api.get(f"/api/recipes/{pk}/diff/?a=1&b=2").json()["changes"]
            if c["path"] == "description"] == [{"path": "description", "change": "changed", "old": None, "new": "now"}]
    client.force_login(admin_user)
    page = client.get(f"/recipes/{pk}/diff/?a=1&b=2", HTTP_HX_REQUEST="true").content.decode()
    row = page[page.index('<td class="mono">description</td>'):]
    row = row[:row.index("</tr>")]
    assert "&quot;&quot;" not in row and '""' not in row
    assert '<td class="old"><span class="muted">—</span></td>' in row
    assert "&quot;now&quot;" in row


def test_the_admin_history_shows_no_description_as_the_diff_page_does(admin_api, admin_user, client):
    """Admin's History lists a description set where there was none, and one cleared, with ``—`` on
    the side that has none, as the recipe pages' diff shows it, never ``""``."""
    import html as html_lib
    import re

    cpu_node_create(name="cpu-box")
    pk = admin_api.post("/api/recipes/", {"name": "plain", "engine": "sim", "topology": "single", "node": "cpu-box",
                                          "spec": SPEC}, format="json").json()["id"]
    admin_api.patch(f"/api/recipes/{pk}/", {"description": "form edit"}, format="json")
    admin_api.patch(f"/api/recipes/{pk}/", {"description": None}, format="json")
    assert Recipe.objects.get(pk=pk).version == 3
    client.force_login(admin_user)
    page = client.get(f"/admin/deployments/recipe/{pk}/history/").content.decode()
    changes = [re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", item))).strip()
               for item in re.findall(r"<li>\s*<strong>.*?</li>", page, flags=re.S)]
    assert changes == ['description: "form edit" → —', 'description: — → "form edit"']
    for a, b in ((1, 2), (2, 3)):
        diff = client.get(f"/recipes/{pk}/diff/?a={a}&b={b}", HTTP_HX_REQUEST="true").content.decode()
        assert '<span class="muted">—</span>' in diff and "&quot;form edit&quot;" in diff
