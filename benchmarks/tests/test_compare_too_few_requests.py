"""A comparison names no best where the difference cannot be judged: where a metric's best run or
the runner-up completed fewer than MIN_COMPARED_REQUESTS requests (the ceiling analysis's rule for
a point too small to compare), the API's ``best`` is null for it with one note naming the runs and
their counts, and the compare page sets no run's value in bold; runs with enough requests still
get a best."""
from __future__ import annotations

import re

import numpy as np
import pytest

from benchmarks.analysis.model import MIN_COMPARED_REQUESTS
from benchmarks.loadgen.metrics import distribution
from benchmarks.models import BenchmarkRun
from benchmarks.services.runs import BEST_METRICS


def _run(ttft_s: np.ndarray, tok_s: float) -> BenchmarkRun:
    n = len(ttft_s)
    summary = {"requests": n, "successes": n, "failures": 0, "output_throughput_tok_s": tok_s, "duration_s": 1.0,
               **{f"{k}_s": distribution(ttft_s * f, ci=True) for k, f in (("ttft", 1), ("tpot", 0.1), ("e2e", 10))}}
    return BenchmarkRun.objects.create(status="done", concurrency=1, input_len=64, output_len=64, summary=summary)


def _bold_cells(html: str) -> list[str]:
    return re.findall(r'<td class="num best[^"]*">([^<]*)</td>', html)


@pytest.mark.django_db
def test_one_request_each_names_no_best_in_the_api_or_on_the_page(viewer_api, client, viewer):
    a = _run(np.array([0.050]), 120.0)   # the lower TTFT and the higher tok/s, from one request each
    b = _run(np.array([0.080]), 100.0)
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}").json()
    assert set(body["best"]) == {key for key, _ in BEST_METRICS}
    assert all(rid is None for rid in body["best"].values()), body["best"]
    assert body["uncertain"] == {} and body["ties"] == {}
    [note] = [n for n in body["notes"] if "cannot be judged" in n]
    assert note.startswith("no best run for output throughput, ")
    assert "TTFT mean, TTFT p50, TTFT p90, TTFT p99" in note
    assert (f"run #{a.pk} completed only 1 request and run #{b.pk} only 1 request, fewer than the "
            f"{MIN_COMPARED_REQUESTS} each run needs to be compared, so the difference cannot be judged from so few "
            "requests; measure at least 10 requests per run to rank them") in note
    # no note still says a run "is named best"
    assert not any("is named best" in n for n in body["notes"])

    client.force_login(viewer)
    html = client.get(f"/benchmarks/compare/?runs={a.pk},{b.pk}").content.decode()
    assert _bold_cells(html) == []
    assert "nor where the best or the next completed fewer than 10 requests" in html
    assert "the difference cannot be judged from so few requests" in html


@pytest.mark.django_db
def test_one_small_run_against_a_large_one_is_not_judged_but_large_runs_are(viewer_api, client, viewer):
    rng = np.random.default_rng(3)
    base = rng.lognormal(-3.0, 0.2, 200)
    big = _run(base, 100.0)
    small = _run(base[:MIN_COMPARED_REQUESTS - 1] * 0.5, 150.0)   # faster, from 9 requests
    body = viewer_api.get(f"/api/runs/compare/?ids={big.pk},{small.pk}").json()
    assert body["best"]["ttft_ms.mean"] is None and body["best"]["output_throughput_tok_s"] is None
    assert any(n.startswith("no best run for output throughput") and f"run #{small.pk} completed only 9 requests, "
               "fewer than the 10" in n for n in body["notes"])

    # 10 requests is enough: the clearly faster run is named best, and set in bold on the page.
    enough = _run(base[:MIN_COMPARED_REQUESTS] * 0.5, 150.0)
    body = viewer_api.get(f"/api/runs/compare/?ids={big.pk},{enough.pk}").json()
    assert body["best"]["ttft_ms.mean"] == enough.pk and body["best"]["output_throughput_tok_s"] == enough.pk
    assert not any("cannot be judged" in n for n in body["notes"])
    client.force_login(viewer)
    html = client.get(f"/benchmarks/compare/?runs={big.pk},{enough.pk}").content.decode()
    assert "150.0" in _bold_cells(html)
