"""The sweep API's ``progress``: the running point's last progress report, the very data the sweep
page embeds for its live panel and the last ``sweep.progress`` message the sweep's realtime group
carried (the real Redis channel layer), so a page re-syncing from ``/api/sweeps/<id>/`` after a
lost socket draws what the socket would have; null when no point runs or it has not reported."""
from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweeps as sweeps_module
from controlplane import realtime
from controlplane.realtime import sweep_group

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_rate_limit(settings, monkeypatch) -> None:
    settings.CEILING_REALTIME_MIN_INTERVAL_S = 0.0
    # The readings of a test's own clock stay out of the rate limit's memory of other tests.
    monkeypatch.setattr(realtime, "_last_sent", {})


class GroupListener:
    """A real channel-layer channel in a sweep's group; :meth:`progress` returns the data of every
    ``sweep.progress`` message received so far."""

    def __init__(self, sweep_id: int) -> None:
        self.layer = get_channel_layer()
        self.group = sweep_group(sweep_id)
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(self.group, self.channel)

    def progress(self, count: int, timeout_s: float = 10.0) -> list[dict]:
        async def collect() -> list[dict]:
            got: list[dict] = []
            deadline = time.monotonic() + timeout_s
            while len(got) < count and time.monotonic() < deadline:
                try:
                    event = await asyncio.wait_for(self.layer.receive(self.channel), 1.0)
                except asyncio.TimeoutError:
                    continue
                if event["message"]["type"] == "sweep.progress":
                    got.append(event["message"]["data"])
            return got

        return async_to_sync(collect)()

    def close(self) -> None:
        async_to_sync(self.layer.group_discard)(self.group, self.channel)


@pytest.fixture
def running(operator):
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, requests_total=20,
                                          grid={"concurrency": [2, 4], "lengths": [[8, 8]], "requests": 10},
                                          current_point="c=2 8/8", created_by=operator)
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=2,
                                      input_len=8, output_len=8, num_requests=10, progress={})
    point = {"concurrency": 2, "request_rate": None, "input_len": 8, "output_len": 8, "duration_s": None}
    listener = GroupListener(sweep.pk)
    yield sweep, run, point, listener
    listener.close()


def _embedded(html: str) -> dict:
    m = re.search(r'<script id="sweep-progress-message" type="application/json">(.*?)</script>', html, re.S)
    assert m, html
    return json.loads(m.group(1))


def _the_three(sweep: BenchmarkSweep, viewer, viewer_api) -> tuple[dict, dict, dict]:
    """The API's progress (detail and the sweep's list entry) and the page's embedded message."""
    detail = viewer_api.get(f"/api/sweeps/{sweep.pk}/")
    assert detail.status_code == 200, detail.content
    listed = viewer_api.get("/api/sweeps/").json()
    entry = next(s for s in listed["results"] if s["id"] == sweep.pk)
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    return detail.json()["progress"], entry["progress"], _embedded(page)


def test_the_api_page_and_socket_carry_one_report(running, viewer, viewer_api, monkeypatch) -> None:
    sweep, run, point, listener = running
    # A clock of the test's own from the real one: the rate limit of broadcasts keeps its readings.
    now = [time.monotonic()]
    monkeypatch.setattr(sweeps_module.time, "monotonic", lambda: now[0])
    progress = sweeps_module._PointProgress(sweep, run, point, 0)
    progress.report({"done": 3, "total": 10, "failed": 0, "output_tokens": 24, "elapsed_s": 1.0, "tok_s": 20.0,
                     "tok_s_mean": 24.0})
    progress.tick()   # broadcast and written
    progress.report({"done": 7, "total": 10, "failed": 1, "output_tokens": 56, "elapsed_s": 1.4, "tok_s": 80.0,
                     "tok_s_mean": 40.0})
    now[0] += 0.4
    progress.tick()   # broadcast inside the write interval
    now[0] += 1.1
    progress.tick()   # the report broadcast above is written now
    monkeypatch.undo()   # time.monotonic is the event loop's clock too: the listener needs it back
    sent = listener.progress(2)
    assert [m["done"] for m in sent] == [3, 7], sent

    api, listed, embedded = _the_three(sweep, viewer, viewer_api)
    assert api == sent[-1] == embedded == listed
    assert api["done"] == 7 and api["failed"] == 1 and api["requests_done"] == 7 and api["updated_at"]


def test_while_the_point_builds_its_prompts(running, viewer, viewer_api, monkeypatch) -> None:
    sweep, run, point, listener = running
    now = [time.monotonic()]
    monkeypatch.setattr(sweeps_module.time, "monotonic", lambda: now[0])
    progress = sweeps_module._PointProgress(sweep, run, point, 0)
    progress.preparing(5, 20)
    progress.tick()
    monkeypatch.undo()
    sent = listener.progress(1)
    api, listed, embedded = _the_three(sweep, viewer, viewer_api)
    assert api == sent[-1] == embedded == listed
    assert api["phase"] == "preparing prompts" and api["prepared"] == 5 and api["total"] == 20


def test_null_before_the_first_report_and_when_no_point_runs(running, viewer_api) -> None:
    sweep, run, point, listener = running
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["progress"] is None   # nothing reported yet
    run.progress = {"done": 10, "total": 10, "failed": 0, "updated_at": "2026-01-01T00:00:00Z"}
    run.status = RunStatus.DONE
    run.save(update_fields=["progress", "status"])
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["progress"] is None   # no point running
    run.status = RunStatus.RUNNING
    run.save(update_fields=["status"])
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["progress"]["done"] == 10
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.DONE)
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/").json()["progress"] is None   # the sweep is over
