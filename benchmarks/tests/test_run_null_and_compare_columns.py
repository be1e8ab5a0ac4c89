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
