"""Wording that must not mislead: whose request total a terminal progress line shows, and an
empty per-GPU chart that must not contradict the sweep's GPU count."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_follow_line
from benchmarks.views.charts import sweep_charts

pytestmark = pytest.mark.django_db


def test_it_says_whose_request_counts_a_progress_line_shows() -> None:
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=3, points_done=0,
                                          requests_total=225, requests_done=12, current_point="c=1 256/256",
                                          current_tok_s=41.04)
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=1,
                                      num_requests=25, progress={"done": 12, "total": 25})
    assert sweep_follow_line(sweep=sweep, elapsed_s=7.2) == (
        f"  sweep #{sweep.pk} 7 s: running, sending c=1 256/256, points 0/3 done, requests 12/225 done "
        "(point 12/25), 41.0 output tok/s (last 0.5 s window)")
    # with the mean since the start: both rates, each named, never one taken for the other
    run.progress = {"done": 12, "total": 25, "output_tokens": 3072, "elapsed_s": 80.0, "tok_s_mean": 3072 / 80.0}
    run.save()
    assert sweep_follow_line(sweep=sweep, elapsed_s=7.2).endswith(
        "requests 12/225 done (point 12/25), 41.0 output tok/s (last 0.5 s window), "
        "38.4 output tok/s (mean since start)")
    # the point's failed requests, when any
    run.progress = {**run.progress, "failed": 2}
    run.save()
    assert "requests 12/225 done (point 12/25, 2 failed), " in sweep_follow_line(sweep=sweep, elapsed_s=7.2)


def test_a_time_limited_points_line_says_its_total_is_what_was_sent_so_far() -> None:
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2, points_done=0,
                                          requests_total=0, requests_done=42, current_point="c=4 256/256",
                                          grid={"concurrency": [4, 8], "lengths": [[256, 256]], "duration_s": 30.0})
    BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=4, duration_s=30.0,
                                progress={"done": 42, "total": 44, "duration_s": 30.0, "total_sent_so_far": True})
    assert sweep_follow_line(sweep=sweep, elapsed_s=31.0) == (
        f"  sweep #{sweep.pk} 31 s: running, sending c=4 256/256, points 0/2 done, requests 42 done "
        "(point 42 done of 44 sent so far, time-limited), total not known: points limited by time")


def test_the_running_point_stores_and_broadcasts_whether_its_total_is_what_was_sent(monkeypatch) -> None:
    from benchmarks.services import sweeps as sweeps_module

    sent = []
    monkeypatch.setattr(sweeps_module, "_broadcast", lambda sweep_id, kind, data: sent.append(data))
    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, points_total=2)
    timed = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.RUNNING, concurrency=4)
    rated = BenchmarkRun.objects.create(sweep=sweep, ordinal=1, status=RunStatus.RUNNING, request_rate=2.0)
    for run, point in ((timed, {"concurrency": 4, "request_rate": None, "input_len": 8, "output_len": 8,
                                "duration_s": 30.0}),
                       (rated, {"concurrency": None, "request_rate": 2.0, "input_len": 8, "output_len": 8,
                                "duration_s": 30.0})):
        progress = sweeps_module._PointProgress(sweep, run, point, 0)
        progress.report({"done": 42, "total": 44, "failed": 0, "output_tokens": 40, "elapsed_s": 10.0, "tok_s": 5.0,
                         "tok_s_mean": 4.0})
        progress.tick(final=True)
    assert [m["total_sent_so_far"] for m in sent] == [True, False]
    assert [(m["tok_s"], m["tok_s_mean"]) for m in sent] == [(5.0, 4.0), (5.0, 4.0)]   # both rates broadcast
    timed.refresh_from_db()
    rated.refresh_from_db()
    assert (timed.progress["total_sent_so_far"], rated.progress["total_sent_so_far"]) == (True, False)
    assert (timed.progress["tok_s"], timed.progress["tok_s_mean"]) == (5.0, 4.0)   # both kept on the row


def test_it_does_not_call_a_known_gpu_count_unknown_before_any_point_finished() -> None:
    assert sweep_charts([], num_gpus=8)["tok_s_per_gpu"]["empty"] == "No finished point with output tok/s yet."
    assert sweep_charts([], num_gpus=8, ended=True)["tok_s_per_gpu"]["empty"] == "No point finished with output tok/s."
    assert sweep_charts([])["tok_s_per_gpu"]["empty"] == "GPU count unknown."
    assert sweep_charts([], num_gpus=0)["tok_s_per_gpu"]["empty"] == "No GPUs (CPU-only): no per-GPU figure."
