"""Imported result files whose numbers disagree: a throughput written as ``Infinity`` that Ceiling
recomputes from the totals gets one note saying so (not "kept as null" next to "computed"), and a
file claiming output from a run in which no request completed is refused at those keys."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.importers import ResultImportError, import_results
from benchmarks.models import BenchmarkRun

SGLANG = json.loads((Path(__file__).parent / "data" / "sglang-bench-serving-h200.jsonl").read_text())


def test_a_non_finite_throughput_recomputed_from_the_totals_gets_one_note_saying_so():
    line = json.dumps(SGLANG).replace('"output_throughput": 537.4142851849319', '"output_throughput": Infinity')
    assert "Infinity" in line
    [run] = import_results(line)
    assert run.output_throughput_tok_s == pytest.approx(160347 / 298.3675805060193)
    notes = [n for n in run.notes if "output_throughput" in n]
    assert notes == ["output_throughput was Infinity in the file; output_throughput_tok_s computed from its "
                     "total / duration instead."]


def test_output_from_a_run_where_nothing_completed_is_refused_at_each_key():
    record = {**SGLANG, "completed": 0, "total_output_tokens": 0, "output_throughput": 537.4}
    with pytest.raises(ResultImportError) as refused:
        import_results(json.dumps(record))
    text = str(refused.value)
    assert "output_throughput = 537.4 but completed is 0: a run in which no request completed delivered no output" in text
    assert "total_output_tokens" not in text  # 0 is consistent


@pytest.mark.django_db
def test_the_api_refuses_such_a_file_and_stores_nothing(operator_api):
    record = {**SGLANG, "completed": 0, "total_output_tokens": 12, "output_throughput": 537.4}
    answer = operator_api.post("/api/runs/import/", {"text": json.dumps(record)}, format="json")
    assert answer.status_code == 400, answer.json()
    messages = json.dumps(answer.json())
    assert "total_output_tokens = 12 but completed is 0" in messages and "output_throughput = 537.4" in messages
    assert not BenchmarkRun.objects.exists()
