"""A PD worker's restart counts as ready again only once a streamed request through the
router yields a token: the real sglang-router keeps a restarted worker's circuit open for a
while, and its entry URL refuses requests meanwhile although every process answers /health.
Real agent, real sim engines, the real sglang-router, real SIGKILL."""
from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    node_of,
    sim_pd_recipe,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.slow


def _entry_status(url_base: str) -> int | None:
    try:
        return httpx.post(f"{url_base}/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}},
                          timeout=10, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def test_a_restarted_decode_is_ready_again_only_when_the_router_serves_through_it(agents, deployer):
    agent = agents()
    # A startup timeout far shorter than the router's circuit breaker (about a minute).
    recipe = sim_pd_recipe(node=node_of(agent), user=deployer, startup_timeout_s=10,
                           restart={"policy": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2})
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready", timeout_s=60)
    assert _entry_status(deployment.entry_url) == 200
    decode = ServerProcess.objects.get(deployment=deployment, role="decode")
    os.kill(decode.pid, signal.SIGKILL)

    def decode_back():
        _entry_status(deployment.entry_url)  # traffic while decode is down opens the router's circuits
        row = ServerProcess.objects.get(deployment=deployment, role="decode")
        return row if row.status == ProcessStatus.READY and row.pid != decode.pid else None

    wait_for(decode_back, timeout_s=30, what="decode to be restarted and answer /health")
    # From here on: whenever the deployment reads ready, its entry URL must serve.
    deadline = time.monotonic() + 120
    refused_while_starting = False
    reasons: list[str] = []
    while time.monotonic() < deadline:
        deployment.refresh_from_db()
        status = deployment.status
        code = _entry_status(deployment.entry_url)
        if status == "ready":
            deployment.refresh_from_db()
            assert deployment.status != "ready" or code == 200, f"ready while the entry answers {code}"
            if code == 200:
                break
        else:
            assert status == "starting", deployment.reason
            if code != 200:
                refused_while_starting = True
                reason = services.deployment_waiting_reason(deployment=deployment)
                assert reason.startswith("waiting for a streamed request through the router to yield a token"), reason
                reasons.append(reason)
        time.sleep(0.5)
    deployment.refresh_from_db()
    assert deployment.status == "ready" and _entry_status(deployment.entry_url) == 200
    assert services.deployment_waiting_reason(deployment=deployment) == "" and deployment.reason == ""
    message = deployment.events.filter(kind="ready", process=None).order_by("-at", "-id").first().message
    assert message.startswith("ready again after restart, ") and "yielded a token" in message, message
    # The router refused requests for a while after decode answered /health again.
    assert refused_while_starting
    # Refused past the startup timeout: still degraded, and the reason says how long.
    assert any("beyond the startup timeout of 10s" in reason for reason in reasons), reasons[-1:]
    assert deployment.events.filter(kind="probe", message__startswith="waiting for a streamed request").exists()
