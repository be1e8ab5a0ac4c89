"""``/api/nodes/<name>/`` names a node as the CLI, the queue names and the README do
(``/api/nodes/local/``); a lookup of digits alone stays the numeric id, so a node name may not be
digits alone (it would be read as an id)."""
from __future__ import annotations

import pytest

from controlplane.errors import InvalidInput
from deployments.models import Node
from deployments.nodes import node_register
from deployments.tests.factories import cpu_node_create
from deployments.topology import NodeFacts

pytestmark = pytest.mark.django_db


def test_a_node_is_read_by_its_name_as_by_its_id(viewer_api):
    node = cpu_node_create(name="local")
    by_name = viewer_api.get("/api/nodes/local/")
    by_id = viewer_api.get(f"/api/nodes/{node.pk}/")
    assert by_name.status_code == 200, by_name.content
    assert by_name.json()["name"] == "local" and by_name.json()["id"] == node.pk
    assert by_name.json() == by_id.json()


def test_a_name_with_dots_dashes_and_underscores_is_found(viewer_api):
    cpu_node_create(name="gpu-7.rack_2")
    response = viewer_api.get("/api/nodes/gpu-7.rack_2/")
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "gpu-7.rack_2"


def test_an_unknown_name_or_id_is_a_json_404(viewer_api):
    cpu_node_create(name="local")
    for path in ("/api/nodes/nosuch/", "/api/nodes/424242/", "/api/nodes/99999999999999999999999/"):
        response = viewer_api.get(path)
        assert response.status_code == 404, (path, response.content)
        assert "detail" in response.json()


def test_an_admin_removes_a_node_by_its_name(admin_api):
    cpu_node_create(name="spare")
    response = admin_api.delete("/api/nodes/spare/")
    assert response.status_code == 204, response.content
    assert not Node.objects.filter(name="spare").exists()


def test_a_name_of_digits_alone_is_refused_at_registration_saying_why():
    facts = NodeFacts(name="42", hostname="h", cpu_count=1, memory_total_bytes=1, numa_nodes=[], gpus=[], tools={})
    with pytest.raises(InvalidInput) as exc:
        node_register(facts=facts)
    assert exc.value.errors == {"name": [
        "must not be digits alone, got '42': /api/nodes/<digits>/ reads digits as a node's id; "
        "add a letter, e.g. 'node-42'"]}
    assert not Node.objects.exists()


def test_the_schema_names_the_node_path_parameter_as_a_name_or_id(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    [param] = [p for p in schema["paths"]["/api/nodes/{id}/"]["get"]["parameters"] if p["in"] == "path"]
    assert param["schema"]["type"] == "string"
    assert "name" in param["description"] and "id" in param["description"]
