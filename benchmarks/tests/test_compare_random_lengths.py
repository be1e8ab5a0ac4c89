"""Runs whose lengths were drawn at random are ranked against runs of the same random-length
settings; runs whose lengths are not recorded say "lengths unknown", never "mismatch"."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus
from benchmarks.models import BenchmarkRun
from benchmarks.services import run_import
from benchmarks.services.runs import run_length_setting, runs_compare
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
SGLANG = json.loads((DATA / "sglang-bench-serving-h200.jsonl").read_text())
VLLM_TEXT = (DATA / "vllm-bench-serve.json").read_text()

pytestmark = pytest.mark.django_db


def _sglang(user, *, duration: float, ratio: float = 0.0, name: str = "r.jsonl") -> BenchmarkRun:
    """A SGLang random-dataset run of the fixture's tokens over ``duration`` seconds (its output
    throughput total_output_tokens / duration), lengths drawn with ``--random-range-ratio ratio``."""
    line = {**SGLANG, "duration": duration, "random_range_ratio": ratio,
            "output_throughput": SGLANG["total_output_tokens"] / duration}
    [run] = run_import(text=json.dumps(line) + "\n", filename=name, user=user)
    return run


def test_two_runs_of_the_same_random_lengths_are_ranked(operator, viewer_api, viewer) -> None:
    slow = _sglang(operator, duration=298.0)
    fast = _sglang(operator, duration=149.0)
    assert run_length_setting(run=slow) == ("random", "random [1, 1024]/[1, 1024]")
    response = viewer_api.get(f"/api/runs/compare/?ids={slow.pk},{fast.pk}")
    assert response.status_code == 200
    body = response.json()
    assert [(e["rankable"], e["refusal"], e["lengths"]) for e in body["runs"]] == [
        (True, None, "random [1, 1024]/[1, 1024]"), (True, None, "random [1, 1024]/[1, 1024]")]
    assert body["best"]["output_throughput_tok_s"] == fast.pk
    assert body["baseline"] == slow.pk
    tok = next(f for f in body["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["values"] == pytest.approx([160347 / 298.0, 160347 / 149.0])
    assert tok["deltas_pct"] == pytest.approx([0.0, 100.0])
    assert not any("not ranked" in n or "different input/output lengths" in n for n in body["notes"])

    page = logged_in_client(viewer).get(reverse("benchmarks:compare") + f"?runs={slow.pk},{fast.pk}")
    html = page.content.decode()
    assert page.status_code == 200 and "not ranked" not in html
    row = html.split("<td>output throughput (tok/s)</td>")[1].split("</tr>")[0]
    assert row == '<td class="num">538.1</td><td class="num best">1,076.2</td>'   # 160347 tokens / 298 s, / 149 s
    assert '<tr class="delta">' in html and "+100" in html


def test_different_random_lengths_name_no_best(operator) -> None:
    wide = _sglang(operator, duration=298.0)
    narrow = _sglang(operator, duration=149.0, ratio=0.5)
    compared = runs_compare(runs=[wide, narrow])
    assert [e["rankable"] for e in compared["runs"]] == [True, True]
    assert compared["best"]["output_throughput_tok_s"] is None
    assert ("the rankable runs have different input/output lengths (random [1, 1024]/[1, 1024], "
            "random [512, 1024]/[512, 1024]); no best run is named") in compared["notes"]


def test_a_random_length_run_is_not_ranked_against_a_fixed_length_one(operator) -> None:
    imported = _sglang(operator, duration=298.0)
    dist = {"mean": 0.2, "p50": 0.2, "p90": 0.28, "p99": 0.3, "count": 8}
    fixed = BenchmarkRun.objects.create(
        status=RunStatus.DONE, concurrency=8, input_len=1024, output_len=1024, num_requests=8,
        summary={"requests": 8, "successes": 8, "failures": 0, "duration_s": 2.0, "output_throughput_tok_s": 100.0,
                 "request_throughput_req_s": 4.0, "ttft_s": dist, "tpot_s": dist, "e2e_s": dist, "itl_s": dist,
                 "flags": {}, "errors": {}})
    compared = runs_compare(runs=[imported, fixed])
    entry = compared["runs"][0]
    assert not entry["rankable"] and compared["runs"][1]["rankable"]
    assert entry["refusal"] == (
        f"run #{imported.pk} is not ranked: variable lengths — its request lengths were drawn at random (random "
        "[1, 1024]/[1, 1024]), so its tok/s and latencies are not comparable with fixed-length runs; compare it "
        "with runs of the same random-length settings")
    assert compared["best"]["output_throughput_tok_s"] == fixed.pk


def test_unknown_lengths_are_not_called_a_mismatch(operator, viewer_api) -> None:
    [vllm] = run_import(text=VLLM_TEXT, filename="v.json", user=operator)
    random_run = _sglang(operator, duration=298.0)
    assert run_length_setting(run=vllm) == ("unknown", None)
    body = viewer_api.get(f"/api/runs/compare/?ids={vllm.pk},{random_run.pk}&baseline={vllm.pk}").json()
    entry = body["runs"][0]
    assert entry["lengths"] is None and not entry["rankable"]
    assert entry["refusal"] == (f"run #{vllm.pk} is not ranked: lengths unknown — the result file does not record "
                                "requested input/output lengths, so its tok/s and latencies cannot be compared with "
                                "any other run's")
    assert "mismatch" not in entry["refusal"]
    assert body["runs"][1]["rankable"] and body["best"]["output_throughput_tok_s"] == random_run.pk
    assert (f"the baseline run #{vllm.pk} is not ranked (its lengths are unknown), so no delta is given; choose a "
            "ranked run as the baseline") in body["notes"]


def test_a_run_without_the_range_ratio_is_refused_for_the_range_not_the_lengths(operator) -> None:
    line = {k: v for k, v in SGLANG.items() if k != "random_range_ratio"}
    [unranged] = run_import(text=json.dumps(line) + "\n", filename="noratio.jsonl", user=operator)
    assert unranged.flags == ["range_ratio_unknown"] and unranged.label == "1 req/s lengths unknown"
    assert run_length_setting(run=unranged) == ("unknown", None)
    ranged = _sglang(operator, duration=298.0)
    entry = runs_compare(runs=[unranged, ranged])["runs"][0]
    assert entry["refusal"] == (f"run #{unranged.pk} is not ranked: lengths unknown — the result file records the "
                                "requested lengths but not SGLang's random_range_ratio (the range [L*r, L] they "
                                "were drawn from is unknown), so its tok/s and latencies cannot be compared with any other run's")
