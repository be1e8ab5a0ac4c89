"""A run's text that is absent or not known is null in every JSON answer, never ``""``: an imported
file that named no API or model (``api``, ``served_model_name``), a measured run's
``original_sha256``, a run with no ``reason``; the CSV export leaves the cell empty. Through a real
import and the API."""
from __future__ import annotations

import csv
import io
import json

import pytest

from benchmarks.models import BenchmarkRun

pytestmark = pytest.mark.django_db

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "output_throughput_tok_s": 100.0}
# A vLLM ``bench serve`` result that names no model and no endpoint.
VLLM = {"date": "20250101-000000", "num_prompts": 4, "completed": 4, "duration": 2.0,
        "total_input_tokens": 32, "total_output_tokens": 32, "request_throughput": 2.0,
        "output_throughput": 16.0, "total_token_throughput": 32.0, "max_concurrency": 1,
        "mean_ttft_ms": 10.0, "median_ttft_ms": 10.0, "p99_ttft_ms": 12.0, "mean_tpot_ms": 5.0,
        "median_tpot_ms": 5.0, "p99_tpot_ms": 6.0, "mean_itl_ms": 5.0, "median_itl_ms": 5.0, "p99_itl_ms": 6.0,
        "mean_e2el_ms": 50.0, "median_e2el_ms": 50.0, "p99_e2el_ms": 60.0}

UNKNOWN = ("api", "served_model_name", "original_sha256", "reason")


def test_a_measured_runs_absent_texts_are_null(viewer_api):
    run = BenchmarkRun.objects.create(source="measured", status="done", concurrency=1, input_len=8, output_len=8,
                                      summary=SUMMARY)
    detail = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert {key: detail[key] for key in UNKNOWN} == dict.fromkeys(UNKNOWN)
    listed = viewer_api.get("/api/runs/").json()["results"][0]
    assert {key: listed[key] for key in UNKNOWN} == dict.fromkeys(UNKNOWN)
    export = viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").json()
    assert (export["api"], export["served_model_name"], export["reason"]) == (None, None, None)
    row = next(csv.DictReader(io.StringIO(viewer_api.get(f"/api/runs/{run.pk}/export/?format=csv").content.decode())))
    assert row["served_model_name"] == ""


def test_an_imported_run_that_named_no_api_or_model_gives_null_and_keeps_its_hash(operator_api):
    answer = operator_api.post("/api/runs/import/", {"text": json.dumps(VLLM), "filename": "b.json"}, format="json")
    assert answer.status_code == 201, answer.content
    run = answer.json()["created"][0]
    detail = operator_api.get(f"/api/runs/{run['id']}/").json()
    assert detail["api"] is None and detail["served_model_name"] is None and detail["reason"] is None
    assert len(detail["original_sha256"]) == 64
    assert (detail["import_format"], detail["original_filename"]) == ("vllm-bench-serve", "b.json")


def test_a_known_text_is_given_as_it_is(viewer_api):
    run = BenchmarkRun.objects.create(source="measured", status="failed", reason="the deployment went down",
                                      api="chat", served_model_name="tiny", concurrency=1, input_len=8,
                                      output_len=8, summary=SUMMARY)
    detail = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert (detail["api"], detail["served_model_name"], detail["reason"]) == ("chat", "tiny",
                                                                              "the deployment went down")


def test_the_schema_says_they_may_be_null(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    props = schema["components"]["schemas"]["Run"]["properties"]
    for key in UNKNOWN:
        assert props[key].get("nullable") is True, key
