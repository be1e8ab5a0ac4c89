"""Every problem of a query is named in one 400, on every list endpoint and read alike
(controlplane.drf_defaults.query_problems): a key not taken, a key given twice, a filter given empty,
a value of the wrong type or outside its choices, a bad limit or offset. A 400 that named the first
kind alone would have the client fix one problem, resend, and meet the next."""
from __future__ import annotations

import pytest

UNKNOWN = "unknown field '{key}'; allowed: {allowed}"
LIMIT_0 = ["must be a whole number >= 1, got '0'"]
NOT_AN_ID = ["must be a whole number between 1 and 2147483647, got 'abc'"]


def _empty(key: str) -> list[str]:
    return [f"filter '{key}' is empty: give a value or leave it out"]


def test_an_empty_filter_does_not_hide_a_bad_value(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?status=&sweep=abc")
    assert answer.status_code == 400
    assert answer.json() == {"status": _empty("status"), "sweep": NOT_AN_ID}


def test_an_unknown_key_does_not_hide_a_bad_value_or_a_bad_limit(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&limit=0&foo=1")
    assert answer.status_code == 400
    allowed = "sweep, source, status, order, limit, offset, format"
    assert answer.json() == {"foo": [UNKNOWN.format(key="foo", allowed=allowed)], "sweep": NOT_AN_ID, "limit": LIMIT_0}


def test_a_bad_value_does_not_hide_a_bad_limit(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&limit=0&offset=-1")
    assert answer.status_code == 400
    assert answer.json() == {"sweep": NOT_AN_ID, "limit": LIMIT_0,
                             "offset": ["must be a whole number >= 0, got '-1'"]}


def test_a_key_given_twice_does_not_hide_the_others(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?sweep=abc&sweep=2&limit=0&status=x&foo=1")
    assert answer.status_code == 400
    body = answer.json()
    assert body["sweep"] == ["is given 2 times (abc, 2): give it once"]
    assert body["limit"] == LIMIT_0
    assert body["status"] == ["must be one of running, done, failed, cancelled; got 'x'"]
    assert set(body) == {"sweep", "limit", "status", "foo"}


#: Each list endpoint with a filter given empty, a filter with a bad value, a bad limit or offset
#: and an unknown key, and the keys the 400 must name.
LISTS = [
    ("/api/recipes/?engine=nope&topology=&limit=abc&foo=1", {"engine", "topology", "limit", "foo"}),
    ("/api/deployments/?recipe=abc&status=&offset=-1&foo=1", {"recipe", "status", "offset", "foo"}),
    ("/api/processes/?deployment=abc&role=&limit=0&foo=1", {"deployment", "role", "limit", "foo"}),
    ("/api/sweeps/?deployment=abc&status=&limit=0&foo=1", {"deployment", "status", "limit", "foo"}),
    ("/api/runs/?sweep=abc&status=&limit=0&foo=1", {"sweep", "status", "limit", "foo"}),
    ("/api/kernel-jobs/?status=bogus&package=&limit=0&foo=1", {"status", "package", "limit", "foo"}),
    ("/api/kernel-best/?batch=abc&device=&limit=0&foo=1", {"batch", "device", "limit", "foo"}),
    ("/api/nodes/?limit=0&foo=1", {"limit", "foo"}),
    ("/api/kernel-packages/?offset=x&foo=1", {"offset", "foo"}),
]


@pytest.mark.parametrize("url, keys", LISTS)
def test_every_list_names_every_problem_of_its_query_at_once(viewer_api, rows, url, keys):
    answer = viewer_api.get(url)
    assert answer.status_code == 400, (url, answer.content)
    assert set(answer.json()) == keys, (url, answer.json())


@pytest.mark.parametrize("url, keys", [
    ("/api/runs/{run}/records/?limit=0&offset=abc&foo=1", {"limit", "offset", "foo"}),
    ("/api/recipes/{recipe}/versions/?limit=0&foo=1", {"limit", "foo"}),
    ("/api/deployments/{deployment}/events/?limit=0&offset=x&foo=1", {"limit", "offset", "foo"}),
    ("/api/deployments/{deployment}/telemetry/?since=abc&until=&foo=1", {"since", "until", "foo"}),
    ("/api/recipes/{recipe}/diff/?a=abc&b=1&b=2", {"a", "b"}),
    ("/api/kernel-whatif/?sweep=abc&share=&foo=1", {"sweep", "share", "foo"}),
    ("/api/kernel-whatif/?sweep=1&sweep=2&share=abc&foo=1", {"sweep", "share", "foo"}),
])
def test_other_reads_name_every_problem_at_once_too(viewer_api, rows, url, keys):
    answer = viewer_api.get(url.format(**rows))
    assert answer.status_code == 400, (url, answer.content)
    assert set(answer.json()) == keys, (url, answer.json())


def test_a_key_left_out_is_named_once_the_querys_own_problems_are_gone(viewer_api, rows):
    url = f"/api/recipes/{rows['recipe']}/diff/"
    # an empty a is named alone: the b left out is the diff's to name, once a is given
    assert viewer_api.get(f"{url}?a=").json() == {"a": ["query parameter 'a' is empty: give a value or leave it out"]}
    assert "b" in viewer_api.get(f"{url}?a=1").json()


def test_a_good_query_still_answers(viewer_api, rows):
    answer = viewer_api.get(f"/api/runs/?sweep={rows['sweep']}&status=done&limit=1&offset=0")
    assert answer.status_code == 200 and answer.json()["count"] == 1
