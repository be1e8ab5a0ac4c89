"""A recipe name of digits alone: refused on save (``manage.py sweep`` reads digits alone as a
deployment's id), and one saved before that rule is never swept in place of the deployment the
digits name, nor the other way round: the command refuses and says which id to give."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


def test_the_api_refuses_a_recipe_name_of_digits_alone(operator_api) -> None:
    body = {"name": "1", "engine": "sim", "topology": "single", "node": "local", "spec": {}}
    response = operator_api.post("/api/recipes/", body, format="json")
    assert response.status_code == 400
    assert response.json()["name"] == ["must not be digits alone, got '1': `manage.py sweep` reads digits alone as a "
                                       "deployment's id; add a letter, e.g. 'recipe-1'"]


def test_a_digit_named_recipe_saved_before_the_rule_is_an_ambiguity_the_command_names(operator_api) -> None:
    first = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="first")
    digits = sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name=str(first.pk))
    assert digits.pk != first.pk
    with pytest.raises(CommandError) as exc:
        call_command("sweep", str(first.pk), "--concurrency", "1", "--lengths", "8:8", "--requests", "1",
                     stdout=io.StringIO())
    assert str(exc.value) == (f"'{first.pk}' is deployment #{first.pk} and also the name of recipe '{first.pk}', "
                              f"deployed as #{digits.pk}; give that id ({digits.pk}) to sweep it, and rename the "
                              "recipe to end the ambiguity")
    assert not BenchmarkSweep.objects.exists()
