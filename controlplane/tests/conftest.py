"""Fixtures shared by the control plane's API tests."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create


@pytest.fixture
def rows(db) -> dict[str, int | str]:
    """One of each object the query-key tests address: a node (by name), a recipe, a deployment,
    a sweep and its run (by id)."""
    node = cpu_node_create()
    recipe = recipe_row_create(node=node, name="r1")
    deployment = deployment_row_create(recipe=recipe)
    sweep = BenchmarkSweep.objects.create(name="s", engine="sim", topology="single", status="done")
    run = BenchmarkRun.objects.create(sweep=sweep, status="done", concurrency=1, input_len=8, output_len=8)
    return {"node": node.name, "recipe": recipe.pk, "deployment": deployment.pk, "sweep": sweep.pk, "run": run.pk}
