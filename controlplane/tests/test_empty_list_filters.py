"""A list filter given empty (``?status=``, a script whose variable was unset) is a 400 naming the
filter, on every list endpoint alike (controlplane.drf_defaults.empty_filter_errors), never read as
left out, which would answer with every row. Paging (``limit``, ``offset``), ``format`` and the runs'
``order`` keep taking an empty value as their default; unknown keys stay refused as unknown."""
from __future__ import annotations

import pytest

from controlplane.api_urls import router
from controlplane.drf_defaults import ORDER_KEYS, PAGE_KEYS, declared_query_keys

#: Every filter of every list endpoint, with a value it takes.
FILTERS = {
    "/api/recipes/": {"engine": "sim", "topology": "single", "node": "cpu-box"},
    "/api/deployments/": {"recipe": "{recipe}", "recipe_name": "r1", "status": "ready"},
    "/api/processes/": {"deployment": "{deployment}", "role": "decode"},
    "/api/sweeps/": {"deployment": "{deployment}", "status": "done", "model": "m"},
    "/api/runs/": {"sweep": "{sweep}", "source": "measured", "status": "done"},
    "/api/kernel-jobs/": {"package": "toy_attn", "status": "done", "node": "h200-box"},
    "/api/kernel-best/": {"package": "toy_attn", "device": "H200", "shape": "small", "batch": "1"},
}
CASES = [(url, key) for url, keys in FILTERS.items() for key in keys]


def _message(key: str) -> str:
    return f"filter '{key}' is empty: give a value or leave it out"


def test_the_table_holds_every_filter_of_every_list_endpoint():
    found = {}
    for prefix, viewset, _basename in router.registry:
        view = viewset()
        view.action = "list"
        if "list" in getattr(viewset, "query_keys_reported_by_action", ()):
            continue   # judges its whole query itself (the what-if projection)
        keys = [k for k in declared_query_keys(view) if k not in (*PAGE_KEYS, "format", *ORDER_KEYS)]
        if keys:
            found[f"/api/{prefix}/"] = keys
    assert found == {url: list(keys) for url, keys in FILTERS.items()}


@pytest.mark.parametrize("url, key", CASES)
def test_a_filter_given_empty_is_a_400_naming_it(viewer_api, rows, url, key):
    answer = viewer_api.get(f"{url}?{key}=")
    assert answer.status_code == 400, (url, key, answer.content)
    assert answer.json() == {key: [_message(key)]}


@pytest.mark.parametrize("url, key", CASES)
def test_the_same_filter_given_a_value_is_taken(viewer_api, rows, url, key):
    value = FILTERS[url][key].format(**rows)
    answer = viewer_api.get(url, {key: value})
    assert answer.status_code == 200, (url, key, answer.content)
    assert "results" in answer.json()


@pytest.mark.parametrize("url", list(FILTERS))
def test_every_empty_filter_is_named_at_once_beside_the_others_problems(viewer_api, rows, url):
    keys = list(FILTERS[url])
    query = "&".join(f"{k}=" for k in keys)
    answer = viewer_api.get(f"{url}?{query}&limit=2")
    assert answer.status_code == 400
    assert answer.json() == {k: [_message(k)] for k in keys}
    # with an unknown key, and with a key given twice: one 400 naming each
    answer = viewer_api.get(f"{url}?{keys[0]}=&bogus=1")
    assert answer.status_code == 400
    assert answer.json()[keys[0]] == [_message(keys[0])]
    assert answer.json()["bogus"][0].startswith("unknown field 'bogus'; allowed: ")
    answer = viewer_api.get(f"{url}?{keys[0]}=&{keys[-1]}=a&{keys[-1]}=b")
    assert answer.status_code == 400
    assert answer.json() == {keys[0]: [_message(keys[0])], keys[-1]: ["is given 2 times (a, b): give it once"]}


@pytest.mark.parametrize("url", [*FILTERS, "/api/nodes/", "/api/secrets/", "/api/kernel-packages/"])
def test_paging_and_format_given_empty_keep_their_defaults(admin_api, rows, url):
    answer = admin_api.get(f"{url}?limit=&offset=&format=")
    assert answer.status_code == 200, (url, answer.content)
    assert set(answer.json()) == {"count", "next", "previous", "results"}


def test_the_runs_order_given_empty_keeps_the_default_order(viewer_api, rows):
    answer = viewer_api.get("/api/runs/?order=")
    assert answer.status_code == 200, answer.content
    assert [r["id"] for r in answer.json()["results"]] == [rows["run"]]


def test_an_empty_value_of_a_key_the_list_does_not_take_is_named_as_unknown(viewer_api, rows):
    answer = viewer_api.get("/api/nodes/?gpu=")
    assert answer.status_code == 400
    assert answer.json() == {"gpu": ["unknown field 'gpu'; allowed: limit, offset, format"]}


def test_a_list_that_judges_its_whole_query_keeps_its_own_words(viewer_api, rows):
    # the what-if projection reports every problem of its query itself: a value it cannot read in
    # its own words, a parameter given empty in the words every other read uses
    answer = viewer_api.get("/api/kernel-whatif/?sweep=x&speedup=2")
    assert answer.status_code == 400
    assert answer.json() == {"sweep": ["must be a whole number between 1 and 2147483647, got 'x'"]}
    answer = viewer_api.get("/api/kernel-whatif/?sweep=&speedup=2")
    assert answer.status_code == 400
    assert answer.json() == {"sweep": ["query parameter 'sweep' is empty: give a value or leave it out"]}


def test_the_role_is_checked_first(anon_api, outsider_api, rows):
    assert anon_api.get("/api/deployments/?status=").status_code == 401
    assert outsider_api.get("/api/deployments/?status=").status_code == 403
