"""A deployment stopped while a point builds its prompts, or just as it starts sending: the point
sends nothing to a server that is going away on request, and requests the stopped server refused
count as aborted by the stop, never as the server's failures.

Against a real ``sim`` server process, stopped as the node agent stops it (the request recorded
as ``deployment_stop`` records it, then the process ended); the point is held at the moment under
test by wrapping the service's own steps."""
from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.services import sweeps as sweep_services
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from deployments.models import Deployment, ProcessEvent
from deployments.services import STOP_REQUESTED_TEXT, deployment_event_add

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

GRID = {"concurrency": [4], "lengths": "64:64", "requests": 2000}


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _stop_as_asked(deployment: Deployment, proc, user) -> str:
    """The stop as it happens: the request recorded (flag and timeline), then the agent ending the
    engine process. Returns the request as the sweep names it."""
    Deployment.objects.filter(pk=deployment.pk).update(stop_requested=True)
    deployment_event_add(deployment=deployment, kind="stop-requested",
                         message=f"{user.get_username()}{STOP_REQUESTED_TEXT}")
    proc.terminate()
    proc.wait(timeout=10)
    at = ProcessEvent.objects.get(deployment=deployment, kind="stop-requested").at
    return (f"{user.get_username()} requested a stop of deployment #{deployment.pk} at "
            f"{at.astimezone(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} UTC")


def _held_at(monkeypatch, name: str, wrap_method: bool = False) -> tuple[threading.Event, threading.Event]:
    """Hold the point's thread the first time it reaches ``name`` until ``resume`` is set."""
    reached, resume = threading.Event(), threading.Event()
    owner = sweep_services._PointProgress if wrap_method else sweep_services
    real = getattr(owner, name)

    def held(*args, **kwargs):
        if not reached.is_set():
            reached.set()
            assert resume.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, held)
    return reached, resume


def _run_with_stop(monkeypatch, tmp_path: Path, operator, *, at: str, wrap_method: bool = False):
    base, proc = sim_start(tmp_path / "sim.log")
    try:
        deployment = sim_deployment_create(base_url=base)
        sweep = sweep_create(deployment=deployment, user=operator, grid=GRID)
        reached, resume = _held_at(monkeypatch, at, wrap_method)
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
        thread.start()
        assert reached.wait(30), f"the point never reached {at}"
        asked = _stop_as_asked(deployment, proc, operator)
        resume.set()
        thread.join(60)
        assert not thread.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    sweep.refresh_from_db()
    return sweep, result["status"], asked


@pytest.mark.django_db(transaction=True)
def test_a_deployment_stopped_while_prompts_are_built_gets_no_request(monkeypatch, tmp_path: Path, operator,
                                                                      operator_api) -> None:
    # Stopped while the point builds its prompts; the agent has ended the process but not yet
    # marked the deployment stopping.
    sweep, status, asked = _run_with_stop(monkeypatch, tmp_path, operator, at="preparing", wrap_method=True)
    assert status == SweepStatus.FAILED
    assert sweep.reason == (f"{asked} during point c=4 64/64; deployment #{sweep.deployment_id} is still marked "
                            "ready; the sweep stopped")
    assert sweep.requests_done == 0
    run = sweep.runs.get()
    assert run.progress.get("done", 0) == 0 and run.progress.get("failed", 0) == 0
    assert not (run.summary or {}).get("failures")
    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["requests_done"] == 0 and body["reason"] == sweep.reason


@pytest.mark.django_db(transaction=True)
def test_requests_refused_after_the_stop_was_asked_for_are_aborted_not_failed(monkeypatch, tmp_path: Path,
                                                                              operator) -> None:
    # Stopped after the last look at the deployment, as the load generator starts: every request
    # is refused by a server that is gone, before the sweep's watch looks again.
    sweep, status, asked = _run_with_stop(monkeypatch, tmp_path, operator, at="loadgen_run")
    assert status == SweepStatus.FAILED
    run = sweep.runs.get()
    s = run.summary
    assert s["requests"] > 0 and (s["successes"], s["failures"], s["aborted"]) == (0, 0, s["requests"])
    assert s["ended_by"] == "deployment_down" and set(s["errors"]) == {f"aborted: {asked}"}
    assert not s["flags"].get("no_successful_requests")
    assert sweep.reason.startswith(f"{asked} during point c=4 64/64: {s['requests']} of {s['requests']} requests "
                                   f"sent failed (commonest: {s['requests']} x aborted in flight when the point was "
                                   "stopped)")
    # Neither finished nor failed: the live counts and the sweep's done count say the same.
    assert sweep.requests_done == 0
    assert (run.progress["done"], run.progress["failed"], run.progress["aborted"]) == (0, 0, s["requests"])
    assert not BenchmarkSweep.objects.filter(pk=sweep.pk, status=SweepStatus.RUNNING).exists()
