"""Imports of many runs at once: each run keeps only its own part of the file, lists and admin
never read the kept text, and admin deletes thousands of imported runs without loading it."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from django.apps import apps
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.models import BenchmarkRun

DATA = Path(__file__).parent / "data"
SGLANG_LINE = (DATA / "sglang-bench-serving-h200.jsonl").read_text().strip()

pytestmark = pytest.mark.django_db


def _jsonl(runs: int) -> str:
    """A SGLang JSON-lines file of ``runs`` lines, each a different concurrency, with a blank line
    in the middle (kept out of every run's text)."""
    base = json.loads(SGLANG_LINE)
    lines = [json.dumps({**base, "max_concurrency": c + 1}) for c in range(runs)]
    lines.insert(runs // 2, "")
    return "\n".join(lines) + "\n"


# --- 1. each run keeps its own line ----------------------------------------------------------------


def test_it_stores_each_run_of_a_multi_run_file_as_its_own_line(operator_api, viewer_api) -> None:
    text = _jsonl(40)
    upload = SimpleUploadedFile("many.jsonl", text.encode(), content_type="application/jsonl")
    response = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert response.status_code == 201, response.json()
    assert len(response.json()) == 40
    runs = list(BenchmarkRun.objects.order_by("source_line"))
    lines = text.splitlines()
    assert [r.original_text for r in runs] == [lines[r.source_line - 1] for r in runs]
    stored = sum(len(r.original_text) for r in runs)
    assert len(text) - 41 <= stored <= len(text)   # the file less its line breaks, not 40 copies of it
    assert len({r.original_sha256 for r in runs}) == 1   # still the whole file's hash
    original = viewer_api.get(f"/api/runs/{runs[3].pk}/original/")
    assert original.status_code == 200 and original.content.decode() == lines[runs[3].source_line - 1]
    again = operator_api.post("/api/runs/import/", {"text": text, "filename": "again.jsonl"}, format="json")
    assert again.status_code == 409 and "already imported" in again.json()["detail"]


def test_it_keeps_the_whole_file_of_a_single_run(operator_api) -> None:
    text = SGLANG_LINE + "\n"
    response = operator_api.post("/api/runs/import/", {"text": text, "filename": "one.jsonl"}, format="json")
    assert response.status_code == 201, response.json()
    assert BenchmarkRun.objects.get().original_text == text


def test_the_migration_cuts_runs_that_kept_the_whole_file_down_to_their_line(operator_api) -> None:
    text, single = _jsonl(5), SGLANG_LINE + "\n"
    many = [r["id"] for r in operator_api.post("/api/runs/import/", {"text": text}, format="json").json()]
    [one] = [r["id"] for r in operator_api.post("/api/runs/import/", {"text": single}, format="json").json()]
    BenchmarkRun.objects.filter(pk__in=many).update(original_text=text)   # as an import stored them before
    migration = importlib.import_module("benchmarks.migrations.0006_imported_run_keeps_its_own_record")
    migration.keep_own_records(apps, None)
    lines = text.splitlines()
    for run in BenchmarkRun.objects.filter(pk__in=many):
        assert run.original_text == lines[run.source_line - 1]
    assert BenchmarkRun.objects.get(pk=one).original_text == single
