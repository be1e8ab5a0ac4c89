"""Hostile input found against the running server, each now a 400 naming the field (never a 500,
never stored): deeply nested JSON in an imported file, an import file name with line breaks or
other control characters (and such a name already stored still downloads), a file name that is not
ASCII (downloaded as RFC 5987 ``filename*``), an unknown key in an import or a text or file name
that is not a JSON string, and sweep grids with a time limit too short to measure, repeated
concurrencies, rates or length pairs, or a rate so low that its point's time overflowed to ``inf``
in the message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.importers import MAX_JSON_NESTING
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import MIN_DURATION_S
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus

DATA = Path(__file__).parent / "data"
VLLM = (DATA / "vllm-bench-serve.json").read_text()

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)


def _import(api, text: str, **fields):
    return api.post("/api/runs/import/", {"text": text, **fields}, format="json")


# --- 1. deeply nested JSON in an imported file ------------------------------------------------------

TOO_DEEP = f"line 1: not valid JSON (nested more than {MAX_JSON_NESTING} levels deep at column 101)"


def test_deeply_nested_import_text_is_a_400_naming_the_line_not_a_recursion_error(operator_api) -> None:
    response = _import(operator_api, "[" * 100_000 + "]" * 100_000)
    assert response.status_code == 400
    assert response.json() == {"line 1": [TOO_DEEP.removeprefix("line 1: ")]}
    assert not BenchmarkRun.objects.exists()


def test_deeply_nested_import_file_is_a_400_naming_the_line_not_a_recursion_error(operator_api) -> None:
    upload = SimpleUploadedFile("deep.json", ("[" * 50_000 + "]" * 50_000).encode())
    response = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert response.status_code == 400
    assert response.json() == {"line 1": [TOO_DEEP.removeprefix("line 1: ")]}
    assert not BenchmarkRun.objects.exists()


def test_a_result_nested_past_the_limit_is_refused_where_python_could_still_parse_it(operator_api) -> None:
    # The object is level 1, so a key holding 99 nested lists reaches the limit; 100 go past it.
    def with_deep_key(lists: int) -> str:
        return json.dumps({**json.loads(VLLM), "deep": json.loads("[" * lists + "]" * lists)})

    refused_text = with_deep_key(MAX_JSON_NESTING)
    column = refused_text.index('"deep": [') + len('"deep": ') + MAX_JSON_NESTING
    refused = _import(operator_api, refused_text)
    assert refused.status_code == 400
    assert refused.json() == {"line 1": [
        f"not valid JSON (nested more than {MAX_JSON_NESTING} levels deep at column {column})"]}
    assert not BenchmarkRun.objects.exists()
    kept = _import(operator_api, with_deep_key(MAX_JSON_NESTING - 1))
    assert kept.status_code == 201, kept.json()


def test_brackets_inside_strings_do_not_count_as_nesting(operator_api) -> None:
    text = json.dumps({**json.loads(VLLM), "note": "[{" * 500 + '\\"[' * 50})
    assert _import(operator_api, text).status_code == 201


# --- 2. control characters in an import's file name -------------------------------------------------


@pytest.mark.parametrize(("filename", "found"), [
    ("a\r\nSet-Cookie: x=y", "found U+000D at character 2"),
    ("run\n.json", "found U+000A at character 4"),
    ("tab\there.json", "found U+0009 at character 4"),
    ("del\x7f.json", "found U+007F at character 4"),
    ("c1\x85.json", "found U+0085 at character 3"),
    ("line\u2028sep.json", "found U+2028 at character 5"),
    ("para\u2029sep.json", "found U+2029 at character 5"),
])
def test_an_import_filename_with_a_control_character_is_refused(operator_api, filename, found) -> None:
    response = _import(operator_api, VLLM, filename=filename)
    assert response.status_code == 400
    assert response.json() == {"filename": [f"must not contain control characters or line breaks; {found}"]}
    upload = SimpleUploadedFile("vllm.json", VLLM.encode())
    multipart = operator_api.post("/api/runs/import/", {"file": upload, "filename": filename}, format="multipart")
    assert multipart.status_code == 400
    assert list(multipart.json()) == ["filename"]
    assert not BenchmarkRun.objects.exists()


def test_a_stored_filename_with_line_breaks_still_downloads_with_them_replaced(operator_api, viewer) -> None:
    created = _import(operator_api, VLLM, filename="kept.json")
    assert created.status_code == 201
    run_id = created.json()["created"][0]["id"]
    # A name stored before such names were refused (or by manage.py import_results).
    BenchmarkRun.objects.filter(pk=run_id).update(original_filename="a\r\nSet-Cookie: x=y\u2028.json")
    api = operator_api.get(f"/api/runs/{run_id}/original/")
    assert api.status_code == 200 and api.content.decode() == VLLM
    assert api["Content-Disposition"] == 'attachment; filename="a__Set-Cookie: x=y_.json"'
    assert "x" not in api.cookies
    page = logged_in_client(viewer).get(reverse("benchmarks:run-original", args=[run_id]))
    assert page.status_code == 200 and page.content.decode() == VLLM
    assert page["Content-Disposition"] == 'attachment; filename="a__Set-Cookie: x=y_.json"'
    assert "x" not in page.cookies


# --- 3. a file name that is not ASCII ---------------------------------------------------------------


def test_a_non_ascii_filename_downloads_as_an_rfc_5987_filename(operator_api, viewer) -> None:
    created = _import(operator_api, VLLM, filename="é€😀.jsonl")
    assert created.status_code == 201, created.json()
    [run] = created.json()["created"]
    assert run["original_filename"] == "é€😀.jsonl"
    expected = "attachment; filename*=utf-8''%C3%A9%E2%82%AC%F0%9F%98%80.jsonl"
    api = operator_api.get(f"/api/runs/{run['id']}/original/")
    assert api.status_code == 200 and api["Content-Disposition"] == expected
    page = logged_in_client(viewer).get(reverse("benchmarks:run-original", args=[run["id"]]))
    assert page.status_code == 200 and page["Content-Disposition"] == expected


# --- 4. unknown keys in an import --------------------------------------------------------------------

UNKNOWN_ZZZ = {"zzz": ["unknown field 'zzz'; allowed: file, text, filename, allow_duplicate"]}


def test_an_unknown_key_in_an_import_is_refused_before_the_file_is_read(operator_api) -> None:
    response = _import(operator_api, VLLM, zzz=1)
    assert response.status_code == 400 and response.json() == UNKNOWN_ZZZ
    assert not BenchmarkRun.objects.exists()
    upload = SimpleUploadedFile("vllm.json", VLLM.encode())
    multipart = operator_api.post("/api/runs/import/", {"file": upload, "zzz": "1"}, format="multipart")
    assert multipart.status_code == 400 and multipart.json() == UNKNOWN_ZZZ
    assert not BenchmarkRun.objects.exists()
    # the same content again: the unknown key is the answer, not 409 "imported before" nor a 201
    assert _import(operator_api, VLLM).status_code == 201
    again = _import(operator_api, VLLM, zzz=1, allow_duplicate=True)
    assert again.status_code == 400 and again.json() == UNKNOWN_ZZZ
    assert _import(operator_api, VLLM, zzz=1).json() == UNKNOWN_ZZZ
    assert BenchmarkRun.objects.count() == 1


@pytest.mark.parametrize(("body", "field", "shown"), [
    ({"text": 5}, "text", "the number 5"),
    ({"text": True}, "text", "the boolean true"),
    ({"text": ["{}"]}, "text", 'the list ["{}"]'),
    ({"text": VLLM, "filename": 7}, "filename", "the number 7"),
])
def test_an_import_text_or_filename_that_is_not_a_string_is_refused_under_its_name(operator_api, body, field,
                                                                                    shown) -> None:
    # {"text": 5} was read as the file "5" and refused under "file" as not a result
    response = operator_api.post("/api/runs/import/", body, format="json")
    assert response.status_code == 400
    assert response.json() == {field: [f"must be a string, got {shown}"]}
    assert not BenchmarkRun.objects.exists()
    # a multipart form sends its fields as text, as it always did
    upload = SimpleUploadedFile("vllm.json", VLLM.encode())
    multipart = operator_api.post("/api/runs/import/", {"file": upload, "filename": "7"}, format="multipart")
    assert multipart.status_code == 201, multipart.json()
    assert multipart.json()["created"][0]["original_filename"] == "7"


# --- 5. sweep grids ---------------------------------------------------------------------------------

GRID = {"concurrency": [1], "lengths": ["8:8"]}


def _sweep(api, deployment, **grid):
    return api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {**GRID, **grid}}, format="json")


@pytest.mark.parametrize("duration", [1e-300, 0.5, 0.999])
def test_a_duration_below_the_minimum_is_refused(operator_api, deployment, duration) -> None:
    response = _sweep(operator_api, deployment, duration_s=duration)
    assert response.status_code == 400
    assert response.json() == {"grid.duration_s": [
        f"must be at least {MIN_DURATION_S} s and at most 86400 s (24 h), got {duration!r}"]}
    assert not BenchmarkSweep.objects.exists()


def test_a_duration_of_the_minimum_is_taken(operator_api, deployment, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        response = _sweep(operator_api, deployment, duration_s=MIN_DURATION_S)
    assert response.status_code == 201, response.json()
    assert response.json()["grid"]["duration_s"] == MIN_DURATION_S


def test_repeated_concurrencies_are_refused_naming_the_value(operator_api, deployment) -> None:
    response = _sweep(operator_api, deployment, concurrency=[1] * 5000)
    assert response.status_code == 400
    assert response.json() == {"grid.concurrency": ["repeated concurrency: 1 (5,000 times); give each once"]}
    several = _sweep(operator_api, deployment, concurrency=[1, 8, 8, 1, 16, 1])
    assert several.json() == {"grid.concurrency": ["repeated concurrency: 1 (3 times), 8 (2 times); give each once"]}
    many = _sweep(operator_api, deployment, concurrency=list(range(1, 8)) * 2)
    assert many.json()["grid.concurrency"] == [
        "repeated concurrency: 1 (2 times), 2 (2 times), 3 (2 times), 4 (2 times), 5 (2 times), and 2 more; "
        "give each once"]
    assert not BenchmarkSweep.objects.exists()


def test_repeated_rates_and_length_pairs_are_refused_naming_the_value(operator_api, deployment) -> None:
    response = _sweep(operator_api, deployment, concurrency=[], request_rates=[2, 0.5, 2.0], requests=4,
                      lengths=["8:8", [8, 8], "16:8"])
    assert response.status_code == 400
    assert response.json() == {
        "grid.request_rates": ["repeated request rate: 2 req/s (2 times); give each once"],
        "grid.lengths": ["repeated length pair: 8:8 (2 times); give each once"],
    }
    assert not BenchmarkSweep.objects.exists()


def test_repeated_concurrencies_from_the_sweep_form_are_refused(operator, deployment) -> None:
    client = logged_in_client(operator)
    response = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1,1,1", "lengths": "8:8", "requests": "2"})
    assert response.status_code == 400
    assert "repeated concurrency: 1 (3 times); give each once" in response.content.decode()
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.parametrize(("rate", "shown", "seconds"), [(1e-308, "1e-308", "2e+308"), (5e-324, "5e-324", "4.05e+323")])
def test_a_rate_whose_point_time_overflows_gets_a_finite_time_in_the_message(
        operator_api, deployment, rate, shown, seconds) -> None:
    response = _sweep(operator_api, deployment, concurrency=[], request_rates=[rate], requests=2)
    assert response.status_code == 400
    [message] = response.json()["grid.request_rates.0"]
    assert message == (f"2 requests at {shown} req/s take about {seconds} s; at most 86400 s (24 h) per point: "
                       "raise the rate or give duration_s")
    assert "inf" not in message
    assert not BenchmarkSweep.objects.exists()


def test_one_request_at_a_tiny_rate_is_said_in_the_singular(operator_api, deployment) -> None:
    response = _sweep(operator_api, deployment, concurrency=[], request_rates=[1e-300], requests=1)
    assert response.status_code == 400
    assert response.json()["grid.request_rates.0"] == [
        "1 request at 1e-300 req/s takes about 1e+300 s; at most 86400 s (24 h) per point: raise the rate or give "
        "duration_s"]
    assert not BenchmarkSweep.objects.exists()
