"""Comparison and export as a new user met them: the run comparison names a best run, or
says why not, for every metric it compares; the CSV and JSON exports name the request rate with
its unit (``request_rate_req_s``), as every other figure."""
from __future__ import annotations

import csv
import io
import json

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import runs_compare
from benchmarks.services.runs import BEST_METRICS, COMPARE_FIELDS

pytestmark = pytest.mark.django_db


# --- every metric has a best run or a note saying why not -------------------------------------


def _compared(sweep: BenchmarkSweep, ordinal: int, *, req_s: float, tok_s: float, ttft_s: float,
              itl_p99_s: float, e2e_s: float) -> BenchmarkRun:
    summary = {"requests": 20, "successes": 20, "failures": 0, "duration_s": 200.0, "output_throughput_tok_s": tok_s,
               "request_throughput_req_s": req_s,
               "ttft_s": {"mean": ttft_s, "p50": ttft_s, "p90": ttft_s, "p99": ttft_s * 1.5},
               "tpot_s": {"mean": 0.094, "p99": 0.1}, "itl_s": {"mean": 0.094, "p99": itl_p99_s},
               "e2e_s": {"mean": e2e_s, "p50": e2e_s, "p99": e2e_s * 1.2}}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=1,
                                       input_len=256, output_len=256, num_gpus=8, summary=summary)


def _reasons(body: dict) -> dict[str, list[str]]:
    """For each metric without a best run, the notes that name it (by its label)."""
    labels = {key: label for key, label, _ in COMPARE_FIELDS}
    return {key: [n for n in body["notes"] if f"for {labels[key]}" in n or f"a {labels[key]}" in n]
            for key, best in body["best"].items() if best is None}


def test_the_comparison_names_a_best_run_or_says_why_not_for_every_metric(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="first-use", status=SweepStatus.DONE)
    # A first run's request throughput: 0.098 vs 0.103 req/s, 5 % apart; TTFT and E2E far apart too.
    a = _compared(sweep, 0, req_s=0.098, tok_s=25.0, ttft_s=0.90, itl_p99_s=0.30, e2e_s=25.0)
    b = _compared(sweep, 1, req_s=0.103, tok_s=26.3, ttft_s=0.60, itl_p99_s=0.20, e2e_s=24.0)
    c = _compared(sweep, 2, req_s=0.0985, tok_s=25.2, ttft_s=0.95, itl_p99_s=0.302, e2e_s=26.0)
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{c.pk}").json()
    assert list(body["best"]) == [key for key, _ in BEST_METRICS]
    assert {key for key, _ in BEST_METRICS} == {key for key, _, _ in COMPARE_FIELDS} - {"failures"}
    assert body["best"] == {
        "output_throughput_tok_s": b.pk, "tok_s_per_gpu": b.pk, "request_throughput_req_s": b.pk,
        "goodput_req_s": None, "ttft_ms.mean": b.pk, "ttft_ms.p50": b.pk, "ttft_ms.p90": b.pk, "ttft_ms.p99": b.pk,
        "tpot_ms.mean": None, "tpot_ms.p50": None, "tpot_ms.p90": None, "tpot_ms.p99": None, "itl_ms.mean": None,
        "itl_ms.p50": None, "itl_ms.p90": None, "itl_ms.p99": b.pk,
        "e2e_ms.mean": b.pk, "e2e_ms.p50": b.pk, "e2e_ms.p90": None, "e2e_ms.p99": b.pk}
    reasons = _reasons(body)
    assert set(reasons) == {"goodput_req_s", "tpot_ms.mean", "tpot_ms.p50", "tpot_ms.p90", "tpot_ms.p99",
                            "itl_ms.mean", "itl_ms.p50", "itl_ms.p90", "e2e_ms.p90"}
    assert all(len(found) == 1 for found in reasons.values()), reasons
    assert reasons["goodput_req_s"] == ["no rankable run has a goodput (a run has one only when it was measured "
                                        "against an SLO); no best run is named for it"]
    assert reasons["itl_ms.mean"] == [
        f"no best run for ITL mean: runs #{a.pk} 94, #{b.pk} 94, #{c.pk} 94 ms are equal, under the 2 % tie "
        "threshold (run-to-run noise)"]

    # Goodput against different SLOs: no best, and why.
    for run, slo in ((a, {"ttft_s": 1.0}), (b, {"ttft_s": 0.5})):
        run.summary = {**run.summary, "goodput_req_s": run.summary["request_throughput_req_s"], "slo": slo}
        run.save(update_fields=["summary"])
    body = runs_compare(runs=[a, b])
    assert body["best"]["goodput_req_s"] is None
    assert [n for n in body["notes"] if n.startswith("no best run for goodput")] == [
        f"no best run for goodput: it counts the requests that met each run's own SLO, and the rankable runs' SLOs "
        f"differ or are not known (#{a.pk}: TTFT ≤ 1 s; #{b.pk}: TTFT ≤ 0.5 s)"]
    assert set(_reasons(body)) == {k for k, best in body["best"].items() if best is None}
    assert all(_reasons(body).values())


# --- the request rate's unit is in its export name -------------------------------------------


def test_the_exports_name_the_request_rate_with_its_unit(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="open", status=SweepStatus.DONE, grid={"request_rates": [2.5]})
    run = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.DONE, request_rate=2.5, input_len=8,
                                      output_len=8, summary={"requests": 4, "successes": 4, "failures": 0,
                                                             "output_throughput_tok_s": 10.0})
    for url in (f"/api/runs/{run.pk}/export/?format=csv", f"/api/sweeps/{sweep.pk}/export/?format=csv"):
        [row] = list(csv.DictReader(io.StringIO(viewer_api.get(url).content.decode())))
        assert row["request_rate_req_s"] == "2.5" and "request_rate" not in row, url
    exported = json.loads(viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").content)
    assert exported["request_rate_req_s"] == 2.5 and "request_rate" not in exported
    [in_sweep] = json.loads(viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json").content)["runs"]
    assert in_sweep["request_rate_req_s"] == 2.5 and "request_rate" not in in_sweep
