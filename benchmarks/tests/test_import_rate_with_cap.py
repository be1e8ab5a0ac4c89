"""An imported run with both a finite ``request_rate`` and a ``max_concurrency`` was an open loop
(requests sent at that rate) capped at that many in flight, not a closed loop: its label, its run
page, the comparison's notes and the charts say so. vLLM's ``max_concurrent_requests`` is shown on
the run page; it is the most successful requests active within one second (vLLM counts them in
one-second buckets), so it may exceed the cap and is kept with a note, but never exceeds
``completed``, which is refused naming both numbers.

The values are vLLM's real result (200 requests at 1 request/s, 40,000 input and 25,600 output
tokens in 203.5 s, ``max_concurrent_requests`` 12), given per-request lengths (200 input and 128
output tokens each: the file's totals / 200) so that the runs are ranked, and a cap."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.choices import RunStatus
from benchmarks.importers import ResultImportError, import_results
from benchmarks.models import BenchmarkRun
from benchmarks.services import run_import
from benchmarks.services.runs import runs_compare
from benchmarks.tests.page_support import page_text
from benchmarks.views.charts import sweep_charts
from benchmarks.views.common import run_row

DATA = Path(__file__).parent / "data"
VLLM = json.loads((DATA / "vllm-bench-serve.json").read_text())
LENS = {"input_lens": [200] * 200, "output_lens": [128] * 200}   # 40000 / 200, 25600 / 200

pytestmark = pytest.mark.django_db


def _text(**changes) -> str:
    return json.dumps({**VLLM, **LENS, **changes})


def test_a_rate_with_a_cap_is_labelled_an_open_loop_capped_in_flight(operator_api, viewer) -> None:
    answer = operator_api.post("/api/runs/import/", {"text": _text(max_concurrency=16), "filename": "r.json"},
                               format="json")
    assert answer.status_code == 201, answer.json()
    [body] = answer.json()["created"]
    assert (body["request_rate"], body["concurrency"]) == (1.0, 16)
    assert body["label"] == "1 req/s (at most 16 in flight) 200/128"
    run = BenchmarkRun.objects.get(pk=body["id"])
    html = page_text(viewer, reverse("benchmarks:run-detail", args=[run.pk]))
    assert "Run #%d <span class=\"muted\">·</span> 1 req/s (at most 16 in flight) 200/128" % run.pk in html
    load = html.split('<dd class="run-load">')[1].split("</dd>")[0]
    assert load.startswith("1.0 req/s (open loop), at most 16 requests in flight <span")
    assert "not a closed loop" in load and "concurrency 16 (closed loop)" not in load
    # vLLM's own count, with what it counts
    fact = html.split("Max concurrent requests (vLLM&#x27;s count)")[1].split("</tr>")[0]
    assert '<td class="num">12</td>' in fact
    assert "may exceed the max_concurrency cap of 16" in html


def test_the_analysis_point_and_the_charts_take_it_as_an_open_loop() -> None:
    [item] = import_results(_text(max_concurrency=16))
    point = item.as_sweep_point()
    assert (point.label, point.load_kind, point.load) == ("1.00 req/s (at most 16 in flight)", "open", 1.0)
    [run] = run_import(text=_text(max_concurrency=16), filename="r.json", user=None)
    closed = BenchmarkRun.objects.create(
        status=RunStatus.DONE, concurrency=16, input_len=200, output_len=128, num_requests=200,
        summary={"requests": 200, "successes": 200, "failures": 0, "duration_s": 100.0,
                 "output_throughput_tok_s": 256.0, "flags": {}, "errors": {}})
    charts = sweep_charts([run_row(closed), run_row(run)])
    # the capped run is drawn against its rate (1 req/s), not at concurrency 16
    assert [p[0] for s in charts["tok_s"]["series"] for p in s["points"]] == [16.0]
    assert [p for s in charts["rate"]["tok_s"]["series"] for p in s["points"]] == [
        [1.0, pytest.approx(25600 / VLLM["duration"])]]


def test_a_comparison_names_the_capped_rate_as_its_load(operator) -> None:
    [capped] = run_import(text=_text(max_concurrency=16), filename="r.json", user=operator)
    [closed] = run_import(text=_text(request_rate="inf", max_concurrency=16), filename="c.json", user=operator)
    assert closed.label == "c=16 200/128"   # every request at once, 16 in flight: a closed loop
    compared = runs_compare(runs=[closed, capped])
    assert [e["label"] for e in compared["runs"]] == ["c=16 200/128", "1 req/s (at most 16 in flight) 200/128"]
    assert compared["best"]["output_throughput_tok_s"] is None
    assert any(n.startswith("the rankable runs ran at different loads (c=16, 1 req/s (at most 16 in flight)):")
               for n in compared["notes"]), compared["notes"]


def test_a_count_above_the_cap_is_kept_with_a_note_saying_why() -> None:
    # vLLM counts per one-second bucket: requests ending and starting within one second add up
    [item] = import_results(_text(max_concurrency=8))
    assert (item.concurrency, item.max_concurrent_requests) == (8, 12)
    assert ("max_concurrent_requests 12 is above max_concurrency 8: vLLM counts every successful request active "
            "at any time within a one-second bucket, so requests that ended and started within one second add up; "
            "it is not the most in flight at one instant, which the cap held to 8.") in item.notes
    [within] = import_results(_text(max_concurrency=16))
    assert not any("max_concurrent_requests" in n for n in within.notes)


def test_a_count_above_the_completed_requests_is_refused_naming_both(operator_api) -> None:
    with pytest.raises(ResultImportError) as refused:
        import_results(_text(max_concurrent_requests=201))
    assert refused.value.errors == {"file.max_concurrent_requests": [
        "max_concurrent_requests 201 is more than completed 200: vLLM counts only successful requests in it (the "
        "most active within one second), so it cannot exceed the requests that completed; the file disagrees "
        "with itself"]}
    answer = operator_api.post("/api/runs/import/", {"text": _text(max_concurrent_requests=201)}, format="json")
    assert answer.status_code == 400
    assert list(answer.json()) == ["text.max_concurrent_requests"]
    assert "max_concurrent_requests 201 is more than completed 200" in answer.json()["text.max_concurrent_requests"][0]
    assert not BenchmarkRun.objects.exists()
