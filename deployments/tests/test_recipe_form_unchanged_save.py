"""A recipe's edit form saved with nothing changed writes no version and no history row, and says
so, never "saved as version N" for a save that did not happen; a changed save still records its
version."""
from __future__ import annotations

import pytest
from django.urls import reverse

from deployments import services
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]


def _form_values(response) -> dict:
    form = response.context["form"]
    return {bf.html_name: bf.value() for bf in form if bf.value() is not None}


@pytest.fixture
def recipe(operator) -> Recipe:
    example = example_recipe("local-sim-single")
    return services.recipe_create(user=operator, name="unchanged-sim", description="", engine="sim",
                                  topology="single", node=cpu_node_create(), spec=example["spec"])


def test_an_unchanged_save_makes_no_version_and_says_nothing_changed(operator_client, recipe):
    before = (recipe.version, recipe.history.count())
    url = reverse("deployments:recipe-edit", args=[recipe.pk])
    values = _form_values(operator_client.get(url))

    response = operator_client.post(url, values, follow=True)

    assert response.redirect_chain == [(reverse("deployments:recipe-detail", args=[recipe.pk]), 302)]
    said = [str(m) for m in response.context["messages"]]
    assert said == [f"Recipe unchanged-sim is unchanged: nothing was saved and no new version was made "
                    f"(still version {before[0]})."]
    page = response.content.decode()
    assert said[0] in page
    assert "saved as version" not in page
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.history.count()) == before


def test_a_changed_save_still_records_its_version(operator_client, recipe):
    url = reverse("deployments:recipe-edit", args=[recipe.pk])
    values = {**_form_values(operator_client.get(url)), "description": "now described"}

    response = operator_client.post(url, values, follow=True)

    row = Recipe.objects.get(pk=recipe.pk)
    assert row.version == recipe.version + 1 and row.description == "now described"
    assert f"Recipe unchanged-sim saved as version {row.version}." in response.content.decode()
    assert "nothing was saved" not in response.content.decode()
