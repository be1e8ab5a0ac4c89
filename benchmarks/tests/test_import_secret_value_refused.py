"""A result file whose name, ``model_id``, ``tokenizer_id`` or ``label`` holds a stored secret's
value is refused at import (each is stored and shown in clear): the problem names the field and
the secret, never the value, on the API, the import form and ``manage.py import_results``.
Nothing is stored."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks.models import BenchmarkRun

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent / "data"
VALUE = "tok-9f8e7d6c5b4a"


@pytest.fixture
def secret(admin_api):
    made = admin_api.post("/api/secrets/", {"name": "hub-token", "value": VALUE}, format="json")
    assert made.status_code == 201, made.json()


def _file(**changes) -> str:
    obj = json.loads((DATA / "vllm-bench-serve.json").read_text())
    obj.update(changes)
    return json.dumps(obj)


MESSAGE = ("{field} holds the value of secret 'hub-token'; it would be stored and shown in clear: "
           "remove the value from the {where} and import again")


@pytest.mark.parametrize(("changes", "filename", "path", "field"), [
    ({"model_id": f"/models/{VALUE}"}, "bench.json", "text.model_id", "model_id"),
    ({"model_id": base64.b64encode(VALUE.encode()).decode()}, "bench.json", "text.model_id", "model_id"),
    ({"tokenizer_id": f"org/{VALUE}"}, "bench.json", "text.tokenizer_id", "tokenizer_id"),
    ({"label": f"run {VALUE}"}, "bench.json", "text.label", "label"),
    ({}, f"bench-{VALUE}.json", "filename", "filename"),
], ids=["model_id", "model_id base64", "tokenizer_id", "label", "file name"])
def test_the_api_refuses_it_naming_the_field_not_the_value(secret, operator_api, changes, filename, path, field):
    answer = operator_api.post("/api/runs/import/", {"text": _file(**changes), "filename": filename}, format="json")

    assert answer.status_code == 400, answer.content
    where = "file name" if field == "filename" else "file"
    assert answer.json() == {path: [MESSAGE.format(field=field, where=where)]}
    assert VALUE not in answer.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_every_field_holding_it_is_named_at_once_by_line(secret, operator_api):
    text = _file() + "\n" + _file(model_id=f"m-{VALUE}") + "\n"

    answer = operator_api.post("/api/runs/import/", {"text": text, "filename": f"{VALUE}.jsonl"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {
        "filename": [MESSAGE.format(field="filename", where="file name")],
        "line 2.model_id": [MESSAGE.format(field="model_id", where="file")],
    }
    assert not BenchmarkRun.objects.exists()


def test_the_import_form_and_the_command_refuse_it_too(secret, operator, tmp_path):
    client = Client()
    client.force_login(operator)
    upload = io.BytesIO(_file(model_id=VALUE).encode())
    upload.name = "bench.json"

    page = client.post("/benchmarks/import/", {"file": upload})

    body = page.content.decode()
    assert "model_id holds the value of secret &#x27;hub-token&#x27;" in body
    assert VALUE not in body
    path = tmp_path / "bench.json"
    path.write_text(_file(model_id=VALUE))
    with pytest.raises(CommandError) as err:
        call_command("import_results", str(path), stdout=io.StringIO())
    assert "model_id holds the value of secret 'hub-token'" in str(err.value) and VALUE not in str(err.value)
    assert not BenchmarkRun.objects.exists()


def test_a_file_without_it_is_imported(secret, operator_api):
    answer = operator_api.post("/api/runs/import/", {"text": _file(), "filename": "bench.json"}, format="json")

    assert answer.status_code == 201, answer.content
    assert BenchmarkRun.objects.count() == 1


# --- anywhere else in the file: it is kept whole and served by the run's original download ---

ELSEWHERE = ("{what} holds the value of secret 'hub-token'; the file is kept as the run's original and its "
             "download would serve it in clear: remove the value from the file and import again")


def _sglang_line(**changes) -> str:
    first = (DATA / "sglang-bench-serving-h200.jsonl").read_text().splitlines()[0]
    return json.dumps({**json.loads(first), **changes})


def test_a_value_in_any_other_key_is_refused_by_its_line_and_key(secret, operator_api):
    spread = json.loads(_file())
    spread["server_info"] = {"args": ["--port", "30000"], "headers": {"authorization": f"Bearer {VALUE}"}}
    text = json.dumps(spread, indent=2)
    line = text.splitlines().index(f'      "authorization": "Bearer {VALUE}"') + 1

    answer = operator_api.post("/api/runs/import/", {"text": text, "filename": "bench.json"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"text.server_info.headers.authorization": [
        ELSEWHERE.format(what=f"server_info.headers.authorization (line {line})")]}
    assert VALUE not in answer.content.decode()
    assert not BenchmarkRun.objects.exists()


@pytest.mark.parametrize(("spelled", "path"), [
    (f"https://hub.example/?token={VALUE.replace('-', '%2D')}", "line 2.extra[1]"),
    (base64.b64encode(VALUE.encode()).decode(), "line 2.extra[1]"),
], ids=["percent-encoded", "base64"])
def test_each_line_of_several_runs_names_its_own_place(secret, operator_api, spelled, path):
    text = "\n".join([_sglang_line(max_concurrency=8), _sglang_line(max_concurrency=16, extra=["x", spelled]),
                      _sglang_line(max_concurrency=32, **{f"k-{VALUE}": 1})]) + "\n"

    answer = operator_api.post("/api/runs/import/", {"text": text, "filename": "bench.jsonl"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {path: [ELSEWHERE.format(what="extra[1]")],
                             "line 3": [ELSEWHERE.format(what="a key name")]}
    assert VALUE not in answer.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_the_form_and_the_command_refuse_a_value_elsewhere_too(secret, operator, tmp_path):
    client = Client()
    client.force_login(operator)
    upload = io.BytesIO(_file(note=f"token {VALUE}").encode())
    upload.name = "bench.json"

    body = client.post("/benchmarks/import/", {"file": upload}).content.decode()

    assert "note (line 1) holds the value of secret &#x27;hub-token&#x27;" in body and VALUE not in body
    path = tmp_path / "bench.json"
    path.write_text(_file(note=f"token {VALUE}"))
    with pytest.raises(CommandError) as err:
        call_command("import_results", str(path), stdout=io.StringIO())
    assert "note (line 1) holds the value of secret 'hub-token'" in str(err.value) and VALUE not in str(err.value)
    assert not BenchmarkRun.objects.exists()


def test_the_download_of_a_file_stored_before_masks_the_value(admin_api, operator_api, viewer):
    text = _file(note=f"token {VALUE}", label=f"run {VALUE}")
    made = operator_api.post("/api/runs/import/", {"text": text, "filename": f"bench-{VALUE}.json"}, format="json")
    assert made.status_code == 201, made.content   # no secret holds it yet: stored as given
    run = BenchmarkRun.objects.get()
    assert VALUE in run.original_text
    stored = admin_api.post("/api/secrets/", {"name": "hub-token", "value": VALUE}, format="json")
    assert stored.status_code == 201, stored.json()
    page = Client()
    page.force_login(viewer)

    for answer in (page.get(f"/benchmarks/runs/{run.pk}/original/"), operator_api.get(f"/api/runs/{run.pk}/original/")):
        assert answer.status_code == 200
        assert answer.content.decode() == text.replace(VALUE, "***redacted***")
        assert VALUE not in answer["Content-Disposition"]
        assert "bench-***redacted***.json" in answer["Content-Disposition"]


def test_a_download_without_a_value_is_the_file_byte_for_byte(secret, operator_api):
    text = _file() + "\n"
    made = operator_api.post("/api/runs/import/", {"text": text, "filename": "bench.json"}, format="json")
    assert made.status_code == 201, made.content

    answer = operator_api.get(f"/api/runs/{made.json()['created'][0]['id']}/original/")

    assert answer.content.decode() == text


@pytest.fixture
def imported_before(admin_api, operator_api) -> int:
    """A run imported from a file whose name, model_id, tokenizer_id and label hold a value that a
    secret stored afterwards holds; the run's id."""
    text = _file(model_id=f"m/{VALUE}", tokenizer_id=f"t/{VALUE}", label=f"run {VALUE}")
    made = operator_api.post("/api/runs/import/", {"text": text, "filename": f"bench-{VALUE}.json"}, format="json")
    assert made.status_code == 201, made.content
    stored = admin_api.post("/api/secrets/", {"name": "hub-token", "value": VALUE}, format="json")
    assert stored.status_code == 201, stored.json()
    return made.json()["created"][0]["id"]


#: Every read of an imported run that shows its file's name or fields: (name, URL).
IMPORTED_READS = [
    ("API run detail", "/api/runs/{run}/"),
    ("API run list", "/api/runs/"),
    ("API run export", "/api/runs/{run}/export/"),
    ("API run export CSV", "/api/runs/{run}/export/?format=csv"),
    ("run page", "/benchmarks/runs/{run}/"),
    ("run export JSON", "/benchmarks/runs/{run}/export.json"),
    ("run export CSV", "/benchmarks/runs/{run}/export.csv"),
    ("benchmarks page", "/benchmarks/"),
]


@pytest.mark.parametrize(("name", "url"), IMPORTED_READS, ids=[r[0] for r in IMPORTED_READS])
def test_no_read_of_a_run_imported_before_shows_the_value(imported_before, viewer, name, url):
    client = Client()
    client.force_login(viewer)

    response = client.get(url.format(run=imported_before))

    assert response.status_code == 200, (name, response.status_code)
    text = response.content.decode()
    assert VALUE not in text, f"{name} shows the secret's value"


def test_the_api_shows_the_file_name_and_fields_masked(imported_before, viewer_api):
    run = viewer_api.get(f"/api/runs/{imported_before}/").json()

    assert run["original_filename"] == "bench-***redacted***.json"
    assert run["served_model_name"] == "m/***redacted***"
    assert (run["summary"]["model_id"], run["summary"]["tokenizer_id"], run["summary"]["label"]) == (
        "m/***redacted***", "t/***redacted***", "run ***redacted***")


def test_importing_the_file_again_names_the_earlier_run_s_file_masked(imported_before, operator_api):
    text = _file(model_id=f"m/{VALUE}", tokenizer_id=f"t/{VALUE}", label=f"run {VALUE}")

    again = operator_api.post("/api/runs/import/", {"text": text, "filename": "again.json"}, format="json")

    assert again.status_code == 409, again.content
    detail = again.json()["detail"]
    assert detail.startswith(f"this file was already imported as run #{imported_before} (bench-***redacted***.json) on ")
    assert VALUE not in detail


# --- a well-known credential anywhere in the file, and in the download of a file stored before ---

HF_TOKEN = "hf_" + "Ab3" * 12
CREDENTIAL_ELSEWHERE = ("{what} holds what looks like a Hugging Face token (hf_…); the file is kept as the run's "
                        "original and its download would serve it in clear: remove the value from the file and "
                        "import again")


def test_a_credential_in_any_other_key_is_refused_by_its_line_and_key(operator_api):
    spread = json.loads(_file())
    spread["server_info"] = {"env": {"HUB": HF_TOKEN}}
    text = json.dumps(spread, indent=2)
    line = text.splitlines().index(f'      "HUB": "{HF_TOKEN}"') + 1

    answer = operator_api.post("/api/runs/import/", {"text": text, "filename": "bench.json"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"text.server_info.env.HUB": [
        CREDENTIAL_ELSEWHERE.format(what=f"server_info.env.HUB (line {line})")]}
    assert HF_TOKEN not in answer.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_a_credential_in_a_line_s_value_or_key_name_is_named_by_its_line(operator_api):
    text = "\n".join([_sglang_line(max_concurrency=8), _sglang_line(max_concurrency=16, extra=["x", HF_TOKEN]),
                      _sglang_line(max_concurrency=32, **{HF_TOKEN: 1})]) + "\n"

    answer = operator_api.post("/api/runs/import/", {"text": text, "filename": "bench.jsonl"}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json() == {"line 2.extra[1]": [CREDENTIAL_ELSEWHERE.format(what="extra[1]")],
                             "line 3": [CREDENTIAL_ELSEWHERE.format(what="a key name")]}
    assert HF_TOKEN not in answer.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_the_download_of_a_file_stored_before_shortens_a_credential(operator_api, viewer):
    text = _file(note=f"token {HF_TOKEN}")
    run = BenchmarkRun.objects.create(source="imported", status="done", original_text=text,
                                      original_filename=f"bench-{HF_TOKEN}.json")
    page = Client()
    page.force_login(viewer)

    for answer in (page.get(f"/benchmarks/runs/{run.pk}/original/"), operator_api.get(f"/api/runs/{run.pk}/original/")):
        assert answer.status_code == 200
        assert answer.content.decode() == text.replace(HF_TOKEN, "hf_…(39 chars)")
        assert HF_TOKEN not in answer["Content-Disposition"]
        assert "bench-hf_%E2%80%A6%2839%20chars%29.json" in answer["Content-Disposition"]
