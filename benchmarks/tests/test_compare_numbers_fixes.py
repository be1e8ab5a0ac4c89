"""Comparing runs says what makes their numbers comparable: runs measured against different SLOs
list the SLO among the differing configuration and a note says their goodput is not comparable;
every metric has a change against a baseline run (the first, or the one asked for) in the API, on
the page and in the CSV; and a difference within run-to-run noise names no best run.

The SLO and delta cases compare runs of two real sweeps against a real ``sim`` server; the tie
cases use rows with stored summaries, like the other comparison tests."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import runs_compare, sweep_create, sweep_execute
from benchmarks.services.runs import COMPARE_TIE_PCT
from benchmarks.tests.sweep_support import sim_deployment_create

# 10 requests: the fewest a comparison names a best from (MIN_COMPARED_REQUESTS).
GRID = {"concurrency": [2], "lengths": "32:16", "requests": 10}


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _measured(deployment, operator, slo: dict) -> BenchmarkRun:
    sweep = sweep_create(deployment=deployment, user=operator, grid={**GRID, "slo": slo})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    [run] = sweep.runs.all()
    return run


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_it_lists_the_slo_as_a_difference_and_refuses_to_compare_goodput_across_slos(
        sim_url: str, operator, viewer, viewer_api) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    # No request of the sim answers within a microsecond; every one within 10 s.
    strict = _measured(deployment, operator, {"ttft_s": 0.000001})
    loose = _measured(deployment, operator, {"ttft_s": 10.0})
    assert strict.summary["goodput_req_s"] == 0.0 and loose.summary["goodput_req_s"] > 0

    body = viewer_api.get(f"/api/runs/compare/?ids={strict.pk},{loose.pk}").json()
    slos = [{"ttft_s": 0.000001, "tpot_s": None, "e2e_s": None}, {"ttft_s": 10.0, "tpot_s": None, "e2e_s": None}]
    assert [r["config"]["slo"] for r in body["runs"]] == slos
    assert {"field": "slo", "values": slos} in body["config_differs"]
    assert (f"goodput is not comparable across these runs: it counts the requests that met each run's own SLO, "
            f"and their SLOs differ (run #{strict.pk}: TTFT ≤ 0.000001 s; run #{loose.pk}: TTFT ≤ 10 s); no goodput "
            "delta is given") in body["notes"]
    fields = {f["key"]: f for f in body["fields"]}
    assert fields["goodput_req_s"]["values"] == [0.0, loose.summary["goodput_req_s"]]
    # the baseline's 0 against itself is no change; 0 is no base for another value, and the SLOs differ
    assert fields["goodput_req_s"]["deltas_pct"] == [0.0, None]

    # Deltas against the first run by default, in percent of its value.
    assert body["baseline"] == strict.pk
    tok = fields["output_throughput_tok_s"]
    assert tok["deltas_pct"][0] == 0.0
    assert tok["deltas_pct"][1] == pytest.approx((tok["values"][1] - tok["values"][0]) / tok["values"][0] * 100,
                                                 abs=1e-3)
    ttft = fields["ttft_ms.p99"]
    assert ttft["deltas_pct"][1] == pytest.approx((ttft["values"][1] - ttft["values"][0]) / ttft["values"][0] * 100,
                                                  abs=1e-3)
    # A best run is named only past the tie threshold, and a tie says so.
    spread = abs(tok["values"][0] - tok["values"][1]) / max(tok["values"]) * 100
    if spread < COMPARE_TIE_PCT:
        assert body["best"]["output_throughput_tok_s"] is None
        assert body["ties"]["output_throughput_tok_s"] and any(
            n.startswith("no best run for output throughput") for n in body["notes"])
    else:
        assert body["best"]["output_throughput_tok_s"] == (strict.pk if tok["values"][0] > tok["values"][1]
                                                            else loose.pk)

    # The service takes another baseline; one not compared is refused by name.
    other = runs_compare(runs=[strict, loose], baseline_id=loose.pk)
    assert other["baseline"] == loose.pk
    assert next(f for f in other["fields"] if f["key"] == "output_throughput_tok_s")["deltas_pct"][1] == 0.0

    # The page: each run's SLO, the SLO highlighted as a difference, the note, deltas vs a chosen baseline.
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("benchmarks:compare"), {"runs": f"{strict.pk},{loose.pk}", "baseline": loose.pk})
    html = page.content.decode()
    assert page.status_code == 200
    assert '<td class="num small">TTFT ≤ 0.000001 s</td><td class="num small">TTFT ≤ 10 s</td>' in html
    assert '<tr class="config differs"><td>slo <span class="tag warn small">differs</span></td>' in html
    assert "Goodput is not comparable across these runs" in html
    assert f"Change vs baseline run #{loose.pk}" in html and '<div class="tag small baseline">baseline</div>' in html
    expected = (tok["values"][0] - tok["values"][1]) / tok["values"][1] * 100
    sign = "+" if expected > 0 else "−"
    text = "0 %" if abs(expected) < 0.05 else f"{sign}{abs(expected):.1f} %"
    assert (f'<tr class="delta"><td>output throughput</td><td class="num small">{text}</td>'
            '<td class="num small">baseline</td></tr>') in html
    assert client.get(reverse("benchmarks:compare"), {"runs": f"{strict.pk},{loose.pk}",
                                                      "baseline": "999999"}).status_code == 400

    # The CSV: each run's SLO, values with units in the names, deltas against the baseline.
    export = client.get(reverse("benchmarks:compare"), {"runs": f"{strict.pk},{loose.pk}", "format": "csv"})
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [(r["run_id"], r["baseline"], r["slo_ttft_s"], r["slo_tpot_s"]) for r in rows] == [
        (str(strict.pk), "true", "1e-06", ""), (str(loose.pk), "false", "10.0", "")]
    assert [r["goodput_req_s_delta_pct"] for r in rows] == ["0.0", ""]
    assert rows[0]["output_throughput_tok_s_delta_pct"] == "0.0"
    assert float(rows[1]["output_throughput_tok_s_delta_pct"]) == pytest.approx(tok["deltas_pct"][1])
    assert float(rows[1]["ttft_ms_p99"]) == pytest.approx(ttft["values"][1])
    assert "itl_per_gap_ms_p99" in rows[0] and "itl_p99_ms" not in rows[0]


# --- ties ---------------------------------------------------------------------------------------


def _done_run(sweep: BenchmarkSweep, ordinal: int, *, tok_s: float, ttft_p99_s: float,
              tpot_mean_s: float) -> BenchmarkRun:
    summary = {"requests": 100, "successes": 100, "failures": 0, "duration_s": 10.0,
               "output_throughput_tok_s": tok_s,
               "ttft_s": {"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": ttft_p99_s}, "tpot_s": {"mean": tpot_mean_s}}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=8,
                                       input_len=256, output_len=256, num_gpus=1, summary=summary)


@pytest.mark.django_db
def test_it_names_no_best_run_when_the_two_best_are_within_the_noise_threshold(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="ties", status=SweepStatus.DONE)
    # tok/s 100.4 vs 100.0: 0.4 % apart, a tie; TTFT p99 300 ms vs 200 ms: a clear winner;
    # TPOT mean 20.0 vs 20.3 ms: 1.5 %, a tie, the third run (30 ms) out of it.
    a = _done_run(sweep, 0, tok_s=100.0, ttft_p99_s=0.3, tpot_mean_s=0.0203)
    b = _done_run(sweep, 1, tok_s=100.4, ttft_p99_s=0.2, tpot_mean_s=0.020)
    c = _done_run(sweep, 2, tok_s=50.0, ttft_p99_s=0.9, tpot_mean_s=0.030)
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{c.pk}").json()
    assert body["tie_threshold_pct"] == COMPARE_TIE_PCT == 2.0
    assert {k: body["best"][k] for k in ("output_throughput_tok_s", "tok_s_per_gpu", "ttft_ms.p99",
                                         "tpot_ms.mean")} == {"output_throughput_tok_s": None, "tok_s_per_gpu": None,
                                                              "ttft_ms.p99": b.pk, "tpot_ms.mean": None}
    assert {k: body["ties"][k] for k in ("output_throughput_tok_s", "tok_s_per_gpu", "tpot_ms.mean")} == {
        "output_throughput_tok_s": [b.pk, a.pk], "tok_s_per_gpu": [b.pk, a.pk], "tpot_ms.mean": [b.pk, a.pk]}
    assert "ttft_ms.p99" not in body["ties"]
    assert (f"no best run for output throughput: runs #{b.pk} 100.4, #{a.pk} 100 tok/s are within 0.4 % of "
            "each other, under the 2 % tie threshold (run-to-run noise)") in body["notes"]
    assert (f"no best run for TPOT mean: runs #{b.pk} 20, #{a.pk} 20.3 ms are within 1.5 % of each other, "
            "under the 2 % tie threshold (run-to-run noise)") in body["notes"]
    # Past the threshold the best is named: 103 vs 100 is 2.9 %.
    d = _done_run(sweep, 3, tok_s=103.0, ttft_p99_s=0.3, tpot_mean_s=0.03)
    assert runs_compare(runs=[a, d])["best"]["output_throughput_tok_s"] == d.pk
    # A tighter threshold separates the first pair.
    assert runs_compare(runs=[a, b], tie_pct=0.1)["best"]["output_throughput_tok_s"] == b.pk
