"""Sweep charts draw open-loop (request-rate) points next to closed-loop (concurrency) points
instead of dropping them; labels say "lengths unknown" for a run whose file did not record them;
the run CSV carries std, the SLO, SLO attainment, total token throughput and achieved concurrency
with units in the column names and per-gap ITL columns; an SGLang import that gives no failure
count leaves failures and the sent total unknown.

A real sweep against a real ``sim`` server holds both kinds of point; imports use the real
fixture files."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.services import run_export_csv, run_import, sweep_create, sweep_execute
from benchmarks.choices import SweepStatus
from benchmarks.tests.sweep_support import sim_deployment_create
from benchmarks.tests.page_support import logged_in_client as _client, json_script as _json_script

DATA = Path(__file__).parent / "data"
SGLANG = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
VLLM = (DATA / "vllm-bench-serve.json").read_text()


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_it_draws_open_loop_points_of_a_mixed_sweep_against_request_rate(sim_url: str, operator, viewer) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [1, 2], "request_rates": [20.0], "lengths": "32:4", "requests": 4,
                               "slo": {"ttft_s": 10.0}})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    runs = list(sweep.runs.order_by("ordinal"))
    assert [(r.concurrency, r.request_rate) for r in runs] == [(1, None), (2, None), (None, 20.0)]
    client = _client(viewer)
    html = client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()

    closed = _json_script(html, "chart-sweep-tok-s")
    assert closed["x"]["label"] == "concurrency" and closed["title"] == "Output throughput vs concurrency"
    assert [p[0] for p in closed["series"][0]["points"]] == [1.0, 2.0]
    assert closed["note"].startswith("1 open-loop point (request rate) is drawn on the request-rate charts")
    opened = _json_script(html, "chart-sweep-rate-tok-s")
    assert opened["x"] == {"label": "request rate", "unit": "req/s", "log": True}
    assert opened["series"] == [{"label": "32/4", "points": [[20.0, pytest.approx(runs[2].output_tok_s)]]}]
    for stem in ("tok-s-per-gpu", "ttft", "tpot", "e2e"):
        assert _json_script(html, f"chart-sweep-rate-{stem}")["x"]["label"] == "request rate"
    assert "Open-loop points" in html

    # The comparison page overlays them the same way: never on the concurrency axis.
    page = client.get(reverse("benchmarks:compare"), {"sweeps": str(sweep.pk)}).content.decode()
    assert [p[0] for p in _json_script(page, "chart-compare-tok-s")["series"][0]["points"]] == [1.0, 2.0]
    assert _json_script(page, "chart-compare-tok-s-rate")["series"][0]["points"][0][0] == 20.0
    assert _json_script(page, "chart-compare-ttft-p99-rate")["x"]["unit"] == "req/s"

    # The run CSV of a measured point: units in the names, std, the SLO, attainment, total tok/s,
    # achieved concurrency, and ITL named per gap.
    [row] = csv.DictReader(io.StringIO(run_export_csv(run=runs[1])))
    s = runs[1].summary
    assert float(row["ttft_ms_std"]) == pytest.approx(s["ttft_s"]["std"] * 1000)
    assert float(row["itl_per_gap_ms_p99"]) == pytest.approx(s["itl_s"]["p99"] * 1000)
    assert not any(c.startswith("itl_ms") for c in row)
    assert (row["slo_ttft_s"], row["slo_tpot_s"], row["slo_e2e_s"]) == ("10.0", "", "")
    assert float(row["slo_attainment_fraction"]) == s["slo_attainment"] == 1.0
    assert float(row["total_token_throughput_tok_s"]) == pytest.approx(s["total_token_throughput_tok_s"])
    assert float(row["achieved_concurrency_mean_requests"]) == pytest.approx(s["achieved_concurrency_mean"])
    assert int(row["achieved_concurrency_max_requests"]) == s["achieved_concurrency_max"] == 2


@pytest.mark.django_db
def test_it_labels_an_unrecorded_length_as_unknown_and_exports_what_the_file_gave(operator, viewer) -> None:
    [vllm] = run_import(text=VLLM, filename="vllm.json", user=operator)
    assert "lengths_unknown" in vllm.flags and vllm.label == "1 req/s lengths unknown"
    [sglang] = run_import(text=SGLANG, filename="h200.jsonl", user=operator)
    assert "variable_lengths" in sglang.flags and sglang.label == "1 req/s variable lengths"
    html = _client(viewer).get(reverse("benchmarks:run-detail", args=[vllm.pk])).content.decode()
    assert "1 req/s lengths unknown" in html and "<dt>Lengths</dt><dd>lengths unknown" in html

    obj = json.loads(VLLM)
    [row] = csv.DictReader(io.StringIO(run_export_csv(run=vllm)))
    assert float(row["ttft_ms_std"]) == obj["std_ttft_ms"] and float(row["itl_per_gap_ms_std"]) == obj["std_itl_ms"]
    assert float(row["total_token_throughput_tok_s"]) == obj["total_token_throughput"]
    assert row["achieved_concurrency_max_requests"] == str(obj["max_concurrent_requests"])
    # vLLM's file does not record the SLO its goodput used (here no goodput at all): empty, not 0.
    assert (row["slo_ttft_s"], row["slo_attainment_fraction"], row["goodput_req_s"]) == ("", "", "")


@pytest.mark.django_db
def test_it_leaves_failures_unknown_when_the_sglang_file_gives_no_count(operator, viewer_api) -> None:
    [run] = run_import(text=SGLANG, filename="h200.jsonl", user=operator)
    line = json.loads(SGLANG.splitlines()[0])
    assert "failed" not in line
    body = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert (body["metrics"]["successes"], body["metrics"]["failures"], body["metrics"]["requests"]) == (
        line["completed"], None, None)
    assert ("The file gives no failure count: 300 requests completed; how many were sent and how many failed is "
            "not recorded, so both are unknown (null), not 0.") in run.summary["notes"]
    [row] = csv.DictReader(io.StringIO(run_export_csv(run=run)))
    assert (row["successes"], row["failures"], row["requests"]) == ("300", "", "")
    # vLLM's file counts its failures: the total is known there.
    [vllm] = run_import(text=VLLM, filename="vllm.json", user=operator)
    assert (vllm.summary["requests"], vllm.summary["failures"]) == (200, 0)
