"""Wording that must not mislead: whose request total a terminal progress line shows, and an
empty per-GPU chart that must not contradict the sweep's GPU count."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_progress_line
from benchmarks.views.charts import sweep_charts

pytestmark = pytest.mark.django_db


def test_it_says_whose_request_counts_a_progress_line_shows() -> None:
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=3, points_done=0,
                                          requests_total=225, requests_done=12, current_point="c=1 256/256",
                                          current_tok_s=41.04)
    BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=1, num_requests=25,
                                progress={"done": 12, "total": 25})
    assert sweep_progress_line(sweep=sweep) == (
        f"  sweep #{sweep.pk}: running, point 1/3 (c=1 256/256): 12/25 requests of this point, "
        "12/225 of the sweep, 41.0 tok/s now")


def test_it_does_not_call_a_known_gpu_count_unknown_before_any_point_finished() -> None:
    assert sweep_charts([], num_gpus=8)["tok_s_per_gpu"]["empty"] == "No finished point with output tok/s yet."
    assert sweep_charts([])["tok_s_per_gpu"]["empty"] == "GPU count unknown."
