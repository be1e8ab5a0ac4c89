"""An uploaded result file of 0 bytes is refused naming the file and saying it is empty, in the API
(``{"file": ["the file 'bench.json' is empty (0 bytes)"]}``, not DRF's "The submitted file is
empty.") and on the import form; nothing is stored."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

pytestmark = pytest.mark.django_db


def test_the_api_names_an_empty_upload(operator_api):
    answer = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("bench.json", b"")},
                               format="multipart")
    assert answer.status_code == 400
    assert answer.json() == {"file": ["the file 'bench.json' is empty (0 bytes)"]}
    assert not BenchmarkRun.objects.exists()


def test_the_api_names_an_empty_file_of_a_raw_multipart_body(operator_api):
    # as curl -F file=@bench.json sends a file of no bytes
    body = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="run 3.jsonl"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n\r\n--B--\r\n")
    answer = operator_api.generic("POST", "/api/runs/import/", body, content_type="multipart/form-data; boundary=B")
    assert answer.status_code == 400
    assert answer.json() == {"file": ["the file 'run 3.jsonl' is empty (0 bytes)"]}


def test_a_file_of_blank_lines_is_still_judged_by_the_importer(operator_api):
    answer = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("bench.json", b"\n \n")},
                               format="multipart")
    assert answer.status_code == 400 and answer.json() == {"file": ["the file is empty"]}


def test_no_file_at_all_still_asks_for_one(operator_api):
    answer = operator_api.post("/api/runs/import/", {"allow_duplicate": "false"}, format="multipart")
    assert answer.json() == {"file": ["give a file (multipart) or text (JSON), exactly one"]}


def test_the_import_form_names_an_empty_upload(operator):
    page = logged_in_client(operator).post("/benchmarks/import/", {"file": SimpleUploadedFile("bench.json", b"")})
    assert page.status_code == 400
    assert "The file &#x27;bench.json&#x27; is empty (0 bytes)." in page.content.decode()
    assert not BenchmarkRun.objects.exists()


def test_a_chunked_upload_is_refused_with_411_before_it_is_read(operator_api):
    # curl -F file=@/dev/null sends its body in chunks; no body sent so is read (411 Length Required).
    answer = operator_api.generic("POST", "/api/runs/import/", b"", content_type="multipart/form-data; boundary=B",
                                  HTTP_TRANSFER_ENCODING="chunked")
    assert answer.status_code == 411
    assert answer.json()["detail"].startswith("The request body must be sent with a Content-Length header")
    assert not BenchmarkRun.objects.exists()
