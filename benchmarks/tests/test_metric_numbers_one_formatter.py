"""Every page prints a metric as the results table does (docs/benchmarks.md: "the same decimal
places and thousands separated"): the run page, the sweep page, the runs list and the comparison
of runs or of sweeps, through one formatter; the exports keep the full value."""
from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep

pytestmark = pytest.mark.django_db


def _run(sweep: BenchmarkSweep, ordinal: int, *, tpot_s: float, itl_s: float) -> BenchmarkRun:
    summary = {"requests": 100, "successes": 100, "failures": 0, "duration_s": 10.0,
               "output_throughput_tok_s": 5222.34, "request_throughput_req_s": 1.23456,
               "ttft_s": {"mean": 3.59682, "p50": 3.4, "p90": 4.1, "p99": 12.34567},
               "tpot_s": {"mean": tpot_s, "p50": 0.09, "p90": 0.1, "p99": 0.11},
               "itl_s": {"mean": itl_s, "p50": 0.4652, "p90": 0.6, "p99": 0.7},
               "e2e_s": {"mean": 15.2, "p50": 14.0, "p90": 16.0, "p99": 18.0}}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=4,
                                       input_len=128, output_len=64, num_gpus=2, summary=summary)


@pytest.fixture
def two_sweeps() -> tuple[BenchmarkRun, BenchmarkRun]:
    # Values so close that a row given places until they read apart would print 4 decimals.
    first = _run(BenchmarkSweep.objects.create(name="a", status=SweepStatus.DONE), 0,
                 tpot_s=0.0940696, itl_s=0.5046297)
    second = _run(BenchmarkSweep.objects.create(name="b", status=SweepStatus.DONE), 0,
                  tpot_s=0.0940704, itl_s=0.5046303)
    return first, second


def _compare_cells(page: str, label: str) -> list[str]:
    row = page.split(f"<td>{label}</td>", 1)[1].split("</tr>", 1)[0]
    return [c.split(">", 1)[1] for c in row.split("</td>") if "<td" in c]


def _row_cells(table: str, run: BenchmarkRun) -> list[str]:
    row = table.split(f'id="run-{run.pk}"', 1)[1].split("</tr>", 1)[0]
    return [c.split("<", 1)[0] for c in row.split('<td class="num">')[1:]]


def test_the_run_sweep_list_and_compare_pages_print_a_metric_alike(client, viewer, two_sweeps) -> None:
    first, second = two_sweeps
    client.force_login(viewer)
    expected = {"output": "5,222.3", "per_gpu": "2,611.17", "req_s": "1.235",
                "ttft_mean": "3,596.8", "ttft_p99": "12,345.7", "tpot_mean": "94.07",
                "itl_mean": "504.63", "itl_p50": "465.20", "e2e_mean": "15,200"}

    for query in (f"sweeps={second.sweep_id},{first.sweep_id}", f"runs={first.pk},{second.pk}"):
        page = client.get(reverse("benchmarks:compare") + "?" + query).content.decode()
        for label, key in (("output throughput (tok/s)", "output"), ("output throughput per GPU (tok/s)", "per_gpu"),
                           ("request throughput (req/s)", "req_s"), ("TTFT mean (ms)", "ttft_mean"),
                           ("TTFT p99 (ms)", "ttft_p99"), ("TPOT mean (ms)", "tpot_mean"),
                           ("ITL mean (ms)", "itl_mean"), ("ITL p50 (ms)", "itl_p50"), ("E2E mean (ms)", "e2e_mean")):
            assert _compare_cells(page, label) == [expected[key]] * 2, (query, label)
        table = page.split('<table class="compare">', 1)[1].split("</table>", 1)[0]
        assert "94.0696" not in table and "504.6297" not in table

    for run in (first, second):
        table = client.get(reverse("benchmarks:sweep-detail", args=[run.sweep_id])).content.decode()
        cells = _row_cells(table, run)
        assert cells[1:5] == [expected["output"], expected["per_gpu"], expected["req_s"], "—"]
        assert cells[5] == expected["ttft_mean"] and cells[8] == expected["ttft_p99"]
        assert cells[9] == expected["tpot_mean"] and cells[13:15] == [expected["itl_mean"], expected["itl_p50"]]
        assert cells[17] == expected["e2e_mean"]

        html = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
        summary = {label: value for label, value in re.findall(
            r'<tr><td>([^<]+)</td><td class="num">([^<]*)</td></tr>', html)}
        assert summary["Output throughput (tok/s)"] == expected["output"]
        assert summary["Output throughput per GPU (tok/s)"] == expected["per_gpu"]
        assert summary["Request throughput (req/s)"] == expected["req_s"]
        latency = html.split('<table class="latency">', 1)[1].split("</table>", 1)[0]
        for label, stats in (("TTFT", (expected["ttft_mean"], "3,400.0", "4,100.0", expected["ttft_p99"])),
                             ("TPOT", (expected["tpot_mean"], "90.00", "100.00", "110.00")),
                             ("ITL \\(per event\\)", (expected["itl_mean"], expected["itl_p50"], "600.00", "700.00")),
                             ("E2E", (expected["e2e_mean"], "14,000", "16,000", "18,000"))):
            row = re.search(rf'<td title="[^"]*">{label}</td>((?:<td class="num">[^<]*</td>){{4}})', latency)
            assert row, label
            assert re.findall(r'<td class="num">([^<]*)</td>', row.group(1)) == list(stats), label
        assert "3596.82" not in html and "94.0696" not in html

    runs_list = client.get(reverse("benchmarks:index")).content.decode()
    for run in (first, second):
        row = runs_list.split(f'/benchmarks/runs/{run.pk}/"', 1)[1].split("</tr>", 1)[0]
        assert [expected["output"], expected["ttft_p99"], expected["tpot_mean"]] == [
            c.split("<", 1)[0] for c in row.split('<td class="num">')[1:4]]


def test_the_exports_keep_the_full_value(viewer_api, two_sweeps) -> None:
    first, second = two_sweeps
    rows = list(csv.DictReader(io.StringIO(
        viewer_api.get(f"/api/runs/compare/?ids={first.pk},{second.pk}&format=csv").content.decode())))
    assert [float(r["tpot_ms_mean"]) for r in rows] == [pytest.approx(94.0696), pytest.approx(94.0704)]
    assert float(rows[0]["ttft_ms_mean"]) == pytest.approx(3596.82) and "," not in rows[0]["ttft_ms_mean"]


def test_the_error_adjusted_percentiles_are_printed_as_the_latency_table_prints_them(client, viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="adj", status=SweepStatus.DONE)
    run = _run(sweep, 0, tpot_s=0.09, itl_s=0.5)
    run.summary.update(failures=3, error_adjusted={
        "ttft_s": {"p50": 3.45678, "p90": 4.5, "p99": None}, "e2e_s": {"p50": 14.0, "p90": 16.5, "p99": None},
        "failures": 3, "infinite": ["ttft_s.p99", "e2e_s.p99"]})
    run.save(update_fields=["summary"])
    client.force_login(viewer)
    html = client.get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    table = html.split('<table class="latency error-adjusted">', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', table) == [
        "3,456.8", "4,500.0", "∞ (failures)", "14,000", "16,500", "∞ (failures)"]


def test_a_compared_row_keeps_its_places_unless_the_best_would_read_as_another() -> None:
    from benchmarks.views.run_pages import _row_texts
    # close values (a tie under the 2 % rule): the places the other pages print
    assert _row_texts("tpot_ms.mean", [94.0696, 94.0704, 504.6297]) == ["94.07", "94.07", "504.63"]
    # a best in bold that would read as the runner-up: one more place for the whole row
    assert _row_texts("goodput_req_s", [0.0014, 0.0011, 0.2], best=1) == ["0.0014", "0.0011", "0.2000"]
    assert _row_texts("goodput_req_s", [0.0014, 0.0011, 0.2], best=2) == ["0.001", "0.001", "0.200"]
