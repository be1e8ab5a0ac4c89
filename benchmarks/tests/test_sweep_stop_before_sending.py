"""A deployment stopped while a point builds its prompts, just as it starts sending, or while it
sends: the point sends nothing to a server that is going away on request, and every request that
ended unsuccessfully once the stop was asked for (refused, reset, a stream cut short) counts as
aborted by the stop, never as the server's failure; the stored reason, ``stopped_early`` and the
sweep's request total say the same.

Against a real ``sim`` server process, stopped as the node agent stops it (the request recorded
as ``deployment_stop`` records it, then the process ended); the point is held at the moment under
test by wrapping the service's own steps."""
from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_cancel, sweep_create, sweep_execute, sweep_follow_line
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
                            "ready; the sweep stopped while preparing prompts")
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
    # The refusals that stopped the load generator came after the stop: the stop ended the point.
    assert s["stopped_early"] == f"{asked}: its server refused connections after the stop was asked for"
    assert sweep.reason.startswith(f"{asked} during point c=4 64/64: {s['requests']} requests sent: none failed, "
                                   f"{s['requests']} aborted by the stop, {s['not_sent']:,} not sent (its server "
                                   "refused connections after the stop was asked for); ")
    assert "target unreachable" not in sweep.reason
    # The ended sweep counts what it sent, not the 2,000 planned.
    assert sweep.requests_total == s["requests"]
    # Neither finished nor failed: the live counts and the sweep's done count say the same.
    assert sweep.requests_done == 0
    assert (run.progress["done"], run.progress["failed"], run.progress["aborted"]) == (0, 0, s["requests"])
    assert not BenchmarkSweep.objects.filter(pk=sweep.pk, status=SweepStatus.RUNNING).exists()


@pytest.mark.django_db
def test_errors_at_or_after_the_stop_are_aborted_by_it_whatever_they_are(tmp_path: Path, operator) -> None:
    # A real run whose engine is killed under it: the streams in flight are cut (reset, ended
    # without a finish reason), the later requests refused. The stop-requested event is put among
    # those errors: the ones that ended at or after it are aborted by the stop, whatever their
    # error; the ones before stay failures.
    base, proc = sim_start(tmp_path / "sim.log")
    deployment = sim_deployment_create(base_url=base)
    specs = random_dataset(num=400, input_len=16, output_len=512, seed=5)
    cfg = LoadConfig(base_url=base, api=Api.GENERATE, model="sim-model", concurrency=4, ignore_eos=True)

    def progress(info: dict) -> None:
        if info["output_tokens"] > 0 and proc.poll() is None:
            proc.kill()

    try:
        result = loadgen_run(config=cfg, specs=specs, progress=progress)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    rec = result.records
    errors = dict(rec.errors)
    assert len(errors) >= 4 and any(not m.startswith("cannot connect to ") for m in errors.values()), errors
    order = sorted(errors, key=lambda i: int(rec.end[i]))
    # The event goes in the widest gap between two errors' ends (not on one end): the event's time
    # is stored in microseconds and moved between clocks, so a time on an end could fall either side.
    gaps = [(int(rec.end[order[k]]) - int(rec.end[order[k - 1]]), k) for k in range(1, len(order))]
    gap, k = max(gaps)
    assert gap > 200_000, f"no two errors ended 0.2 ms apart: {gaps}"
    event_ns = int(rec.end[order[k - 1]]) + gap // 2
    before, after = set(order[:k]), set(order[k:])
    Deployment.objects.filter(pk=deployment.pk).update(stop_requested=True)
    event = deployment_event_add(deployment=deployment, kind="stop-requested",
                                 message=f"{operator.get_username()}{STOP_REQUESTED_TEXT}")
    # The event's wall-clock time, in that gap (the records' clock is monotonic).
    at = dt.datetime.fromtimestamp((event_ns + time.time_ns() - time.perf_counter_ns()) / 1e9,
                                   tz=dt.timezone.utc)
    ProcessEvent.objects.filter(pk=event.pk).update(at=at)

    marked = sweep_services._ended_by_stop(result, deployment_id=deployment.pk, reason="the stop")
    assert marked == len(after) > 0 and before
    assert all(rec.errors[i] == "aborted: the stop" for i in after)
    assert {i: rec.errors[i] for i in before} == {i: errors[i] for i in before}
    # Marked once: a second pass finds nothing more to move.
    assert sweep_services._ended_by_stop(result, deployment_id=deployment.pk, reason="the stop") == 0


@pytest.mark.django_db(transaction=True)
def test_a_stop_during_a_point_aborts_the_cut_and_refused_requests_and_the_total_follows(
        monkeypatch, tmp_path: Path, operator, operator_api) -> None:
    # The stop asked for while the point sends, then the engine killed: the streams in flight are
    # cut and the load generator stops on its own at the refusals, before the sweep's watch looks
    # again (held here until the load generator has ended).
    base, proc = sim_start(tmp_path / "sim.log")
    ended, asked_for = threading.Event(), threading.Event()
    real_run, real_check = sweep_services.loadgen_run, sweep_services._Watch.check
    seen: dict = {}

    def run(*args, **kwargs):
        try:
            return real_run(*args, **kwargs)
        finally:
            ended.set()

    def check(self, *args, **kwargs):
        if asked_for.is_set():
            assert ended.wait(60)
        return real_check(self, *args, **kwargs)

    real_mark = sweep_services._ended_by_stop

    def mark(result, **kwargs):
        seen["errors"] = dict(result.records.errors)
        return real_mark(result, **kwargs)

    monkeypatch.setattr(sweep_services, "loadgen_run", run)
    monkeypatch.setattr(sweep_services._Watch, "check", check)
    monkeypatch.setattr(sweep_services, "_ended_by_stop", mark)
    try:
        deployment = sim_deployment_create(base_url=base)
        sweep = sweep_create(deployment=deployment, user=operator,
                             grid={"concurrency": [4, 8], "lengths": "16:512", "requests": 2000})
        assert sweep.requests_total == 4000
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
        thread.start()
        deadline = time.monotonic() + 30
        while not ((r := sweep.runs.first()) is not None and (r.progress or {}).get("done", 0) >= 4):
            assert time.monotonic() < deadline, "the point never finished a request"
            time.sleep(0.05)
        asked_for.set()
        Deployment.objects.filter(pk=deployment.pk).update(stop_requested=True)
        deployment_event_add(deployment=deployment, kind="stop-requested",
                             message=f"{operator.get_username()}{STOP_REQUESTED_TEXT}")
        proc.kill()
        proc.wait(timeout=10)
        thread.join(60)
        assert not thread.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    at = ProcessEvent.objects.get(deployment=deployment, kind="stop-requested").at
    asked = (f"{operator.get_username()} requested a stop of deployment #{deployment.pk} at "
             f"{at.astimezone(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')} UTC")
    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    run = sweep.runs.get()
    s = run.summary
    # The cut streams (not refusals) were among what the stop ended; every one is aborted by it.
    assert any(not m.startswith("cannot connect to ") for m in seen["errors"].values()), seen["errors"]
    assert s["successes"] >= 4 and s["failures"] == 0 and s["aborted"] == len(seen["errors"]) > 4
    assert set(s["errors"]) == {f"aborted: {asked}"}
    assert s["stopped_early"] == f"{asked}: its server refused connections after the stop was asked for"
    assert s["ended_by"] == "deployment_down" and run.status == RunStatus.FAILED
    assert run.reason == (f"{asked} during point c=4 16/512: {s['requests']} requests sent: none failed, "
                          f"{s['aborted']} aborted by the stop, {s['not_sent']:,} not sent (its server refused "
                          f"connections after the stop was asked for); deployment #{deployment.pk} was still "
                          "marked ready at that moment")
    # The live counts agree with the summary: done are the finished ones, the aborted apart.
    assert (run.progress["done"], run.progress["failed"], run.progress["aborted"]) == (
        s["successes"], 0, s["aborted"])
    # The ended sweep counts what its point sent; the second point never ran and adds 0.
    assert sweep.requests_done == s["successes"] and sweep.requests_total == s["requests"]
    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert (body["requests_done"], body["requests_total"]) == (s["successes"], s["requests"])
    assert f"requests {s['successes']}/{s['requests']} done" in sweep_follow_line(sweep=sweep, elapsed_s=1)


@pytest.mark.django_db
def test_an_ended_sweep_counts_what_it_sent_a_done_one_its_plan(operator, operator_api) -> None:
    # Cancelled before it started: nothing was sent, whatever was planned.
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1, 2], "lengths": "8:8",
                                                                     "requests": 8})
    assert sweep.requests_total == 16
    sweep = sweep_cancel(sweep=sweep, user=operator)
    assert (sweep.status, sweep.requests_total) == (SweepStatus.CANCELLED, 0)
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["requests_total"] == 0
    # Ended with points run: what each sent, and 0 for a point that never ran; a done sweep keeps
    # its planned total.
    failed = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, requests_total=16, requests_done=3,
                                           grid={"concurrency": [1, 2], "lengths": [[8, 8]], "requests": 8})
    failed.runs.create(ordinal=0, status=RunStatus.FAILED, concurrency=1, input_len=8, output_len=8,
                       num_requests=8, summary={"requests": 5, "successes": 3, "failures": 0, "aborted": 2})
    assert sweep_services._finish(failed.pk, SweepStatus.FAILED, "deployment #1 is stopped")
    failed.refresh_from_db()
    assert (failed.requests_total, failed.requests_total_known, failed.requests_done) == (5, 5, 3)
    done = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, requests_total=16, requests_done=16,
                                         grid={"concurrency": [1, 2], "lengths": [[8, 8]], "requests": 8})
    assert sweep_services._finish(done.pk, SweepStatus.DONE, "")
    done.refresh_from_db()
    assert done.requests_total == 16
