"""The headline reason of an engine that exited names the fatal error, not a traceback Python
printed afterwards from a destructor during interpreter shutdown ("Exception ignored in ...").
Real agent, the real llama.cpp server (llama-cpp-python) given a random file as its model."""
from __future__ import annotations

import os

import pytest

from deployments import services
from deployments.models import ServerProcess
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    free_ports,
    node_of,
    wait_status,
)

pytestmark = pytest.mark.slow


def test_a_model_that_does_not_load_is_the_reason_not_the_destructor_noise_after_it(
        agents, agent_env, deployer, settings, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    broken = models / "broken.gguf"
    broken.write_bytes(os.urandom(4096))
    settings.CEILING_MODEL_ROOTS = [str(models)]
    agent = agents(CEILING_MODEL_ROOTS=str(models))
    (port,) = free_ports(1)
    spec = {
        "model": {"path": str(broken)},
        "served_model_name": "broken",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": port, "flags": {"n_ctx": 512}}},
        "startup_timeout_s": 60,
        "stop_grace_s": 5,
    }
    recipe = services.recipe_create(user=deployer, name="broken-gguf", engine="llamacpp", topology="single",
                                    node=node_of(agent), spec=spec)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed", timeout_s=60)
    row = ServerProcess.objects.get(deployment=deployment)
    assert "Exception ignored in" in row.reason  # the noise is there in the last log lines
    assert deployment.reason.startswith("single failed: exited with code 1: ValueError: Failed to load model from file"), \
        deployment.reason
    assert "broken.gguf" in deployment.reason and "AttributeError" not in deployment.reason


def test_it_marks_a_chained_ignored_block_and_nothing_before_or_after_it():
    from deployments.agent import _ignored_lines

    lines = [
        "Traceback (most recent call last):",
        '  File "serve.py", line 3, in <module>',
        "RuntimeError: CUDA error: out of memory",
        "Exception ignored in: <function Engine.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        '  File "engine.py", line 9, in __del__',
        "KeyError: 'handle'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "engine.py", line 11, in __del__',
        "AttributeError: 'Engine' object has no attribute 'pool'",
        "shutdown error: done",
    ]
    assert _ignored_lines(lines) == set(range(3, 13))
    assert _ignored_lines(lines[3:7]) == {0, 1, 2, 3}
