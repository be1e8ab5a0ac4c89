"""A sweep's grid holding a whole number too large for a float (JSON keeps integers exact, so
``1`` and 400 zeros reaches the checks as an int) is a 400 naming the field, never a server error:
the SLO bound, the time limit and the request rates judge it as the number it is."""
from __future__ import annotations

import json

import pytest

from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("grid", "field"), [
    ({"slo": {"ttft_s": 10 ** 400}}, "grid.slo.ttft_s"),
    ({"duration_s": 10 ** 400}, "grid.duration_s"),
    ({"request_rates": [10 ** 400]}, "grid.request_rates.0"),
])
def test_a_grid_number_too_large_for_a_float_is_a_400_naming_it(operator_api, grid, field):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                       recipe_name="huge-sim")
    body = json.dumps({"deployment": deployment.pk, "grid": {"concurrency": [1], "lengths": "8:8", **grid}})
    answer = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
