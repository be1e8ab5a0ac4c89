"""Sweeps that must end early or not start at all: grid size limits (clear 400s), a cancel or a
stopped deployment taking effect during a point (the load generator stops and aborts in-flight
requests), and sweeps whose worker process died (failed "worker lost", cancel ends them at once).

Against a real ``sim`` server process and real (dead) processes; no Celery worker is needed: the
behaviour lives in the services the task calls."""
from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import Api, LoadConfig, LoadgenStopped, loadgen_run, random_dataset
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute, sweeps_reconcile
from benchmarks.sweeps import (
    MAX_CONCURRENCY, MAX_PROMPT_TOKENS_PER_POINT, MAX_REQUESTS_PER_POINT, MAX_REQUESTS_PER_SWEEP, grid_validate,
)
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.errors import InvalidInput
from deployments.choices import DeploymentStatus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


# ------------------------------------------------------------------------------------ limits


def _refusal(grid: dict) -> str:
    with pytest.raises(InvalidInput) as info:
        grid_validate(grid)
    return str(info.value)


def test_it_refuses_grids_past_the_documented_limits() -> None:
    assert MAX_CONCURRENCY == 4096 and MAX_REQUESTS_PER_POINT == 100_000 and MAX_REQUESTS_PER_SWEEP == 1_000_000
    assert "grid.concurrency.0: must be an integer 1..4096, got 100000" in _refusal(
        {"concurrency": [100000], "lengths": [[256, 256]]})
    assert "would send 4,096,000 requests; at most 100,000 per point" in _refusal(
        {"concurrency": [4096], "lengths": [[16, 16]], "requests_per_concurrency": 1000})
    text = _refusal({"concurrency": [64], "lengths": [[100000, 100000]], "requests": 1000})
    assert "needs 100,000,000 prompt tokens" in text and f"at most {MAX_PROMPT_TOKENS_PER_POINT:,} per point" in text
    assert "the sweep would send 1,300,000 requests; at most 1,000,000 per sweep" in _refusal(
        {"concurrency": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], "lengths": [[16, 16]],
         "requests": 100_000})
    # at the limits it is accepted
    assert grid_validate({"concurrency": [4096], "lengths": [[100, 16]], "requests": 100_000})["requests"] == 100_000


@pytest.mark.django_db
def test_it_answers_a_huge_grid_with_a_400_naming_the_limit(operator_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [4096], "lengths": [[100000, 100000]], "requests_per_concurrency": 1000}}, format="json")
    assert response.status_code == 400
    assert "at most 100,000 per point" in json.dumps(response.json())
    assert not BenchmarkSweep.objects.exists()


# ------------------------------------------------------------------------------------ stop signal


def test_it_stops_building_prompts_when_asked() -> None:
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 10

    with pytest.raises(LoadgenStopped, match="stopped while building prompts \\(10 of 100000 built\\)"):
        random_dataset(num=100_000, input_len=64, output_len=8, should_stop=should_stop)


def test_it_stops_the_load_generator_mid_run_and_aborts_what_is_in_flight(sim_url: str) -> None:
    specs = random_dataset(num=400, input_len=16, output_len=512, seed=3)
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="sim-model", concurrency=4, ignore_eos=True)
    seen: list[dict] = []
    asked = threading.Event()
    stop_at: list[float] = []

    def progress(info: dict) -> None:
        seen.append(info)
        if info["output_tokens"] > 0 and not stop_at:
            stop_at.append(time.monotonic())
            asked.set()

    with pytest.raises(LoadgenStopped):
        loadgen_run(config=cfg, specs=specs, progress=progress, should_stop=asked.is_set)
    took = time.monotonic() - stop_at[0]
    assert took < 2.0, f"took {took:.2f} s to stop"
    assert seen[-1]["done"] < 400


# ------------------------------------------------------------------------------------ sweeps


def _start(sweep_id: int) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep_id)))
    thread.start()
    return thread, result


def _wait_for_requests(sweep: BenchmarkSweep) -> None:
    deadline = time.monotonic() + 30
    while True:
        run = sweep.runs.first()
        if run is not None and (run.progress or {}).get("output_tokens"):
            return
        assert time.monotonic() < deadline, "the point never reported progress"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_it_cancels_a_sweep_during_a_point_within_seconds(sim_url: str, operator, operator_api) -> None:
    from benchmarks.tests.page_support import logged_in_client

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2, 4], "lengths": [[16, 512]], "requests": 400})
    thread, result = _start(sweep.pk)
    _wait_for_requests(sweep)
    asked = time.monotonic()
    page = logged_in_client(operator)
    assert page.post(f"/benchmarks/sweeps/{sweep.pk}/cancel/").status_code == 302
    thread.join(30)
    took = time.monotonic() - asked
    assert result["status"] == SweepStatus.CANCELLED and took < 5.0, f"took {took:.2f} s"
    sweep.refresh_from_db()
    # who asked, as a cancel of a pending sweep records it, on the API and the page
    reason = f"cancelled by {operator.get_username()}"
    assert sweep.reason == reason and sweep.points_done == 0
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["reason"] == reason
    assert reason in page.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
    run = sweep.runs.get()
    assert run.status == RunStatus.CANCELLED and run.summary["ended_by"] == "cancelled"
    assert run.summary["partial"]["planned"] == 400
    assert run.progress["done"] < 400


@pytest.mark.django_db(transaction=True)
def test_it_stops_a_sweep_whose_deployment_stops_with_that_reason(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 512]], "requests": 400})
    thread, result = _start(sweep.pk)
    _wait_for_requests(sweep)
    deployment.status = DeploymentStatus.STOPPING
    deployment.save(update_fields=["status"])
    thread.join(30)
    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    run = sweep.runs.get()
    assert run.status == RunStatus.FAILED
    # The point keeps what was sent; the two requests in flight were aborted.
    s = run.summary
    assert s["ended_by"] == "deployment_down" and (s["failures"], s["aborted"]) == (0, 2)
    assert s["requests"] + s["not_sent"] == 400
    assert sweep.reason == (f"deployment #{deployment.pk} is stopping during point c=2 16/512: {s['requests']} "
                            f"requests sent: none failed, 2 aborted in flight when the point was stopped, "
                            f"{s['not_sent']:,} not sent; its numbers are not kept as a measurement")


@pytest.mark.django_db(transaction=True)
def test_it_leads_the_reason_with_who_stopped_the_deployment(sim_url: str, operator) -> None:
    # What deployment_stop records (the flag and the timeline's stop-requested event naming the
    # user), then what the node agent writes as it acts on it: the deployment stopping and its
    # process ended by SIGTERM. The request leads; the processes it ended are its consequence.
    from deployments.choices import ProcessStatus
    from deployments.models import Deployment, ProcessEvent, ServerProcess
    from deployments.services import deployment_event_add

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 512]], "requests": 400})
    thread, result = _start(sweep.pk)
    _wait_for_requests(sweep)
    Deployment.objects.filter(pk=deployment.pk).update(stop_requested=True)
    deployment_event_add(deployment=deployment, kind="stop-requested",
                         message=f"{operator.get_username()} requested a stop")
    event = ProcessEvent.objects.get(deployment=deployment, kind="stop-requested")
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPING)
    ServerProcess.objects.filter(deployment=deployment).update(status=ProcessStatus.KILLED, exit_code=-15)
    thread.join(30)
    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    run = sweep.runs.get()
    s = run.summary
    at = event.at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert sweep.reason == (f"oscar-operator requested a stop of deployment #{deployment.pk} at {at} UTC during "
                            f"point c=2 16/512: {s['requests']} requests sent: none failed, 2 aborted by the stop, "
                            f"{s['not_sent']:,} not sent; deployment "
                            f"#{deployment.pk} was marked stopping at that moment; its numbers are not kept as a "
                            "measurement")
    assert run.status == RunStatus.FAILED and run.reason in sweep.reason
    assert s["ended_by"] == "deployment_down" and set(s["errors"]) == {
        f"aborted: oscar-operator requested a stop of deployment #{deployment.pk} at {at} UTC"}


@pytest.mark.django_db(transaction=True)
def test_it_names_the_process_that_ended_during_a_point_and_the_point(sim_url: str, operator) -> None:
    # The rows as the node agent writes them for a crash with restart policy "never": the process
    # failed with its exit code (-9: SIGKILL) and the deployment failed after it.
    from deployments.choices import ProcessStatus
    from deployments.models import ServerProcess

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 512]], "requests": 400})
    thread, result = _start(sweep.pk)
    _wait_for_requests(sweep)
    ServerProcess.objects.filter(deployment=deployment).update(
        status=ProcessStatus.FAILED, exit_code=-9,
        reason="killed by signal 9 (SIGKILL); restart policy is 'never'\nlast log lines:\nsim server role=single")
    deployment.status = DeploymentStatus.FAILED
    deployment.save(update_fields=["status"])
    thread.join(30)
    assert result["status"] == SweepStatus.FAILED
    sweep.refresh_from_db()
    run = sweep.runs.get()
    s = run.summary
    assert sweep.reason == (f"single #0 killed by signal 9 (SIGKILL); restart policy is 'never' during "
                            f"point c=2 16/512: {s['requests']} requests sent: none failed, 2 aborted in flight "
                            f"when the point was stopped, {s['not_sent']:,} not sent; deployment "
                            f"#{deployment.pk} was marked failed at that moment; its numbers are not kept as a "
                            "measurement")
    assert run.status == RunStatus.FAILED and run.reason in sweep.reason
    # The sim still answers here: the two requests in flight were aborted, and they say why.
    assert (s["failures"], s["aborted"]) == (0, 2) and s["halted"] == "single #0 killed by signal 9 (SIGKILL); restart policy is 'never'"
    assert set(s["errors"]) == {"aborted: " + s["halted"]}
    # The live counts say the same: aborted in flight, neither done nor failed. No request completed,
    # so the completed requests' tokens are 0; the stored output throughput is what the two aborted
    # requests had streamed over the point's duration (basis completed_and_aborted), and the live
    # counts end on those very figures.
    assert (run.progress["failed"], run.progress["aborted"]) == (0, 2)
    assert s["output_tokens"] == 0 and s["output_tokens_aborted"] > 0
    assert s["output_throughput_basis"] == "completed_and_aborted"
    assert s["output_throughput_tok_s"] == pytest.approx(s["output_tokens_aborted"] / s["duration_s"])
    assert s["output_throughput_completed_tok_s"] == 0.0
    assert run.progress["output_tokens"] == s["output_tokens_aborted"]
    assert run.progress["tok_s_mean"] == pytest.approx(s["output_throughput_tok_s"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    return proc.pid


def _running_sweep(operator, *, worker: str, heartbeat_age_s: float = 0.0) -> BenchmarkSweep:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    sweep = sweep_create(deployment=deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    now = timezone.now()
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(
        status=SweepStatus.RUNNING, started_at=now - dt.timedelta(seconds=heartbeat_age_s), worker=worker,
        heartbeat_at=now - dt.timedelta(seconds=heartbeat_age_s), cancel_requested=False)
    sweep.refresh_from_db()
    return sweep


@pytest.mark.django_db
def test_it_fails_a_redelivered_sweep_whose_worker_process_is_gone(operator) -> None:
    pid = _dead_pid()
    host = socket.gethostname()
    sweep = _running_sweep(operator, worker=f"{host}:{pid}")
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.FAILED
    sweep.refresh_from_db()
    assert sweep.reason == f"worker lost: process {pid} on {host} is gone"
    # the deployment takes a new sweep again
    again = sweep_create(deployment=sweep.deployment, user=operator, grid={"concurrency": [1], "lengths": [[8, 8]]})
    assert again.status == SweepStatus.PENDING


@pytest.mark.django_db
def test_it_leaves_a_sweep_with_a_live_worker_alone_on_redelivery(operator) -> None:
    import os

    sweep = _running_sweep(operator, worker=f"{socket.gethostname()}:{os.getpid()}")
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.RUNNING
    assert sweeps_reconcile() == 0


@pytest.mark.django_db
def test_it_reconciles_sweeps_whose_heartbeat_stopped(operator) -> None:
    stale = _running_sweep(operator, worker="other-host:4242", heartbeat_age_s=180)
    assert sweeps_reconcile() == 1
    stale.refresh_from_db()
    assert stale.status == SweepStatus.FAILED
    assert stale.reason == "worker lost: no heartbeat from other-host:4242 for 180 s"


@pytest.mark.django_db
def test_it_ends_a_cancelled_sweep_at_once_when_no_live_worker_owns_it(operator_api, operator) -> None:
    pid = _dead_pid()
    sweep = _running_sweep(operator, worker=f"{socket.gethostname()}:{pid}")
    response = operator_api.post(f"/api/sweeps/{sweep.pk}/cancel/")
    assert response.status_code == 200
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.CANCELLED
    assert sweep.reason == f"cancelled by {operator.get_username()} (worker lost: process {pid} on " \
                           f"{socket.gethostname()} is gone)"


def test_it_bounds_an_open_loop_point_by_time_when_it_has_no_duration() -> None:
    with pytest.raises(InvalidInput) as err:
        grid_validate({"lengths": [[32, 16]], "request_rates": [1e-9], "requests": 2})
    assert "take about 2,000,000,000 s; at most 86400 s" in err.value.errors["grid.request_rates.0"][0]
    # a duration bounds it, and an ordinary rate is fine
    assert grid_validate({"lengths": [[32, 16]], "request_rates": [1e-9], "requests": 2, "duration_s": 10})
    assert grid_validate({"lengths": [[32, 16]], "request_rates": [2.0], "requests": 20})["request_rates"] == [2.0]


def test_it_takes_one_length_pair_given_as_a_bare_string() -> None:
    assert grid_validate({"concurrency": [1], "lengths": "32:16"})["lengths"] == [[32, 16]]


@pytest.mark.django_db(transaction=True)
def test_it_answers_a_bad_grid_with_400_even_while_another_sweep_is_active(sim_url: str, operator) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    first = sweep_create(deployment=deployment, user=operator,
                         grid={"request_rates": [0.5], "lengths": [[8, 4]], "requests": 2})
    assert first.name.endswith("0.5 req/s 8/4")  # named by its rate, not "c= "
    with pytest.raises(InvalidInput):
        sweep_create(deployment=deployment, user=operator,
                     grid={"concurrency": [1], "lengths": [[10_000_000_000, 16]]})
