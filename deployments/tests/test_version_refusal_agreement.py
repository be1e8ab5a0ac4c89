"""A recipe version that is not one gets one message from the API, the recipe pages and
``manage.py dryrun --version``: the API's own (``must be a whole number between 1 and 2147483647,
got 'x'``), range included, from one function
(:func:`deployments.api.serializers.version_number`); the pages and the command put the
parameter's name before it, as the API keys it by that name."""
from __future__ import annotations

import html

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from deployments.api.serializers import version_number
from deployments.examples import example_recipe, local_node_facts_example
from deployments.nodes import node_register
from deployments.services import recipe_create, recipe_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def recipe_v2(operator):
    node = node_register(facts=local_node_facts_example(cpu_count=4))
    ex = example_recipe("local-sim-single")
    recipe = recipe_create(user=operator, name=ex["name"], description="", engine=ex["engine"],
                           topology=ex["topology"], node=node, spec=ex["spec"])
    return recipe_update(recipe=recipe, user=operator, spec=dict(recipe.spec, stop_grace_s=11))


def _page_message(client, name: str, recipe, query: str) -> str:
    response = client.get(reverse(f"deployments:{name}", args=[recipe.pk]) + "?" + query)
    assert response.status_code == 400, response.status_code
    text = response.content.decode()
    start = text.index("<h1>Bad request</h1>\n<p>") + len("<h1>Bad request</h1>\n<p>")
    return html.unescape(text[start:text.index("</p>", start)])


def _command_message(recipe, value: str) -> str:
    with pytest.raises(CommandError) as err:
        call_command("dryrun", recipe.name, "--version", value)
    assert err.value.returncode == 2
    return str(err.value)


@pytest.mark.parametrize("value, quoted", [("x", "'x'"), ("abc", "'abc'"), ("0", "'0'"), ("-1", "'-1'"),
                                           ("1.5", "'1.5'"), ("2147483648", "'2147483648'")])
def test_api_pages_and_dryrun_refuse_a_version_with_one_message(viewer_api, client, viewer, recipe_v2,
                                                                value, quoted) -> None:
    message = f"must be a whole number between 1 and 2147483647, got {quoted}"
    with pytest.raises(ValueError) as exc:
        version_number(value)
    assert str(exc.value) == message

    api_diff = viewer_api.get(f"/api/recipes/{recipe_v2.pk}/diff/?a={value}&b=2")
    assert api_diff.status_code == 400 and api_diff.json() == {"a": [message]}
    api_dry = viewer_api.get(f"/api/recipes/{recipe_v2.pk}/dry-run/?version={value}")
    assert api_dry.status_code == 400 and api_dry.json() == {"version": [message]}

    client.force_login(viewer)
    assert _page_message(client, "recipe-diff", recipe_v2, f"a={value}&b=2") == f"a {message}"
    assert _page_message(client, "recipe-history", recipe_v2, f"a={value}") == f"a {message}"
    assert _page_message(client, "recipe-detail", recipe_v2, f"version={value}") == f"version {message}"
    assert _page_message(client, "recipe-dry-run", recipe_v2, f"version={value}") == f"version {message}"

    assert _command_message(recipe_v2, value) == f"--version {message}"


def test_a_version_in_range_is_taken_everywhere(viewer_api, client, viewer, recipe_v2, capsys) -> None:
    assert version_number("2") == 2
    assert viewer_api.get(f"/api/recipes/{recipe_v2.pk}/diff/?a=1&b=2").status_code == 200
    client.force_login(viewer)
    assert client.get(reverse("deployments:recipe-diff", args=[recipe_v2.pk]) + "?a=1&b=2",
                      HTTP_HX_REQUEST="true").status_code == 200
    call_command("dryrun", recipe_v2.name, "--version", "1", "--json")
    assert '"version": 1' in capsys.readouterr().out
