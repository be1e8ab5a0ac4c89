"""404 pages say in plain words what was not found: no exception class names, one final period."""
from __future__ import annotations

from django.test import Client

from deployments.tests.factories import cpu_node_create, recipe_row_create


def _page(user, path):
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 404, path
    return response.content.decode()


def test_a_404_page_says_what_was_not_found_in_plain_words(operator):
    body = _page(operator, "/kernels/jobs/999/")
    assert "<p>No kernel job #999.</p>" in body and "KernelJob" not in body and "given query" not in body
    assert "<code>/kernels/jobs/999/</code>" in body
    body = _page(operator, "/benchmarks/sweeps/abc/")
    assert "<p>No page at /benchmarks/sweeps/abc/.</p>" in body and "Resolver404" not in body
    assert "Address:" not in body
    body = _page(operator, "/kernels/packages/nope/")
    assert "<p>No kernel package &#x27;nope&#x27;.</p>" in body


def test_a_missing_recipe_version_is_said_with_one_period(operator):
    recipe = recipe_row_create(node=cpu_node_create())
    body = _page(operator, f"/recipes/{recipe.pk}/?version=99")
    assert f"<p>Recipe &#x27;{recipe.name}&#x27; has no version 99.</p>" in body and ".." not in body
