"""A comparison's goodput note lists each distinct SLO once and says which goodput deltas and best
it gives; grid messages spell refused numbers as JSON does and report every error at once; the
sweep form names an unknown deployment under its field; an SLO in ms is stored in seconds without
binary rounding; a standard deviation of fewer than 2 samples is null."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep

SLO = {"ttft_s": 0.02, "e2e_s": 0.05}


def _run(sweep: BenchmarkSweep, ordinal: int, *, goodput: float | None, slo: dict | None,
         status: str = RunStatus.DONE) -> BenchmarkRun:
    summary = {"requests": 20, "successes": 20, "failures": 0, "duration_s": 10.0, "output_throughput_tok_s": 100.0,
               "request_throughput_req_s": 2.0, "ttft_s": {"mean": 0.01, "p50": 0.01, "p90": 0.01, "p99": 0.01}}
    if goodput is not None:
        summary["goodput_req_s"] = goodput
    if slo is not None:
        summary["slo"] = slo
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=status, concurrency=1, input_len=256,
                                       output_len=256, num_gpus=1, summary=summary)


@pytest.mark.django_db
def test_the_goodput_note_lists_each_slo_once_and_says_which_deltas_it_gives(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="slo", status=SweepStatus.DONE)
    a = _run(sweep, 0, goodput=2.0, slo=SLO)
    b = _run(sweep, 1, goodput=0.852, slo=SLO)
    failed = _run(sweep, 2, goodput=None, slo=None, status=RunStatus.FAILED)
    plain = _run(sweep, 3, goodput=None, slo=None)
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{failed.pk},{plain.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["goodput_req_s"]["deltas_pct"] == [0.0, -57.4, None, None]
    assert body["best"]["goodput_req_s"] == a.pk
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note == (
        "goodput is not comparable across these runs: it counts the requests that met each run's own SLO, and their "
        f"SLOs differ (runs #{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; run #{plain.pk}: no SLO recorded); "
        f"goodput deltas are given only between runs #{a.pk} and #{b.pk}, which share the baseline run #{a.pk}'s "
        f"SLO; the best goodput is named among runs #{a.pk} and #{b.pk}, the ranked runs with a goodput, which "
        "share one SLO")

    # The baseline without an SLO: no goodput delta at all, and the note says so.
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{plain.pk}&baseline={plain.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["goodput_req_s"]["deltas_pct"] == [None, None, None]
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note.endswith(f"run #{plain.pk}: no SLO recorded); no goodput delta is given; the best goodput is named "
                         f"among runs #{a.pk} and #{b.pk}, the ranked runs with a goodput, which share one SLO")

    # Three SLOs, two shared: each listed once, and no best goodput across them.
    c = _run(sweep, 4, goodput=1.0, slo={"ttft_s": 0.0000001})
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{c.pk}").json()
    assert body["best"]["goodput_req_s"] is None
    assert {f["key"]: f for f in body["fields"]}["goodput_req_s"]["deltas_pct"] == [0.0, -57.4, None]
    assert (f"no best run for goodput: it counts the requests that met each run's own SLO, and the rankable runs' "
            f"SLOs differ or are not known (#{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; #{c.pk}: TTFT ≤ 1e-7 s)"
            ) in body["notes"]
    [note] = [n for n in body["notes"] if n.startswith("goodput")]
    assert note.endswith(f"(runs #{a.pk} and #{b.pk}: TTFT ≤ 0.02 s, E2E ≤ 0.05 s; run #{c.pk}: TTFT ≤ 1e-7 s); "
                         f"goodput deltas are given only between runs #{a.pk} and #{b.pk}, which share the baseline "
                         f"run #{a.pk}'s SLO")
