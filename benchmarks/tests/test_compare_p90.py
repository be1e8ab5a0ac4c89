"""The comparison ranks and shows the p90 of TTFT, TPOT and E2E, as every summary computes it
(metrics.md: p50, p90, p99 plus mean): a field with values and deltas in the API, a best run, a
row on the page and columns in the CSV download."""
from __future__ import annotations

import csv
import io

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep

pytestmark = pytest.mark.django_db

P90 = ("ttft_ms.p90", "tpot_ms.p90", "e2e_ms.p90")


def _run(sweep: BenchmarkSweep, ordinal: int, *, p90_s: float) -> BenchmarkRun:
    # Equal means, p50s and p99s, so p90 alone tells the runs apart.
    def dist(scale: float) -> dict[str, float]:
        return {"mean": scale, "p50": scale, "p90": p90_s * scale, "p99": 3 * scale}

    summary = {"requests": 100, "successes": 100, "failures": 0, "duration_s": 10.0,
               "output_throughput_tok_s": 500.0, "request_throughput_req_s": 10.0,
               "ttft_s": dist(0.1), "tpot_s": dist(0.01), "itl_s": dist(0.01), "e2e_s": dist(1.0)}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=4,
                                       input_len=128, output_len=64, num_gpus=2, summary=summary)


def test_it_ranks_and_shows_the_p90_of_each_latency(viewer_api, client, viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="p90", status=SweepStatus.DONE)
    slow = _run(sweep, 0, p90_s=2.0)
    fast = _run(sweep, 1, p90_s=1.5)
    body = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["ttft_ms.p90"]["label"] == "TTFT p90" and fields["ttft_ms.p90"]["unit"] == "ms"
    assert fields["ttft_ms.p90"]["values"] == [pytest.approx(200.0), pytest.approx(150.0)]
    assert fields["tpot_ms.p90"]["values"] == [pytest.approx(20.0), pytest.approx(15.0)]
    assert fields["e2e_ms.p90"]["values"] == [pytest.approx(2000.0), pytest.approx(1500.0)]
    assert fields["e2e_ms.p90"]["deltas_pct"] == [0.0, pytest.approx(-25.0)]
    assert {key: body["best"][key] for key in P90} == {key: fast.pk for key in P90}
    # the other statistics are equal: a tie, no best
    assert body["best"]["ttft_ms.p50"] is None and body["best"]["e2e_ms.p99"] is None

    response = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}&format=csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [float(r["ttft_ms_p90"]) for r in rows] == [pytest.approx(200.0), pytest.approx(150.0)]
    assert [float(r["tpot_ms_p90"]) for r in rows] == [pytest.approx(20.0), pytest.approx(15.0)]
    assert float(rows[1]["e2e_ms_p90_delta_pct"]) == pytest.approx(-25.0)
    assert set(P90) <= set(rows[1]["best_for"].split(";"))

    client.force_login(viewer)
    page = client.get(f"/benchmarks/compare/?runs={slow.pk},{fast.pk}").content.decode()
    for label in ("TTFT p90 (ms)", "TPOT p90 (ms)", "E2E p90 (ms)"):
        assert f"<td>{label}</td>" in page, label
