"""A page form that creates or changes something refuses a single-valued field given twice, as
the API does: the sweep form (``deployment=1&deployment=2``, ``concurrency=1&concurrency=2``),
the recipe form (create, edit and Validate), and the import form (a file given twice). Nothing is
created and the form comes back with status 400 naming the field and its values."""
from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils.html import escape

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from deployments.choices import DeploymentStatus
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture


@pytest.fixture
def two_deployments(db):
    node = cpu_node_create()
    recipes = [recipe_row_create(node=node, name=f"local-sim-{n}", spec={"sim": {"gpus_modelled": 4}}) for n in (1, 2)]
    return [deployment_row_create(recipe=recipe, status=DeploymentStatus.READY) for recipe in recipes]


def _html(response) -> str:
    return response.content.decode()


def test_it_refuses_a_sweep_form_naming_two_deployments(operator_client, two_deployments):
    one, two = two_deployments
    body = f"deployment={one.pk}&deployment={two.pk}&concurrency=1&lengths=64:64&requests=2"
    response = operator_client.post(reverse("benchmarks:sweep-create"), body,
                                    content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert escape(f"deployment is given 2 times ({one.pk}, {two.pk}): give it once.") in _html(response)
    assert not BenchmarkSweep.objects.exists()


def test_it_refuses_a_sweep_form_giving_a_field_twice_and_shows_it_on_the_form(operator_client, two_deployments):
    one = two_deployments[0]
    body = f"deployment={one.pk}&concurrency=1&concurrency=2&lengths=64:64&requests=2&requests=3"
    response = operator_client.post(reverse("benchmarks:sweep-create"), body,
                                    content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    html = _html(response)
    assert "Start sweep" in html   # the form itself, re-rendered
    assert escape("concurrency is given 2 times (1, 2): give it once.") in html
    assert escape("requests is given 2 times (2, 3): give it once.") in html
    assert not BenchmarkSweep.objects.exists()


@pytest.fixture
def seed_node(db):
    return node_register(facts=seed_node_facts())


def _recipe_body(node, **repeats: list[str]) -> str:
    ex = example_recipe("seed-v4-flash-tp4")
    pairs = [("name", ex["name"]), ("description", ""), ("engine", ex["engine"]),
             ("topology", ex["topology"]), ("node", str(node.pk)), ("spec", json.dumps(ex["spec"]))]
    pairs = [p for p in pairs if p[0] not in repeats] + [(k, v) for k, vs in repeats.items() for v in vs]
    return urlencode(pairs)


def test_it_refuses_a_recipe_form_giving_the_name_twice(operator_client, seed_node):
    body = _recipe_body(seed_node, name=["alpha", "beta"])
    response = operator_client.post(reverse("deployments:recipe-create"), body,
                                    content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert escape("name is given 2 times (alpha, beta): give it once.") in _html(response)
    assert not Recipe.objects.exists()
    validate = operator_client.post(reverse("deployments:recipe-validate"), body,
                                    content_type="application/x-www-form-urlencoded")
    # Validate lists each problem under its path, written once: "<code>name</code> is given …".
    assert "<code>name</code> " + escape("is given 2 times (alpha, beta): give it once.") in _html(validate)


def test_it_refuses_a_recipe_edit_giving_the_expected_version_twice(operator_client, operator, seed_node):
    ok = operator_client.post(reverse("deployments:recipe-create"), _recipe_body(seed_node),
                              content_type="application/x-www-form-urlencoded")
    assert ok.status_code == 302
    recipe = Recipe.objects.get()
    body = _recipe_body(seed_node, expected_version=["1", "1"], description=["a", "b"])
    response = operator_client.post(reverse("deployments:recipe-edit", args=[recipe.pk]), body,
                                    content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    html = _html(response)
    assert escape("expected_version is given 2 times (1, 1): give it once.") in html
    assert escape("description is given 2 times (a, b): give it once.") in html
    recipe.refresh_from_db()
    assert recipe.version == 1


def test_it_refuses_an_import_giving_the_file_twice(operator_client, db):
    files = [SimpleUploadedFile(name, b'{"x": 1}\n', content_type="application/json") for name in ("a.jsonl", "b.jsonl")]
    response = operator_client.post(reverse("benchmarks:run-import"), {"file": files})
    assert response.status_code == 400
    assert escape("file is given 2 times (a.jsonl, b.jsonl): give it once.") in _html(response)
    assert not BenchmarkRun.objects.exists()
