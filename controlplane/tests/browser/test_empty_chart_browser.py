"""A deployment whose engines never reported a tok/s figure (no ``/metrics``, or it failed before
the first one), in a real browser (the Debian ``chromium`` package driven by Playwright) against
Django's live test server: its output chart is a short muted line, "no tok/s recorded yet" while
it runs and "no tok/s recorded while it ran" once it ended, never bare axes over 0-1; a chart
with values on the same page is still drawn. An engine that exposes no ``/metrics`` (llama.cpp)
never gives one: its chart says so, live or stored, and points to the sweeps, never "yet".

No engines, agent or websocket server: the rows and their stored telemetry are written
directly, and the live page's ``/ws/live/`` is answered by Playwright (a subscription
acknowledged, then the deployment's end), as the server would.
"""
from __future__ import annotations

import json
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import sign_in_to
from deployments.choices import DeploymentStatus
from deployments.models import DeploymentTelemetry
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

NO_TOK_S_YET = "no tok/s recorded yet"
NO_TOK_S_ENDED = "no tok/s recorded while it ran"
NO_METRICS = ("llama-cpp-python's server exposes no /metrics, so there is no live tok/s; sweeps measure it (see the "
              "benchmark sweeps below)")


def _deployment_without_tok_s(status: str, engine: str = "sim") -> tuple[int, int]:
    """A deployment of ``engine`` in ``status`` with 5 stored seconds of telemetry (starting 10 s
    ago): CPU % of its one process each second, tok/s never; (deployment id, process id)."""
    recipe = recipe_row_create(node=cpu_node_create(name=f"edge-box-{status}"), name=f"no-metrics-{status}",
                               engine=engine)
    deployment = deployment_row_create(recipe=recipe, status=status)
    began = timezone.now() - timedelta(seconds=10)
    ended = began + timedelta(seconds=6) if status in (DeploymentStatus.STOPPED, DeploymentStatus.FAILED) else None
    type(deployment).objects.filter(pk=deployment.pk).update(created_at=began, started_at=began, ended_at=ended)
    process = deployment.processes.get()
    for second in range(5):
        DeploymentTelemetry.objects.create(
            deployment=deployment, at=(began + timedelta(seconds=second + 1)).replace(microsecond=0),
            data={"status": status, "tok_s": None,
                  "processes": {str(process.pk): {"role": "single", "gen_tok_s": None, "cpu_pct": 10.0 + second}}})
    return deployment.pk, process.pk


@pytest.fixture
def ended_without_tok_s(transactional_db) -> int:
    """A failed deployment whose stored telemetry has no tok/s; its id. Database work happens in
    fixtures: once Playwright runs, its event loop owns the thread."""
    return _deployment_without_tok_s(DeploymentStatus.FAILED)[0]


@pytest.fixture
def starting_without_tok_s(transactional_db) -> int:
    """A starting deployment whose stored telemetry has no tok/s yet; its id."""
    return _deployment_without_tok_s(DeploymentStatus.STARTING)[0]


@pytest.fixture
def llamacpp_starting(transactional_db) -> int:
    """A starting llama.cpp deployment (no /metrics); its id."""
    return _deployment_without_tok_s(DeploymentStatus.STARTING, "llamacpp")[0]


@pytest.fixture
def llamacpp_ended(transactional_db) -> int:
    """A stopped llama.cpp deployment (no /metrics); its id."""
    return _deployment_without_tok_s(DeploymentStatus.STOPPED, "llamacpp")[0]


def _new_page(browser):
    """A fresh browser context and page, and the list the page's uncaught script errors go to."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors


def test_it_says_no_tok_s_was_recorded_on_an_ended_deployments_stored_telemetry(
        live_server, ended_without_tok_s, viewer, browser):
    path = f"/deployments/{ended_without_tok_s}/"
    context, page, errors = _new_page(browser)
    sign_in_to(page, live_server.url, viewer, path)

    history = page.locator("#deployment-telemetry-history")
    history.locator("[data-f='history-note']").filter(has_text="5 stored samples").wait_for(timeout=10_000)
    output = history.locator(".history-chart").filter(has=page.locator("h3", has_text="Output (tok/s)"))
    assert output.locator("[data-chart-empty]").inner_text() == NO_TOK_S_ENDED
    assert "muted" in (output.locator("[data-chart-empty]").get_attribute("class") or "")
    assert output.locator(".uplot").count() == 0  # no axes drawn for it
    cpu = history.locator(".history-chart").filter(has=page.locator("h3", has_text="single #0: CPU (%)"))
    assert cpu.locator(".uplot").count() == 1 and cpu.locator("[data-chart-empty]").count() == 0

    context.close()
    assert errors == [], errors


def test_it_says_no_tok_s_was_recorded_on_the_live_chart_and_again_once_the_deployment_ended(
        live_server, starting_without_tok_s, viewer, browser):
    path = f"/deployments/{starting_without_tok_s}/"
    group = f"deployment-{starting_without_tok_s}"
    context, page, errors = _new_page(browser)
    sockets = []

    def answer(ws) -> None:
        # What the consumer answers a socket that subscribes in its URL (?sub=<group>): the
        # groups' (empty) snapshots; the page then fetches the stored history over REST.
        groups = parse_qs(urlsplit(ws.url).query).get("sub", [])
        ws.on_message(lambda text: None)  # acks and pings: nothing to answer
        ws.send(json.dumps({"type": "live.subscribed", "ack_every": 50,
                            "groups": {g: {"seq": 0, "latest": {}} for g in groups}}))
        sockets.append(ws)

    page.route_web_socket("**/ws/live/**", answer)
    sign_in_to(page, live_server.url, viewer, path)

    chart = page.locator("#deployment-telemetry [data-spark='tok_s']")
    chart.locator("[data-chart-empty]").filter(has_text=NO_TOK_S_YET).wait_for(timeout=10_000)
    assert chart.locator(".uplot").count() == 0
    assert "muted" in (chart.locator("[data-chart-empty]").get_attribute("class") or "")

    sockets[-1].send(json.dumps({"type": "deployment.status", "group": group, "seq": 1, "ts": time.time(),
                                 "data": {"status": "failed"}}))
    chart.locator("[data-chart-empty]").filter(has_text=NO_TOK_S_ENDED).wait_for(timeout=5_000)
    assert chart.locator(".uplot").count() == 0

    context.close()
    assert errors == [], errors


def test_it_says_an_engine_without_metrics_charts_no_tok_s_live_or_stored(
        live_server, llamacpp_starting, llamacpp_ended, viewer, browser):
    context, page, errors = _new_page(browser)

    def answer(ws) -> None:  # the subscription acknowledged: the page then fetches the stored history
        groups = parse_qs(urlsplit(ws.url).query).get("sub", [])
        ws.on_message(lambda text: None)
        ws.send(json.dumps({"type": "live.subscribed", "ack_every": 50,
                            "groups": {g: {"seq": 0, "latest": {}} for g in groups}}))

    page.route_web_socket("**/ws/live/**", answer)
    sign_in_to(page, live_server.url, viewer, f"/deployments/{llamacpp_starting}/")
    chart = page.locator("#deployment-telemetry [data-spark='tok_s']")
    chart.locator("[data-chart-empty]").filter(has_text=NO_METRICS).wait_for(timeout=10_000)
    assert chart.locator("[data-chart-empty]").inner_text() == NO_METRICS

    page.goto(f"{live_server.url}/deployments/{llamacpp_ended}/", wait_until="domcontentloaded")
    history = page.locator("#deployment-telemetry-history")
    history.locator("[data-f='history-note']").filter(has_text="5 stored samples").wait_for(timeout=10_000)
    output = history.locator(".history-chart").filter(has=page.locator("h3", has_text="Output (tok/s)"))
    assert output.locator("[data-chart-empty]").inner_text() == NO_METRICS

    context.close()
    assert errors == [], errors
