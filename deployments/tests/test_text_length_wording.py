"""A recipe's description, a secret's description and value, and a sweep's name over their limit
are refused in the wording of names and change reasons: ``Use at most N characters; got M.``"""
from __future__ import annotations

import pytest

from deployments import services as deployment_services
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


def test_recipe_description_over_its_limit(operator_api):
    node = cpu_node_create(name="len-box")
    resp = operator_api.post("/api/recipes/", {"name": "len-recipe", "engine": "sim", "topology": "single",
                                                "node": node.name, "description": "d" * 4001, "spec": {}},
                             format="json")
    assert resp.status_code == 400 and resp.json()["description"] == ["Use at most 4000 characters; got 4001."]


def test_secret_description_and_value_over_their_limits(admin_api):
    resp = admin_api.post("/api/secrets/", {"name": "len-secret", "value": "v" * 8200,
                                            "description": "d" * 300}, format="json")
    assert resp.status_code == 400
    assert resp.json()["description"] == ["Use at most 255 characters; got 300."]
    assert resp.json()["value"] == ["Use at most 8192 characters; got 8200."]
    with pytest.raises(Exception) as exc:
        deployment_services.secret_create(user=None, name="len-secret", value="v" * 20, description="d" * 300)
    assert exc.value.errors == {"description": ["Use at most 255 characters; got 300."]}


def test_sweep_name_over_its_limit(operator_api):
    resp = operator_api.post("/api/sweeps/", {"deployment": 1, "grid": {"concurrency": [1], "lengths": ["16:8"]},
                                              "name": "n" * 201}, format="json")
    assert resp.status_code == 400 and resp.json()["name"] == ["Use at most 200 characters; got 201."]
