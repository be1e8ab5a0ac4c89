"""Two imported runs holding one result (a copy kept with ``allow_duplicate``) are one measurement,
not two runs: a comparison ranks the older alone and says the other is the same result imported
twice, with the SHA-256, never that their equal values are run-to-run noise. Random-length runs of
the same ranges are ranked among themselves only where their requests drew alike: measured mean
lengths more than the tie threshold apart name no best.

The values are SGLang's real line (Llama-3.3-70B on H200: 300 requests of lengths drawn from
[1, 1024], 152,612 input and 160,347 output tokens in 298.4 s)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.importers import record_digest
from benchmarks.services import run_import
from benchmarks.services.runs import runs_compare
from benchmarks.tests.page_support import page_text

DATA = Path(__file__).parent / "data"
LINE = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
SGLANG = json.loads(LINE)

pytestmark = pytest.mark.django_db


def test_a_file_imported_twice_is_one_measurement_not_noise(operator, operator_api, viewer_api, viewer) -> None:
    [first] = run_import(text=LINE, filename="h200.jsonl", user=operator)
    again = operator_api.post("/api/runs/import/", {"text": LINE, "filename": "h200-again.jsonl",
                                                    "allow_duplicate": True}, format="json")
    assert again.status_code == 201
    copy_id = again.json()["created"][0]["id"]
    digest = hashlib.sha256(LINE.encode()).hexdigest()

    body = viewer_api.get(f"/api/runs/compare/?ids={first.pk},{copy_id}").json()
    said = (f"the same result file as run #{first.pk}, imported twice (SHA-256 {digest}): one measurement, not an "
            "independent repeat, so it is not ranked beside it and their equal values are not run-to-run noise")
    assert [(e["id"], e["rankable"], e["refusal"]) for e in body["runs"]] == [
        (first.pk, True, None), (copy_id, False, f"run #{copy_id} is not ranked: {said}")]
    assert body["excluded"] == [{"id": copy_id, "reason": said}]
    # the older run alone is ranked; no tie "within run-to-run noise" between a result and itself
    assert body["best"]["output_throughput_tok_s"] == first.pk
    assert f"run #{first.pk} is the only rankable run: it is named best with no other run to rank it against" \
        in body["notes"]
    assert not any("tie threshold" in n for n in body["notes"]), body["notes"]
    assert body["ties"] == {}

    html = page_text(viewer, reverse("benchmarks:compare") + f"?runs={first.pk},{copy_id}")
    assert f"imported twice (SHA-256 {digest})" in html and "run-to-run noise)" not in html
    assert html.count("not ranked</div>") == 1


def test_a_record_imported_again_from_a_grown_file_names_the_records_sha256(operator) -> None:
    # SGLang appends each run: the grown file holds the same first line and a new one.
    second = json.dumps({**SGLANG, "max_concurrency": 16}) + "\n"
    [first] = run_import(text=LINE, filename="h200.jsonl", user=operator)
    grown = run_import(text=LINE + second, filename="h200.jsonl", user=operator, allow_duplicate=True)
    copy, new = grown
    assert copy.allowed_duplicate and not new.allowed_duplicate and copy.original_sha256 != first.original_sha256
    compared = runs_compare(runs=[copy, first, new])
    refusals = {e["id"]: e["refusal"] for e in compared["runs"]}
    assert refusals[first.pk] is None and refusals[new.pk] is None
    assert refusals[copy.pk] == (
        f"run #{copy.pk} is not ranked: the same result as run #{first.pk}, imported twice (the result's record "
        f"read as JSON has SHA-256 {record_digest(LINE)}): one measurement, not an independent repeat, so it is not "
        "ranked beside it and their equal values are not run-to-run noise")
    # the copy, given first, is not the baseline: the first ranked run is, and the note says why
    assert compared["baseline"] == first.pk
    assert compared["baseline_note"].startswith(
        f"run #{copy.pk} is not rankable: a copy of run #{first.pk} (flags: variable_lengths); run #{first.pk}, the "
        "first ranked run, is the baseline")


def test_random_lengths_that_came_out_differently_name_no_best(operator) -> None:
    [drawn] = run_import(text=LINE, filename="a.jsonl", user=operator)
    # the same ranges, [1, 1024], a longer draw of prompts: 160,000 input tokens over 300 requests
    other = {**SGLANG, "total_input_tokens": 160000, "duration": 149.0,
             "output_throughput": SGLANG["total_output_tokens"] / 149.0}
    [longer] = run_import(text=json.dumps(other) + "\n", filename="b.jsonl", user=operator)
    compared = runs_compare(runs=[drawn, longer])
    assert [e["rankable"] for e in compared["runs"]] == [True, True]
    assert [e["lengths"] for e in compared["runs"]] == ["random [1, 1024]/[1, 1024]"] * 2
    assert compared["best"]["output_throughput_tok_s"] is None
    assert (f"the rankable runs' lengths were drawn at random from the same ranges (random [1, 1024]/[1, 1024]) but "
            f"came out differently (mean input tokens per request #{drawn.pk} 508.7, #{longer.pk} 533.3: more than 2 % "
            "apart): a best would rank the draw of lengths, not the server; no best run is named") in compared["notes"]
    # deltas are still given, against the baseline
    tok = next(f for f in compared["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["deltas_pct"] == pytest.approx([0.0, (298.3675805060193 / 149.0 - 1) * 100], abs=1e-3)
