"""95 % confidence intervals of per-request latency statistics (benchmarks.loadgen.uncertainty):
the order-statistic ranks match the published tables, the intervals cover the true value at least
95 % of the time, run summaries carry them, and the comparison says when a named best lies within
the runner-up's interval."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.loadgen.metrics import distribution
from benchmarks.loadgen.uncertainty import (
    ci95, mean_ci, min_samples_for_upper_bound, quantile_ci, quantile_ranks, t_quantile_975,
)
from benchmarks.models import BenchmarkRun
from benchmarks.services.runs import run_ci95_ms, runs_compare


@pytest.mark.parametrize(("n", "q", "ranks"), [
    (20, 0.5, (6, 15)),       # Conover, Practical Nonparametric Statistics, table A3 (median, n = 20)
    (100, 0.5, (40, 61)),     # the median of 100 samples: the 40th and 61st
    (367, 0.99, (359, None)),  # too few to bound a p99 from above
    (368, 0.99, (360, 368)),
    (6, 0.5, (1, 6)),
    (5, 0.5, (None, None)),   # 5 samples cannot bound a median at 95 % (0.5 ** 5 > 0.025)
])
def test_the_ranks_are_those_of_the_binomial_rule(n, q, ranks):
    assert quantile_ranks(n, q) == ranks


def test_a_p99_needs_368_requests_for_an_upper_bound():
    assert min_samples_for_upper_bound(0.99) == 368 and min_samples_for_upper_bound(0.9) == 36
    assert quantile_ranks(min_samples_for_upper_bound(0.9), 0.9)[1] is not None
    assert quantile_ranks(min_samples_for_upper_bound(0.9) - 1, 0.9)[1] is None


@pytest.mark.parametrize(("df", "t"), [(1, 12.706), (10, 2.228), (30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980)])
def test_the_t_quantile_matches_the_table(df, t):
    assert t_quantile_975(df) == pytest.approx(t, abs=0.0015)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_the_quantile_interval_covers_the_true_quantile_at_least_95_percent_of_the_time(q):
    # Lognormal latencies (a long right tail, as request latencies have), 400 requests a run,
    # 2000 runs: the rule guarantees >= 95 %; Monte Carlo noise is about 0.5 %.
    rng = np.random.default_rng(7)
    true = math.exp({0.5: 0.0, 0.9: 1.2815515655446004, 0.99: 2.3263478740408408}[q] * 0.5)
    hits = 0
    for _ in range(2000):
        low, high = quantile_ci(np.sort(rng.lognormal(0.0, 0.5, 400)), q)
        hits += (low is None or low <= true) and (high is None or true <= high)
    assert hits / 2000 >= 0.94


def test_the_mean_interval_covers_the_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    true = math.exp(0.5 ** 2 / 2)
    hits = sum(lo <= true <= hi for lo, hi in (mean_ci(rng.lognormal(0.0, 0.5, 200)) for _ in range(2000)))
    assert 0.93 <= hits / 2000 <= 0.97
    assert mean_ci(np.array([1.0])) is None


def test_a_summary_distribution_carries_the_intervals_around_its_statistics():
    values = np.random.default_rng(1).lognormal(-3.0, 0.4, 500)
    d = distribution(values, ci=True)
    for stat in ("mean", "p50", "p90", "p99"):
        low, high = d["ci95"][stat]
        assert low <= d[stat] <= high, stat
    assert d["ci95"] == ci95(values)
    assert distribution(np.array([]), ci=True)["ci95"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert "ci95" not in distribution(values)  # ITL gaps get none


def _run(summary_seconds: dict[str, np.ndarray], **kwargs) -> BenchmarkRun:
    n = len(summary_seconds["ttft"])
    summary = {"requests": n, "successes": n, "failures": 0, "output_throughput_tok_s": 1000.0,
               "duration_s": 10.0, **{f"{k}_s": distribution(v, ci=True) for k, v in summary_seconds.items()}}
    return BenchmarkRun.objects.create(status="done", concurrency=8, input_len=128, output_len=64, summary=summary,
                                       **kwargs)


@pytest.mark.django_db
def test_the_comparison_says_when_the_best_lies_within_the_runner_ups_interval():
    rng = np.random.default_rng(11)
    base = rng.lognormal(-3.0, 0.5, 400)
    # TTFT: b is 5 % faster than a (beyond the 2 % tie threshold) but both p99 intervals are wide;
    # E2E: c is twice as fast as a, far outside either interval.
    a = _run({"ttft": base, "tpot": base / 10, "e2e": base * 10})
    b = _run({"ttft": base * 0.95, "tpot": base / 10 * 0.95, "e2e": base * 10 * 0.99})
    c = _run({"ttft": base * 2.0, "tpot": base / 5, "e2e": base * 5})
    result = runs_compare(runs=[a, b, c])
    assert result["best"]["ttft_ms.p99"] == b.pk
    assert result["uncertain"]["ttft_ms.p99"] == [b.pk, a.pk]
    note = next(n for n in result["notes"] if n.startswith("TTFT p99:"))
    assert f"run #{b.pk} is named best" in note and "confidence intervals overlap" in note
    ci_a, ci_b = (run_ci95_ms(run=r)["ttft_ms"]["p99"] for r in (a, b))
    assert f"{ci_b[0]:.4g}–{ci_b[1]:.4g} ms" in note and f"{ci_a[0]:.4g}–{ci_a[1]:.4g} ms" in note
    assert ci_b[1] >= ci_a[0]  # they do overlap
    assert result["best"]["e2e_ms.mean"] == c.pk and "e2e_ms.mean" not in result["uncertain"]
    entry = next(e for e in result["runs"] if e["id"] == a.pk)
    assert entry["ci95_ms"]["ttft_ms"]["p99"] == pytest.approx(ci_a)


@pytest.mark.django_db
def test_too_few_requests_leave_the_p99_unbounded_and_the_note_says_how_many_are_needed():
    rng = np.random.default_rng(5)
    small = rng.lognormal(-3.0, 0.3, 100)
    a = _run({"ttft": small, "tpot": small, "e2e": small})
    b = _run({"ttft": small * 1.5, "tpot": small * 1.5, "e2e": small * 1.5})
    result = runs_compare(runs=[a, b])
    assert run_ci95_ms(run=a)["ttft_ms"]["p99"][1] is None
    note = next(n for n in result["notes"] if n.startswith("TTFT p99:"))
    assert "not bounded above by its 100 requests (a p99 needs 368)" in note
    # An imported run has no intervals, so nothing is said about them.
    imported = BenchmarkRun.objects.create(source="imported", status="done", concurrency=8, input_len=128,
                                           output_len=64, summary={"requests": 4, "successes": 4, "failures": 0,
                                                                   "output_throughput_tok_s": 10.0, "ttft_ms": {"p99": 1.0}},
                                           original_text="{}", original_filename="b.json")
    assert run_ci95_ms(run=imported) is None
    assert "ttft_ms.p99" not in runs_compare(runs=[a, imported])["uncertain"]


@pytest.mark.django_db
def test_the_run_page_shows_the_intervals_under_each_latency_and_their_caveat(client, viewer):
    rng = np.random.default_rng(2)
    values = rng.lognormal(-3.0, 0.4, 100)
    run = _run({"ttft": values, "tpot": values / 10, "e2e": values * 10})
    client.force_login(viewer)
    page = client.get(f"/benchmarks/runs/{run.pk}/").content.decode()
    assert "95 % CI under each" in page
    assert page.count('<tr class="ci-row"><td>95 % CI</td>') == 3  # TTFT, TPOT, E2E; not ITL
    ci = run_ci95_ms(run=run)["ttft_ms"]
    assert f"{ci['p50'][0]:.1f}–{ci['p50'][1]:.1f}" in page   # tens of ms: one decimal
    low = ci['p99'][0]
    assert f"≥ {low:.0f} (needs 368)" in page if low >= 100 else f"≥ {low:.1f} (needs 368)" in page  # no upper bound
    assert "which the requests of one run are not" in page
    imported = BenchmarkRun.objects.create(source="imported", status="done", summary={"ttft_ms": {"p99": 1.0}},
                                           original_text="{}", original_filename="b.json")
    assert "95 % CI" not in client.get(f"/benchmarks/runs/{imported.pk}/").content.decode()


@pytest.mark.django_db
def test_one_request_gives_no_interval_and_the_page_and_notes_say_how_many_are_needed(client, viewer):
    one = np.array([0.05])
    a = _run({"ttft": one, "tpot": one / 10, "e2e": one * 10})
    b = _run({"ttft": one * 1.2, "tpot": one / 10 * 1.2, "e2e": one * 12})
    assert a.summary["ttft_s"]["ci95"] == {"mean": [None, None], "p50": [None, None], "p90": [None, None],
                                           "p99": [0.05, None]}
    client.force_login(viewer)
    page = client.get(f"/benchmarks/runs/{a.pk}/").content.decode()
    assert "<td class=\"num\">needs 2</td><td class=\"num\">needs 6</td><td class=\"num\">needs 36</td><td class=\"num\">≥ 50.0 (needs 368)</td>" in page
    result = runs_compare(runs=[a, b])
    # one request each: no best is named for any metric, and none is left "uncertain" either
    assert a.summary["ttft_s"]["mean"] < b.summary["ttft_s"]["mean"]
    assert all(rid is None for rid in result["best"].values()) and result["uncertain"] == {}
    [note] = [n for n in result["notes"] if "cannot be judged" in n]
    # (their equal 1000 tok/s is a tie, said as such; every latency statistic is refused here)
    assert result["ties"]["output_throughput_tok_s"] == [a.pk, b.pk]
    assert note.startswith("no best run for TTFT mean, TTFT p50, TTFT p90, TTFT p99, TPOT mean")
    assert (f": run #{a.pk} completed only 1 request and run #{b.pk} only 1 request, fewer than the 10 each run "
            "needs to be compared, so the difference cannot be judged from so few requests") in note


def test_min_samples_for_interval():
    from benchmarks.loadgen.uncertainty import min_samples_for_interval

    assert [min_samples_for_interval(s) for s in ("mean", "p50", "p90", "p99")] == [2, 6, 36, 368]
    with pytest.raises(ValueError):
        min_samples_for_interval("p100")


def test_it_widens_a_few_samples_interval_to_contain_the_reported_percentile():
    # 2 requests: p99's lower bound is the larger sample (rank 2), above the interpolated p99
    # (0.1 + 0.99 × 0.1 = 0.199 s); the summary's interval is widened down to it.
    values = np.array([0.1, 0.2])
    assert quantile_ci(np.sort(values), 0.99) == (0.2, None)
    d = distribution(values, ci=True)
    assert d["p99"] == pytest.approx(0.199)
    low, high = d["ci95"]["p99"]
    assert low == d["p99"] and high is None
    for stat in ("mean", "p50", "p90", "p99"):
        low, high = d["ci95"][stat]
        assert (low is None or low <= d[stat]) and (high is None or d[stat] <= high), stat


def test_it_leaves_a_thousand_samples_intervals_as_the_order_statistics_give_them():
    values = np.random.default_rng(13).lognormal(-3.0, 0.5, 1000)
    assert distribution(values, ci=True)["ci95"] == ci95(values)


@pytest.mark.django_db
def test_it_widens_the_interval_of_a_summary_stored_before_widening():
    values = np.array([0.1, 0.2])
    run = _run({"ttft": values, "tpot": values / 10, "e2e": values * 10})
    run.summary["ttft_s"]["ci95"]["p99"] = [0.2, None]   # as stored before intervals were widened
    run.save(update_fields=["summary"])
    run.refresh_from_db()
    assert run_ci95_ms(run=run)["ttft_ms"]["p99"] == [pytest.approx(199.0), None]
