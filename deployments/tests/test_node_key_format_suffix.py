"""A node name may hold dots, and every route takes a format suffix: ``/api/nodes/<key>/`` reads
its key by one rule. A node named the whole key wins (``a.json`` is that node when there is
one); otherwise a trailing ``.json``, ``.csv`` or ``.api``, in any case, is the format, as on every
other route; any other ending stays part of the name."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create


@pytest.fixture
def nodes(db):
    return {"local": cpu_node_create(name="local"), "a.json": cpu_node_create(name="a.json"),
            "a": cpu_node_create(name="a")}


def test_a_node_named_with_the_suffix_wins(viewer_api, nodes):
    answer = viewer_api.get("/api/nodes/a.json/")
    assert answer.status_code == 200 and answer.json()["name"] == "a.json"
    # a node "a" exists too: the exact name is still the one taken
    assert viewer_api.get("/api/nodes/a/").json()["name"] == "a"


def test_a_suffix_no_node_is_named_with_is_the_format(viewer_api, nodes):
    plain = viewer_api.get("/api/nodes/local/?format=json")
    for url in ("/api/nodes/local.json/", "/api/nodes/local.JSON/", "/api/nodes/local.json",
                f"/api/nodes/{nodes['local'].pk}.json/"):
        answer = viewer_api.get(url)
        assert answer.status_code == 200, (url, answer.content[:200])
        assert answer["Content-Type"].startswith("application/json") and answer.json() == plain.json(), url
    # the browsable API's format is one too, with an HTML Accept or not
    assert viewer_api.get("/api/nodes/local.api/")["Content-Type"].startswith("text/html")
    assert viewer_api.get("/api/nodes/local.json/", HTTP_ACCEPT="text/html")["Content-Type"].startswith(
        "application/json")


def test_a_suffix_is_judged_as_its_format_query(viewer_api, anon_api, nodes):
    # a node answers in no CSV: the 400 of ?format=csv, not a 404 for a node named local.csv
    answer = viewer_api.get("/api/nodes/local.csv/")
    assert answer.status_code == 400 and answer.json() == viewer_api.get("/api/nodes/local/?format=csv").json()
    # the format given twice, by the suffix and the query
    assert viewer_api.get("/api/nodes/local.json/?format=json").status_code == 400
    # signed out, the format is not judged before the sign-in is asked for
    assert anon_api.get("/api/nodes/local.csv/").status_code == 401


def test_another_ending_is_part_of_the_name(viewer_api, nodes):
    answer = viewer_api.get("/api/nodes/local.box/")
    assert (answer.status_code, answer.json()) == (404, {"detail": "no node with name 'local.box'"})


def test_a_404_for_a_key_read_with_a_suffix_names_what_was_asked(viewer_api, nodes):
    for url, said in (("/api/nodes/nosuch.json/", "no node with name 'nosuch.json' (nor 'nosuch')"),
                      ("/api/nodes/nosuch.JSON/", "no node with name 'nosuch.JSON' (nor 'nosuch')"),
                      ("/api/nodes/nosuch.json", "no node with name 'nosuch.json' (nor 'nosuch')"),
                      ("/api/nodes/nosuch.json/telemetry/", "no node with name 'nosuch.json' (nor 'nosuch')"),
                      ("/api/nodes/nosuch/telemetry.json", "no node with name 'nosuch'"),
                      ("/api/nodes/999.json/", "no node with name '999.json' (nor id 999)")):
        answer = viewer_api.get(url)
        assert (answer.status_code, answer.json()) == (404, {"detail": said}), url
    # a key with no suffix split off is named as it is
    answer = viewer_api.get("/api/nodes/nosuch/")
    assert (answer.status_code, answer.json()) == (404, {"detail": "no node with name 'nosuch'"})
