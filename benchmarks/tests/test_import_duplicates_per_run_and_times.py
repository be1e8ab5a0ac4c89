"""Duplicate imports are found per run, and an imported run's times are not made up.

* Each run of an imported file is recognised by its record read as JSON (whatever white space, line
  endings, key order or byte order mark): SGLang appends each run to its output file, so importing
  the grown file stores its new lines and skips the rest, naming them; a file with no new run is
  refused (409) naming the runs holding its results, on the API, the import form and
  ``manage.py import_results``. A partial unique index holds it when imports race.
* An imported run has no ``started_at`` or ``ended_at`` (the import is not when it ran); the page
  says when it was imported and, for vLLM's ``date``, the local time the file states, zone not
  recorded.
* The run page's stored summary is labelled with the units its keys name, not "seconds".
"""
from __future__ import annotations

import csv
import hashlib
import importlib
import io
import json
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.urls import reverse

from benchmarks.importers import record_digest, result_date
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import AlreadyImported, run_import
from benchmarks.services import runs as run_services
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.test_api_schema_benchmarks import _schema, check

DATA = Path(__file__).parent / "data"
SGLANG_LINE = (DATA / "sglang-bench-serving-h200.jsonl").read_text().strip()
VLLM = (DATA / "vllm-bench-serve.json").read_text()
# A second SGLang run, as bench_serving appends it to the same file: another concurrency bound.
NEXT_LINE = SGLANG_LINE.replace('"max_concurrency": null', '"max_concurrency": 16')

pytestmark = pytest.mark.django_db


def _post(api, body: str, name: str, **data):
    return api.post("/api/runs/import/", {"file": SimpleUploadedFile(name, body.encode()), **data},
                    format="multipart")


# --- the digest -----------------------------------------------------------------------------------


def test_a_records_digest_ignores_spacing_line_endings_key_order_and_a_bom_but_not_a_value() -> None:
    obj = json.loads(SGLANG_LINE)
    same = [SGLANG_LINE + "\n", SGLANG_LINE + "\r\n", "\ufeff" + SGLANG_LINE, json.dumps(obj, indent=4),
            json.dumps(dict(reversed(list(obj.items())))), SGLANG_LINE.replace("0.0", "0.00"),
            "[" + SGLANG_LINE + "]"]
    assert {record_digest(text) for text in same} == {record_digest(SGLANG_LINE)}
    assert len(record_digest(SGLANG_LINE)) == 64
    assert record_digest(NEXT_LINE) != record_digest(SGLANG_LINE)
    assert record_digest("not json") == "" and record_digest("[1, 2]") == ""


def test_vllms_date_is_read_as_a_local_time_without_a_zone() -> None:
    assert result_date("20260722-041843") == "2026-07-22T04:18:43"
    assert result_date("20261332-041843") is None     # no 13th month
    assert result_date("2026-07-22 04:18:43") is None and result_date(None) is None and result_date(5) is None


# --- 1. duplicates per run ------------------------------------------------------------------------


def test_a_grown_sglang_file_imports_its_new_line_and_names_the_one_skipped(operator_api, viewer_api) -> None:
    schema = _schema(viewer_api)
    first = _post(operator_api, SGLANG_LINE + "\n", "h200.jsonl")
    assert first.status_code == 201, first.json()
    check(schema, first, "/api/runs/import/", "post")
    [one] = first.json()["created"]
    assert first.json()["skipped"] == []

    grown = _post(operator_api, SGLANG_LINE + "\n" + NEXT_LINE + "\n", "h200.jsonl")
    assert grown.status_code == 201, grown.json()
    check(schema, grown, "/api/runs/import/", "post")
    [two] = grown.json()["created"]
    assert (two["source_line"], two["concurrency"]) == (2, 16)
    assert grown.json()["skipped"] == [
        {"line": 1, "item": None, "where": "line 1", "run": one["id"], "in_this_file": False}]
    assert BenchmarkRun.objects.count() == 2
    assert one["record_sha256"] == record_digest(SGLANG_LINE) and two["record_sha256"] == record_digest(NEXT_LINE)

    # Nothing new: refused, naming the runs holding each line (both files' names and times).
    again = _post(operator_api, SGLANG_LINE + "\r\n" + NEXT_LINE + "\r\n", "copy.jsonl")
    assert again.status_code == 409
    check(schema, again, "/api/runs/import/", "post")
    body = again.json()
    assert body["code"] == "conflict" and body["runs"] == [one["id"], two["id"]]
    assert [(k["where"], k["run"]) for k in body["skipped"]] == [("line 1", one["id"]), ("line 2", two["id"])]
    assert body["detail"].startswith(f"every run of this file was already imported: line 1 as run #{one['id']} "
                                     "(h200.jsonl, ")
    assert f"; line 2 as run #{two['id']} (h200.jsonl, " in body["detail"]
    assert body["detail"].endswith("; set allow_duplicate to true to import it again")
    # other bytes than the runs' files: their SHA-256 is in the body, not named as the same file
    assert body["sha256"] == hashlib.sha256((SGLANG_LINE + "\r\n" + NEXT_LINE + "\r\n").encode()).hexdigest()
    assert body["sha256"] not in body["detail"]
    assert BenchmarkRun.objects.count() == 2


def test_one_result_in_other_spacing_is_refused_naming_its_run(operator_api) -> None:
    [run] = _post(operator_api, VLLM, "vllm.json").json()["created"]
    pretty = json.dumps(json.loads(VLLM), indent=2, sort_keys=True) + "\r\n"
    again = _post(operator_api, pretty, "pretty.json")
    assert again.status_code == 409
    assert again.json()["detail"].startswith(f"the result in this file was already imported as run #{run['id']} "
                                             "(vllm.json, ")
    assert again.json()["skipped"] == [{"line": None, "item": None, "where": "the file", "run": run["id"],
                                        "in_this_file": False}]
    # The same bytes still name the file as such, with its hash.
    same = _post(operator_api, VLLM, "same.json")
    assert same.status_code == 409 and same.json()["detail"].startswith(
        f"this file was already imported as run #{run['id']} (vllm.json) on ")
    assert run["original_sha256"][:12] in same.json()["detail"]


def test_a_result_given_twice_in_one_file_is_stored_once(operator_api) -> None:
    answer = _post(operator_api, f"{SGLANG_LINE}\n{NEXT_LINE}\n{SGLANG_LINE}\n", "twice.jsonl")
    assert answer.status_code == 201, answer.json()
    first, second = answer.json()["created"]
    assert (first["source_line"], second["source_line"]) == (1, 2)
    assert answer.json()["skipped"] == [
        {"line": 3, "item": None, "where": "line 3", "run": first["id"], "in_this_file": True}]
    other = SGLANG_LINE.replace('"max_concurrency": null', '"max_concurrency": 32')
    outcome = run_import(text=f"{other}\n{other}\n", filename="t.jsonl", user=None)
    assert [r.source_line for r in outcome] == [1]
    assert outcome.skipped_said == (f"skipped 1 run already imported: line 2: the same result as line 1 of this "
                                    f"file (run #{outcome[0].pk})")


def test_allow_duplicate_stores_every_run_marking_the_copies(operator_api) -> None:
    [first] = _post(operator_api, SGLANG_LINE, "h200.jsonl").json()["created"]
    kept = _post(operator_api, f"{SGLANG_LINE}\n{SGLANG_LINE}\n{NEXT_LINE}\n", "all.jsonl", allow_duplicate="true")
    assert kept.status_code == 201 and kept.json()["skipped"] == []
    assert [r["source_line"] for r in kept.json()["created"]] == [1, 2, 3]
    rows = list(BenchmarkRun.objects.order_by("id").values_list("record_sha256", "allowed_duplicate"))
    assert rows == [(record_digest(SGLANG_LINE), False), (record_digest(SGLANG_LINE), True),
                    (record_digest(SGLANG_LINE), True), (record_digest(NEXT_LINE), False)]
    # A later import without it skips them, naming the oldest run holding the result.
    again = _post(operator_api, SGLANG_LINE, "h200.jsonl")
    assert again.status_code == 409 and again.json()["runs"] == [first["id"]]


def test_the_database_holds_one_imported_run_per_record() -> None:
    [run] = run_import(text=SGLANG_LINE, filename="a.jsonl", user=None)
    copy = BenchmarkRun(source="imported", status="done", record_sha256=run.record_sha256)
    with pytest.raises(IntegrityError), transaction.atomic():
        copy.save()
    copy.allowed_duplicate = True
    copy.save()    # a copy imported on purpose
    BenchmarkRun.objects.create(source="imported", status="done", record_sha256="")   # unreadable: never matched
    BenchmarkRun.objects.create(source="imported", status="done", record_sha256="")


def test_an_import_that_loses_a_race_reads_again_and_skips_what_the_other_stored(monkeypatch) -> None:
    [held] = run_import(text=SGLANG_LINE, filename="a.jsonl", user=None)
    real = run_services.imported_record_runs
    calls = []

    def stale_at_first(*, digests):
        # As if the other import committed its run after this one looked: the first two reads
        # (the check before the transaction and the one in it) find nothing.
        calls.append(len(digests))
        return {} if len(calls) <= 2 else real(digests=digests)

    monkeypatch.setattr(run_services, "imported_record_runs", stale_at_first)
    outcome = run_import(text=f"{SGLANG_LINE}\n{NEXT_LINE}\n", filename="grown.jsonl", user=None)
    assert len(calls) == 3     # the insert of line 1 failed on the unique index, then it read again
    assert [r.source_line for r in outcome] == [2]
    assert [(s.where, s.run.pk) for s in outcome.skipped] == [("line 1", held.pk)]
    assert BenchmarkRun.objects.count() == 2

    calls.clear()
    with pytest.raises(AlreadyImported) as refused:
        run_import(text=f"{NEXT_LINE}\n", filename="next.jsonl", user=None)
    assert [r.pk for r in refused.value.runs] == [outcome[0].pk]
    assert BenchmarkRun.objects.count() == 2


def test_the_import_form_names_the_skipped_lines_and_links_the_refusal(operator) -> None:
    client = logged_in_client(operator)
    url = reverse("benchmarks:run-import")
    client.post(url, {"file": SimpleUploadedFile("h200.jsonl", SGLANG_LINE.encode())}, follow=True)
    first = BenchmarkRun.objects.get()
    grown = client.post(url, {"file": SimpleUploadedFile("h200.jsonl", f"{SGLANG_LINE}\n{NEXT_LINE}\n".encode())})
    second = BenchmarkRun.objects.exclude(pk=first.pk).get()
    assert grown.status_code == 302 and grown["Location"] == reverse("benchmarks:run-detail", args=[second.pk])
    assert [str(m) for m in get_messages(grown.wsgi_request)] == [
        "Imported 1 new run from h200.jsonl.",
        f"Skipped 1 run already imported: line 1: already imported as run #{first.pk} (not stored again)."]
    again = client.post(url, {"file": SimpleUploadedFile("h200.jsonl", f"{SGLANG_LINE}\n{NEXT_LINE}\n".encode())})
    assert again.status_code == 409
    html = again.content.decode()
    assert f"Every run of this file was already imported: line 1 as run #{first.pk} (h200.jsonl, " in html
    for run in (first, second):
        assert f'<a href="{reverse("benchmarks:run-detail", args=[run.pk])}">run #{run.pk}</a>' in html
    assert "Import again runs that were imported before" in html
    assert "only its new lines are stored" in html
    assert BenchmarkRun.objects.count() == 2


def test_the_command_prints_the_skipped_lines(tmp_path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(SGLANG_LINE + "\n")
    call_command("import_results", str(path), stdout=io.StringIO())
    first = BenchmarkRun.objects.get()
    path.write_text(f"{SGLANG_LINE}\n{NEXT_LINE}\n")
    out = io.StringIO()
    call_command("import_results", str(path), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"run #{BenchmarkRun.objects.latest('id').pk} (sglang-bench-serving, line 2): ")
    assert lines[1:] == [f"skipped line 1: already imported as run #{first.pk}"]


def test_the_migration_fills_in_each_records_digest_and_marks_later_copies() -> None:
    runs = [BenchmarkRun.objects.create(source="imported", status="done", original_text=text,
                                        ended_at="2026-12-07T19:56:06Z")
            for text in (VLLM, SGLANG_LINE + "\r\n", json.dumps(json.loads(VLLM), indent=2), "[" + NEXT_LINE + "]",
                         "not json")]
    measured = BenchmarkRun.objects.create(status="done", ended_at="2026-12-07T19:56:06Z")
    migration = importlib.import_module("benchmarks.migrations.0011_imported_run_record_digest")
    migration.backfill(apps, None)
    rows = [BenchmarkRun.objects.values_list("record_sha256", "allowed_duplicate", "ended_at").get(pk=r.pk)
            for r in runs]
    assert rows == [(record_digest(VLLM), False, None), (record_digest(SGLANG_LINE), False, None),
                    (record_digest(VLLM), True, None), (record_digest(NEXT_LINE), False, None), ("", False, None)]
    measured.refresh_from_db()
    assert measured.ended_at is not None and measured.record_sha256 == ""


# --- 2. times ---------------------------------------------------------------------------------------


def test_an_imported_vllm_run_has_no_end_time_and_shows_its_files_date_without_a_zone(operator, operator_api,
                                                                                      viewer_api) -> None:
    [made] = _post(operator_api, VLLM, "vllm.json").json()["created"]
    run = BenchmarkRun.objects.get(pk=made["id"])
    api = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert (api["started_at"], api["ended_at"]) == (None, None)
    assert api["imported_at"] == api["created_at"] and api["imported_at"].startswith(
        run.created_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert api["result_date"] == "2026-07-22T04:18:43" and api["summary"]["date"] == "20260722-041843"
    exported = json.loads(viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").content)
    assert (exported["started_at"], exported["ended_at"], exported["result_date"]) == (None, None,
                                                                                       "2026-07-22T04:18:43")
    assert exported["imported_at"] == run.created_at.isoformat()
    assert exported["record_sha256"] == record_digest(VLLM)

    html = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert '<dt>Ended</dt><dd class="run-ended">— <span class="muted small">(the file does not record it)</span>' in html
    assert '<dt>Started</dt><dd class="run-started">— ' in html
    assert ('<dt>Result dated</dt><dd class="run-result-date"><time datetime="2026-07-22T04:18:43">'
            '2026-07-22 04:18:43</time>') in html
    assert "local time of the benchmarking host, zone not recorded" in html
    imported_at = run.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert '<dt>Imported at</dt><dd class="run-imported-at"><time' in html and imported_at in html


def test_an_sglang_run_has_no_date_and_a_measured_run_keeps_its_times(operator, operator_api, viewer_api) -> None:
    [made] = _post(operator_api, SGLANG_LINE, "h200.jsonl").json()["created"]
    api = viewer_api.get(f"/api/runs/{made['id']}/").json()
    assert (api["started_at"], api["ended_at"], api["result_date"]) == (None, None, None)
    html = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[made["id"]])).content.decode()
    assert "Result dated" not in html and "run-imported-at" in html
    measured = BenchmarkRun.objects.create(status="done", started_at="2026-12-07T10:00:00Z",
                                           ended_at="2026-12-07T10:05:00Z")
    api = viewer_api.get(f"/api/runs/{measured.pk}/").json()
    assert (api["imported_at"], api["result_date"], api["record_sha256"]) == (None, None, None)
    assert api["ended_at"] == "2026-12-07T10:05:00Z"
    html = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[measured.pk])).content.decode()
    assert "2026-12-07 10:05:00" in html and "run-imported-at" not in html


def _csv_row(api, run_id: int) -> dict[str, str]:
    response = api.get(f"/api/runs/{run_id}/export/?format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    [row] = list(csv.DictReader(io.StringIO(response.content.decode())))
    return row


def test_the_exports_give_a_measured_runs_times_in_utc(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(status="done", num_gpus=1)
    measured = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status="done",
                                           started_at="2026-12-07T10:00:00.250000Z",
                                           ended_at="2026-12-07T10:05:00Z")
    measured.refresh_from_db()
    row = _csv_row(viewer_api, measured.pk)
    assert (row["started_at"], row["ended_at"]) == ("2026-12-07T10:00:00.250000+00:00", "2026-12-07T10:05:00+00:00")
    assert (row["imported_at"], row["result_date"]) == ("", "")
    exported = json.loads(viewer_api.get(f"/api/runs/{measured.pk}/export/?format=json").content)
    assert exported["created_at"] == measured.created_at.isoformat() and exported["created_at"].endswith("+00:00")
    assert (exported["started_at"], exported["ended_at"]) == ("2026-12-07T10:00:00.250000+00:00",
                                                              "2026-12-07T10:05:00+00:00")
    # The sweep export gives the same cells for its runs, and when the sweep was created.
    swept = json.loads(viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json").content)
    assert swept["sweep"]["created_at"] == sweep.created_at.isoformat()
    assert swept["runs"][0]["created_at"] == exported["created_at"]
    response = viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=csv")
    [swept_row] = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert swept_row["started_at"] == row["started_at"] and swept_row["ended_at"] == row["ended_at"]
    # Still running: no end yet.
    BenchmarkRun.objects.filter(pk=measured.pk).update(ended_at=None, status="running")
    assert _csv_row(viewer_api, measured.pk)["ended_at"] == ""


def test_the_csv_export_gives_an_imported_runs_import_time_and_its_files_date(operator_api, viewer_api) -> None:
    [made] = _post(operator_api, VLLM, "vllm.json").json()["created"]
    run = BenchmarkRun.objects.get(pk=made["id"])
    row = _csv_row(viewer_api, run.pk)
    assert (row["started_at"], row["ended_at"]) == ("", "")   # its harness did not record when it ran
    assert row["imported_at"] == run.created_at.isoformat()
    assert row["result_date"] == "2026-07-22T04:18:43"
    exported = json.loads(viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").content)
    assert exported["created_at"] == exported["imported_at"] == row["imported_at"]


def test_a_date_in_another_form_is_noted_and_not_read() -> None:
    [run] = run_import(text=VLLM.replace("20260722-041843", "yesterday"), filename="v.json", user=None)
    assert run.summary["date"] == "yesterday" and run_services.run_result_date(run=run) is None
    assert "date 'yesterday' is not in vLLM's %Y%m%d-%H%M%S form; not read as a time." in run.summary["notes"]


def test_imported_runs_list_by_when_they_were_imported(operator_api, viewer_api) -> None:
    a = _post(operator_api, SGLANG_LINE, "a.jsonl").json()["created"][0]["id"]
    b = _post(operator_api, VLLM, "v.json").json()["created"][0]["id"]
    assert [r["id"] for r in viewer_api.get("/api/runs/").json()["results"]] == [b, a]
    assert [r["id"] for r in viewer_api.get("/api/runs/?order=created_at").json()["results"]] == [a, b]


# --- 3. the stored summary's label ------------------------------------------------------------------


def test_the_stored_summary_is_labelled_with_the_units_its_keys_name(operator) -> None:
    [run] = run_import(text=SGLANG_LINE, filename="a.jsonl", user=None)
    html = logged_in_client(operator).get(reverse("benchmarks:run-detail", args=[run.pk])).content.decode()
    assert "Stored summary (JSON, seconds)" not in html
    assert ("<summary>Stored summary (JSON; each value in the unit its key names: <code>_s</code> seconds, "
            "<code>_ms</code> milliseconds, <code>_tok_s</code> tokens/s, <code>_req_s</code> requests/s)"
            "</summary>") in html
    assert '"ttft_ms"' in html or "&quot;ttft_ms&quot;" in html


def test_a_refused_form_import_keeps_the_choices_and_shows_the_problems_first(operator) -> None:
    client = logged_in_client(operator)
    url = reverse("benchmarks:run-import")
    bad = SGLANG_LINE.replace('"completed": 300', '"completed": -3')
    refused = client.post(url, {"file": SimpleUploadedFile("bad.jsonl", bad.encode()), "allow_duplicate": "1"})
    assert refused.status_code == 400
    html = refused.content.decode()
    form = html.split('<form method="post" enctype="multipart/form-data"')[1].split("</form>")[0]
    # the problems come first in the form, focused on load; the tick is kept, the file named
    summary = form.split('<div class="notice bad error-summary import-errors" id="import-errors" role="alert" '
                         'tabindex="-1" autofocus>')[1].split("</div>")[0]
    assert form.index('id="import-errors"') < form.index('id="id_file"')
    assert summary.startswith("\n    <strong><code>bad.jsonl</code> was not imported</strong>")
    assert "<code>line 1.completed</code>: expected a whole number &gt;= 0, got -3" in summary
    assert 'id="id_allow_duplicate" checked>' in form
    # without the tick, none is shown; a page with no refusal has no problem block
    plain = client.post(url, {"file": SimpleUploadedFile("bad.jsonl", bad.encode())}).content.decode()
    assert 'id="id_allow_duplicate">' in plain and 'id="id_allow_duplicate" checked' not in plain
    assert 'id="import-errors"' not in client.get(reverse("benchmarks:index")).content.decode()
    assert not BenchmarkRun.objects.exists()
