"""A result file that is one JSON value imports as well as JSON lines do: a pretty-printed SGLang
``bench_serving`` result (``python -m json.tool out.jsonl > pretty.json``), with or without a
byte order mark, is one run; a JSON array of results is one run per object, in order. Every check
a JSON-lines file gets applies the same way, and a file that is neither is still refused at its
first bad line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.models import BenchmarkRun

DATA = Path(__file__).parent / "data"
SGLANG_LINE = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
SGLANG = json.loads(SGLANG_LINE)
VLLM = json.loads((DATA / "vllm-bench-serve.json").read_text())
BOM = b"\xef\xbb\xbf"


def _upload(api, body: bytes, name: str = "pretty.json", **data):
    return api.post("/api/runs/import/", {"file": SimpleUploadedFile(name, body), **data}, format="multipart")


@pytest.mark.django_db
@pytest.mark.parametrize("mark", [b"", BOM], ids=["plain", "with-bom"])
def test_a_pretty_printed_sglang_result_is_one_run_like_its_line(operator_api, viewer_api, mark: bytes) -> None:
    as_line = _upload(operator_api, SGLANG_LINE.encode(), "out.jsonl")
    assert as_line.status_code == 201, as_line.json()
    # What json.tool writes: the object, indented by 4, over many lines.
    body = mark + (json.dumps(SGLANG, indent=4) + "\n").encode()
    # The same result as the line: skipped as already imported, unless asked for.
    refused = _upload(operator_api, body)
    assert refused.status_code == 409 and refused.json()["runs"] == [as_line.json()["created"][0]["id"]]
    answer = _upload(operator_api, body, allow_duplicate="true")
    assert answer.status_code == 201, answer.json()
    [created] = answer.json()["created"]
    run, line_run = BenchmarkRun.objects.get(pk=created["id"]), BenchmarkRun.objects.get(pk=as_line.json()["created"][0]["id"])
    assert run.import_format == "sglang-bench-serving" and run.source_line is None
    measured = ("successes", "duration_s", "output_throughput_tok_s", "mean_input_tokens", "ttft_ms", "e2e_ms",
                "input_len_range", "output_len_range", "notes")
    assert {k: run.summary[k] for k in measured} == {k: line_run.summary[k] for k in measured}
    assert round(run.summary["mean_input_tokens"], 1) == 508.7  # 152612 / 300, range ratio 0
    assert viewer_api.get(f"/api/runs/{run.pk}/original/").content == body


@pytest.mark.django_db
def test_a_json_array_of_results_is_one_run_per_object_in_order(operator_api, viewer_api) -> None:
    results = [{**SGLANG, "max_concurrency": c} for c in (8, 16, 32)]
    body = json.dumps(results, indent=2).encode()
    answer = _upload(operator_api, body, "sweep.json")
    assert answer.status_code == 201, answer.json()
    runs = [BenchmarkRun.objects.get(pk=r["id"]) for r in answer.json()["created"]]
    assert [r.concurrency for r in runs] == [8, 16, 32]
    # Each run is at the line its object starts on and keeps that object as the file writes it.
    text = body.decode()
    starts = [i + 1 for i, line in enumerate(text.split("\n")) if line == "  {"]
    assert [r.source_line for r in runs] == starts == [2, 22, 42]
    kept = [viewer_api.get(f"/api/runs/{r.pk}/original/").content.decode() for r in runs]
    assert [json.loads(k) for k in kept] == results and all(k in text for k in kept)
    # vLLM results in an array import too, on one line.
    vllm = _upload(operator_api, json.dumps([VLLM, {**VLLM, "max_concurrency": 4}]).encode(), "v.json")
    assert vllm.status_code == 201, vllm.json()
    assert [r["concurrency"] for r in vllm.json()["created"]] == [VLLM.get("max_concurrency"), 4]


@pytest.mark.django_db
def test_every_check_applies_to_a_pretty_printed_result_and_to_each_object_of_an_array(operator_api) -> None:
    # A key given twice in a pretty-printed result: named with the lines it is on.
    pretty = json.dumps(SGLANG, indent=4).replace('"completed": 300', '"completed": 300,\n    "completed": 299')
    answer = _upload(operator_api, pretty.encode())
    assert answer.status_code == 400
    assert answer.json() == {"line 20.completed": [
        "completed is given 2 times in one result object (lines 19, 20): 300, then 299; a run has one value per key, "
        "so the file disagrees with itself"]}
    # Bounds and consistency checks, each at its object, by its place in the array and its line.
    bad = [SGLANG, {**SGLANG, "duration": -1}, {**SGLANG, "median_ttft_ms": 9e9, "mean_e2e_latency_ms": 1.0}, 7]
    answer = _upload(operator_api, json.dumps(bad).encode(), "bad.json")
    assert answer.status_code == 400
    errors = answer.json()
    assert errors["item 2 (line 1).duration"] == ["expected a duration in seconds > 0, got -1"]
    assert any(k.startswith("item 3 (line 1).") for k in errors), errors
    assert errors["item 4 (line 1)"] == ["expected a JSON object, got a number"]
    pretty_bad = json.dumps([SGLANG, {**SGLANG, "completed": -3}], indent=2)
    assert _upload(operator_api, pretty_bad.encode()).json() == {
        "item 2 (line 22).completed": ["expected a whole number >= 0, got -3"]}
    # A key given twice inside one object of an array is refused at that object.
    twice = "[" + SGLANG_LINE.strip() + ",\n" + SGLANG_LINE.strip()[:-1] + ', "duration": 5}]'
    assert list(_upload(operator_api, twice.encode()).json()) == ["item 2 (line 2).duration"]
    assert _upload(operator_api, b"[]").json() == {"file": ["the file is an empty JSON array: it holds no result object"]}
    assert BenchmarkRun.objects.count() == 0


@pytest.mark.django_db
def test_a_file_that_is_neither_json_lines_nor_one_json_value_names_its_first_bad_line(operator_api) -> None:
    body = SGLANG_LINE + json.dumps({**SGLANG, "max_concurrency": 16}) + "\n" + '{"backend": "sglang",\n'
    answer = _upload(operator_api, body.encode(), "out.jsonl")
    assert answer.status_code == 400
    assert list(answer.json()) == ["line 3"] and answer.json()["line 3"][0].startswith("not valid JSON")
    assert BenchmarkRun.objects.count() == 0
