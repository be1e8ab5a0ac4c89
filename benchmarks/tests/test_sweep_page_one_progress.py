"""The sweep page and the sweep's live messages show one progress: the status block a reload
renders embeds the same ``sweep.progress`` data the last message carried, and a report broadcast
inside the row write interval is still written by a later tick (it used to stay unwritten until a
newer report came, so a reload showed older counts than the live panel)."""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweeps as sweeps_module

pytestmark = pytest.mark.django_db


def _running(operator) -> tuple[BenchmarkSweep, BenchmarkRun, dict]:
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, requests_total=20,
                                          grid={"concurrency": [2, 4], "lengths": [[8, 8]], "requests": 10},
                                          current_point="c=2 8/8", created_by=operator)
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=2,
                                      input_len=8, output_len=8, num_requests=10, progress={})
    point = {"concurrency": 2, "request_rate": None, "input_len": 8, "output_len": 8, "duration_s": None}
    return sweep, run, point


def _embedded(html: str) -> dict:
    m = re.search(r'<script id="sweep-progress-message" type="application/json">(.*?)</script>', html, re.S)
    assert m, html
    return json.loads(m.group(1))


def test_the_page_and_the_last_message_agree_after_a_throttled_report(operator, viewer, monkeypatch) -> None:
    sent: list[dict] = []
    monkeypatch.setattr(sweeps_module, "_broadcast", lambda sweep_id, type_, data, **kw: sent.append(data))
    now = [100.0]
    monkeypatch.setattr(sweeps_module.time, "monotonic", lambda: now[0])
    sweep, run, point = _running(operator)
    progress = sweeps_module._PointProgress(sweep, run, point, 0)
    progress.report({"done": 3, "total": 10, "failed": 0, "output_tokens": 24, "elapsed_s": 1.0, "tok_s": 20.0,
                     "tok_s_mean": 24.0})
    progress.tick()   # broadcast and written
    progress.report({"done": 7, "total": 10, "failed": 1, "output_tokens": 56, "elapsed_s": 1.4, "tok_s": 80.0,
                     "tok_s_mean": 40.0})
    now[0] = 100.4
    progress.tick()   # broadcast, inside the write interval
    now[0] = 101.5
    progress.tick()   # no new report: the one broadcast above is written now
    assert [m["done"] for m in sent] == [3, 7]

    client = Client()
    client.force_login(viewer)
    detail = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    partial = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk]), {"points": "0"}).content.decode()
    for html in (detail, partial):
        assert _embedded(html) == sent[-1]   # the very data the live panel got last
        assert "7 / 10 requests done" in html and "1 failed" in html
        assert 'class="requests-done" data-sweep-requests-done="7">7 / 20 requests' in html
        stamp = sent[-1]["updated_at"][11:19]
        assert f"as of <time datetime=" in html and f"{stamp} UTC</time>" in html


def test_the_prompt_build_s_last_count_reaches_the_row(operator, viewer, monkeypatch) -> None:
    sent: list[dict] = []
    monkeypatch.setattr(sweeps_module, "_broadcast", lambda sweep_id, type_, data, **kw: sent.append(data))
    now = [10.0]
    monkeypatch.setattr(sweeps_module.time, "monotonic", lambda: now[0])
    sweep, run, point = _running(operator)
    progress = sweeps_module._PointProgress(sweep, run, point, 0)
    progress.preparing(5, 20)
    progress.tick()
    progress.preparing(20, 20)
    now[0] = 10.5
    progress.tick()
    now[0] = 11.2
    progress.tick()   # the build is over and the load generator has not reported yet
    run.refresh_from_db()
    assert run.progress["prepared"] == 20
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert _embedded(html) == sent[-1]
    assert "preparing prompts</span>: 20 / 20 prompts" in html
