"""The API's write endpoints take form-encoded and multipart bodies as DRF parses them (the
browsable API sends them) and judge them like JSON ones: never a 500."""
from __future__ import annotations

import pytest

from deployments.models import Secret
from deployments.tests.factories import cpu_node_create, recipe_row_create


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["form", "multipart"])
def test_form_and_multipart_bodies_are_judged_not_crashed_on(admin_api, fmt):
    content_type = "application/x-www-form-urlencoded" if fmt == "form" else None
    if fmt == "form":
        created = admin_api.generic("POST", "/api/secrets/",
                                    "name=form-secret&value=abcdefghijklmnop&description=from+a+form",
                                    content_type=content_type)
    else:
        created = admin_api.post("/api/secrets/", {"name": "form-secret", "value": "abcdefghijklmnop",
                                                   "description": "from a form"}, format="multipart")
    assert created.status_code == 201, created.content
    assert "abcdefghijklmnop" not in created.content.decode()
    # a form's fields are text: the API's texts, which a JSON body must send as strings, take them
    secret = Secret.objects.get(name="form-secret")
    assert (secret.plaintext(), secret.description) == ("abcdefghijklmnop", "from a form")

    recipe = recipe_row_create(node=cpu_node_create(name="formnode"))
    if fmt == "form":
        edited = admin_api.generic("PATCH", f"/api/recipes/{recipe.pk}/", "description=edited+by+form",
                                   content_type=content_type)
    else:
        edited = admin_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "edited by form"}, format="multipart")
    as_json = admin_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "edited by form"}, format="json")
    assert edited.status_code != 500
    assert (edited.status_code, edited.json()) == (as_json.status_code, as_json.json())

    bad = admin_api.post("/api/deployments/", {"recipe": "not-a-number"}, format="multipart")
    assert bad.status_code == 400 and "recipe" in bad.json()
