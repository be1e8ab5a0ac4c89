"""A sweep is refused for a deployment that is being stopped: once a stop is requested (set by
``deployment_stop`` even while the node's agent is down and has not acted on it), the deployment
is about to go away and every request of the sweep would fail against a server that is exiting."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.services import deployment_stop

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}


@pytest.mark.django_db
def test_a_ready_deployment_with_a_stop_pending_is_not_swept(operator, operator_api,
                                                             django_capture_on_commit_callbacks) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    with django_capture_on_commit_callbacks(execute=False):  # no agent: the stop task is not run
        deployment_stop(deployment=deployment, user=operator)
    row = Deployment.objects.get(pk=deployment.pk)
    assert (row.status, row.stop_requested, row.cancel_requested) == (DeploymentStatus.READY, True, False)

    answer = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert answer.status_code == 409, answer.content
    assert answer.json() == {"detail": f"deployment #{deployment.pk} is being stopped; deploy its recipe again and "
                                       "sweep the new deployment",
                             "code": "conflict"}
    assert not BenchmarkSweep.objects.filter(deployment=deployment).exists()


@pytest.mark.django_db
def test_a_stopping_deployment_is_not_swept_and_a_bad_grid_is_still_a_400(operator_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPING)
    answer = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert answer.status_code == 409, answer.content
    assert "is being stopped" in answer.json()["detail"]

    bad = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {**GRID, "concurrency": [0]}},
                            format="json")
    assert bad.status_code == 400, bad.content
    assert not BenchmarkSweep.objects.filter(deployment=deployment).exists()
