"""An API 404 of an object the route names says what it is and how the route keys it, in the
API's wording, for a route keyed by name as for one keyed by id: ``no node with name 'nosuch'``,
``no benchmark run with id 999``, ``no benchmark run with id 'abc'`` for an id that is not a
number, never a Python class name ("No Node matches the given query."), a bare "Not found." nor an
id the route does not have."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("path", "detail"), [
    ("/api/nodes/nosuch/", "no node with name 'nosuch'"),
    ("/api/nodes/nosuch/telemetry/", "no node with name 'nosuch'"),
    # a key no node could be named is still a node key: the 404 names it, not the endpoint
    ("/api/nodes/l%C3%B6cal/", "no node with name 'löcal'"),
    ("/api/nodes/l%C3%B6cal/telemetry/", "no node with name 'löcal'"),
    ("/api/nodes/Local/", "no node with name 'Local'"),
    ("/api/nodes/%C2%B2/", "no node with name '²'"),
    ("/api/nodes/a%00b/", "no node with name 'a<U+0000>b'"),
    ("/api/nodes/l%C3%B6cal.json/", "no node with name 'löcal.json' (nor 'löcal')"),
    ("/api/kernel-packages/nosuch/", "no kernel package with name 'nosuch'"),
    # a key no package could be named is still a package key: the 404 names it, not the endpoint
    ("/api/kernel-packages/l%C3%B6cal/", "no kernel package with name 'löcal'"),
    ("/api/kernel-packages/Local/", "no kernel package with name 'Local'"),
    ("/api/kernel-packages/my-kernel/", "no kernel package with name 'my-kernel'"),
    ("/api/kernel-packages/a%00b/", "no kernel package with name 'a<U+0000>b'"),
    ("/api/kernel-jobs/l%C3%B6cal/", "no kernel job with id 'löcal'"),
    ("/api/kernel-best/l%C3%B6cal/", "no kernel best with id 'löcal'"),
    ("/api/kernel-best/l%C3%B6cal/config/", "no kernel best with id 'löcal'"),
    ("/api/runs/999/", "no benchmark run with id 999"),
    ("/api/deployments/999/telemetry/", "no deployment with id 999"),
    ("/api/recipes/999/", "no recipe with id 999"),
])
def test_it_names_the_missing_object_as_the_route_keys_it(viewer_api, path, detail):
    answer = viewer_api.get(path)
    assert answer.status_code == 404
    assert answer.json() == {"detail": detail}


def test_an_object_that_exists_is_served(viewer_api):
    node = cpu_node_create(name="here")
    assert viewer_api.get(f"/api/nodes/{node.name}/telemetry/").status_code == 200


def test_a_nodes_telemetry_is_served_by_name_and_by_id_as_the_node_itself(viewer_api):
    node = cpu_node_create(name="here")
    by_name = viewer_api.get(f"/api/nodes/{node.name}/telemetry/")
    by_id = viewer_api.get(f"/api/nodes/{node.pk}/telemetry/")
    assert by_name.status_code == by_id.status_code == 200, by_id.content
    assert by_name.json()["group"] == by_id.json()["group"] == "node-here"
    assert viewer_api.get(f"/api/nodes/{node.pk}/").json()["name"] == "here"


@pytest.mark.parametrize(("path", "detail"), [
    ("/api/nodes/999/", "no node with id 999"),
    ("/api/nodes/999/telemetry/", "no node with id 999"),
])
def test_a_missing_node_id_reads_the_same_on_the_node_and_its_telemetry(viewer_api, path, detail):
    answer = viewer_api.get(path)
    assert answer.status_code == 404
    assert answer.json() == {"detail": detail}


@pytest.mark.parametrize(("method", "path", "detail"), [
    ("get", "/api/runs/abc/", "no benchmark run with id 'abc'"),
    ("get", "/api/runs/abc/records/", "no benchmark run with id 'abc'"),
    ("get", "/api/runs/abc/export/", "no benchmark run with id 'abc'"),
    ("get", "/api/sweeps/1x/", "no benchmark sweep with id '1x'"),
    ("get", "/api/recipes/abc/versions/", "no recipe with id 'abc'"),
    ("delete", "/api/recipes/abc/", "no recipe with id 'abc'"),
    ("get", "/api/secrets/abc/", "no secret with id 'abc'"),
    ("get", "/api/deployments/abc/events/", "no deployment with id 'abc'"),
    ("post", "/api/deployments/abc/stop/", "no deployment with id 'abc'"),
    ("get", "/api/processes/abc/log/download/", "no server process with id 'abc'"),
    ("get", "/api/kernel-jobs/abc/", "no kernel job with id 'abc'"),
    ("post", "/api/kernel-jobs/abc/cancel/", "no kernel job with id 'abc'"),
    ("get", "/api/kernel-best/abc/", "no kernel best with id 'abc'"),
])
def test_it_names_an_id_that_is_not_a_number_as_any_missing_id(admin_api, method, path, detail):
    answer = getattr(admin_api, method)(path)
    assert answer.status_code == 404
    assert answer.json() == {"detail": detail}


def test_it_cuts_and_quotes_a_long_id_that_is_not_a_number(viewer_api):
    answer = viewer_api.get("/api/runs/" + "x" * 100 + "/")
    assert answer.status_code == 404
    assert answer.json() == {"detail": f"no benchmark run with id {'x' * 40!r}"}


@pytest.mark.parametrize("path", ["/api/runs/{}/", "/api/recipes/{}/", "/api/deployments/{}/", "/api/nodes/{}/"])
def test_an_id_of_thousands_of_digits_is_cut_to_forty_and_its_length_said(viewer_api, path):
    response = viewer_api.get(path.format("7" * 5000))

    assert response.status_code == 404
    detail = response.json()["detail"]
    assert detail.endswith(f"with id {'7' * 40}… (5000 digits)")   # never the 5000 digits back
    assert len(detail) < 120
