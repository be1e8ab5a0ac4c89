"""A goodput of 0 req/s is no request within the run's SLO: the comparison names no best run for
goodput then, and says that no run met its SLO, in the JSON and the CSV export alike."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import runs_compare

pytestmark = pytest.mark.django_db

SLO = {"ttft_s": 0.5, "tpot_s": 0.05}


def _run(sweep: BenchmarkSweep, ordinal: int, *, tok_s: float, goodput: float | None, slo: dict | None) -> BenchmarkRun:
    summary = {"requests": 20, "successes": 20, "failures": 0, "duration_s": 200.0, "output_throughput_tok_s": tok_s,
               "request_throughput_req_s": 0.1, "ttft_s": {"mean": 0.9, "p50": 0.9, "p99": 1.2},
               "tpot_s": {"mean": 0.094, "p99": 0.1}, "e2e_s": {"mean": 25.0, "p50": 25.0, "p99": 30.0}}
    if goodput is not None:
        summary["goodput_req_s"] = goodput
    if slo is not None:
        summary["slo"] = slo
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=1,
                                       input_len=256, output_len=256, num_gpus=8, summary=summary)


@pytest.fixture
def sweep(db) -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(name="zero goodput", status=SweepStatus.DONE)


def _goodput_notes(body: dict) -> list[str]:
    return [n for n in body["notes"] if "goodput" in n]


def test_the_only_run_with_a_goodput_of_0_is_not_named_best(viewer_api, sweep) -> None:
    # one run measured against an SLO that no request met, one without an SLO (no goodput)
    a = _run(sweep, 0, tok_s=25.0, goodput=0.0, slo=SLO)
    b = _run(sweep, 1, tok_s=26.0, goodput=None, slo=None)
    body = runs_compare(runs=[a, b])
    assert body["best"]["goodput_req_s"] is None
    notes = _goodput_notes(body)
    assert f"no best run for goodput: no run met its SLO (run #{a.pk} has a goodput of 0 req/s, no request " \
           "within the SLO)" in notes
    assert not any("named best for goodput" in n or "best goodput is named" in n for n in notes)
    csv_text = viewer_api.get(f"/api/runs/compare.csv?ids={a.pk},{b.pk}").content.decode()
    assert "no run met its SLO" in csv_text and "named best for goodput" not in csv_text


def test_runs_that_share_an_slo_none_met_have_no_best_goodput(sweep) -> None:
    a = _run(sweep, 0, tok_s=25.0, goodput=0.0, slo=SLO)
    b = _run(sweep, 1, tok_s=26.0, goodput=0.0, slo=SLO)
    body = runs_compare(runs=[a, b])
    assert body["best"]["goodput_req_s"] is None and "goodput_req_s" not in body["ties"]
    assert [n for n in body["notes"] if n.startswith("no best run for goodput")] == [
        f"no best run for goodput: no run met its SLO (runs #{a.pk} and #{b.pk} have a goodput of 0 req/s, "
        "no request within the SLO)"]


def test_a_run_that_met_its_slo_is_still_named_best_over_one_that_did_not(sweep) -> None:
    a = _run(sweep, 0, tok_s=25.0, goodput=0.0, slo=SLO)
    b = _run(sweep, 1, tok_s=26.0, goodput=0.05, slo=SLO)
    body = runs_compare(runs=[a, b])
    assert body["best"]["goodput_req_s"] == b.pk
    assert not any(n.startswith("no best run for goodput") for n in body["notes"])
