"""A model path that lies under a model root as text but leaves it through a symbolic link
(``<root>/out_link -> /elsewhere``) is refused by the node agent before it spawns anything: recipe
validation is lexical (the file lives on the node), so the agent checks the real path."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from deployments import services
from deployments.agent import deployment_launch
from deployments.choices import DeploymentStatus
from deployments.examples import example_node_facts, example_recipe
from deployments.launch import launch_plan_render, paths_escaping_roots
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import free_ports


@pytest.fixture
def roots(settings, tmp_path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.gguf").write_bytes(b"GGUF")
    (root / "out_link").symlink_to(outside)
    (root / "real.gguf").write_bytes(b"GGUF")
    (root / "alias.gguf").symlink_to(root / "real.gguf")  # a link that stays inside is fine
    settings.CEILING_MODEL_ROOTS = [str(root)]
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    return root


def _spec(model_path: str) -> dict:
    spec = copy.deepcopy(example_recipe("local-llamacpp")["spec"])
    spec["model"] = {**spec["model"], "path": model_path}
    (port,) = free_ports(1)
    spec["roles"]["single"]["port"] = port
    return spec


def test_a_path_leaving_the_roots_through_a_link_is_named_and_one_staying_inside_is_not(roots):
    node = example_node_facts("local")
    escaping = launch_plan_render(engine="llamacpp", topology="single",
                                  spec=_spec(str(roots / "out_link" / "private.gguf")), node=node)
    assert paths_escaping_roots(escaping, [str(roots)]) == [
        f"{roots}/out_link/private.gguf resolves to {roots.parent}/outside/private.gguf through a symbolic link, "
        f"outside the model roots ({roots}); single was not started"]
    for inside in ("real.gguf", "alias.gguf", "not-yet-downloaded.gguf"):
        plan = launch_plan_render(engine="llamacpp", topology="single", spec=_spec(str(roots / inside)), node=node)
        assert paths_escaping_roots(plan, [str(roots)]) == [], inside


@pytest.mark.django_db
def test_the_agent_fails_such_a_deployment_before_spawning_anything(roots, operator):
    node = cpu_node_create()
    recipe = services.recipe_create(user=operator, name="linked", engine="llamacpp", topology="single", node=node,
                                    spec=_spec(str(roots / "out_link" / "private.gguf")))  # lexically fine: saved
    deployment = services.deployment_create(recipe=recipe, user=operator)

    assert deployment_launch(deployment_id=deployment.pk) == "failed"

    row = Deployment.objects.get(pk=deployment.pk)
    assert row.status == DeploymentStatus.FAILED
    assert (f"out_link/private.gguf resolves to {roots.parent}/outside/private.gguf through a symbolic link, "
            "outside the model roots") in row.reason
    assert not ServerProcess.objects.filter(deployment=deployment, pid__isnull=False).exists()
