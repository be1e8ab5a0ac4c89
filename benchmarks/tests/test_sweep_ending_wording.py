"""How a sweep that ended without finishing reads: "the sweep failed (why)" or "the sweep was
cancelled", never "the sweep was failed"; a sweep cancelled before it sent a request says none
was sent instead of "0 / 0 requests"."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_cancel, sweep_create
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


def test_it_says_how_the_sweep_ended_in_words_that_read_as_english() -> None:
    def ending(status: str, reason: str = "") -> str:
        return BenchmarkSweep(status=status, reason=reason).ending_text

    assert ending(SweepStatus.CANCELLED, "cancelled by owner") == "the sweep was cancelled"
    assert ending(SweepStatus.FAILED, "deployment #3 is stopping") == "the sweep failed (deployment #3 is stopping)"
    assert ending(SweepStatus.FAILED) == "the sweep failed"
    assert ending(SweepStatus.WAITING) == "the sweep is waiting for the deployment"


def test_a_sweep_cancelled_before_its_first_request_says_none_was_sent(operator, monkeypatch) -> None:
    from benchmarks.tasks import sweep_run_task

    monkeypatch.setattr(sweep_run_task, "apply_async", lambda *a, **kw: None)
    deployment = sim_deployment_create(base_url="http://127.0.0.1:39999")
    # points limited by time alone: the total is what they sent, 0 for a sweep that never ran one
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2], "lengths": [[16, 8]], "duration_s": 2})
    sweep = sweep_cancel(sweep=sweep, user=operator)
    assert sweep.status == SweepStatus.CANCELLED and sweep.requests_total_known == 0

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    cell = page.split('class="requests-done"')[1].split("</dd>")[0]
    assert cell == ('>none sent <span class="muted small">(the sweep was cancelled before its first measured '
                    'request)</span>')
    assert "0 / 0" not in page
