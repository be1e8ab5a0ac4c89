"""The sweep form takes its deployment from the link once: ``?deployment=1&deployment=2`` chose
no one deployment, so it is the picker again with status 400 naming the repeated parameter, as
``?deployment=abc`` is, never the form for the last one. The recipe form's ``?from=`` likewise."""
from __future__ import annotations

import html

import pytest
from django.urls import reverse

from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(db):
    return (sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="sim-a"),
            sim_deployment_create(base_url="http://127.0.0.1:9", recipe_name="sim-b"))


def test_a_deployment_given_twice_in_the_link_is_the_picker_with_a_400(client, operator, two):
    first, second = two
    client.force_login(operator)
    response = client.get(f'{reverse("benchmarks:sweep-create")}?deployment={first.pk}&deployment={second.pk}')
    body = response.content.decode()
    assert response.status_code == 400
    assert (f'<ul class="errorlist" id="form-errors"><li>deployment is given 2 times ({first.pk}, {second.pk}): '
            "give it once.</li></ul>") in body
    assert "<h1>New sweep <span" not in body  # the picker, not a form for either deployment
    assert f"Sweep deployment #{first.pk}" in body and f"Sweep deployment #{second.pk}" in body


def test_a_deployment_given_once_in_the_link_is_its_form(client, operator, two):
    first, _ = two
    client.force_login(operator)
    response = client.get(f'{reverse("benchmarks:sweep-create")}?deployment={first.pk}')
    assert response.status_code == 200
    assert f"deployment #{first.pk} sim-a</h1>" in response.content.decode()


def test_a_post_naming_no_deployment_with_it_twice_in_the_link_starts_nothing(client, operator, two):
    from benchmarks.models import BenchmarkSweep

    first, second = two
    client.force_login(operator)
    response = client.post(f'{reverse("benchmarks:sweep-create")}?deployment={first.pk}&deployment={second.pk}',
                           {"concurrency": "1", "lengths": "16:8", "requests": "2"})
    assert response.status_code == 400
    assert html.escape(f"deployment is given 2 times ({first.pk}, {second.pk}): give it once.") in (
        response.content.decode())
    assert not BenchmarkSweep.objects.exists()


def test_the_recipe_form_refuses_a_from_given_twice(client, operator, two):
    first, second = two
    client.force_login(operator)
    response = client.get(f'{reverse("deployments:recipe-create")}?from={first.recipe_id}&from={second.recipe_id}')
    assert response.status_code == 400
    assert (f"<h1>Bad request</h1>\n<p>from is given 2 times ({first.recipe_id}, {second.recipe_id}): give it once</p>"
            in response.content.decode())
    once = client.get(f'{reverse("deployments:recipe-create")}?from={first.recipe_id}')
    assert once.status_code == 200 and 'value="sim-a-copy"' in once.content.decode()
