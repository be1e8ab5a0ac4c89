"""A point's warm-up requests show as such in its live progress (the load generator's reports, the
run row, the sweep.progress messages, the API, the sweep page and the followed line), and never
count as requests of the point; against a real sim engine slowed down so the warm-up spans reports."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import Api, LoadConfig, loadgen_run, loadgen_run_async, random_dataset
from benchmarks.loadgen.driver import PROGRESS_PERIOD_S, WARMUP_PHASE
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create
from benchmarks.services import sweeps as sweep_service
from benchmarks.services.sweeps import _PointProgress, sweep_follow_line
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start, sweep_executing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WARM_KEYS = {"phase", "warmup_done", "warmup_total", "warmup_elapsed_s"}
MEASURED_KEYS = {"done", "total", "failed", "aborted", "sent", "output_tokens", "elapsed_s", "tok_s", "tok_s_mean"}


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim engine five times slower than its profile: an 8-token request takes about 0.4 s."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=5.0)
    yield base
    proc.terminate()
    proc.wait(timeout=10)


class Calls:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.times: list[float] = []

    def __call__(self, info: dict[str, Any]) -> None:
        self.calls.append(dict(info))
        self.times.append(time.monotonic())


def _check(seen: Calls, *, warm_total: int, measured: int) -> None:
    """The warm-up's reports come first, then the measured phase's; the warm-up counts only grow,
    end at ``warm_total`` and are never in the measured counts."""
    warm = [c for c in seen.calls if c.get("phase") == WARMUP_PHASE]
    assert warm, seen.calls
    assert seen.calls[:len(warm)] == warm
    assert all(set(c) == WARM_KEYS and c["warmup_total"] == warm_total for c in warm)
    dones = [c["warmup_done"] for c in warm]
    assert dones == sorted(dones) and all(0 <= d <= warm_total for d in dones)
    assert dones[-1] == warm_total          # the last warm-up request's end is reported
    assert dones.count(warm_total) == 1     # and only once
    elapsed = [c["warmup_elapsed_s"] for c in warm]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    # Throttled as the measured reports are: all but the last warm-up report at least a period apart.
    times = seen.times[:len(warm)]
    gaps = [b - a for a, b in zip(times[:-2], times[1:-1])]
    assert all(g >= PROGRESS_PERIOD_S - 0.05 for g in gaps), gaps
    rest = seen.calls[len(warm):]
    assert rest and all(set(c) == MEASURED_KEYS for c in rest)
    assert rest[-1]["done"] == rest[-1]["total"] == measured   # the warm-up requests are not in them
    assert max(c["done"] for c in rest) == measured


def _load(base_url: str, *, requests: int, warmup: int, **config) -> tuple[LoadConfig, list, list]:
    """A completions load of ``requests`` 32/8 prompts after ``warmup`` others on the sim at
    ``base_url``: (its config, the measured specs, the warm-up specs)."""
    specs = random_dataset(num=requests, input_len=32, output_len=8, seed=1)
    warm = random_dataset(num=warmup, input_len=32, output_len=8, seed=2)
    return (LoadConfig(base_url=base_url, api=Api.COMPLETIONS, model="sim-model", ignore_eos=True, fixed_output=True,
                       **config), specs, warm)


def test_the_load_generator_reports_the_warmup_before_the_measured_phase(slow_sim: str) -> None:
    seen = Calls()
    cfg, specs, warmup = _load(slow_sim, requests=2, warmup=3, concurrency=1)
    result = loadgen_run(config=cfg, specs=specs, warmup_specs=warmup, progress=seen)
    assert len(result.records) == 2
    _check(seen, warm_total=3, measured=2)
    # Three warm-up requests of ~0.4 s one after another: the reports in between saw them end one by one.
    warm = [c for c in seen.calls if c.get("phase") == WARMUP_PHASE]
    assert len(warm) >= 2 and warm[-1]["warmup_elapsed_s"] > 0.6


def test_the_async_entry_point_reports_the_warmup_too(slow_sim: str) -> None:
    seen = Calls()
    cfg, specs, warmup = _load(slow_sim, requests=2, warmup=2, concurrency=1)
    result = asyncio.run(loadgen_run_async(config=cfg, specs=specs, warmup_specs=warmup, progress=seen))
    assert len(result.records) == 2
    _check(seen, warm_total=2, measured=2)


def test_worker_processes_report_their_warmups_summed(slow_sim: str) -> None:
    seen = Calls()
    cfg, specs, warmup = _load(slow_sim, requests=4, warmup=4, concurrency=2, workers=2)
    result = loadgen_run(config=cfg, specs=specs, warmup_specs=warmup, progress=seen)
    assert len(result.records) == 4
    _check(seen, warm_total=4, measured=4)


@pytest.fixture
def _sweep_settings(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


@pytest.mark.django_db(transaction=True)
def test_a_running_point_shows_its_warmup_on_its_row_messages_api_page_and_line(
        slow_sim: str, operator, viewer, viewer_api, monkeypatch, _sweep_settings) -> None:
    deployment = sim_deployment_create(base_url=slow_sim)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"api": "openai-completions", "concurrency": [1], "lengths": ["32:8"], "requests": 2,
                               "warmup": 3})
    # The first warm-up report is held in the callback until the row, the API, the page and the line
    # have been read (the sweep's thread goes on ticking and writing it meanwhile).
    release = threading.Event()
    reported = _PointProgress.report

    def report(self, snapshot) -> None:
        reported(self, snapshot)
        if snapshot.get("phase") == WARMUP_PHASE and not release.is_set():
            assert release.wait(60), "the test never released the warm-up report"

    monkeypatch.setattr(_PointProgress, "report", report)
    messages: list[dict] = []
    broadcast = sweep_service._broadcast

    def keep(sweep_id, kind, data, **kwargs) -> None:
        if kind == "sweep.progress":
            messages.append(dict(data))
        broadcast(sweep_id, kind, data, **kwargs)

    monkeypatch.setattr(sweep_service, "_broadcast", keep)
    client = Client()
    client.force_login(viewer)
    seen: list[dict] = []
    line = page = ""
    api: dict = {}
    with sweep_executing(sweep_id=sweep.pk, release=release) as (result, thread):
        while thread.is_alive():
            run = BenchmarkRun.objects.filter(sweep=sweep).first()
            if run is not None and run.status == RunStatus.RUNNING \
                    and (run.progress or {}).get("phase") == WARMUP_PHASE:
                seen.append(dict(run.progress))
                if not line:
                    row = BenchmarkSweep.objects.get(pk=sweep.pk)
                    assert row.requests_done == 0
                    line = sweep_follow_line(sweep=row, elapsed_s=0)
                    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
                    api = viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()
                    release.set()
            time.sleep(0.05)
    assert result["status"] == SweepStatus.DONE
    assert seen, "the run's progress never said it was warming up"
    for p in seen:
        assert set(p) == WARM_KEYS | {"duration_s", "total_sent_so_far", "updated_at"}, p
        assert p["warmup_total"] == 3 and 0 <= p["warmup_done"] <= 3 and p["warmup_elapsed_s"] >= 0
    held = seen[0]
    assert f": running, warming up for c=1 32/8, {held['warmup_done']}/3 warm-up requests, " in line, line
    assert "requests 0/2 done" in line and "(point" not in line, line
    assert api["progress"]["phase"] == WARMUP_PHASE and api["progress"]["warmup_total"] == 3
    assert api["progress"]["requests_done"] == 0 and "done" not in api["progress"]
    assert "run-phase" in page and f"{held['warmup_done']} / 3 warm-up requests" in page, page
    assert "not counted as done" in page

    warm_messages = [m for m in messages if m.get("phase") == WARMUP_PHASE]
    assert warm_messages and all(m["requests_done"] == 0 and "done" not in m and m["warmup_total"] == 3
                                 for m in warm_messages)
    # (the hold above keeps later warm-up reports back; the load generator's own tests see the last one)
    assert [m["warmup_done"] for m in warm_messages] == sorted(m["warmup_done"] for m in warm_messages)
    measured = [m for m in messages if "phase" not in m]
    assert measured and messages.index(warm_messages[-1]) < messages.index(measured[0])
    assert max(m["requests_done"] for m in measured) == 2

    # The measured phase's reports replace it; three warm-up requests went out, two are counted.
    run = BenchmarkRun.objects.get(sweep=sweep)
    assert "phase" not in run.progress and run.progress["done"] == 2 and run.progress["failed"] == 0
    assert run.summary["requests"] == 2
    assert BenchmarkSweep.objects.get(pk=sweep.pk).requests_done == 2
