"""A user who may only view recipes (the viewer role) reads a recipe's admin change page as every
other model's (200, its fields shown read-only, no Save) and is refused sending it (403). The page
shows the name, description and spec as the edit form does: a stored secret's value or a
credential saved there before such text was refused is masked, never shown in clear."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.urls import reverse

from deployments.forms import spec_pretty
from deployments.models import Recipe
from deployments.tests.factories import (
    SIM_TINY_SPEC, STORED_BEFORE_VALUE, cpu_node_create, recipe_stored_before_create, signed_in_client,
)

pytestmark = pytest.mark.django_db

SPEC = SIM_TINY_SPEC
HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123"


def _shown(page: str) -> dict[str, str]:
    """Each read-only field of a change page, label to text as shown."""
    rows = re.findall(r'<label>([^<]*):</label>\s*<div class="readonly">(.*?)</div>', page, flags=re.S)
    return {label: html_lib.unescape(re.sub(r"<[^>]+>", "", value)) for label, value in rows}


def test_a_viewer_reads_a_recipe_s_change_page_and_cannot_send_it(viewer, db):
    recipe = Recipe.objects.create(name="t1a", description="first", engine="sim", topology="single",
                                   node=cpu_node_create(name="local"), spec=SPEC, version=1)
    client = signed_in_client(viewer)
    url = reverse("admin:deployments_recipe_change", args=[recipe.pk])
    response = client.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    shown = _shown(page)
    assert list(shown) == ["Name", "Description", "Engine", "Topology", "Node", "Spec", "Version", "Created by",
                           "Created at", "Updated at"]
    assert (shown["Name"], shown["Description"], shown["Node"], shown["Version"]) == ("t1a", "first", "local", "1")
    # as stored: PostgreSQL's jsonb keeps the keys in its own order, which the page shows
    assert json.loads(shown["Spec"]) == SPEC and shown["Spec"] == spec_pretty(Recipe.objects.get(pk=recipe.pk).spec)
    assert "<textarea" not in page and 'name="_save"' not in page
    response = client.post(url, {"name": "t1a", "description": "changed by a viewer", "engine": "sim",
                                 "topology": "single", "node": recipe.node_id, "spec": json.dumps(SPEC),
                                 "expected_version": 1})
    assert response.status_code == 403
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.description, row.spec) == (1, "first", SPEC)


def test_a_viewer_s_page_masks_what_the_edit_form_masks(viewer, admin_api):
    recipe = recipe_stored_before_create(admin_api)
    Recipe.objects.filter(pk=recipe.pk).update(description=f"pass {STORED_BEFORE_VALUE}, hub {HF_TOKEN}")
    response = signed_in_client(viewer).get(reverse("admin:deployments_recipe_change", args=[recipe.pk]))
    assert response.status_code == 200
    page = html_lib.unescape(response.content.decode())
    assert STORED_BEFORE_VALUE not in page and HF_TOKEN not in page
    shown = _shown(response.content.decode())
    assert shown["Description"] == "pass ***redacted***, hub hf_…(33 chars)"
    assert json.loads(shown["Spec"])["env"] == {"TZ": "***redacted***", "NOTE": "pass=***redacted***;"}
