"""A PD worker's restart counts as ready again only once a streamed request through the
router yields a token: the real sglang-router keeps a restarted worker's circuit open for a
while, and its entry URL refuses requests meanwhile although every process answers /health.
Real agent, real sim engines, the real sglang-router, real SIGKILL.

What opens that circuit, as sglang-router 0.3.2 does it with the flags the product passes (none
of the ``--cb-*`` ones, so its defaults): every request the router cannot send to a worker is
retried (``--retry-max-retries`` 5, about 0.4 s in all) and each attempt counts one failure;
10 consecutive failures (``--cb-failure-threshold``) open the worker's circuit, and it stays
open for ``--cb-timeout-duration-secs`` (60 s) whatever the worker does meanwhile, refusing every
request with 503 ``server_selection_failed``; only then does it let requests through again
(half-open). Its metrics server says so: ``smg_worker_cb_state{worker="<url>"}`` is 0 closed,
1 open, 2 half-open. So two requests while decode is really down open the circuit; the test
waits until the router's metrics show it open before decode is back, rather than hoping enough
of its requests fell in the window between the kill and the restart."""
from __future__ import annotations

import os
import re
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


def _circuit_state(metrics_url: str, worker_url: str) -> int | None:
    """The router's circuit-breaker state for ``worker_url`` (0 closed, 1 open, 2 half-open),
    None when its metrics server does not say."""
    try:
        text = httpx.get(metrics_url, timeout=10, trust_env=False).text
    except httpx.HTTPError:
        return None
    found = re.search(rf'^smg_worker_cb_state\{{worker="{re.escape(worker_url)}"\}} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else None


def test_a_restarted_decode_is_ready_again_only_when_the_router_serves_through_it(agents, deployer):
    agent = agents()
    # A startup timeout far shorter than the router's circuit breaker (about a minute).
    # A restart backoff of 5 s leaves decode down long enough for the requests that open its
    # circuit (two of them, under a second); the circuit then stays open about 55 s after decode
    # is back, well past the startup timeout.
    recipe = sim_pd_recipe(node=node_of(agent), user=deployer, startup_timeout_s=10,
                           restart={"policy": "on-failure", "backoff_initial_s": 5, "backoff_max_s": 5})
    deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "ready", timeout_s=60)
    assert _entry_status(deployment.entry_url) == 200
    decode = ServerProcess.objects.get(deployment=deployment, role="decode")
    router = ServerProcess.objects.get(deployment=deployment, role="router")
    metrics_url = f"http://127.0.0.1:{router.ports['metrics']}/metrics"
    decode_url = f"http://127.0.0.1:{decode.ports['http']}"
    assert _circuit_state(metrics_url, decode_url) == 0
    os.kill(decode.pid, signal.SIGKILL)

    def decode_restarted() -> ServerProcess | None:
        row = ServerProcess.objects.get(deployment=deployment, role="decode")
        return row if row.pid != decode.pid and row.status in (ProcessStatus.SPAWNED, ProcessStatus.READY) else None

    def circuit_open() -> bool:
        # Precondition, observed rather than assumed: the decode's circuit opens while decode is
        # still down (requests through the router are what open it).
        assert decode_restarted() is None, "decode came back before the router's circuit opened"
        _entry_status(deployment.entry_url)
        return _circuit_state(metrics_url, decode_url) == 1

    wait_for(circuit_open, timeout_s=5, what="the router to open the decode's circuit", every_s=0)
    wait_for(lambda: (row := decode_restarted()) and row.status == ProcessStatus.READY, timeout_s=30,
             what="decode to be restarted and answer /health")
    assert _circuit_state(metrics_url, decode_url) == 1, "the circuit closed before the loop below"
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
