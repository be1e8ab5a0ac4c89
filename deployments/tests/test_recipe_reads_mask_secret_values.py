"""Every read of a recipe masks a stored secret's value saved before it was refused, in every
spelling the redaction knows (as typed, base64, percent-encoded, JSON-escaped): in its spec, its
description and its history's change reasons, on both sides of a diff, for viewers as for admins.
Each read endpoint is one row of :data:`READS`; a new one is added there."""
from __future__ import annotations

import base64
import html
import json
import urllib.parse

import pytest
from django.test import Client

from controlplane.redaction import REDACTED
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import recipe_row_create, seed_node_create

pytestmark = pytest.mark.django_db

VALUE = "Super Secret/Value=1234"


def spellings(value: str) -> dict[str, str]:
    raw = value.encode()
    return {
        "plain": value,
        "base64": base64.b64encode(raw).decode(),
        "base64 unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64 url-safe": base64.urlsafe_b64encode(raw).decode(),
        "percent-encoded": urllib.parse.quote(value, safe=""),
        "percent-encoded plus": urllib.parse.quote_plus(value, safe=""),
        "JSON-escaped": json.dumps(value)[1:-1],
    }


SPELLINGS = spellings(VALUE)


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def stored(admin_api) -> Recipe:
    """A recipe of two versions written straight to the table (as saved before the checks):
    version 1 holds the value as typed, version 2 its base64 spelling (the diff's old and new
    differ), each version's description and change reason hold other spellings."""
    node = seed_node_create()
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    recipe = recipe_row_create(node=node, name="stored-before", topology="pd", engine="sglang",
                               description=f"pass {SPELLINGS['percent-encoded plus']}",
                               spec={**spec, "env": {"OMP_NUM_THREADS": VALUE, "NOTE": SPELLINGS["JSON-escaped"]}})
    recipe.spec = {**spec, "env": {"OMP_NUM_THREADS": SPELLINGS["base64"], "NOTE": SPELLINGS["percent-encoded"]}}
    recipe.description = f"now {VALUE}"
    recipe.version = 2
    recipe._change_reason = f"rotated {SPELLINGS['base64 url-safe']}"
    recipe.save()
    made = admin_api.post("/api/secrets/", {"name": "s3", "value": VALUE}, format="json")
    assert made.status_code == 201, made.json()
    return recipe


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


#: (name, URL of the recipe ``pk``, who reads it: "viewer" or "admin"), every read of a recipe. A
#: dry-run of a spec holding a stored secret's value is refused (400): its answer is a read too.
READS = [
    ("API detail", "/api/recipes/{pk}/", "viewer"),
    ("API list", "/api/recipes/", "viewer"),
    ("API versions", "/api/recipes/{pk}/versions/", "viewer"),
    ("API version 1", "/api/recipes/{pk}/versions/1/", "viewer"),
    ("API version 2", "/api/recipes/{pk}/versions/2/", "viewer"),
    ("API diff", "/api/recipes/{pk}/diff/?a=1&b=2", "viewer"),
    ("API reverse diff", "/api/recipes/{pk}/diff/?a=2&b=1", "viewer"),
    ("API dry-run", "/api/recipes/{pk}/dry-run/", "viewer"),
    ("API dry-run of version 1", "/api/recipes/{pk}/dry-run/?version=1", "viewer"),
    ("list page", "/recipes/", "viewer"),
    ("detail page", "/recipes/{pk}/", "viewer"),
    ("detail page of version 1", "/recipes/{pk}/?version=1", "viewer"),
    ("history page", "/recipes/{pk}/history/", "viewer"),
    ("diff page", "/recipes/{pk}/diff/?a=1&b=2", "viewer"),
    ("dry-run page", "/recipes/{pk}/dry-run/", "viewer"),
    ("edit page", "/recipes/{pk}/edit/", "admin"),
    ("copy page", "/recipes/new/?from={pk}", "admin"),
    ("admin list", "/admin/deployments/recipe/", "admin"),
    ("admin change page", "/admin/deployments/recipe/{pk}/change/", "admin"),
    ("admin history", "/admin/deployments/recipe/{pk}/history/", "admin"),
]


@pytest.mark.parametrize(("name", "url", "reader"), READS, ids=[r[0] for r in READS])
def test_no_read_of_a_recipe_shows_a_stored_secret_value(stored, viewer, admin_user, name, url, reader):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = _browser(viewer if reader == "viewer" else admin_user)

    response = client.get(url.format(pk=stored.pk), follow=True)

    assert response.status_code == (400 if name.startswith("API dry-run") else 200), (name, response.status_code)
    body = response.content.decode()
    for text in (body, html.unescape(body)):
        for spelling, form in SPELLINGS.items():
            assert form not in text, f"{name} shows the secret's value ({spelling})"
    if name.startswith("API diff"):
        assert REDACTED in body


def test_the_diff_api_masks_both_sides(stored, viewer_api):
    changes = viewer_api.get(f"/api/recipes/{stored.pk}/diff/?a=1&b=2").json()["changes"]
    by_path = {c["path"]: c for c in changes}
    assert by_path["spec.env.OMP_NUM_THREADS"]["old"] == REDACTED
    assert by_path["spec.env.OMP_NUM_THREADS"]["new"] == REDACTED
    assert by_path["description"] == {"path": "description", "change": "changed",
                                      "old": f"pass {REDACTED}", "new": f"now {REDACTED}"}
