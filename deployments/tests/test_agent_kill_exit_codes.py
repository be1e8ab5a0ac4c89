"""A process the agent ends itself (failed liveness, startup timeout) keeps how it ended: the
signal from the shim's exit record, stored as ``-N`` like a process killed from outside. Real
agent, real sim engines, real SIGSTOP."""
from __future__ import annotations

import os
import signal

import pytest

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    node_of,
    sim_single_recipe,
    wait_status,
)

pytestmark = pytest.mark.slow


def test_a_stopped_engine_failing_liveness_is_recorded_as_killed_by_sigkill(agents, deployer):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer, stop_grace_s=1)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    row = ServerProcess.objects.get(deployment=deployment)
    os.kill(row.pid, signal.SIGSTOP)  # ignores SIGTERM from now on; only SIGKILL ends it

    deployment = wait_status(deployment, "failed", timeout_s=40)
    row.refresh_from_db()
    assert row.status == ProcessStatus.FAILED
    assert row.exit_code == -9
    crash = deployment.events.get(process=row, kind="crashed").message
    assert crash.startswith("single: liveness failed 3 times: ")
    assert "SIGKILL needed after SIGTERM was ignored for 1s" in crash, crash


def test_an_engine_killed_at_its_startup_timeout_keeps_the_signal(agents, deployer):
    agent = agents()
    # demo-fast's 1 s startup delay scaled by 60: /health answers 503 for a minute.
    recipe = sim_single_recipe(node=node_of(agent), user=deployer, startup_timeout_s=2, time_scale=60)
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed", timeout_s=30)
    row = ServerProcess.objects.get(deployment=deployment)
    assert row.status == ProcessStatus.FAILED and row.reason.startswith("not ready after 2s")
    assert row.exit_code == -15
