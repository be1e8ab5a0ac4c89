"""A result whose mean E2E puts more requests in flight than its ``max_concurrency`` allows is
refused at the mean E2E key: by Little's law (L = lambda W) the mean number in flight is
completed x mean E2E / duration, and a run held to c requests at once averages at most c
(1 % over allowed, ``LITTLES_LAW_TOLERANCE``). A run without a bound, or without the values, is
not checked.

The values are real: SGLang's line (Llama-3.3-70B on H200, 300 requests at 1 request/s, mean E2E
7,840.6 ms over 298.4 s: 7.884 requests in flight on average) and vLLM's result (200 requests of
128 output tokens in 203.5 s). vLLM writes E2E statistics only with ``--percentile-metrics``
naming ``e2el``, which that run did not, so its mean E2E is computed from its own means: each
request's TPOT is (E2E - TTFT) / 127, so mean E2E = mean TTFT + 127 x mean TPOT = 3,640.4 ms,
3.578 requests in flight."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.importers import LITTLES_LAW_TOLERANCE, ResultImportError, import_results
from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
SGLANG = json.loads((DATA / "sglang-bench-serving-h200.jsonl").read_text())
VLLM_FILE = json.loads((DATA / "vllm-bench-serve.json").read_text())
OUTPUT_TOKENS = VLLM_FILE["total_output_tokens"] // VLLM_FILE["completed"]  # 25600 / 200 = 128
VLLM_E2E_MS = VLLM_FILE["mean_ttft_ms"] + (OUTPUT_TOKENS - 1) * VLLM_FILE["mean_tpot_ms"]
# The file's run had no bound (its max_concurrent_requests, 12, is the peak vLLM counted per
# 1 s bucket of that unbounded run): left out of the bounded variants below.
VLLM = {k: v for k, v in VLLM_FILE.items() if k != "max_concurrent_requests"} | {"mean_e2el_ms": VLLM_E2E_MS}
# SGLang's run: 300 x 7.8406 s / 298.37 s.
SGLANG_IN_FLIGHT = SGLANG["completed"] * SGLANG["mean_e2e_latency_ms"] / 1000 / SGLANG["duration"]

SGLANG_REFUSED_AT_7 = (
    "completed 300 requests × mean E2E 7,841 ms = 2,352 request-seconds in flight over a 298.4 s run: a mean of "
    "7.884 in flight, more than max_concurrency 7 allows (Little's law: mean in flight = completed / duration × "
    "mean E2E; 1 % over is allowed for rounding), so the file disagrees with itself")


def refusal(text: str) -> ResultImportError:
    with pytest.raises(ResultImportError) as refused:
        import_results(text)
    return refused.value


def sglang_with_mean_in_flight(bound: int, in_flight: float) -> dict:
    """SGLang's line bounded at ``bound`` with its mean E2E (ms) changed so that ``in_flight``
    requests are in flight on average over its 300 requests and 298.4 s."""
    return {**SGLANG, "max_concurrency": bound,
            "mean_e2e_latency_ms": in_flight * SGLANG["duration"] / SGLANG["completed"] * 1000}


def test_the_real_values_are_what_the_messages_say():
    assert SGLANG_IN_FLIGHT == pytest.approx(7.8835, abs=1e-4)
    assert VLLM_E2E_MS == pytest.approx(3640.437, abs=1e-3)
    assert VLLM["completed"] * VLLM_E2E_MS / 1000 / VLLM["duration"] == pytest.approx(3.5776, abs=1e-4)
    assert LITTLES_LAW_TOLERANCE == 0.01


@pytest.mark.parametrize("bound", [8, 16, 300])
def test_a_real_sglang_line_within_its_bound_imports(bound):
    [run] = import_results(json.dumps({**SGLANG, "max_concurrency": bound}))
    assert run.concurrency == bound and run.e2e_ms["mean"] == SGLANG["mean_e2e_latency_ms"]


@pytest.mark.parametrize("bound", [4, 12])
def test_a_real_vllm_result_within_its_bound_imports(bound):
    [run] = import_results(json.dumps({**VLLM, "max_concurrency": bound}, indent=2))
    assert run.concurrency == bound and run.e2e_ms["mean"] == VLLM_E2E_MS


def test_more_in_flight_than_the_bound_is_refused_at_the_mean_e2e_with_the_numbers():
    error = refusal(json.dumps({**SGLANG, "max_concurrency": 7}))
    assert error.errors == {"line 1.mean_e2e_latency_ms": [SGLANG_REFUSED_AT_7]}
    assert str(error) == f"line 1, key 'mean_e2e_latency_ms': {SGLANG_REFUSED_AT_7}"


def test_a_vllm_result_is_refused_at_its_own_key():
    error = refusal(json.dumps({**VLLM, "max_concurrency": 3}, indent=2))
    assert error.errors == {"file.mean_e2el_ms": [
        "completed 200 requests × mean E2E 3,640 ms = 728.1 request-seconds in flight over a 203.5 s run: a mean "
        "of 3.578 in flight, more than max_concurrency 3 allows (Little's law: mean in flight = completed / "
        "duration × mean E2E; 1 % over is allowed for rounding), so the file disagrees with itself"]}


@pytest.mark.parametrize("in_flight", [8.0, 8 * 1.005, 8 * (1 + LITTLES_LAW_TOLERANCE) * (1 - 1e-9)],
                         ids=["exactly at the bound", "half a percent over", "just inside the tolerance"])
def test_a_run_at_the_bound_within_the_tolerance_imports(in_flight):
    record = sglang_with_mean_in_flight(8, in_flight)
    [run] = import_results(json.dumps(record))
    assert run.e2e_ms["mean"] == record["mean_e2e_latency_ms"]


def test_a_run_just_past_the_tolerance_is_refused():
    record = sglang_with_mean_in_flight(8, 8 * (1 + LITTLES_LAW_TOLERANCE) * (1 + 1e-6))
    [message] = refusal(json.dumps(record)).errors["line 1.mean_e2e_latency_ms"]
    assert "a mean of 8.080 in flight, more than max_concurrency 8 allows" in message


@pytest.mark.parametrize(("bound", "read_as"), [(None, None), (0, 0), (math.inf, None)],
                         ids=["null", "0 (no bound to either harness)", "Infinity"])
def test_a_run_without_a_bound_is_not_checked(bound, read_as):
    text = json.dumps({**SGLANG, "mean_e2e_latency_ms": 10 * SGLANG["mean_e2e_latency_ms"], "max_concurrency": bound})
    [run] = import_results(text)  # 78.8 in flight: more than any small bound allows
    assert run.concurrency == read_as


def test_a_run_without_the_key_is_not_checked():
    [sglang] = import_results(json.dumps({k: v for k, v in SGLANG.items() if k != "max_concurrency"}))
    [vllm] = import_results(json.dumps(VLLM_FILE))  # as the file is: no bound and no mean E2E
    assert sglang.concurrency is None and vllm.e2e_ms["mean"] is None


def test_a_missing_or_non_finite_mean_e2e_is_not_checked():
    without = {k: v for k, v in SGLANG.items() if k != "mean_e2e_latency_ms"}
    [run] = import_results(json.dumps({**without, "max_concurrency": 1}))
    assert run.e2e_ms["mean"] is None
    text = json.dumps({**SGLANG, "max_concurrency": 1, "mean_e2e_latency_ms": math.nan})
    assert "NaN" in text
    [run] = import_results(text)
    assert run.e2e_ms["mean"] is None and "mean_e2e_latency_ms" in run.nan_keys


@pytest.mark.parametrize(("changes", "path"), [
    ({"max_concurrency": "seven"}, "line 1.max_concurrency"),
    ({"max_concurrency": -7}, "line 1.max_concurrency"),
    ({"duration": -1}, "line 1.duration"),
    ({"completed": 2.5}, "line 1.completed"),
    ({"mean_e2e_latency_ms": -5.0}, "line 1.mean_e2e_latency_ms"),
], ids=["bound not a number", "negative bound", "negative duration", "completed not whole", "negative mean"])
def test_a_check_that_needs_a_refused_value_adds_nothing(changes, path):
    error = refusal(json.dumps({**SGLANG, "max_concurrency": 1, **changes}))
    assert list(error.errors) == [path]
    assert not any("in flight" in m for m in error.errors[path])


def test_each_line_is_checked_against_its_own_bound_beside_other_problems():
    text = "\n".join([json.dumps({**SGLANG, "max_concurrency": 8}),
                      json.dumps({**SGLANG, "max_concurrency": 7, "output_throughput": 900.0})]) + "\n"
    error = refusal(text)
    assert list(error.errors) == ["line 2.output_throughput", "line 2.mean_e2e_latency_ms"]
    assert error.errors["line 2.mean_e2e_latency_ms"] == [SGLANG_REFUSED_AT_7]


@pytest.mark.django_db
def test_the_api_refuses_such_a_file_and_stores_nothing(operator_api):
    answer = operator_api.post("/api/runs/import/", {"text": json.dumps({**SGLANG, "max_concurrency": 7})},
                               format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json() == {"line 1.mean_e2e_latency_ms": [SGLANG_REFUSED_AT_7]}
    assert not BenchmarkRun.objects.exists()
    upload = SimpleUploadedFile("vllm.json", json.dumps({**VLLM, "max_concurrency": 3}).encode())
    answer = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert answer.status_code == 400 and list(answer.json()) == ["file.mean_e2el_ms"]
    assert not BenchmarkRun.objects.exists()
    kept = operator_api.post("/api/runs/import/", {"text": json.dumps({**SGLANG, "max_concurrency": 8})},
                             format="json")
    assert kept.status_code == 201, kept.json()
    assert kept.json()["created"][0]["concurrency"] == 8


@pytest.mark.django_db
def test_the_import_form_shows_the_reason_and_stores_nothing(operator):
    upload = SimpleUploadedFile("bench.jsonl", (json.dumps({**SGLANG, "max_concurrency": 7}) + "\n").encode())
    page = logged_in_client(operator).post("/benchmarks/import/", {"file": upload})
    assert page.status_code == 400
    html = page.content.decode()
    assert "<code>line 1.mean_e2e_latency_ms</code>" in html
    assert ("completed 300 requests × mean E2E 7,841 ms = 2,352 request-seconds in flight over a 298.4 s run: a "
            "mean of 7.884 in flight, more than max_concurrency 7 allows") in html
    assert not BenchmarkRun.objects.exists()
