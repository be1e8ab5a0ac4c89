"""A run that was not imported reads the same in every answer (``import_format`` and
``original_filename`` null), and the comparison CSV names its columns as the run export does."""
import csv
import io

import pytest

from benchmarks.models import BenchmarkRun

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "output_throughput_tok_s": 100.0}


@pytest.fixture
def measured_and_imported(db):
    measured = BenchmarkRun.objects.create(source="measured", status="done", concurrency=1, input_len=8,
                                           output_len=8, summary=SUMMARY)
    imported = BenchmarkRun.objects.create(source="imported", status="done", concurrency=2, input_len=8,
                                           output_len=8, summary=SUMMARY, import_format="vllm-bench-serve",
                                           original_text="{}", original_filename="b.json")
    return measured, imported


def test_import_fields_are_null_for_a_run_that_was_not_imported_everywhere(viewer_api, measured_and_imported):
    measured, imported = measured_and_imported
    detail = viewer_api.get(f"/api/runs/{measured.pk}/").json()
    export = viewer_api.get(f"/api/runs/{measured.pk}/export/?format=json").json()
    compared = viewer_api.get(f"/api/runs/compare/?ids={measured.pk},{imported.pk}").json()
    config = {e["id"]: e["config"] for e in compared["runs"]}
    assert (detail["import_format"], detail["original_filename"]) == (None, None)
    assert (export["import_format"], export["original_filename"]) == (None, None)
    assert config[measured.pk]["import_format"] is None
    # an imported run keeps its values in both answers
    detail = viewer_api.get(f"/api/runs/{imported.pk}/").json()
    export = viewer_api.get(f"/api/runs/{imported.pk}/export/?format=json").json()
    assert (detail["import_format"], detail["original_filename"]) == ("vllm-bench-serve", "b.json")
    assert (export["import_format"], export["original_filename"]) == ("vllm-bench-serve", "b.json")
    assert config[imported.pk]["import_format"] == "vllm-bench-serve"


def test_the_comparison_csv_names_metrics_as_the_run_export_and_gives_each_run_its_point(viewer_api, db):
    full = {**SUMMARY, "ttft_ms": {"mean": 40.0, "p99": 90.0}, "itl_ms": {"mean": 5.0, "p99": 9.0}}
    a = BenchmarkRun.objects.create(source="measured", status="done", concurrency=4, input_len=128, output_len=64,
                                    num_requests=16, num_gpus=2, summary=full,
                                    snapshot={"deployment_id": 7, "recipe_id": 3, "recipe": "pd-2"})
    b = BenchmarkRun.objects.create(source="measured", status="done", concurrency=8, request_rate=2.5, input_len=128,
                                    output_len=64, num_requests=16, num_gpus=2, summary=full,
                                    snapshot={"deployment_id": 9, "recipe_id": 3, "recipe": "pd-2"})
    compared = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&format=csv")
    rows = list(csv.DictReader(io.StringIO(compared.content.decode())))
    exported = next(csv.DictReader(io.StringIO(viewer_api.get(f"/api/runs/{a.pk}/export/?format=csv")
                                                .content.decode())))
    # the run export's names, and the same values under them
    for column in ("output_throughput_tok_s", "tok_s_per_gpu", "ttft_ms_mean", "ttft_ms_p99", "itl_per_gap_ms_mean",
                   "itl_per_gap_ms_p99", "failures", "concurrency", "request_rate_req_s", "input_len", "output_len",
                   "num_requests", "num_gpus"):
        assert rows[0][column] == exported[column], column
    assert (rows[0]["tok_s_per_gpu"], rows[0]["ttft_ms_mean"], rows[0]["itl_per_gap_ms_mean"]) == ("50.0", "40.0", "5.0")
    for old in ("output_throughput_per_gpu_tok_s", "ttft_mean_ms", "itl_per_gap_mean_ms", "failures_requests"):
        assert old not in rows[0]
    # what each run measured, so what differs between them is in the file
    assert [(r["concurrency"], r["request_rate_req_s"], r["input_len"], r["output_len"], r["deployment_id"],
             r["recipe_id"], r["recipe"]) for r in rows] == [
        ("4", "", "128", "64", "7", "3", "pd-2"), ("8", "2.5", "128", "64", "9", "3", "pd-2")]
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}").json()
    assert {"field": "deployment_id", "values": [7, 9]} in body["config_differs"]
    assert "recipe_id" not in {d["field"] for d in body["config_differs"]}
