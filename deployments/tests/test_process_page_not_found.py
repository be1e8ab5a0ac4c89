"""A process's log pages (the tail partial and the download) answer a 404 that names what is
missing: the requested process, not the deployment's id, or that the process belongs to
another deployment."""
from __future__ import annotations

import html

import pytest
from django.test import Client

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def pages(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def two_deployments() -> tuple:
    recipe = recipe_row_create(node=cpu_node_create())
    first = deployment_row_create(recipe=recipe, status="stopped")
    second = deployment_row_create(recipe=recipe)
    return first, second


def _message(response) -> str:
    assert response.status_code == 404
    return html.unescape(response.content.decode())


@pytest.mark.parametrize("tail", ["log/download/", "log/"])
def test_it_names_the_missing_process_or_whose_it_is(pages, two_deployments, tail):
    first, second = two_deployments
    first_process = first.processes.get()
    missing = second.processes.get().pk + 1000
    text = _message(pages.get(f"/deployments/{first.pk}/processes/{missing}/{tail}"))
    assert f"No server process #{missing}." in text
    assert f"#{first.pk}." not in text
    text = _message(pages.get(f"/deployments/{second.pk}/processes/{first_process.pk}/{tail}"))
    assert f"Process #{first_process.pk} is not part of deployment #{second.pk}." in text
    text = _message(pages.get(f"/deployments/{second.pk + 50}/processes/{first_process.pk}/{tail}"))
    assert f"No deployment #{second.pk + 50}." in text
