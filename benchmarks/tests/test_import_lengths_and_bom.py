"""vLLM files with per-request arrays give their lengths (equal: the length; differing: min and
max, flagged variable); a comparison lists every run it does not rank in ``excluded``; a file
starting with a UTF-8 byte order mark is imported and kept byte for byte."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.importers import import_results
from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

DATA = Path(__file__).parent / "data"
VLLM = json.loads((DATA / "vllm-bench-serve.json").read_text())
SGLANG_TEXT = (DATA / "sglang-bench-serving-h200.jsonl").read_text().splitlines()[0]


def _vllm(**changes: object) -> dict:
    # 8 requests at c=4 (all due at once, a closed loop), 1024 in / 128 out: totals as vLLM writes them
    # (completed requests only); at most 7 of them active within one second (max_concurrent_requests).
    base = {**VLLM, "request_rate": "inf", "max_concurrency": 4, "max_concurrent_requests": 7,
            "num_prompts": 8, "completed": 8, "failed": 0,
            "total_input_tokens": 8 * 1024, "total_output_tokens": 8 * 128, "duration": 10.0,
            "output_throughput": 8 * 128 / 10.0, "input_lens": [1024] * 8, "output_lens": [128] * 8}
    return {**base, **changes}


def test_equal_per_request_lengths_are_the_runs_lengths() -> None:
    [run] = import_results(json.dumps(_vllm()))
    point = run.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (1024, 128, ())
    assert run.requested_input_len == 1024 and run.requested_output_len is None   # produced, not requested
    assert run.input_lens_min_max == (1024, 1024) and run.output_lens_min_max == (128, 128)
    assert "Input length 1024 tokens for every request" in run.length_distribution_note
    assert "Every completed request produced 128 output tokens" in run.length_distribution_note


def test_a_failed_requests_zero_output_length_is_not_a_length() -> None:
    # vLLM writes 0 in output_lens for a failed request and leaves it out of the totals.
    [run] = import_results(json.dumps(_vllm(completed=7, failed=1, total_input_tokens=7 * 1024,
                                            total_output_tokens=7 * 128, output_throughput=7 * 128 / 10.0,
                                            output_lens=[128, 128, 0, 128, 128, 128, 128, 128])))
    point = run.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (1024, 128, ())


def test_differing_per_request_lengths_are_flagged_with_min_and_max() -> None:
    ins, outs = [100, 300, 700, 1024, 1024, 512, 256, 4], [128, 90, 128, 5, 128, 128, 64, 128]
    [run] = import_results(json.dumps(_vllm(input_lens=ins, output_lens=outs, total_input_tokens=sum(ins),
                                            total_output_tokens=sum(outs), output_throughput=sum(outs) / 10.0)))
    point = run.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (None, None, ("variable_lengths",))
    assert run.input_lens_min_max == (4, 1024) and run.output_lens_min_max == (5, 128)
    assert "Input lengths varied from 4 to 1024 tokens" in run.length_distribution_note
    assert "Output lengths varied from 5 to 128 tokens" in run.length_distribution_note


def test_without_per_request_lengths_or_with_ones_that_disagree_the_lengths_are_unknown() -> None:
    [plain] = import_results(json.dumps(VLLM))
    assert plain.as_sweep_point().flags == ("lengths_unknown",) and plain.input_lens_min_max is None
    [off] = import_results(json.dumps(_vllm(total_input_tokens=8 * 1000)))
    assert off.as_sweep_point().flags == ("lengths_unknown",) and off.output_lens_min_max == (128, 128)
    assert ("input_lens are all 1024, but total_input_tokens 8000 is not 1024 x 8 completed requests; the input "
            "lengths are not used.") in off.notes
    [short] = import_results(json.dumps(_vllm(output_lens=[128] * 5)))
    assert short.as_sweep_point().flags == ("lengths_unknown",)
    assert any(n.startswith("output_lens has 5 entries, not one per completed request (8)") for n in short.notes)


@pytest.mark.django_db
def test_an_imported_vllm_run_with_equal_lengths_is_ranked(operator_api, viewer_api) -> None:
    text = "\n".join(json.dumps(_vllm(max_concurrency=c)) for c in (4, 8)) + "\n"
    answer = operator_api.post("/api/runs/import/", {"text": text}, format="json")
    assert answer.status_code == 201, answer.json()
    ids = [r["id"] for r in answer.json()["created"]]
    runs = {r.pk: r for r in BenchmarkRun.objects.all()}
    assert [(runs[i].input_len, runs[i].output_len) for i in ids] == [(1024, 128), (1024, 128)]
    compared = viewer_api.get(f"/api/runs/compare/?ids={ids[0]},{ids[1]}").json()
    assert [e["rankable"] for e in compared["runs"]] == [True, True]
    assert [e["lengths"] for e in compared["runs"]] == ["1024/128", "1024/128"]
    assert compared["excluded"] == []


@pytest.mark.django_db
def test_every_unranked_run_is_listed_in_excluded_with_its_reason(operator_api, viewer_api) -> None:
    ins = [100, 300, 700, 1024, 1024, 512, 256, 4]
    texts = [json.dumps(_vllm(max_concurrency=4)), json.dumps(VLLM),
             json.dumps(_vllm(max_concurrency=2, input_lens=ins, total_input_tokens=sum(ins)))]
    ids = []
    for text in texts:
        answer = operator_api.post("/api/runs/import/", {"text": text}, format="json")
        assert answer.status_code == 201, answer.json()
        ids.append(answer.json()["created"][0]["id"])
    failed = BenchmarkRun.objects.create(status="failed", concurrency=8, input_len=1024, output_len=128,
                                         num_requests=8)
    compared = viewer_api.get(f"/api/runs/compare/?ids={','.join(map(str, [*ids, failed.pk]))}").json()
    assert [e["rankable"] for e in compared["runs"]] == [True, False, False, False]
    excluded = {e["id"]: e["reason"] for e in compared["excluded"]}
    assert set(excluded) == {ids[1], ids[2], failed.pk}
    assert excluded[ids[1]].startswith("lengths unknown — the result file does not record requested input/output "
                                       "lengths")
    assert excluded[ids[2]].startswith("variable lengths — its requests' lengths varied (varied [4, 1024]/[128, "
                                       "128]: the shortest and longest the file records per request)")
    assert excluded[failed.pk] == "it failed"
    # The same reason as the run's own refusal, in both places.
    refusals = {e["id"]: e["refusal"] for e in compared["runs"]}
    assert refusals[ids[1]] == f"run #{ids[1]} is not ranked: {excluded[ids[1]]}"


BOM = b"\xef\xbb\xbf"


@pytest.mark.django_db
def test_a_file_starting_with_a_byte_order_mark_imports_and_downloads_byte_for_byte(operator, operator_api,
                                                                                  viewer_api) -> None:
    second = json.dumps({**json.loads(SGLANG_TEXT), "max_concurrency": 16})
    body = BOM + (SGLANG_TEXT + "\n" + second + "\n").encode()
    answer = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("bench.jsonl", body)},
                               format="multipart")
    assert answer.status_code == 201, answer.json()
    runs = list(BenchmarkRun.objects.order_by("source_line"))
    assert [r.source_line for r in runs] == [1, 2]
    assert {r.original_sha256 for r in runs} == {hashlib.sha256(body).hexdigest()}
    # The lines, downloaded one after the other, give back the file: the mark stays with line 1.
    downloads = [viewer_api.get(f"/api/runs/{r.pk}/original/").content for r in runs]
    assert b"".join(downloads) == body and downloads[0].startswith(BOM)
    again = operator_api.post("/api/runs/import/", {"file": SimpleUploadedFile("again.jsonl", body)},
                              format="multipart")
    assert again.status_code == 409 and "already imported as runs" in again.json()["detail"]
    # The import form takes it too.
    vllm = BOM + json.dumps(_vllm(), indent=2).encode()
    page = logged_in_client(operator).post("/benchmarks/import/", {"file": SimpleUploadedFile("v.json", vllm)})
    assert page.status_code == 302, page.content.decode()[:2000]
    run = BenchmarkRun.objects.latest("id")
    assert run.original_text.encode() == vllm and (run.input_len, run.output_len) == (1024, 128)
    assert viewer_api.get(f"/api/runs/{run.pk}/original/").content == vllm


def test_a_byte_order_mark_alone_is_an_empty_file_and_one_later_is_still_refused() -> None:
    from benchmarks.importers import ResultImportError

    with pytest.raises(ResultImportError) as caught:
        import_results("\ufeff\n")
    assert caught.value.errors == {"file": ["the file is empty"]}
    with pytest.raises(ResultImportError) as caught:
        import_results(SGLANG_TEXT + "\n\ufeff" + SGLANG_TEXT + "\n")
    assert list(caught.value.errors) == ["line 2"]
