"""Importing a result file that has several problems: every problem is reported at once, per line
and key, through the importer, the API's 400 body and ``manage.py import_results``; and ±Infinity
or a number too large for a double (``1e400``) is treated as NaN is (refused where a run cannot do
without the key, else kept as null with a note naming the key and the value as written)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from benchmarks.importers import (
    MAX_LINES_COUNTED_AFTER_CAP,
    MAX_REPORTED_PROBLEMS,
    ResultImportError,
    import_results,
    import_sglang_bench_serving,
    import_vllm_bench_serve,
)
from benchmarks.models import BenchmarkRun

DATA = Path(__file__).parent / "data"
SGLANG = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
VLLM = (DATA / "vllm-bench-serve.json").read_text()
SHARED = Path("/work/shared/fixtures/bench-results")


def vllm_text(**changes: object) -> str:
    """The vLLM fixture with keys replaced, pretty-printed like ``--save-result`` writes it."""
    return json.dumps({**json.loads(VLLM), **changes}, indent=2)


def sglang_line(**changes: object) -> str:
    return json.dumps({**json.loads(SGLANG), **changes})


def refusal(text: str) -> ResultImportError:
    with pytest.raises(ResultImportError) as exc:
        import_results(text)
    return exc.value


# --- Infinity and numbers beyond a double ------------------------------------------------------


def test_it_keeps_infinity_and_1e400_as_null_with_a_note_naming_the_key_and_the_value() -> None:
    text = vllm_text(output_throughput=float("inf"), median_ttft_ms=0.0).replace(
        '"median_ttft_ms": 0.0', '"median_ttft_ms": 1e400')
    assert '"output_throughput": Infinity' in text  # as json.dumps (and so vLLM) writes it
    [run] = import_results(text)
    assert run.ttft_ms["p50"] is None
    assert "median_ttft_ms was 1e400 in the file (too large for a 64-bit float); kept as null." in run.notes
    assert run.inf_keys == {"output_throughput": "Infinity", "median_ttft_ms": "1e400"}
    assert run.nan_keys == []
    # the totals and the duration are fine, so the throughput is computed from them, and says so
    assert run.output_throughput_tok_s == pytest.approx(25600 / 203.5104987300001)
    # ...in one note, not "kept as null" next to "computed"
    assert [n for n in run.notes if n.startswith("output_throughput")] == [
        "output_throughput was Infinity in the file; output_throughput_tok_s computed from its total / duration instead."]


def test_it_treats_negative_infinity_and_huge_integers_like_nan() -> None:
    digits = "9" * 400  # an integer beyond a double; more than 4300 digits would make Python refuse it
    text = sglang_line(p99_itl_ms=-1.0, mean_tpot_ms=0.0).replace('"p99_itl_ms": -1.0', '"p99_itl_ms": -Infinity') \
        .replace('"mean_tpot_ms": 0.0', f'"mean_tpot_ms": {digits}')
    [run] = import_sglang_bench_serving(text)
    assert run.itl_ms["p99"] is None and run.tpot_ms["mean"] is None
    assert "p99_itl_ms was -Infinity in the file; kept as null." in run.notes
    assert ("mean_tpot_ms was 999999999999… (400 characters) in the file (too large for a 64-bit float); "
            "kept as null.") in run.notes
    [run] = import_sglang_bench_serving(sglang_line(total_input_tokens=0).replace(
        '"total_input_tokens": 0', '"total_input_tokens": ' + "1" * 5000))
    assert run.total_input_tokens is None and run.mean_input_tokens is None
    assert "total_input_tokens" in run.inf_keys


@pytest.mark.parametrize(("written", "said"), [
    ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "1e400 (too large for a 64-bit float)"),
])
def test_it_refuses_infinity_where_a_run_cannot_do_without_the_key(written: str, said: str) -> None:
    text = vllm_text(duration=0.5).replace('"duration": 0.5', f'"duration": {written}')
    exc = refusal(text)
    assert exc.errors == {"file.duration": [f"duration is {said}; a run cannot be imported without a number here"]}
    line = sglang_line(completed=0).replace('"completed": 0', f'"completed": {written}')
    exc = refusal(SGLANG + line + "\n")
    assert exc.errors == {"line 2.completed": [f"completed is {said}; a run cannot be imported without a number here"]}


def test_it_reads_an_infinite_request_rate_as_unbounded_not_as_a_dropped_value() -> None:
    for written in ("Infinity", "1e400", '"inf"'):
        [run] = import_results(vllm_text(request_rate=1.0).replace('"request_rate": 1.0', f'"request_rate": {written}'))
        assert run.request_rate_unbounded and run.request_rate_req_s is None
        assert not any("request_rate" in note for note in run.notes) and run.inf_keys == {}


def test_it_says_which_key_was_infinite_when_no_throughput_can_be_read() -> None:
    [run] = import_sglang_bench_serving(
        json.dumps({k: v for k, v in json.loads(sglang_line(output_throughput=float("inf"))).items()
                    if k != "total_output_tokens"}))
    with pytest.raises(ResultImportError) as exc:
        run.as_sweep_point()
    assert str(exc.value) == ("line 1, key 'output_throughput': output_throughput is Infinity in the file, so no "
                              "output throughput can be read or computed (total_output_tokens / duration); a run "
                              "needs one")


# --- every problem at once ---------------------------------------------------------------------


def test_it_reports_every_problem_of_a_vllm_file_at_once() -> None:
    exc = refusal(vllm_text(output_throughput="fast", p99_ttft_ms=1, failed=50, mean_itl_ms=-3, duration=-1))
    assert exc.errors == {
        "file.duration": ["expected a duration in seconds > 0, got -1"],
        "file.output_throughput": ["expected a number, got the string \"fast\""],
        "file.mean_itl_ms": ["expected a latency in ms >= 0, got -3"],
        "file.p99_ttft_ms": ["p99_ttft_ms = 1 ms is less than median_ttft_ms = 95.6996 ms; TTFT statistics must "
                             "not decrease (min <= p50 <= p90 <= p95 <= p99 <= max)"],
        "file.completed": ["completed 200 + failed 50 = 250 is more than num_prompts 200; every prompt is sent "
                           "once and ends once"],
    }
    assert (exc.line, exc.key) == (None, "duration")  # the first one, as before
    assert str(exc).splitlines() == [str(p) for p in exc.problems]
    assert str(exc).splitlines()[1] == "file, key 'output_throughput': expected a number, got the string \"fast\""
    with pytest.raises(ResultImportError) as again:
        import_vllm_bench_serve(vllm_text(output_throughput="fast", duration=-1))
    assert list(again.value.errors) == ["file.duration", "file.output_throughput"]


def test_it_reports_every_bad_value_of_a_line_and_every_bad_line_of_a_jsonl_file() -> None:
    ok = SGLANG.strip()
    text = "\n".join([
        ok,
        sglang_line(duration="x", completed=-1, median_ttft_ms="y", random_input_len=1.5),
        '{"backend": "sglang", "completed": 3',
        ok,
        "[1, 2]",
        sglang_line(p99_ttft_ms=80.0),
    ]) + "\n"
    exc = refusal(text)
    assert exc.errors == {
        "line 2.completed": ["expected a whole number >= 0, got -1"],
        "line 2.duration": ["expected a number, got the string \"x\""],
        "line 2.random_input_len": ["expected a whole number >= 0, got 1.5"],
        "line 2.median_ttft_ms": ["expected a number, got the string \"y\""],
        "line 3": ["not valid JSON (Expecting ',' delimiter at column 37)"],
        "line 5": ["expected a JSON object, got an array"],
        "line 6.p99_ttft_ms": ["p99_ttft_ms = 80 ms is less than median_ttft_ms = 85.7451 ms; TTFT statistics must "
                               "not decrease (min <= p50 <= p90 <= p95 <= p99 <= max)"],
    }
    assert [p.line for p in exc.problems] == [2, 2, 2, 2, 3, 5, 6]  # in file order
    with pytest.raises(ResultImportError) as same:
        import_sglang_bench_serving(text)
    assert same.value.errors == exc.errors


def test_it_skips_checks_that_need_a_value_already_refused() -> None:
    # p50 is not a number: the order check compares what is left (p90 <= p99) and does not crash
    exc = refusal(sglang_line(median_ttft_ms="fast", p90_ttft_ms=100.0, p99_ttft_ms=120.0))
    assert exc.errors == {"line 1.median_ttft_ms": ["expected a number, got the string \"fast\""]}
    # failed is refused: completed + failed > num_prompts is not judged with a guess for it
    exc = refusal(vllm_text(failed="many", num_prompts=200, completed=200))
    assert exc.errors == {"file.failed": ["expected a whole number >= 0, got the string \"many\""]}
    # a refused key is named once, not again by each reader of it
    exc = refusal(vllm_text(completed=float("nan"), num_prompts=100))
    assert exc.errors == {"file.completed": ["completed is NaN; a run cannot be imported without a number here"]}


def test_it_lists_the_first_problems_of_a_huge_bad_file_and_counts_the_rest() -> None:
    text = SGLANG + "not json\n" * (MAX_REPORTED_PROBLEMS + 70)
    exc = refusal(text)
    assert len(exc.problems) == MAX_REPORTED_PROBLEMS and exc.omitted == 70
    assert list(exc.errors)[:2] == ["line 2", "line 3"]
    assert exc.errors["file"] == [f"… and 70 more problems in this file (the first {MAX_REPORTED_PROBLEMS} are listed)"]
    assert str(exc).splitlines()[-1] == exc.errors["file"][0]
    # past the count's reach the answer says where it stopped rather than reading on for minutes
    exc = refusal(SGLANG + "x\n" * (MAX_REPORTED_PROBLEMS + MAX_LINES_COUNTED_AFTER_CAP + 500))
    stop = 1 + MAX_REPORTED_PROBLEMS + 1 + MAX_LINES_COUNTED_AFTER_CAP + 1
    assert exc.errors["file"] == [f"… and at least {MAX_LINES_COUNTED_AFTER_CAP + 1:,} more problems; counting "
                                  f"stopped at line {stop:,} (the first {MAX_REPORTED_PROBLEMS} are listed)"]


def test_it_reports_a_pretty_printed_object_with_a_typo_once_where_the_parser_stopped() -> None:
    text = VLLM.replace('"completed": 200,', '"completed": 200').replace(", ", ",\n  ")
    exc = refusal(text)
    assert list(exc.errors) == [f"line {exc.line}"] and exc.line > 1
    assert exc.errors[f"line {exc.line}"][0].startswith("not valid JSON (Expecting ',' delimiter")


def test_it_still_imports_the_shared_captures_with_nothing_dropped() -> None:
    for name in ("sglang-bench-serving-h200.jsonl", "vllm-bench-serve.json"):
        [run] = import_results((SHARED / name).read_text())
        assert not [n for n in run.notes if "kept as null" in n] and run.inf_keys == {} and run.nan_keys == []
        assert run.completed in (200, 300) and run.output_throughput_tok_s is not None


# --- through the API and the command -----------------------------------------------------------


@pytest.mark.django_db
def test_it_answers_400_through_the_api_with_every_problem_by_path(operator_api) -> None:
    text = "\n".join([SGLANG.strip(), sglang_line(duration="x", completed=-1), "{broken"]) + "\n"
    response = operator_api.post("/api/runs/import/", {"text": text}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "line 2.completed": ["expected a whole number >= 0, got -1"],
        "line 2.duration": ["expected a number, got the string \"x\""],
        "line 3": ["not valid JSON (Expecting property name enclosed in double quotes at column 2)"],
    }
    assert not BenchmarkRun.objects.exists()


@pytest.mark.django_db
def test_it_names_the_field_sent_for_a_problem_of_the_whole_file(operator_api) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    pasted = operator_api.post("/api/runs/import/", {"text": '{"a":1}\n'}, format="json")
    assert pasted.status_code == 400
    assert pasted.json() == {"text": ["not a SGLang bench_serving or vLLM bench serve result (no key either writes)"]}
    keyed = operator_api.post("/api/runs/import/", {"text": vllm_text(output_throughput="fast", duration=-1)},
                              format="json")
    assert keyed.json() == {"text.duration": ["expected a duration in seconds > 0, got -1"],
                            "text.output_throughput": ["expected a number, got the string \"fast\""]}
    upload = SimpleUploadedFile("r.json", b'{"a":1}\n', content_type="application/json")
    uploaded = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert uploaded.status_code == 400
    assert uploaded.json() == {"file": ["not a SGLang bench_serving or vLLM bench serve result (no key either writes)"]}
    assert not BenchmarkRun.objects.exists()


@pytest.mark.django_db
def test_it_prints_every_problem_one_per_line_in_the_command(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(vllm_text(output_throughput="fast", duration=-1))
    with pytest.raises(CommandError) as exc:
        call_command("import_results", str(path))
    assert str(exc.value) == ("bad.json cannot be imported:\n"
                              "  file.duration: expected a duration in seconds > 0, got -1\n"
                              "  file.output_throughput: expected a number, got the string \"fast\"")
    assert not BenchmarkRun.objects.exists()


@pytest.mark.django_db
def test_it_names_lines_only_where_the_file_has_them_and_the_commands_own_flag(tmp_path) -> None:
    out = io.StringIO()
    jsonl = tmp_path / "two.jsonl"
    jsonl.write_text(SGLANG + SGLANG.replace('"max_concurrency": null', '"max_concurrency": 16'))
    call_command("import_results", str(jsonl), stdout=out)
    first, second = BenchmarkRun.objects.order_by("id")
    assert out.getvalue().splitlines()[1].startswith(f"run #{second.pk} (sglang-bench-serving, line 2): ")
    single = tmp_path / "vllm.json"
    single.write_text(VLLM)
    out = io.StringIO()
    call_command("import_results", str(single), stdout=out)
    assert "line None" not in out.getvalue() and "(vllm-bench-serve): " in out.getvalue()
    with pytest.raises(CommandError) as exc:
        call_command("import_results", str(single))
    assert str(exc.value).endswith("; pass --allow-duplicate to import it again")
    assert "allow_duplicate" not in str(exc.value)


@pytest.mark.django_db
def test_it_lists_every_problem_on_the_import_page(operator) -> None:
    client = Client()
    client.force_login(operator)
    bad = vllm_text(output_throughput="fast", duration=-1, mean_itl_ms=-3).encode()
    response = client.post(reverse("benchmarks:run-import"), {"file": SimpleUploadedFile("bad.json", bad)})
    assert response.status_code == 400
    html = response.content.decode()
    for path, message in (("file.duration", "expected a duration in seconds &gt; 0, got -1"),
                          ("file.output_throughput", "expected a number, got the string &quot;fast&quot;"),
                          ("file.mean_itl_ms", "expected a latency in ms &gt;= 0, got -3")):
        assert f"<li><code>{path}</code>: {message}</li>" in html
    assert not BenchmarkRun.objects.exists()
