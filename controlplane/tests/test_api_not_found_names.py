"""An API 404 of an object the route names says what it is and how the route keys it, in the
API's wording, for a route keyed by name as for one keyed by id: ``no node with name 'nosuch'``,
``no benchmark run with id 999``, never a Python class name ("No Node matches the given query.")
nor an id the route does not have."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("path", "detail"), [
    ("/api/nodes/nosuch/", "no node with name 'nosuch'"),
    ("/api/nodes/nosuch/telemetry/", "no node with name 'nosuch'"),
    ("/api/kernel-packages/nosuch/", "no kernel package with name 'nosuch'"),
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
