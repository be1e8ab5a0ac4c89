"""A point's prompt building is visible while it lasts, and a point limited by a duration (alone, or
with a request count) builds only the prompts its time can use; against a real sim engine."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.loadgen import random_dataset
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import point_limits, sweep_create, sweep_execute
from benchmarks.services.sweeps import PREPARING_PHASE, _PointProgress, PROMPT_POOL_REQ_S_PER_SLOT, sweep_follow_line
from benchmarks.sweeps import grid_points, grid_validate
from benchmarks.tests.sweep_support import sim_deployment_create, sweep_executing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0


def test_a_running_point_says_it_is_preparing_prompts_on_its_row_page_and_progress_line(
        sim_url: str, operator, viewer, monkeypatch) -> None:
    # A time-only closed-loop text point builds duration x concurrency x PROMPT_POOL_REQ_S_PER_SLOT
    # prompts: 20 here, built in well under one progress tick, so the phase would end before a page
    # could load. The build is held halfway through instead, at the progress callback the prompt
    # builder calls after each prompt, until the row, the page and the line have been read.
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"api": "openai-chat", "concurrency": [1], "lengths": ["1024:4"], "duration_s": 1.0})
    held_at = PROMPT_POOL_REQ_S_PER_SLOT // 2
    release = threading.Event()
    built = _PointProgress.preparing

    def preparing(self, prepared: int, total: int) -> None:
        built(self, prepared, total)
        if prepared == held_at:
            assert release.wait(60), "the test never released the prompt build"

    monkeypatch.setattr(_PointProgress, "preparing", preparing)
    client = Client()
    client.force_login(viewer)
    seen: list[dict] = []
    line = page = ""
    with sweep_executing(sweep_id=sweep.pk, release=release) as (result, thread):
        while thread.is_alive():
            run = BenchmarkRun.objects.filter(sweep=sweep).first()
            if run is not None and run.status == RunStatus.RUNNING and (run.progress or {}).get("phase"):
                seen.append(dict(run.progress))
                if not line and run.progress["prepared"] == held_at:  # held there: it stays until released
                    line = sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=0)
                    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
                    release.set()
            time.sleep(0.05)
    assert result["status"] == SweepStatus.DONE
    assert seen, "the run's progress never said it was preparing prompts"
    total = seen[0]["total"]
    assert all(p["phase"] == PREPARING_PHASE and p["total"] == total for p in seen)
    assert [p["prepared"] for p in seen] == sorted(p["prepared"] for p in seen)
    assert all(0 <= p["prepared"] <= total for p in seen)
    run = BenchmarkRun.objects.get(sweep=sweep)
    assert total == run.summary["prompt_pool"] == PROMPT_POOL_REQ_S_PER_SLOT  # no warmup: the pool, 1 s at c=1
    assert f": running, {PREPARING_PHASE} for c=1 1024/4, {held_at}/{total} prompts built, " in line, line
    assert "run-phase" in page and f"{held_at} / {total} prompts" in page, page
    # the load generator's reports replace it once requests go out
    assert "phase" not in run.progress and run.progress["done"] == run.num_requests


def test_a_text_point_with_a_count_and_a_duration_builds_only_what_its_time_can_use(sim_url: str, operator) -> None:
    point = {"concurrency": 2, "request_rate": None, "input_len": 64, "output_len": 8, "max_requests": 5000,
             "duration_s": 1.0, "num_requests": 5000}
    pool = 2 * 1 * PROMPT_POOL_REQ_S_PER_SLOT
    assert point_limits(point=point, seed=0, text_prompts=True)["specs"] == pool
    # token ids: the time-only pool, 2 slots x 1 s at 1 ms + 8 x 0.1 ms a request (1.8 ms): 1,112
    assert point_limits(point=point, seed=0)["specs"] == 1112
    # open loop ending by time: exactly the arrivals inside it
    # a closed-loop text point limited by time alone is capped the same way
    timed = {**point, "max_requests": None, "duration_s": 60.0, "num_requests": 31250}
    assert point_limits(point=timed, seed=0, text_prompts=True)["specs"] == 2 * 60 * PROMPT_POOL_REQ_S_PER_SLOT
    assert point_limits(point=timed, seed=0)["specs"] == 31250
    rated = {**point, "concurrency": None, "request_rate": 4.0, "max_requests": 400, "num_requests": 400}
    limits = point_limits(point=rated, seed=0)
    assert limits["ends_by"] == "duration" and 1 <= limits["specs"] <= 20

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"api": "openai-chat", "concurrency": [2], "lengths": ["64:8"], "requests": 5000,
                               "duration_s": 1.0})
    started = time.monotonic()
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    run = BenchmarkRun.objects.get(sweep=sweep)
    s = run.summary
    assert s["prompt_pool"] == pool and s["ended_by"] in ("duration", "requests")
    assert 1 <= s["requests"] and s["prompts_reused"] == (s["requests"] > pool)
    assert time.monotonic() - started < 30


def test_a_time_only_point_builds_no_more_prompts_than_its_slots_could_send(sim_url: str, operator,
                                                                            monkeypatch) -> None:
    # The pool counts each request's output tokens (at least 1 ms + 0.1 ms per token): a 30 s point
    # at c=4 of 64:256 builds 120 / 26.6 ms = 4,512 prompts, where 1 ms a request and the 2,000,000
    # prompt tokens' bound alone made it 31,250 (about 3 s of building).
    [long_point] = grid_points(grid_validate({"concurrency": [4], "lengths": ["64:256"], "duration_s": 30}))
    assert long_point["num_requests"] == 4512 and long_point["max_requests"] is None
    assert point_limits(point=long_point, seed=0)["specs"] == 4512
    # Short outputs keep the other bounds: 60 s at c=2 of 64:8 stays at 2,000,000 / 64 tokens.
    [short_out] = grid_points(grid_validate({"concurrency": [2], "lengths": ["64:8"], "duration_s": 60}))
    assert short_out["num_requests"] == 31250
    # The same point, the same seed: the same prompts in the same order.
    first = random_dataset(num=50, input_len=64, output_len=256, seed=3)
    assert [s.prompt for s in first] == [s.prompt for s in random_dataset(num=50, input_len=64, output_len=256,
                                                                          seed=3)]

    # On the sim: 2 slots for 2 s at 16:64 could send at most 4 s / 7.4 ms = 541 requests (4 s / 1 ms
    # = 4,000 before this bound counted output tokens); it builds that many and sends far fewer.
    built: list[tuple[int, int]] = []
    preparing = _PointProgress.preparing

    def counted(self, prepared: int, total: int) -> None:
        built.append((prepared, total))
        preparing(self, prepared, total)

    monkeypatch.setattr(_PointProgress, "preparing", counted)
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": ["16:64"], "duration_s": 2.0})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    s = BenchmarkRun.objects.get(sweep=sweep).summary
    assert max(prepared for prepared, _ in built) == 541 and {total for _, total in built} == {541}
    assert s["prompt_pool"] == 541 and s["ended_by"] == "duration"
    assert 1 <= s["requests"] < 541 and s["prompts_reused"] is False
