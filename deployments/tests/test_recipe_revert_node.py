"""The revert page names the node the restored version is validated against: the version's own
node (a revert moves the recipe back to it), and says when that node no longer exists."""
from __future__ import annotations

import dataclasses
import html as html_lib
import re

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Node, Recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import recipe_create, recipe_update


@pytest.fixture
def moved(db, operator) -> Recipe:
    """v1 on node ``first``, v2 moved to node ``second``."""
    first = node_register(facts=dataclasses.replace(seed_node_facts(), name="first"))
    second = node_register(facts=dataclasses.replace(seed_node_facts(), name="second"))
    ex = example_recipe("seed-v4-flash-pd")
    recipe = recipe_create(user=operator, name="moves", engine=ex["engine"], topology=ex["topology"], node=first,
                           spec=ex["spec"])
    return recipe_update(recipe=recipe, user=operator, node=second)


def _said(client: Client, recipe: Recipe) -> str:
    page = client.get(reverse("deployments:recipe-revert", args=[recipe.pk, 1]))
    assert page.status_code == 200
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_lib.unescape(page.content.decode())))
    return text


def test_the_revert_page_names_the_version_s_node_not_the_current_one(operator, moved):
    client = Client()
    client.force_login(operator)
    assert moved.node.name == "second"
    text = _said(client, moved)
    assert ("The content is validated against v1's node, first, as it is now (the recipe is on second now and "
            "moves back).") in text
    assert "validated against node second" not in text


def test_the_revert_page_says_when_the_version_s_node_is_gone(operator, moved):
    client = Client()
    client.force_login(operator)
    Node.objects.filter(name="first").delete()
    text = _said(client, moved)
    assert "refused v1's node no longer exists, so this version cannot be restored." in text
    response = client.post(reverse("deployments:recipe-revert", args=[moved.pk, 1]), {"expected_version": "2"},
                           follow=True)
    assert "The node of version 1 no longer exists." in html_lib.unescape(response.content.decode())
