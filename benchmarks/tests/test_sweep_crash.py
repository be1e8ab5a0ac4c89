"""A sweep whose deployment crashes under a point: the real sim PD deployment (prefill, decode and the
real sglang-router, spawned by the node side's own launch code), the node agent's own monitor pass
(:func:`deployments.agent.deployment_check`, run here in a thread as the agent's tick would), and a
real SIGKILL of the router while a point runs."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun
from benchmarks.services import run_records, sweep_create, sweep_execute
from benchmarks.tests.sweep_support import agent_watched_deployment
from deployments.choices import ProcessStatus
from deployments.models import ServerProcess
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import sim_pd_recipe, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

# The agent's monitor period in the fault tests (CEILING_AGENT_TICK_S there): a dead process is
# marked within about this long.
AGENT_TICK_S = 0.2


@pytest.fixture
def pd_deployment(settings, tmp_path: Path, operator):
    """A ready sim PD deployment on this host, watched by the agent's monitor pass in a thread;
    torn down (and every engine tree of the test killed) afterwards."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    settings.VAR_DIR = tmp_path
    recipe = sim_pd_recipe(node=cpu_node_create(name="sweep-box"), user=operator, name="sim-pd-crash")
    with agent_watched_deployment(recipe=recipe, user=operator, tmp_path=tmp_path, tick_s=AGENT_TICK_S,
                                  what="the sim PD deployment") as deployment:
        yield deployment


def test_it_names_the_router_killed_under_a_point_and_how_it_ended(pd_deployment, operator, viewer) -> None:
    router = ServerProcess.objects.get(deployment=pd_deployment, role="router")
    router_port = int(pd_deployment.entry_url.rsplit(":", 1)[1])
    sweep = sweep_create(deployment=pd_deployment, user=operator,
                         grid={"concurrency": [4, 8], "lengths": ["16:64"], "requests": 4000})
    result: dict[str, str] = {}
    thread = threading.Thread(target=lambda: result.update(status=sweep_execute(sweep_id=sweep.pk)), daemon=True)
    thread.start()
    # Mid-point: the load generator has reported finished requests (written once a second).
    wait_for(lambda: ((BenchmarkRun.objects.filter(sweep=sweep).values_list("progress", flat=True).first() or {})
                      .get("done") or 0) > 0, timeout_s=30, what="the first point to report progress")
    killed_at = time.monotonic()
    os.kill(router.pid, signal.SIGKILL)
    thread.join(60)
    took = time.monotonic() - killed_at

    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    [run] = sweep.runs.all()  # the c=8 point never ran
    assert run.status == RunStatus.FAILED
    # The agent recorded how the router ended (exit code -9: SIGKILL); the sweep says it first.
    assert ServerProcess.objects.get(pk=router.pk).status == ProcessStatus.FAILED
    # (The agent's own words lead with how it ended, then its restart policy.)
    assert sweep.reason.startswith("router #0 killed by signal 9 (SIGKILL)"), sweep.reason
    assert "restart policy is 'never' during point c=4 16/64" in sweep.reason
    assert took < 15, f"the sweep took {took:.1f} s to end after the kill"
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    row = html.split(f'id="run-{run.pk}"')[1].split("</tr>")[0]

    s = run.summary
    # Either order keeps what was sent: the records, a summary and what was not sent.
    assert sweep.reason.endswith("; its numbers are not kept as a measurement and the later point was not run")
    assert s["requests"] + s["not_sent"] == 4000 and s["not_sent"] > 3000
    assert f"{s['failures'] + s['aborted']:,} of {s['requests']:,} requests sent failed" in sweep.reason
    assert (f'<span class="bad">{s["failures"]:,} failed of {s["requests"]:,}, {s["not_sent"]:,} not sent</span>'
            in row), row
    assert len(run_records(run=run)) == s["requests"]
    if s["ended_by"] == "deployment_down":
        # The agent's mark reached the sweep's watch before the load generator noticed: the sweep
        # stopped the point there, aborting what was in flight.
        assert s["halted"].startswith("router #0 killed by signal 9 (SIGKILL)")
        assert f"{s['not_sent']:,} not sent" in sweep.reason
        assert f"; deployment #{pd_deployment.pk} was marked " in sweep.reason
        return
    # The load generator's own stop ended the point first (the usual order: it notices within
    # milliseconds, the agent within its tick).
    # The load generator stopped sending once the router was clearly gone, and did not count what
    # it never sent as failed.
    assert s["stopped_early"] == (f"target unreachable: 32 consecutive connection failures "
                                  f"(connection refused to 127.0.0.1:{router_port})")
    assert s["ended_by"] == "target_unreachable"
    # 32 unanswered in a row, plus the 3 other slots' racing the 32nd and the 4 requests in flight
    # when the router died. Those 4 were answered (cut mid-stream), and one noticed after a few
    # refusals restarts the count, so at most one more streak fits before the stop: tens, never
    # the thousands a client without the stop sends.
    assert 32 <= s["failures"] <= 2 * 32 + 3 + 4, s["errors"]
    assert s["successes"] == s["requests"] - s["failures"] > 0
    commonest = max(s["errors"].items(), key=lambda kv: kv[1])[0]
    assert commonest.startswith(f"cannot connect to 127.0.0.1:{router_port}: ConnectionRefusedError")
    assert f"{s['not_sent']:,} not sent ({s['stopped_early']})" in sweep.reason
