"""Every list endpoint pages with ``?limit=`` / ``?offset=``; values that are not whole numbers in
range are a 400 naming the parameter, not a silently different page."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create, recipe_row_create


@pytest.mark.django_db
@pytest.mark.parametrize("query, name", [("limit=abc", "limit"), ("limit=0", "limit"), ("limit=-1", "limit"),
                                         ("limit=1.5", "limit"), ("offset=-5", "offset"), ("offset=abc", "offset"),
                                         ("limit=%C2%B2", "limit")])
def test_a_page_parameter_that_is_not_a_whole_number_in_range_is_a_400(viewer_api, query, name):
    for url in ("/api/recipes/", "/api/deployments/", "/api/runs/", "/api/kernel-jobs/"):
        answer = viewer_api.get(f"{url}?{query}")
        assert answer.status_code == 400, (url, query, answer.content)
        [message] = answer.json()[name]
        bounds = "between 0 and 999999999999999" if name == "offset" else ">= 1"
        assert message.startswith(f"must be a whole number {bounds}, got "), message


@pytest.mark.django_db
def test_pages_in_range_still_page_and_a_large_limit_is_cut(viewer_api):
    node = cpu_node_create()
    for i in range(3):
        recipe_row_create(node=node, name=f"r{i}")
    page = viewer_api.get("/api/recipes/?limit=2&offset=1").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["previous"] is not None
    assert len(viewer_api.get("/api/recipes/?limit=100000").json()["results"]) == 3
    assert len(viewer_api.get("/api/recipes/?limit=&offset=").json()["results"]) == 3


@pytest.mark.django_db
@pytest.mark.parametrize("query, name", [("limit=1&limit=2", "limit"), ("offset=0&offset=5", "offset")])
def test_a_page_parameter_given_twice_is_a_400_not_the_last_value(viewer_api, query, name):
    for url in ("/api/recipes/", "/api/deployments/", "/api/runs/", "/api/kernel-jobs/"):
        answer = viewer_api.get(f"{url}?{query}")
        assert answer.status_code == 400, (url, query, answer.content)
        [message] = answer.json()[name]
        assert message.startswith("is given 2 times (") and message.endswith("): give it once"), message


@pytest.mark.django_db
def test_an_offset_past_the_largest_one_read_is_a_400_that_says_the_maximum(viewer_api):
    for url in ("/api/recipes/", "/api/deployments/", "/api/runs/", "/api/kernel-jobs/"):
        answer = viewer_api.get(f"{url}?offset=99999999999999999999999")
        assert answer.status_code == 400, (url, answer.content)
        assert answer.json() == {
            "offset": ["must be a whole number between 0 and 999999999999999, got '99999999999999999999999'"]}
        assert viewer_api.get(f"{url}?offset=1000000000000000").json() == {
            "offset": ["must be a whole number between 0 and 999999999999999, got '1000000000000000'"]}
        last = viewer_api.get(f"{url}?offset=999999999999999")
        assert last.status_code == 200 and last.json()["results"] == []


@pytest.mark.django_db
def test_a_limit_of_any_size_is_cut_to_the_largest_page(viewer_api):
    node = cpu_node_create()
    for i in range(3):
        recipe_row_create(node=node, name=f"r{i}")
    for limit in ("99999999999999999999999", "0000000000000000000002"):
        page = viewer_api.get(f"/api/recipes/?limit={limit}")
        assert page.status_code == 200, page.content
    assert len(viewer_api.get("/api/recipes/?limit=99999999999999999999999").json()["results"]) == 3
    assert len(viewer_api.get("/api/recipes/?limit=0000000000000000000002").json()["results"]) == 2


@pytest.mark.django_db
def test_both_bad_page_parameters_are_named_in_one_answer(viewer_api):
    for url in ("/api/recipes/", "/api/deployments/", "/api/runs/", "/api/kernel-jobs/"):
        answer = viewer_api.get(f"{url}?limit=abc&offset=-1")
        assert answer.status_code == 400, (url, answer.content)
        assert answer.json() == {"limit": ["must be a whole number >= 1, got 'abc'"],
                                 "offset": ["must be a whole number between 0 and 999999999999999, got '-1'"]}, url
    past = viewer_api.get("/api/runs/?limit=0&offset=10000000000000000").json()
    assert past["limit"] == ["must be a whole number >= 1, got '0'"]
    assert past["offset"] == ["must be a whole number between 0 and 999999999999999, got '10000000000000000'"]
