"""What a new user's run of the benchmark sweeps found: a point stopped during its warm-up counted
by what it sent, the follow line's phases in order, the stop's own words, plural nouns, the sweep
list's wording and the runs list's numbers. Checked on real rows, pages and exports."""
from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_follow_line
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


def _sweep(operator, **grid) -> BenchmarkSweep:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    return sweep_create(deployment=deployment, user=operator,
                        grid={"concurrency": [4], "lengths": "64:64", "requests": 64, **grid})


def _running(sweep: BenchmarkSweep, progress: dict) -> BenchmarkRun:
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.RUNNING, current_point="c=4 64/64",
                                                      started_at=timezone.now())
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=4,
                                       input_len=64, output_len=64, num_requests=64, progress=progress)


def test_a_run_row_with_no_report_yet_reads_starting_not_sending(operator) -> None:
    sweep = _sweep(operator)
    run = _running(sweep, {})
    line = sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    assert "running, starting c=4 64/64," in line and "sending" not in line and "(point" not in line
    # A row reset with only the point's limits (no phase, no counts) is not sending either.
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"duration_s": None, "total_sent_so_far": False,
                                                            "updated_at": "2026-01-01T00:00:00Z"})
    line = sweep_follow_line(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    assert "running, starting c=4 64/64," in line and "sending" not in line
    # Its prompts, then its warm-up, then its measured requests: only the last reads sending.
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"phase": "preparing prompts", "prepared": 3, "total": 11})
    assert "preparing prompts for c=4 64/64, 3/11 prompts built" in sweep_follow_line(
        sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
    BenchmarkRun.objects.filter(pk=run.pk).update(progress={"done": 5, "total": 64, "failed": 0, "aborted": 0})
    assert "running, sending c=4 64/64, points 0/1 done, requests 0/64 done (point 5/64)" in sweep_follow_line(
        sweep=BenchmarkSweep.objects.get(pk=sweep.pk), elapsed_s=1)
