"""A sweep request is judged in full before the deployment's state: a bad grid is a 400 listing
every problem (judged for the deployment's engine) whether the deployment is stopped, failed or
already busy with a sweep; only a valid body gets the 409 for the state."""
from __future__ import annotations

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import Recipe

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}
BAD_GRID = {**GRID, "concurrency": [0], "warmup": -1}
BAD_GRID_ERRORS = {"grid.concurrency.0": ["must be an integer 1..4096, got 0"],
                   "grid.warmup": ["must be an integer 0..10000, got -1"]}


def create(api, deployment_id: int, grid: dict, **extra):
    return api.post("/api/sweeps/", {"deployment": deployment_id, "grid": grid, **extra}, format="json")


@pytest.mark.parametrize("status", [DeploymentStatus.STOPPED, DeploymentStatus.FAILED])
def test_it_answers_a_bad_grid_with_400_before_the_deployment_is_found_over(operator_api, status) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=status)

    bad = create(operator_api, deployment.pk, BAD_GRID)
    valid = create(operator_api, deployment.pk, GRID)

    assert bad.status_code == 400
    assert bad.json() == BAD_GRID_ERRORS
    assert valid.status_code == 409
    assert valid.json() == {"detail": f"deployment #{deployment.pk} is {status}; deploy its recipe again and sweep "
                                      "the new deployment",
                            "code": "conflict"}
    assert not BenchmarkSweep.objects.exists()


def test_it_lists_every_body_error_for_a_stopped_deployment_judged_for_its_engine(operator_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPED)
    Recipe.objects.filter(pk=deployment.recipe_id).update(engine="llamacpp")

    response = create(operator_api, deployment.pk, {**BAD_GRID, "api": "sglang-generate"}, priority="high")

    assert response.status_code == 400
    assert response.json() == {
        "priority": ["unknown field 'priority'; allowed: deployment, grid, name"],
        **BAD_GRID_ERRORS,
        "grid.api": ["sglang-generate is not served by this deployment's engine (llamacpp); it serves "
                     "openai-completions, openai-chat"],
    }


def test_it_answers_a_bad_grid_with_400_while_another_sweep_is_active(operator_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.READY)
    running = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING)

    bad = create(operator_api, deployment.pk, BAD_GRID)
    valid = create(operator_api, deployment.pk, GRID)

    assert bad.status_code == 400
    assert bad.json() == BAD_GRID_ERRORS
    assert valid.status_code == 409
    assert valid.json()["detail"].startswith(f"sweep #{running.pk} is already running on deployment #{deployment.pk}")
    assert list(BenchmarkSweep.objects.values_list("pk", flat=True)) == [running.pk]
