"""Result files are cut into lines at "\\n" only (never at U+2028, U+0085, a form feed or another
character a JSON string may hold), each run keeps its line as the file has it, CRLF included, and
a key given twice in a nested object is refused like one given twice in the result object."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.importers import ResultImportError, import_results
from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
SGLANG = json.loads((DATA / "sglang-bench-serving-h200.jsonl").read_text())
VLLM = json.loads((DATA / "vllm-bench-serve.json").read_text())
# Characters str.splitlines() ends a line at that json.dumps(..., ensure_ascii=False) writes as
# they are inside a string (a form feed, a vertical tab and \x1c-\x1e it escapes, as JSON requires
# of every control character).
SEPARATORS = "\u2028\u2029\u0085"


def _line(**changes: object) -> str:
    return json.dumps({**SGLANG, **changes}, ensure_ascii=False)


def test_a_line_holding_line_separators_in_a_string_stays_one_run() -> None:
    label = f"run a{SEPARATORS}b"
    escaped = "f\x0cv\x0bfs\x1cgs\x1drs\x1e"
    text = "\n".join((_line(backend=label, max_concurrency=8), _line(max_concurrency=16, backend=escaped),
                      _line(max_concurrency=32, label=SEPARATORS * 2))) + "\n"
    assert len(text.splitlines()) == 3 + 3 * len(SEPARATORS)   # what the import used to cut it into
    runs = import_results(text)
    assert [r.source_line for r in runs] == [1, 2, 3]
    assert [r.concurrency for r in runs] == [8, 16, 32]
    assert runs[0].backend == label and runs[1].backend == escaped
    assert [r.original_record for r in runs] == [line + "\n" for line in text.split("\n")[:3]]
    assert "".join(r.original_record for r in runs) == text


def test_error_lines_count_newlines_only() -> None:
    text = (_line(backend="a\u2028b\u2029c\x85d") + "\n"
            + _line(duration=-1) + "\r\n"
            + "\r\n"
            + '{"completed": 3,\u2028 oops}\n')
    with pytest.raises(ResultImportError) as caught:
        import_results(text)
    assert caught.value.errors == {
        "line 2.duration": ["expected a duration in seconds > 0, got -1"],
        "line 4": ["not valid JSON (Expecting property name enclosed in double quotes at column 17)"],
    }


def test_a_line_of_a_form_feed_is_not_blank() -> None:
    with pytest.raises(ResultImportError) as caught:
        import_results(_line() + "\n\x0c\n" + _line(max_concurrency=16) + "\n")
    assert caught.value.errors == {"line 2": ["not valid JSON (Expecting value at column 1)"]}


@pytest.mark.django_db
def test_a_crlf_file_keeps_each_line_byte_for_byte(operator, operator_api, viewer_api) -> None:
    lines = [_line(max_concurrency=c, backend=f"c{c}\u2028") for c in (8, 16, 32)]
    body = (lines[0] + "\r\n" + lines[1] + "\r\n\r\n" + lines[2]).encode()   # the last line has no ending
    upload = SimpleUploadedFile("crlf.jsonl", body, content_type="application/jsonl")
    response = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert response.status_code == 201, response.json()
    runs = list(BenchmarkRun.objects.order_by("source_line"))
    assert [r.source_line for r in runs] == [1, 2, 4]
    assert [r.concurrency for r in runs] == [8, 16, 32]
    assert [r.original_text for r in runs] == [lines[0] + "\r\n", lines[1] + "\r\n", lines[2]]
    assert {r.original_sha256 for r in runs} == {hashlib.sha256(body).hexdigest()}
    for run, expected in zip(runs, (lines[0] + "\r\n", lines[1] + "\r\n", lines[2])):
        api = viewer_api.get(f"/api/runs/{run.pk}/original/")
        assert api.status_code == 200 and api.content == expected.encode()
        page = logged_in_client(operator).get(reverse("benchmarks:run-original", args=[run.pk]))
        assert page.status_code == 200 and page.content == expected.encode()
    # The same bytes again are a duplicate, and so are the same lines with "\n" endings: each run is
    # recognised by its record read as JSON, not by the file's bytes.
    again = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("again.jsonl", body)},
                              format="multipart")
    assert again.status_code == 409 and "already imported as runs" in again.json()["detail"]
    lf = body.replace(b"\r\n", b"\n")
    other = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("lf.jsonl", lf)}, format="multipart")
    assert other.status_code == 409, other.json()
    assert other.json()["runs"] == [r.pk for r in runs]
    assert [(k["line"], k["run"]) for k in other.json()["skipped"]] == [(r.source_line, r.pk) for r in runs]
    kept = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("lf.jsonl", lf), "allow_duplicate": "true"},
                             format="multipart")
    assert kept.status_code == 201 and len(kept.json()["created"]) == 3 and kept.json()["skipped"] == []
    assert BenchmarkRun.objects.get(pk=kept.json()["created"][0]["id"]).original_text == lines[0] + "\n"


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_pretty_printed_vllm_file_still_imports(ending: str) -> None:
    text = json.dumps({**VLLM, "label": "x\u2028y"}, indent=2, ensure_ascii=False).replace("\n", ending) + ending
    [run] = import_results(text)
    assert run.source_line is None and run.label == "x\u2028y" and run.completed == VLLM["completed"]
    assert run.original_text == text and run.original_record == text.strip()


def test_a_key_given_twice_in_a_nested_object_is_refused_at_its_path() -> None:
    nested = json.dumps({**SGLANG, "server_info": {"tp": 8, "args": [{"x": 1}, {"y": 1}]}})
    repeated = nested.replace('"tp": 8', '"tp": 8, "tp": 4').replace('{"y": 1}', '{"y": 1, "y": 2, "y": 3}')
    text = _line() + "\n" + repeated + "\n"
    with pytest.raises(ResultImportError) as caught:
        import_results(text)
    assert caught.value.errors == {
        "line 2.server_info.tp": ["server_info.tp is given 2 times in one object: 8, then 4; an object has one "
                                  "value per key, so the file disagrees with itself"],
        "line 2.server_info.args[1].y": ["server_info.args[1].y is given 3 times in one object: 1, then 2, then "
                                         "3; an object has one value per key, so the file disagrees with itself"],
    }


def test_the_same_key_in_two_nested_objects_is_not_repeated() -> None:
    text = json.dumps({**SGLANG, "server_info": {"tp": 8, "a": {"tp": 4}, "b": [{"tp": 2}, {"tp": 1}]}}) + "\n"
    [run] = import_results(text)
    assert run.completed == SGLANG["completed"] and "server_info" in run.unmapped_keys


def test_a_pretty_printed_file_names_the_lines_of_a_nested_repeated_key() -> None:
    text = json.dumps({**VLLM, "server_info": {"a": [1, {"tp": 0}], "tp": 8}}, indent=2)
    text = text.replace('"tp": 8', '"tp": 8,\n    "tp": 4')
    lines = [n for n, line in enumerate(text.split("\n"), start=1) if line.strip().startswith('"tp": ')]
    assert len(lines) == 3   # the one in the array is another object's
    with pytest.raises(ResultImportError) as caught:
        import_results(text)
    assert caught.value.errors == {
        f"line {lines[2]}.server_info.tp": [f"server_info.tp is given 2 times in one object (lines {lines[1]}, "
                                            f"{lines[2]}): 8, then 4; an object has one value per key, so the file "
                                            "disagrees with itself"]}


@pytest.mark.django_db
def test_a_refused_nested_repeat_stores_nothing(operator_api) -> None:
    text = _line() + "\n" + _line(max_concurrency=16)[:-1] + ', "extra": {"k": 1, "k": 1}}\n'
    response = operator_api.post("/api/runs/import/", {"text": text, "filename": "r.jsonl"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "line 2.extra.k": ["extra.k is given 2 times in one object: 1, then 1; an object has one value per "
                                "key, so the file disagrees with itself"]}
    assert BenchmarkRun.objects.count() == 0
