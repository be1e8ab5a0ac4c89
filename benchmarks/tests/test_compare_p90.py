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
    # best_for names the CSV's own columns, as its header does
    best_for = rows[1]["best_for"].split(";")
    assert {"ttft_ms_p90", "tpot_ms_p90", "e2e_ms_p90"} <= set(best_for) and set(best_for) <= set(rows[1])

    client.force_login(viewer)
    page = client.get(f"/benchmarks/compare/?runs={slow.pk},{fast.pk}").content.decode()
    for label in ("TTFT p90 (ms)", "TPOT p90 (ms)", "E2E p90 (ms)"):
        assert f"<td>{label}</td>" in page, label


def test_the_page_shows_tpot_p50_and_itl_p50_p90_and_request_rates_as_the_sweep_pages_do(
        viewer_api, client, viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="rows", status=SweepStatus.DONE)
    slow = _run(sweep, 0, p90_s=2.0)
    fast = _run(sweep, 1, p90_s=1.5)
    for run, rate in ((slow, 0.04), (fast, 0.0412)):
        run.summary["request_throughput_req_s"] = rate
        run.summary["tpot_s"]["p50"] = 0.0125 if run is slow else 0.011
        run.summary["itl_s"]["p50"] = 0.0091 if run is slow else 0.0081
        run.save(update_fields=["summary"])
    body = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    assert (fields["tpot_ms.p50"]["label"], fields["tpot_ms.p50"]["unit"]) == ("TPOT p50", "ms")
    assert fields["itl_ms.p50"]["values"] == [pytest.approx(9.1), pytest.approx(8.1)]
    assert fields["itl_ms.p90"]["values"] == [pytest.approx(20.0), pytest.approx(15.0)]
    assert body["best"]["tpot_ms.p50"] == fast.pk and body["best"]["itl_ms.p90"] == fast.pk

    client.force_login(viewer)
    for query in (f"runs={slow.pk},{fast.pk}", f"sweeps={sweep.pk}"):
        page = client.get(f"/benchmarks/compare/?{query}").content.decode()
        for label, texts in (("TPOT p50 (ms)", ("12.50", "11.00")), ("ITL p50 (ms)", ("9.10", "8.10")),
                             ("ITL p90 (ms)", ("20.00", "15.00")), ("TTFT p50 (ms)", ("100.0", "100.0")),
                             ("request throughput (req/s)", ("0.040", "0.041"))):
            row = page.split(f"<td>{label}</td>", 1)[1].split("</tr>", 1)[0]
            cells = [c.split(">", 1)[1] for c in row.split("</td>") if "<td" in c]
            assert cells == list(texts), (label, cells)
        sweep_page = client.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
        assert ">0.040</td>" in sweep_page and ">0.041</td>" in sweep_page


def test_every_value_of_a_row_has_the_places_the_sweep_pages_give_that_metric():
    from benchmarks.views.run_pages import _row_texts
    assert _row_texts("tok_s_per_gpu", [3.3, 3.15]) == ["3.30", "3.15"]
    assert _row_texts("itl_ms.p99", [95.8, 97.2, 316, 559]) == ["95.80", "97.20", "316.00", "559.00"]
    assert _row_texts("ttft_ms.p99", [100, 297.6, None]) == ["100.0", "297.6", None]
    assert _row_texts("e2e_ms.mean", [1234.4, 99.0]) == ["1,234", "99"]
    assert _row_texts("itl_ms.mean", [1.001, 1.004]) == ["1.00", "1.00"]   # a tie: the places the other pages print
    assert _row_texts("goodput_req_s", [0.0011, 0.0014], best=0) == ["0.0011", "0.0014"]   # the best reads apart
    assert _row_texts("failures", [1, 0]) == ["1", "0"]
