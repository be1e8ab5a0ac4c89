"""The deployments list shows 20 deployments a page (``?page=N``), newest first, with previous and
next links and "page X of Y"; a page number that names no page is a 404 saying why, as the
benchmarks index does (:mod:`controlplane.paging`)."""
from __future__ import annotations

import re

import pytest

from benchmarks.tests.page_support import logged_in_client
from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployments(db) -> list[int]:
    """45 stopped deployments of one recipe; their ids, newest first."""
    recipe = recipe_row_create(node=cpu_node_create())
    made = [Deployment.objects.create(recipe=recipe, recipe_version=1, node=recipe.node,
                                      status=DeploymentStatus.STOPPED) for _ in range(45)]
    return [d.pk for d in reversed(made)]


def listed(html: str) -> list[int]:
    return [int(x) for x in re.findall(r"<tr>\s*<td>(\d+)</td>", html)]


def test_each_page_lists_20_deployments_newest_first_with_its_links(viewer, deployments):
    client = logged_in_client(viewer)
    first = client.get("/deployments/").content.decode()
    assert listed(first) == deployments[:20]
    assert "page 1 of 3 (45 deployments)" in first
    assert 'href="?page=2#deployments" rel="next"' in first and 'rel="prev"' not in first
    middle = client.get("/deployments/?page=2").content.decode()
    assert listed(middle) == deployments[20:40]
    assert 'href="?page=1#deployments" rel="prev"' in middle and 'href="?page=3#deployments" rel="next"' in middle
    last = client.get("/deployments/?page=3").content.decode()
    assert listed(last) == deployments[40:]
    assert "page 3 of 3 (45 deployments)" in last and 'rel="next"' not in last


@pytest.mark.parametrize("query, words", [
    ("page=999", "no page 999 of the deployments: there are 3 pages (45 deployments, 20 a page)"),
    ("page=0", "no page 0 of the deployments: there are 3 pages (45 deployments, 20 a page)"),
])
def test_a_page_that_names_no_page_is_a_404_saying_why(viewer, deployments, query, words):
    page = logged_in_client(viewer).get(f"/deployments/?{query}")
    assert page.status_code == 404
    assert words in page.content.decode()


@pytest.mark.parametrize("query, words", [
    ("page=abc", "page takes a page number (e.g. 2), got &#x27;abc&#x27;; there are 3 pages (45 deployments, 20 a page)"),
    ("page=two", "page takes a page number (e.g. 2), got &#x27;two&#x27;; there are 3 pages"),
    ("page=1&page=2", "the parameter page is given 2 times (1, 2): give it once; there are 3 pages"),
])
def test_a_malformed_page_is_a_400_saying_why(viewer, deployments, query, words):
    page = logged_in_client(viewer).get(f"/deployments/?{query}")
    assert page.status_code == 400
    assert f"<h1>Bad request</h1>\n<p>{words}" in page.content.decode()


def test_no_deployments_is_one_empty_page_and_page_2_is_a_404(viewer):
    client = logged_in_client(viewer)
    assert client.get("/deployments/").status_code == 200
    missing = client.get("/deployments/?page=2")
    assert missing.status_code == 404
    assert "no page 2 of the deployments: there is 1 page (0 deployments, 20 a page)" in missing.content.decode()
