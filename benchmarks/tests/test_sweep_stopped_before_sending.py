"""A point stopped before its first measured request (the sweep cancelled, or its deployment
stopping, while the point's warm-up requests run or its prompts are built) keeps its last counts
and says what it ended during (``ended_during``, ``requests_sent`` 0) on its row, the API and its
page, never ``phase``, which says a point still runs. Against a real sim engine slowed down so the
warm-up spans several of the load generator's reports."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen.driver import WARMUP_PHASE
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.services.sweeps import PREPARING_PHASE, _PointProgress
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from deployments.choices import DeploymentStatus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

ENDED_KEYS = {"ended_during", "requests_sent", "duration_s", "total_sent_so_far", "updated_at"}


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim engine ten times slower than its profile: a 32:8 request takes about half a second."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=10.0)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _run_until(sweep: BenchmarkSweep, phase: str, stop) -> tuple[str, BenchmarkRun]:
    """Run ``sweep`` in a thread, call ``stop()`` once its point's row says ``phase``; the
    sweep's final status and its point's row."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(status=sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    deadline = time.monotonic() + 30
    try:
        while True:
            run = BenchmarkRun.objects.filter(sweep=sweep).first()
            if run is not None and (run.progress or {}).get("phase") == phase:
                break
            assert thread.is_alive() and time.monotonic() < deadline, f"the point never said {phase}"
            time.sleep(0.05)
        stop()
    finally:
        thread.join(30)
    return result["status"], BenchmarkRun.objects.get(sweep=sweep)


def _warmup_sweep(deployment, operator) -> BenchmarkSweep:
    return sweep_create(deployment=deployment, user=operator,
                        grid={"api": "openai-completions", "concurrency": [1], "lengths": ["32:8"], "requests": 2,
                              "warmup": 6})


def _check_warmup_ended(run: BenchmarkRun, operator, viewer_api) -> None:
    p = run.progress
    assert "phase" not in p and set(p) == ENDED_KEYS | {"warmup_done", "warmup_total", "warmup_elapsed_s"}, p
    assert p["ended_during"] == WARMUP_PHASE and p["requests_sent"] == 0
    assert p["warmup_total"] == 6 and 0 <= p["warmup_done"] < 6
    assert "done" not in p and run.summary in (None, {})
    api = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert api["progress"] == p
    page = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert (f"The point stopped while warming up ({p['warmup_done']} / 6 warm-up requests ended): no measured "
            "request was sent.") in page, page
    # The sweep's own page and API no longer carry a live report of it.
    assert viewer_api.get(f"/api/sweeps/{run.sweep_id}/").json()["progress"] is None
    sweep_page = logged_in_client(operator).get(reverse("benchmarks:sweep-detail", args=[run.sweep_id]))
    # (its point's reason says where it stopped; no running point's phase is drawn)
    assert 'class="run-phase"' not in sweep_page.content.decode() and "warm-up requests, " not in \
        sweep_page.content.decode()


def test_a_point_cancelled_while_warming_up_says_it_ended_then(slow_sim: str, operator, viewer_api) -> None:
    sweep = _warmup_sweep(sim_deployment_create(base_url=slow_sim), operator)
    client = logged_in_client(operator)
    status, run = _run_until(sweep, WARMUP_PHASE, lambda: client.post(
        reverse("benchmarks:sweep-cancel", args=[sweep.pk])))
    assert status == SweepStatus.CANCELLED and run.status == RunStatus.CANCELLED
    _check_warmup_ended(run, operator, viewer_api)
    assert BenchmarkSweep.objects.get(pk=sweep.pk).requests_done == 0


def test_a_point_whose_deployment_stops_while_warming_up_says_it_ended_then(
        slow_sim: str, operator, viewer_api) -> None:
    deployment = sim_deployment_create(base_url=slow_sim)
    sweep = _warmup_sweep(deployment, operator)

    def stop() -> None:
        deployment.status = DeploymentStatus.STOPPING
        deployment.save(update_fields=["status"])

    status, run = _run_until(sweep, WARMUP_PHASE, stop)
    assert status == SweepStatus.FAILED and run.status == RunStatus.FAILED
    _check_warmup_ended(run, operator, viewer_api)


def test_a_point_stopped_while_preparing_prompts_says_it_the_same_way(operator, viewer_api) -> None:
    # The same end, from the preparing phase's last report (the row as the point's thread writes it).
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=1, requests_total=40,
                                          grid={"concurrency": [1], "lengths": [[32, 8]], "requests": 40},
                                          created_by=operator)
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=1, input_len=32,
                                      output_len=8, num_requests=40)
    progress = _PointProgress(sweep, run, {"concurrency": 1, "request_rate": None, "input_len": 32,
                                           "output_len": 8, "max_requests": 40}, 0)
    progress.preparing(12, 40)
    progress.tick()
    run.refresh_from_db()
    assert run.progress["phase"] == PREPARING_PHASE
    progress.ended_before_sending()
    BenchmarkRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    run.refresh_from_db()
    p = run.progress
    assert "phase" not in p and set(p) == ENDED_KEYS | {"prepared", "total"}, p
    assert (p["ended_during"], p["requests_sent"], p["prepared"], p["total"]) == (PREPARING_PHASE, 0, 12, 40)
    assert viewer_api.get(f"/api/runs/{run.pk}/").json()["progress"] == p
    page = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert ("The point stopped while preparing prompts (12 / 40 prompts built): no measured request was "
            "sent.") in page, page
