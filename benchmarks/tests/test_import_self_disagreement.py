"""Result files that disagree with themselves are refused, naming the line and key, and nothing is
stored: a key given twice in one object, a value no real run has (a duration of 1e308 s, a count
past 2^53), an output_throughput that is not total_output_tokens / duration, a mean E2E that puts
more requests in flight than max_concurrency allows, and a later line another harness wrote."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.importers import (
    MAX_COUNT, MAX_DURATION_S, ResultImportError, import_results, import_vllm_bench_serve)
from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
SGLANG_TEXT = (DATA / "sglang-bench-serving-h200.jsonl").read_text().strip()
SGLANG = json.loads(SGLANG_TEXT)
VLLM = json.loads((DATA / "vllm-bench-serve.json").read_text())
# SGLang's record: 160347 output tokens in 298.3675805060193 s, 537.4142851849319 tokens/s.
EXPECTED_TOK_S = 160347 / 298.3675805060193


def refusal(text: str) -> ResultImportError:
    with pytest.raises(ResultImportError) as refused:
        import_results(text)
    return refused.value


# --- a key given twice ------------------------------------------------------------------------


def test_a_key_given_twice_in_a_json_line_is_refused_at_that_line_and_key():
    twice = SGLANG_TEXT[:-1] + ', "duration": 1.5}'
    error = refusal(SGLANG_TEXT + "\n" + twice)
    assert error.errors == {"line 2.duration": [
        "duration is given 2 times in one result object: 298.3675805060193, then 1.5; a run has one value per "
        "key, so the file disagrees with itself"]}


def test_a_key_given_twice_in_a_file_of_one_line_is_reported_once():
    error = refusal(SGLANG_TEXT[:-1] + ', "completed": 299}')
    assert list(error.errors) == ["line 1.completed"]
    assert error.errors["line 1.completed"] == [
        "completed is given 2 times in one result object: 300, then 299; a run has one value per key, so the "
        "file disagrees with itself"]


def test_a_key_given_twice_in_a_pretty_printed_object_names_the_lines_it_is_on():
    text = json.dumps(VLLM, indent=2)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith('"failed"'))
    lines.insert(at + 1, '  "failed": 3,')
    with pytest.raises(ResultImportError) as refused:
        import_vllm_bench_serve("\n".join(lines))
    assert refused.value.errors == {f"line {at + 2}.failed": [
        f"failed is given 2 times in one result object (lines {at + 1}, {at + 2}): 0, then 3; a run has one value "
        "per key, so the file disagrees with itself"]}


def test_the_same_key_in_two_nested_objects_is_not_a_repeat():
    [run] = import_results(json.dumps({**VLLM, "extra": {"duration": 1}, "more": {"duration": 2}}))
    assert run.duration_s == VLLM["duration"] and {"extra", "more"} <= set(run.unmapped_keys)


# --- values no run has ------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "path", "message"), [
    ({"duration": 1e308}, "line 1.duration",
     "expected a duration in seconds of at most 2592000 (30 days), got 1e+308"),
    ({"duration": MAX_DURATION_S + 1, "output_throughput": 160347 / (MAX_DURATION_S + 1)}, "line 1.duration",
     "expected a duration in seconds of at most 2592000 (30 days), got 2592001"),
    ({"mean_e2e_latency_ms": 3e9}, "line 1.mean_e2e_latency_ms",
     "expected a latency in ms of at most 2592000000 (30 days), got 3000000000"),
    ({"completed": 1e300}, "line 1.completed",
     "expected a whole number of at most 9007199254740992 (2^53), got 1e+300"),
    ({"total_input_tokens": MAX_COUNT + 2}, "line 1.total_input_tokens",
     "expected a whole number of at most 9007199254740992 (2^53), got 9007199254740994"),
    ({"completed": -3}, "line 1.completed", "expected a whole number >= 0, got -3"),
    ({"duration": -1.0}, "line 1.duration", "expected a duration in seconds > 0, got -1"),
])
def test_values_no_real_run_has_are_refused_naming_the_bound(changes, path, message):
    error = refusal(json.dumps({**SGLANG, **changes}))
    assert message in error.errors[path]


def test_a_run_of_exactly_30_days_is_accepted():
    [run] = import_results(json.dumps({**SGLANG, "duration": MAX_DURATION_S, "output_throughput": None}))
    assert run.duration_s == 2592000.0
    assert run.output_throughput_tok_s == pytest.approx(160347 / 2592000)


# --- output throughput against its totals -----------------------------------------------------


def test_an_output_throughput_that_is_not_tokens_over_duration_is_refused_with_both_numbers():
    error = refusal(json.dumps({**SGLANG, "output_throughput": 900.0}))
    assert error.errors == {"line 1.output_throughput": [
        "output_throughput = 900 tokens/s but total_output_tokens / duration = 160347 / 298.368 s = 537.414 "
        "tokens/s; they differ by 67.5 %, more than the 1 % (plus 0.01 tokens/s for rounding) allowed, so the "
        "file disagrees with itself"]}


@pytest.mark.parametrize("factor", [1.0099, 0.9901])
def test_a_throughput_within_one_percent_of_the_quotient_is_accepted(factor):
    [run] = import_results(json.dumps({**SGLANG, "output_throughput": EXPECTED_TOK_S * factor}))
    assert run.output_throughput_tok_s == pytest.approx(EXPECTED_TOK_S * factor)


@pytest.mark.parametrize("factor", [1.0102, 0.9898])
def test_a_throughput_just_past_one_percent_is_refused(factor):
    error = refusal(json.dumps({**SGLANG, "output_throughput": EXPECTED_TOK_S * factor}))
    assert list(error.errors) == ["line 1.output_throughput"]
    assert "they differ by 1.02 %, more than the 1 %" in error.errors["line 1.output_throughput"][0]


def test_a_throughput_rounded_to_two_decimals_of_a_tiny_rate_is_accepted():
    # 1 token in 299 s is 0.003344 tokens/s; written as 0.0 it is off by 100 %, but within rounding.
    [run] = import_results(json.dumps({**SGLANG, "total_output_tokens": 1, "output_throughput": 0.0}))
    assert run.output_throughput_tok_s == 0.0 and run.total_output_tokens == 1


def test_the_check_needs_all_three_values():
    [run] = import_results(json.dumps({k: v for k, v in SGLANG.items() if k != "total_output_tokens"}
                                      | {"output_throughput": 900.0}))
    assert run.output_throughput_tok_s == 900.0
    [run] = import_results(json.dumps({**VLLM, "output_throughput": None}))
    assert run.output_throughput_tok_s == pytest.approx(25600 / 203.5104987300001)


def test_the_vllm_file_agrees_with_itself():
    [run] = import_results(json.dumps(VLLM))
    assert run.output_throughput_tok_s == pytest.approx(125.79203608539055)
    assert 25600 / 203.5104987300001 == pytest.approx(125.79203608539055)


# --- lines of another harness -----------------------------------------------------------------


def test_a_later_line_of_another_harness_is_refused_naming_the_first_such_line():
    vllm_line = json.dumps(VLLM)
    error = refusal("\n".join([SGLANG_TEXT, SGLANG_TEXT, vllm_line, SGLANG_TEXT, vllm_line]))
    assert error.errors == {"line 3": [
        "a vLLM bench serve result, unlike line 1 (SGLang bench_serving); a file is read in its first line's "
        "format, so it must hold one harness's results: split it"]}


def test_a_sglang_line_after_vllm_lines_is_refused_too():
    error = refusal("\n\n".join([json.dumps(VLLM), json.dumps(VLLM), SGLANG_TEXT]))
    assert error.errors == {"line 5": [
        "a SGLang bench_serving result, unlike line 1 (vLLM bench serve); a file is read in its first line's "
        "format, so it must hold one harness's results: split it"]}


def test_lines_of_one_harness_are_still_read_alike():
    runs = import_results("\n".join([SGLANG_TEXT, json.dumps({**SGLANG, "completed": 299})]))
    assert [(r.source_line, r.completed, r.source_format) for r in runs] == [
        (1, 300, "sglang-bench-serving"), (2, 299, "sglang-bench-serving")]


# --- nothing is stored ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("bad_line", "path"), [
    (SGLANG_TEXT[:-1] + ', "duration": 1.5}', "line 3.duration"),
    (json.dumps({**SGLANG, "duration": 1e308}), "line 3.duration"),
    (json.dumps({**SGLANG, "output_throughput": 900.0}), "line 3.output_throughput"),
    (json.dumps({**SGLANG, "max_concurrency": 7}), "line 3.mean_e2e_latency_ms"),
    (json.dumps(VLLM), "line 3"),
], ids=["repeated key", "duration of 1e308 s", "throughput not tokens over duration",
        "7.9 in flight at max_concurrency 7", "another harness"])
def test_the_api_stores_no_run_of_a_file_with_one_bad_line(operator_api, bad_line, path):
    text = "\n".join([SGLANG_TEXT, json.dumps({**SGLANG, "completed": 299}), bad_line])
    answer = operator_api.post("/api/runs/import/", {"text": text}, format="json")
    assert answer.status_code == 400, answer.json()
    assert list(answer.json()) == [path]
    assert not BenchmarkRun.objects.exists()


@pytest.mark.django_db
def test_the_import_form_stores_nothing_and_shows_the_reason(operator):
    text = "\n".join([SGLANG_TEXT, json.dumps(VLLM)]).encode()
    page = logged_in_client(operator).post("/benchmarks/import/", {"file": SimpleUploadedFile("mixed.jsonl", text)})
    assert page.status_code == 400
    assert "a vLLM bench serve result, unlike line 1 (SGLang bench_serving)" in page.content.decode()
    assert not BenchmarkRun.objects.exists()
