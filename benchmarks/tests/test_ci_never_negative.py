"""A latency mean's 95 % interval never goes below zero: the t interval of a few spread-out
requests is symmetric about their mean, so its low can be negative, and it is clipped at 0 where it
is made (benchmarks.loadgen.uncertainty.mean_ci, and so each new run summary) and where a stored
summary's intervals are read (benchmarks.services.runs.run_ci95_ms)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.loadgen.metrics import distribution
from benchmarks.loadgen.uncertainty import clip_low, mean_ci
from benchmarks.models import BenchmarkRun
from benchmarks.services.runs import run_ci95_ms


def test_the_mean_interval_of_two_spread_out_requests_starts_at_zero():
    low, high = mean_ci(np.array([0.1, 2.1]))
    assert low == 0.0
    assert high == pytest.approx(1.1 + 12.706, abs=0.01)
    unclipped_low, _ = mean_ci(np.array([0.1, 2.1]), floor=None)
    assert unclipped_low == pytest.approx(1.1 - 12.706, abs=0.01)
    # a tight sample is untouched
    assert mean_ci(np.array([1.0, 1.1, 1.2]))[0] > 0.8


def test_a_new_summary_carries_the_clipped_interval():
    d = distribution(np.array([0.1, 2.1]), ci=True)
    assert d["ci95"]["mean"][0] == 0.0 and d["ci95"]["mean"][1] > d["mean"]


def test_clip_low_leaves_missing_and_unbounded_sides_alone():
    assert clip_low(None) is None
    assert clip_low([None, 5.0]) == [None, 5.0]
    assert clip_low([-3.0, None]) == [0.0, None]
    assert clip_low([2.0, 5.0]) == [2.0, 5.0]


@pytest.mark.django_db
def test_a_stored_summary_with_a_negative_low_is_read_as_zero():
    stats = {"mean": 1.107, "std": 0.6, "p50": 1.107, "p90": 1.9, "p99": 2.0, "count": 2,
             "ci95": {"mean": [-3.263, 5.477], "p50": [None, None], "p90": [None, None], "p99": [None, None]}}
    run = BenchmarkRun.objects.create(status="done", concurrency=1, input_len=64, output_len=64,
                                      summary={"requests": 2, "successes": 2, "failures": 0,
                                               "ttft_s": stats, "tpot_s": stats, "e2e_s": stats})
    ci = run_ci95_ms(run=run)
    assert ci["ttft_ms"]["mean"] == [0.0, pytest.approx(5477.0)]
    assert ci["e2e_ms"]["p50"] == [None, None]


def _summary_run(ttft: np.ndarray) -> BenchmarkRun:
    n = len(ttft)
    summary = {"requests": n, "successes": n, "failures": 0, "output_throughput_tok_s": 100.0, "duration_s": 1.0,
               **{f"{k}_s": distribution(ttft * f, ci=True) for k, f in (("ttft", 1), ("tpot", 0.1), ("e2e", 10))}}
    return BenchmarkRun.objects.create(status="done", concurrency=1, input_len=64, output_len=64, summary=summary)


@pytest.mark.django_db
def test_the_comparison_of_runs_without_intervals_says_it_cannot_judge_not_that_they_overlap():
    from benchmarks.services.runs import _ci_overlap, runs_compare

    a, b = _summary_run(np.array([0.05])), _summary_run(np.array([0.06]))
    result = runs_compare(runs=[a, b])
    # a's 50 ms mean is lower, but one request each cannot say so: no best, nothing "uncertain"
    assert result["best"]["ttft_ms.mean"] is None and "ttft_ms.mean" not in result["uncertain"]
    note = next(n for n in result["notes"] if "TTFT mean" in n)
    assert "cannot be judged from so few requests" in note and "overlap" not in note
    assert f"run #{a.pk} completed only 1 request and run #{b.pk} only 1 request" in note
    # one side with an interval and the other without: still not an overlap, and no best
    c = _summary_run(np.array([0.07, 0.08, 0.09]))
    result = runs_compare(runs=[a, c])
    assert result["best"]["ttft_ms.mean"] is None
    note = next(n for n in result["notes"] if "TTFT mean" in n)
    assert "cannot be judged from so few requests" in note and "overlap" not in note
    assert f"run #{a.pk} completed only 1 request and run #{c.pk} only 3 requests" in note
    # The interval rule alone (a run whose request count is not known): no interval on one side
    # names no best either, and its note gives both runs' intervals.
    entries = {e["id"]: {**e, "metrics": {**e["metrics"], "successes": None}} for e in result["runs"]}
    ids, text, unjudged = _ci_overlap("ttft_ms.mean", [(50.0, a.pk), (80.0, c.pk)], entries, False)
    assert ids == [a.pk, c.pk] and unjudged
    assert text.startswith(f"no best run for TTFT mean: run #{a.pk}'s 50 ms against #{c.pk}'s 80 ms, but the "
                           "difference cannot be judged from so few requests")
    assert "no interval from its requests (a mean needs 2)" in text and "overlap" not in text
