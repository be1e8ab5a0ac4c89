"""An engine that ended while no agent ran is dated by its shim's exit record, not by when the
restarted agent noticed. Real agent (stopped and started again), real sim engine, real SIGKILL."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.utils import timezone

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    node_of,
    sim_single_recipe,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.slow

AWAY_S = 6.0


def test_a_crash_while_the_agent_was_away_keeps_the_time_the_engine_ended(agents, deployer):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer,
                               restart={"policy": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2})
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    first = ServerProcess.objects.get(deployment=deployment)
    agent.stop()

    killed_at = timezone.now()
    os.kill(first.pid, signal.SIGKILL)
    time.sleep(AWAY_S)
    agents()

    wait_for(lambda: deployment.events.filter(kind="crashed").exists(), timeout_s=30, what="the crash to be seen")
    crash = deployment.events.get(kind="crashed")
    assert abs((crash.at - killed_at).total_seconds()) < 1.0, (crash.at, killed_at)
    assert re.search(r"killed by signal 9 \(SIGKILL\) while the agent was away "
                     r"\(noticed at \d\d:\d\d:\d\d, \d+\.\d\ds later\)", crash.message), crash.message
    restarted = wait_for(lambda: (row := ServerProcess.objects.get(deployment=deployment)).pid != first.pid
                         and row.status == ProcessStatus.READY and row, timeout_s=30, what="the restart")
    assert restarted.exit_code is None  # a fresh process
    deployment = wait_status(deployment, "ready")
    message = deployment.events.filter(kind="ready", process=None).order_by("-at", "-id").first().message
    match = re.fullmatch(r"ready again after restart, (\d+\.\d\d)s after the crash "
                         r"\((\d+\.\d\d)s after it was noticed\)", message)
    assert match, message
    assert float(match.group(1)) >= AWAY_S and float(match.group(2)) < float(match.group(1)) - AWAY_S + 1


def test_an_engine_that_ended_while_the_agent_was_away_is_recorded_with_its_end_time(agents, deployer):
    agent = agents()
    recipe = sim_single_recipe(node=node_of(agent), user=deployer)  # restart policy never
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready")
    row = ServerProcess.objects.get(deployment=deployment)
    agent.stop()

    killed_at = timezone.now()
    os.kill(row.pid, signal.SIGKILL)
    time.sleep(AWAY_S)
    agents()

    wait_status(deployment, "failed")
    row.refresh_from_db()
    assert row.exit_code == -9
    assert abs((row.ended_at - killed_at).total_seconds()) < 1.0, (row.ended_at, killed_at)
    assert abs((deployment.events.get(kind="crashed").at - killed_at).total_seconds()) < 1.0
