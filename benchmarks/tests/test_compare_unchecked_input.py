"""A run whose prompt length could not be checked against the engine's count (flag
``input_length_unchecked``) is shown in a comparison but never ranked: it is listed in
``excluded`` with its reason, in the API, on the page and in the CSV."""
from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

pytestmark = pytest.mark.django_db

REASON = ("input length unchecked — the server reported no prompt tokens per request and its "
          "prompts could not be counted again after it, so its prompts may be much longer or shorter than the "
          "requested 64 tokens and its tok/s and latencies cannot be compared with any other run's")


@pytest.fixture
def runs() -> tuple[BenchmarkRun, BenchmarkRun, BenchmarkRun]:
    """Two checked runs (100 and 120 tok/s) and an unchecked one that measured the most (900 tok/s)."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPED)
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, num_gpus=1)
    summary = {"requests": 10, "successes": 10, "failures": 0, "duration_s": 1.0,
               "ttft_s": {"mean": 0.2, "p50": 0.2, "p90": 0.2, "p99": 0.2}, "tpot_s": {"mean": 0.02}}

    def run(ordinal: int, tok_s: float, ttft_s: float, flags: list[str]) -> BenchmarkRun:
        return BenchmarkRun.objects.create(
            sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=8, input_len=64, output_len=64,
            num_gpus=1, flags=flags, summary={**summary, "output_throughput_tok_s": tok_s,
                                              "ttft_s": {k: ttft_s for k in ("mean", "p50", "p90", "p99")}})

    return (run(0, 100.0, 0.4, []), run(1, 120.0, 0.3, []),
            run(2, 900.0, 0.01, ["input_length_unchecked"]))


def test_the_api_lists_the_unchecked_run_as_excluded_and_ranks_the_others(viewer_api, runs) -> None:
    good, better, unchecked = runs
    body = viewer_api.get(f"/api/runs/compare/?ids={good.pk},{better.pk},{unchecked.pk}").json()
    assert body["excluded"] == [{"id": unchecked.pk, "reason": REASON}]
    by_id = {e["id"]: e for e in body["runs"]}
    assert [by_id[r.pk]["rankable"] for r in runs] == [True, True, False]
    assert by_id[unchecked.pk]["refusal"] == f"run #{unchecked.pk} is not ranked: {REASON}"
    assert by_id[unchecked.pk]["refusal"] in body["notes"]
    assert body["best"]["output_throughput_tok_s"] == better.pk
    assert body["best"]["ttft_ms.p99"] == better.pk
    tok = next(f for f in body["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["values"] == [100.0, 120.0, 900.0]   # shown, not ranked


def test_an_unchecked_baseline_gives_no_delta_and_says_why(viewer_api, runs) -> None:
    good, _, unchecked = runs
    body = viewer_api.get(f"/api/runs/compare/?ids={good.pk},{unchecked.pk}&baseline={unchecked.pk}").json()
    assert (f"the baseline run #{unchecked.pk} is not ranked (its input length was not checked), so no delta is "
            "given; choose a ranked run as the baseline") in body["notes"]


def test_the_page_and_the_csv_say_the_unchecked_run_is_not_ranked(viewer, runs) -> None:
    good, better, unchecked = runs
    client = logged_in_client(viewer)
    url = reverse("benchmarks:compare") + f"?runs={good.pk},{better.pk},{unchecked.pk}"
    html = client.get(url).content.decode()
    assert f"Run #{unchecked.pk} is not ranked: input length unchecked" in html.replace("&#x27;", "'")
    assert html.count('tag warn small') == 1 and "not ranked</div>" in html
    row = html.split("<td>output throughput (tok/s)</td>")[1].split("</tr>")[0]
    assert 'class="num best">120.0<' in row and "best" not in row.split("120.0")[1]
    rows = {int(r["run_id"]): r for r in csv.DictReader(io.StringIO(client.get(url + "&format=csv").content.decode()))}
    assert rows[unchecked.pk]["rankable"] == "false"
    assert rows[unchecked.pk]["not_ranked_reason"] == f"run #{unchecked.pk} is not ranked: {REASON}"
    assert rows[unchecked.pk]["best_for"] == "" and "output_throughput_tok_s" in rows[better.pk]["best_for"]
