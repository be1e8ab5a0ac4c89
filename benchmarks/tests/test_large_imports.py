"""Imports of many runs at once: each run keeps only its own part of the file, lists and admin
never read the kept text, and admin deletes thousands of imported runs without loading it."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.models import RUN_ADMIN_DEFERRED, BenchmarkRun
from benchmarks.services import run_import
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
SGLANG_LINE = (DATA / "sglang-bench-serving-h200.jsonl").read_text().strip()

pytestmark = pytest.mark.django_db


def _jsonl(runs: int) -> str:
    """A SGLang JSON-lines file of ``runs`` lines, each a different concurrency bound, with a blank line
    in the middle (kept out of every run's text)."""
    base = json.loads(SGLANG_LINE)
    # From 8 up: the line's 300 requests x 7,841 ms mean E2E over 298.4 s are 7.9 in flight.
    lines = [json.dumps({**base, "max_concurrency": c + 8}) for c in range(runs)]
    lines.insert(runs // 2, "")
    return "\n".join(lines) + "\n"


# --- 1. each run keeps its own line ----------------------------------------------------------------


def test_it_stores_each_run_of_a_multi_run_file_as_its_own_line(operator_api, viewer_api) -> None:
    text = _jsonl(40)
    upload = SimpleUploadedFile("many.jsonl", text.encode(), content_type="application/jsonl")
    response = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert response.status_code == 201, response.json()
    assert len(response.json()["created"]) == 40 and response.json()["skipped"] == []
    runs = list(BenchmarkRun.objects.order_by("source_line"))
    lines = text.split("\n")
    assert [r.original_text for r in runs] == [lines[r.source_line - 1] + "\n" for r in runs]
    # Each line as the file has it, its line break included: together, the file less its one blank
    # line, not 40 copies of it.
    assert "".join(r.original_text for r in runs) == text.replace("\n\n", "\n")
    assert len({r.original_sha256 for r in runs}) == 1   # still the whole file's hash
    original = viewer_api.get(f"/api/runs/{runs[3].pk}/original/")
    assert original.status_code == 200 and original.content.decode() == lines[runs[3].source_line - 1] + "\n"
    again = operator_api.post("/api/runs/import/", {"text": text, "filename": "again.jsonl"}, format="json")
    assert again.status_code == 409 and "already imported" in again.json()["detail"]


def test_it_keeps_the_whole_file_of_a_single_run(operator_api) -> None:
    text = SGLANG_LINE + "\n"
    response = operator_api.post("/api/runs/import/", {"text": text, "filename": "one.jsonl"}, format="json")
    assert response.status_code == 201, response.json()
    assert BenchmarkRun.objects.get().original_text == text


def test_the_migration_cuts_runs_that_kept_the_whole_file_down_to_their_line(operator_api) -> None:
    text, single = _jsonl(5), SGLANG_LINE + "\n"
    many = [r["id"] for r in operator_api.post("/api/runs/import/", {"text": text}, format="json").json()["created"]]
    [one] = [r["id"] for r in operator_api.post("/api/runs/import/", {"text": single}, format="json").json()["created"]]
    BenchmarkRun.objects.filter(pk__in=many).update(original_text=text)   # as an import stored them before
    migration = importlib.import_module("benchmarks.migrations.0006_imported_run_keeps_its_own_record")
    migration.keep_own_records(apps, None)
    lines = text.splitlines()
    for run in BenchmarkRun.objects.filter(pk__in=many):
        assert run.original_text == lines[run.source_line - 1]
    assert BenchmarkRun.objects.get(pk=one).original_text == single


# --- 2. lists never read the kept text -------------------------------------------------------------

RUN_TABLE = '"benchmarks_benchmarkrun"'


def _selected(queries, *fields: str) -> list[str]:
    """The SQL of ``queries`` that reads any of the run columns ``fields``."""
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")
            and any(f'{RUN_TABLE}."{f}"' in q["sql"] for f in fields)]


@pytest.fixture
def imported(operator) -> list[BenchmarkRun]:
    return run_import(text=_jsonl(30), filename="many.jsonl", user=operator)


def test_the_api_run_list_does_not_read_the_kept_text(imported, viewer_api) -> None:
    for url in ("/api/runs/?limit=1", "/api/runs/", "/api/runs/?source=imported&order=-output_tok_s",
                f"/api/runs/compare/?ids={imported[0].pk},{imported[1].pk}"):
        with CaptureQueriesContext(connection) as ctx:
            response = viewer_api.get(url)
        assert response.status_code == 200, (url, response.content[:300])
        assert _selected(ctx.captured_queries, "original_text") == [], url
    # One run's download still reads it.
    assert viewer_api.get(f"/api/runs/{imported[0].pk}/original/").content.decode() == imported[0].original_text


def test_the_benchmarks_pages_do_not_read_the_kept_text(imported, viewer) -> None:
    client = logged_in_client(viewer)
    for url in (reverse("benchmarks:index"),
                reverse("benchmarks:compare") + f"?ids={imported[0].pk},{imported[1].pk}"):
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, url
        assert _selected(ctx.captured_queries, "original_text") == [], url
    assert f"/benchmarks/runs/{imported[-1].pk}/" in client.get(reverse("benchmarks:index")).content.decode()


# --- 3. admin lists and deletes thousands of runs without their large fields -------------------------

LARGE = RUN_ADMIN_DEFERRED


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", "root@example.org", "correct-horse-battery")


def test_the_admin_changelist_does_not_read_large_fields(imported, root) -> None:
    client = logged_in_client(root)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/admin/benchmarks/benchmarkrun/")
    assert response.status_code == 200
    assert _selected(ctx.captured_queries, *LARGE) == []
    page = client.get(f"/admin/benchmarks/benchmarkrun/{imported[0].pk}/change/")
    assert page.status_code == 200 and "field-summary" in page.content.decode()   # read when shown
    assert "field-original_text" not in page.content.decode()


def test_admin_deletes_many_imported_runs_without_reading_large_fields(operator, root) -> None:
    runs = run_import(text=_jsonl(600), filename="many.jsonl", user=operator)
    client = logged_in_client(root)
    chosen = {"action": "delete_selected", "_selected_action": [r.pk for r in runs]}
    with CaptureQueriesContext(connection) as ctx:
        confirm = client.post("/admin/benchmarks/benchmarkrun/", chosen)
    assert confirm.status_code == 200 and "Are you sure" in confirm.content.decode()
    assert _selected(ctx.captured_queries, *LARGE) == []
    with CaptureQueriesContext(connection) as ctx:
        done = client.post("/admin/benchmarks/benchmarkrun/", {**chosen, "post": "yes"})
    assert done.status_code == 302
    assert _selected(ctx.captured_queries, *LARGE) == []
    assert not BenchmarkRun.objects.exists()
    one = run_import(text=SGLANG_LINE, filename="one.jsonl", user=operator)[0]
    with CaptureQueriesContext(connection) as ctx:
        assert client.post(f"/admin/benchmarks/benchmarkrun/{one.pk}/delete/", {"post": "yes"}).status_code == 302
    assert _selected(ctx.captured_queries, *LARGE) == [] and not BenchmarkRun.objects.exists()
