"""JSON text carried by a form-encoded or multipart field (a recipe's ``spec``, a sweep's ``grid``)
is read as a JSON body is: a key given twice in one of its objects is a 400 naming it at its
dotted path, never its last value taken silently (controlplane.api.JSONTextField)."""
from __future__ import annotations

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create

FORM = "application/x-www-form-urlencoded"


def test_a_recipe_spec_sent_as_form_text_names_a_key_given_twice(operator_api, db):
    node = cpu_node_create()
    spec = '{"roles": {"single": {"port": 8001, "port": 8002}}, "restart": {"policy": "never"}}'
    answer = operator_api.post("/api/recipes/", {"name": "twice", "engine": "sim", "topology": "single",
                                                 "node": node.name, "spec": spec}, format="multipart")
    assert answer.status_code == 400
    assert answer.json()["spec.roles.single.port"] == ["is given 2 times (8001, 8002): give it once"]
    assert not Recipe.objects.filter(name="twice").exists()
    # the same JSON text as a JSON body gets the same message at the same path
    body = ('{"name": "twice", "engine": "sim", "topology": "single", "node": "%s", "spec": %s}' % (node.name, spec))
    as_json = operator_api.post("/api/recipes/", body, content_type="application/json")
    assert as_json.status_code == 400
    assert as_json.json()["spec.roles.single.port"] == ["is given 2 times (8001, 8002): give it once"]
    # text that is not JSON is still DRF's message
    bad = operator_api.post("/api/recipes/", "name=x&engine=sim&topology=single&spec={", content_type=FORM)
    assert bad.status_code == 400 and bad.json()["spec"] == ["Value must be valid JSON."]


def test_a_sweep_grid_sent_as_form_text_names_a_key_given_twice(operator_api, db):
    answer = operator_api.post("/api/sweeps/", 'deployment=1&grid={"concurrency": [1], "concurrency": [2]}',
                               content_type=FORM)
    assert answer.status_code == 400
    assert answer.json()["grid.concurrency"] == ['is given 2 times ([1], [2]): give it once']
