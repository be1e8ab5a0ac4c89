"""Case C12 and the rest of the importers: SGLang bench_serving JSONL and vLLM bench serve JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.analysis import ceiling_analyse
from benchmarks.importers import (
    SGLANG_BENCH_SERVING,
    VLLM_BENCH_SERVE,
    ResultImportError,
    detect_format,
    import_results,
    import_sglang_bench_serving,
    import_vllm_bench_serve,
)
from benchmarks.views import FLAG_TEXT
from controlplane.errors import InvalidInput

DATA = Path(__file__).parent / "data"
SGLANG_TEXT = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
VLLM_TEXT = (DATA / "vllm-bench-serve.json").read_text()


def sglang_line(**changes: object) -> str:
    """The fixture's line with keys replaced (a value of ... removes the key)."""
    obj = json.loads(SGLANG_TEXT)
    for key, value in changes.items():
        if value is ...:
            obj.pop(key, None)
        else:
            obj[key] = value
    return json.dumps(obj)


def vllm_obj(**changes: object) -> str:
    obj = json.loads(VLLM_TEXT)
    for key, value in changes.items():
        if value is ...:
            obj.pop(key, None)
        else:
            obj[key] = value
    return json.dumps(obj, indent=2)


def test_it_imports_the_sglang_line_as_a_508_token_mean_run_drawn_from_1_to_1024() -> None:
    [run] = import_sglang_bench_serving(SGLANG_TEXT)
    assert run.source_format == SGLANG_BENCH_SERVING and run.source_line == 1
    # The run's own line, as the file has it: its line break included.
    assert SGLANG_TEXT.count("\n") == 1 and SGLANG_TEXT.endswith("\n")
    assert run.original_text == SGLANG_TEXT and run.original_record == SGLANG_TEXT
    assert run.backend == "sglang" and run.dataset_name == "random"
    assert run.request_rate_req_s == 1.0 and not run.request_rate_unbounded
    assert run.concurrency is None
    assert run.completed == 300 and run.failed is None
    assert run.duration_s == 298.3675805060193
    assert (run.total_input_tokens, run.total_output_tokens, run.total_output_tokens_retokenized) == (
        152612, 160347, 160192)
    assert round(run.mean_input_tokens, 1) == 508.7
    assert run.mean_input_tokens == pytest.approx(152612 / 300)
    assert run.mean_output_tokens == pytest.approx(160347 / 300)
    assert (run.requested_input_len, run.requested_output_len, run.range_ratio) == (1024, 1024, 0.0)
    assert run.input_len_range == (1, 1024) and run.output_len_range == (1, 1024)
    assert run.length_distribution_note is not None
    note = run.length_distribution_note
    assert "Input lengths were drawn uniformly from [1, 1024] tokens, measured mean 508.7" in note
    assert "not a 1024-token input run" in run.length_distribution_note
    assert run.output_throughput_tok_s == 537.4142851849319
    assert run.request_throughput_req_s == pytest.approx(300 / 298.3675805060193)
    assert run.input_throughput_tok_s == pytest.approx(152612 / 298.3675805060193)
    assert run.total_token_throughput_tok_s == pytest.approx((152612 + 160347) / 298.3675805060193)
    assert "request_throughput_req_s is not in the file; computed as its total / duration." in run.notes
    assert run.e2e_ms == {"mean": 7840.616212638561, "std": None, "p50": 7819.046192569658, "p90": None, "p99": None}
    assert run.ttft_ms == {"mean": None, "std": None, "p50": 85.74514742940664, "p90": None, "p99": None}
    assert run.itl_ms == {"mean": None, "std": None, "p50": 13.638956006616354, "p90": None, "p99": None}
    assert run.tpot_ms == {"mean": None, "std": None, "p50": None, "p90": None, "p99": None}
    assert run.request_goodput_req_s is None
    assert run.unmapped_keys == []


def test_it_notes_the_range_for_other_sglang_range_ratios() -> None:
    [half] = import_sglang_bench_serving(sglang_line(random_range_ratio=0.5))
    assert half.input_len_range == (512, 1024) and half.output_len_range == (512, 1024)
    assert "drawn uniformly from [512, 1024] tokens" in half.length_distribution_note
    [fixed] = import_sglang_bench_serving(sglang_line(random_range_ratio=1.0, random_input_len=256,
                                                      random_output_len=128))
    assert fixed.input_len_range == (256, 256) and fixed.output_len_range == (128, 128)
    assert "Input length fixed at 256 tokens" in fixed.length_distribution_note
    [unknown] = import_sglang_bench_serving(sglang_line(random_range_ratio=...))
    assert unknown.range_ratio is None and unknown.input_len_range is None
    assert "random_range_ratio is not recorded" in unknown.length_distribution_note
    [sharegpt] = import_sglang_bench_serving(sglang_line(dataset_name="sharegpt", sharegpt_output_len=256))
    assert sharegpt.requested_input_len is None and sharegpt.requested_output_len == 256
    assert sharegpt.input_len_range is None
    [tiny] = import_sglang_bench_serving(sglang_line(random_input_len=3, random_range_ratio=0.2))
    assert tiny.input_len_range == (1, 3)  # int(3 * 0.2) = 0 is raised to 1, as SGLang does


def test_it_reads_the_newer_sglang_key_set_and_several_lines() -> None:
    newer = {
        "backend": "sglang-oai", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 64,
        "sharegpt_output_len": None, "random_input_len": 256, "random_output_len": 256, "random_range_ratio": 1.0,
        "duration": 20.0, "completed": 512, "total_input_tokens": 131072, "total_output_tokens": 131072,
        "total_output_tokens_retokenized": 131000, "request_throughput": 25.6, "input_throughput": 6553.6,
        "output_throughput": 6553.6, "mean_e2e_latency_ms": 2400.0, "median_e2e_latency_ms": 2390.0,
        "std_e2e_latency_ms": 40.0, "p90_e2e_latency_ms": 2450.0, "p99_e2e_latency_ms": 2500.0,
        "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0, "std_ttft_ms": 30.0, "p99_ttft_ms": 250.0,
        "mean_tpot_ms": 8.9, "median_tpot_ms": 8.8, "std_tpot_ms": 0.4, "p99_tpot_ms": 9.9,
        "mean_itl_ms": 8.9, "median_itl_ms": 8.7, "std_itl_ms": 2.0, "p95_itl_ms": 11.0, "p99_itl_ms": 19.0,
        "max_itl_ms": 80.0, "concurrency": 61.4, "accept_length": None, "future_key": {"nested": [1, 2]},
    }
    text = SGLANG_TEXT + "\n" + json.dumps(newer) + "\n"  # json.dumps writes inf as Infinity
    assert "Infinity" in text
    old, new = import_sglang_bench_serving(text)
    assert old.source_line == 1 and new.source_line == 3
    assert new.original_record == json.dumps(newer) + "\n" and new.original_text == text
    assert new.request_rate_req_s is None and new.request_rate_unbounded
    assert new.concurrency == 64 and new.mean_concurrency == 61.4
    assert new.request_throughput_req_s == 25.6 and new.input_throughput_tok_s == 6553.6
    assert new.ttft_ms == {"mean": 120.0, "std": 30.0, "p50": 110.0, "p90": None, "p99": 250.0}
    assert new.tpot_ms == {"mean": 8.9, "std": 0.4, "p50": 8.8, "p90": None, "p99": 9.9}
    assert new.itl_ms == {"mean": 8.9, "std": 2.0, "p50": 8.7, "p90": None, "p99": 19.0, "p95": 11.0, "max": 80.0}
    assert new.e2e_ms["p90"] == 2450.0
    assert new.input_len_range == (256, 256) and new.mean_input_tokens == 256.0
    assert new.unmapped_keys == ["accept_length", "future_key"]
    assert new.notes == ["total_token_throughput_tok_s is not in the file; computed as its total / duration.",
                         "Input length fixed at 256 tokens, measured mean 256.0. Output length fixed at 256 tokens, "
                         "measured mean 256.0. (SGLang's --random-range-ratio r draws lengths from "
                         "[max(L*r, 1), L]; r was 1.)"]
    sweep_point = new.as_sweep_point(num_gpus=2)
    assert (sweep_point.input_len, sweep_point.output_len, sweep_point.flags) == (256, 256, ())
    assert old.as_sweep_point().flags == ("variable_lengths",) and old.as_sweep_point().input_len is None


def test_it_imports_every_mapped_field_of_the_vllm_result() -> None:
    run = import_vllm_bench_serve(VLLM_TEXT)
    assert run.source_format == VLLM_BENCH_SERVE and run.source_line is None
    assert run.original_text == VLLM_TEXT
    assert run.date == "20260722-041843" and run.backend == "openai" and run.label is None
    assert run.model_id == run.tokenizer_id == "/workspace/shared_assets/models/Qwen/Qwen3-VL-8B-Instruct"
    assert run.num_prompts == 200 and run.request_rate_req_s == 1.0 and run.burstiness == 1.0
    assert run.concurrency is None
    assert run.duration_s == 203.5104987300001
    assert (run.completed, run.failed) == (200, 0)
    assert (run.total_input_tokens, run.total_output_tokens) == (40000, 25600)
    assert (run.mean_input_tokens, run.mean_output_tokens) == (200.0, 128.0)
    assert run.request_throughput_req_s == 0.9827502819171137
    assert run.request_goodput_req_s is None  # "request_goodput": null stays null, not 0
    assert run.output_throughput_tok_s == 125.79203608539055
    assert run.total_token_throughput_tok_s == 322.3420924688133
    assert run.input_throughput_tok_s == pytest.approx(40000 / 203.5104987300001)
    assert run.peak_output_throughput_tok_s == 313.0 and run.max_concurrent_requests == 12
    assert run.ttft_ms == {"mean": 95.6344293046277, "std": 12.71286480609931, "p50": 95.6995899323374,
                           "p90": None, "p99": 143.32562107359988}
    assert run.tpot_ms == {"mean": 27.911832109121164, "std": 1.0193481469453176, "p50": 27.67841275561395,
                           "p90": None, "p99": 31.202747922493362}
    assert run.itl_ms == {"mean": 27.911833959895617, "std": 3.1292647193476784, "p50": 27.339585009030998,
                          "p90": None, "p99": 42.0829780306667}
    assert run.e2e_ms == {"mean": None, "std": None, "p50": None, "p90": None, "p99": None}
    assert run.requested_input_len is None and run.input_len_range is None
    assert run.unmapped_keys == ["endpoint_type", "rtfx"]
    assert run.as_sweep_point().flags == ("lengths_unknown",)


def test_it_reads_goodput_from_the_old_key_with_a_trailing_colon() -> None:
    run = import_vllm_bench_serve(vllm_obj(request_goodput=..., **{"request_goodput:": 3.2}))
    assert run.request_goodput_req_s == 3.2
    assert 'request_goodput read from the older key "request_goodput:".' in run.notes
    assert import_vllm_bench_serve(vllm_obj(request_goodput=None)).request_goodput_req_s is None
    assert import_vllm_bench_serve(vllm_obj(request_goodput=0.0)).request_goodput_req_s == 0.0
    assert import_vllm_bench_serve(vllm_obj(request_goodput=...)).request_goodput_req_s is None


def test_it_maps_vllm_e2el_percentiles_string_inf_and_missing_failed() -> None:
    run = import_vllm_bench_serve(vllm_obj(
        request_rate="inf", failed=..., num_prompts=210, mean_e2el_ms=3650.0, median_e2el_ms=3600.0,
        **{"p99.9_ttft_ms": 180.0, "p90_ttft_ms": 120.0, "ttfts": [0.1] * 200}, max_concurrency=16,
    ))
    assert run.request_rate_req_s is None and run.request_rate_unbounded
    assert run.failed == 10 and "failed is not in the file; computed as num_prompts - completed." in run.notes
    assert run.e2e_ms["mean"] == 3650.0 and run.e2e_ms["p50"] == 3600.0
    assert run.ttft_ms["p99.9"] == 180.0 and run.ttft_ms["p90"] == 120.0
    assert run.concurrency == 16
    assert "Per-request arrays (ttfts) are kept in the original file only." in run.notes
    assert "ttfts" in run.unmapped_keys


def test_it_detects_the_format_and_imports_appended_vllm_lines() -> None:
    assert detect_format(SGLANG_TEXT) == SGLANG_BENCH_SERVING
    assert detect_format(VLLM_TEXT) == VLLM_BENCH_SERVE
    assert detect_format(vllm_obj(endpoint_type=..., model_id=...)) == VLLM_BENCH_SERVE
    appended = json.dumps(json.loads(VLLM_TEXT)) + "\n" + json.dumps(json.loads(vllm_obj(completed=150))) + "\n"
    runs = import_results(appended)
    assert [(r.source_line, r.completed) for r in runs] == [(1, 200), (2, 150)]
    assert runs[1].failed == 0
    with pytest.raises(ResultImportError, match="2 result objects; import_results reads one run per line"):
        import_vllm_bench_serve(appended)
    [sg] = import_results(SGLANG_TEXT)
    assert round(sg.mean_input_tokens, 1) == 508.7


@pytest.mark.parametrize(("text", "message", "line", "key"), [
    ("", "file: the file is empty", None, None),
    ("\n  \n", "file: the file is empty", None, None),
    ('"results"', "file: expected a JSON object or an array of them, got a string", None, None),
    ("[]", "file: the file is an empty JSON array: it holds no result object", None, None),
    ('{"foo": 1}', "file: not a SGLang bench_serving or vLLM bench serve result (no key either writes)", None, None),
    (SGLANG_TEXT + '{"backend": "sglang", "completed": 3\n', "line 2: not valid JSON", 2, None),
    (SGLANG_TEXT + "[]\n", "line 2: expected a JSON object, got an array", 2, None),
    (sglang_line(completed="300"), "line 1, key 'completed': expected a whole number >= 0, got the string \"300\"", 1, "completed"),
    (sglang_line(completed=299.5), "line 1, key 'completed': expected a whole number >= 0, got 299.5", 1, "completed"),
    (sglang_line(total_input_tokens=-1), "line 1, key 'total_input_tokens': expected a whole number >= 0", 1,
     "total_input_tokens"),
    (sglang_line(duration=...), "line 1, key 'duration': is missing; a run needs it", 1, "duration"),
    (sglang_line(output_throughput=True), "line 1, key 'output_throughput': expected a number, got the boolean true", 1,
     "output_throughput"),
    (sglang_line(backend=7), "line 1, key 'backend': expected a string, got 7", 1, "backend"),
    (vllm_obj(completed=None), "file, key 'completed': is missing; a run needs it", None, "completed"),
    (vllm_obj(**{"request_goodput:": "3.2"}), "file, key 'request_goodput:': expected a number, got the string \"3.2\"", None,
     "request_goodput:"),
])
def test_it_names_the_line_and_key_of_a_malformed_file(text: str, message: str, line: int | None,
                                                       key: str | None) -> None:
    with pytest.raises(ResultImportError) as exc:
        import_results(text)
    assert str(exc.value).startswith(message)
    assert (exc.value.line, exc.value.key) == (line, key)
    assert isinstance(exc.value, InvalidInput)  # the API answers 400 with the path
    path = f"line {line}" if line is not None else "file"
    assert list(exc.value.errors) == [f"{path}.{key}" if key else path]


def test_it_keeps_nan_as_null_with_a_note() -> None:
    [run] = import_sglang_bench_serving(sglang_line(median_itl_ms=float("nan")))
    assert run.itl_ms["p50"] is None
    assert "median_itl_ms was NaN in the file; kept as null." in run.notes


def test_it_analyses_imported_runs_of_one_sweep() -> None:
    lines = []
    for c, tok_s, tpot in ((1, 40.0, 24.0), (4, 130.0, 29.0), (16, 330.0, 45.0), (64, 360.0, 160.0)):
        # request_rate Infinity: every request due at once, c in flight (a closed loop)
        lines.append(sglang_line(max_concurrency=c, request_rate=float("inf"), random_range_ratio=1.0, random_input_len=512, random_output_len=512,
                                 output_throughput=tok_s, mean_tpot_ms=tpot, mean_ttft_ms=80.0 * c, completed=4 * c,
                                 total_input_tokens=512 * 4 * c, total_output_tokens=512 * 4 * c,
                                 duration=512 * 4 * c / tok_s))  # output_throughput = tokens / duration
    points = [r.as_sweep_point(num_gpus=1) for r in import_sglang_bench_serving("\n".join(lines))]
    report = ceiling_analyse(points, num_gpus=1, topology="single")
    assert report.input_len == 512 and report.output_len == 512
    assert report.ceiling.source == "observed_plateau" and report.ceiling.plateau_from_label == "c=16"
    assert report.fit.possible


@pytest.mark.parametrize(("text", "key", "message"), [
    (sglang_line(p99_ttft_ms=80.0),
     "p99_ttft_ms", "p99_ttft_ms = 80 ms is less than median_ttft_ms = 85.7451 ms; TTFT statistics must not decrease"),
    (sglang_line(p90_e2e_latency_ms=9000.0, p99_e2e_latency_ms=8999.5),
     "p99_e2e_latency_ms", "p99_e2e_latency_ms = 8999.5 ms is less than p90_e2e_latency_ms = 9000 ms"),
    (sglang_line(p99_itl_ms=40.0, max_itl_ms=39.0),
     "max_itl_ms", "max_itl_ms = 39 ms is less than p99_itl_ms = 40 ms; ITL statistics must not decrease "
                   "(min <= p50 <= p90 <= p95 <= p99 <= max)"),
    (vllm_obj(p95_tpot_ms=30.0, p99_tpot_ms=29.0),
     "p99_tpot_ms", "p99_tpot_ms = 29 ms is less than p95_tpot_ms = 30 ms"),
])
def test_it_refuses_percentiles_that_decrease(text: str, key: str, message: str) -> None:
    with pytest.raises(ResultImportError) as exc:
        import_results(text)
    assert exc.value.key == key and message in str(exc.value)
    path = "line 1" if text.startswith("{\"backend\"") else "file"
    assert list(exc.value.errors) == [f"{path}.{key}"]


def test_it_takes_equal_neighbouring_percentiles_and_float_rounding() -> None:
    [run] = import_results(sglang_line(p90_ttft_ms=90.0, p99_ttft_ms=90.0, max_ttft_ms=90.0 * (1 - 1e-12)))
    assert run.ttft_ms["p90"] == run.ttft_ms["p99"] == 90.0


def test_it_refuses_more_completed_and_failed_requests_than_prompts() -> None:
    with pytest.raises(ResultImportError) as exc:
        import_results(vllm_obj(completed=200, failed=5, num_prompts=200))
    assert str(exc.value) == ("file, key 'completed': completed 200 + failed 5 = 205 is more than num_prompts 200; "
                              "every prompt is sent once and ends once")
    with pytest.raises(ResultImportError, match="completed 201 \\+ failed 0 = 201 is more than num_prompts 200"):
        import_results(vllm_obj(completed=201, failed=..., num_prompts=200))  # failed not in the file
    [run] = import_results(vllm_obj(completed=195, failed=5, num_prompts=200))
    assert (run.completed, run.failed) == (195, 5)


def test_it_says_which_key_is_nan_when_a_run_cannot_do_without_it() -> None:
    # json.dumps writes the NaN literal, as SGLang's bench_serving (json.dumps of a float) does.
    line = sglang_line(duration=float("nan"))
    assert "NaN" in line
    with pytest.raises(ResultImportError) as exc:
        import_sglang_bench_serving(SGLANG_TEXT + line + "\n")
    assert str(exc.value) == "line 2, key 'duration': duration is NaN; a run cannot be imported without a number here"
    # A NaN throughput that the totals cannot replace: named with its line, not "no output throughput".
    [run] = import_sglang_bench_serving(sglang_line(output_throughput=float("nan"), total_output_tokens=...))
    with pytest.raises(ResultImportError) as exc:
        run.as_sweep_point()
    assert str(exc.value) == ("line 1, key 'output_throughput': output_throughput is NaN in the file, so no output "
                              "throughput can be read or computed (total_output_tokens / duration); a run needs one")
    # NaN where a null will do stays a null with a note, and says it was NaN, not absent.
    [run] = import_sglang_bench_serving(sglang_line(random_range_ratio=float("nan")))
    assert run.range_ratio is None and run.nan_keys == ["random_range_ratio"]
    assert run.length_distribution_note.startswith("random_range_ratio is NaN in the file, so the length distribution "
                                                   "is unknown")


@pytest.mark.parametrize(("text", "message"), [
    ('{"backend":"sglang","completed":10,"output_throughput":50.0,"mean_ttft_ms":12.0,"total_output_tokens":500}',
     "file: an incomplete result: its keys (backend, completed, mean_ttft_ms, output_throughput, total_output_tokens) "
     "are ones both SGLang bench_serving and vLLM bench serve write, and none tells which wrote it: it lacks "
     "mean_e2e_latency_ms and median_e2e_latency_ms, which every SGLang bench_serving result has, or model_id and "
     "tokenizer_id, which every vLLM bench serve result has; either needs duration too"),
    ('{"backend":"sglang","completed":10,"output_throughput":50.0,"mean_ttft_ms":12.0,"total_output_tokens":500,'
     '"duration":10,"request_rate":1,"max_concurrency":4}\n',
     "file: an incomplete result: its keys (backend, completed, duration, max_concurrency, mean_ttft_ms, "
     "output_throughput, request_rate, total_output_tokens) are ones both SGLang bench_serving and vLLM bench serve "
     "write, and none tells which wrote it: it lacks mean_e2e_latency_ms and median_e2e_latency_ms, which every "
     "SGLang bench_serving result has, or model_id and tokenizer_id, which every vLLM bench serve result has"),
    ('{"backend":"sglang","completed":10,"concurrency":3.2,"duration":10}',
     "file: an incomplete SGLang bench_serving result: it has keys SGLang bench_serving writes (backend, completed, "
     "concurrency, duration) but lacks mean_e2e_latency_ms and median_e2e_latency_ms, which every SGLang "
     "bench_serving result has"),
    ('{"num_prompts":5,"mean_ttft_ms":1.0}',
     "file: an incomplete vLLM bench serve result: it has keys vLLM bench serve writes (mean_ttft_ms, num_prompts) "
     "but lacks model_id, tokenizer_id, completed and duration, which every vLLM bench serve result has"),
])
def test_a_result_short_of_the_keys_that_name_its_harness_is_told_which_it_lacks(text: str, message: str) -> None:
    with pytest.raises(ResultImportError) as exc:
        import_results(text)
    assert str(exc.value) == message
    assert "no key either writes" not in str(exc.value)
    with_marker = json.loads(text) | {"median_e2e_latency_ms": 20.0, "mean_e2e_latency_ms": 20.0, "duration": 10,
                                      "completed": 10}
    [run] = import_results(json.dumps(with_marker))
    assert run.source_format == SGLANG_BENCH_SERVING


def test_an_sglang_run_without_the_range_ratio_says_only_the_range_is_unknown() -> None:
    # The fixture's line without random_range_ratio: random_input_len / random_output_len (1024)
    # are recorded, the r of SGLang's [L*r, L] is not.
    [run] = import_sglang_bench_serving(sglang_line(random_range_ratio=...))
    assert (run.requested_input_len, run.requested_output_len, run.range_ratio) == (1024, 1024, None)
    assert run.input_len_range is None and run.input_lens_min_max is None
    point = run.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (None, None, ("range_ratio_unknown",))
    assert FLAG_TEXT["range_ratio_unknown"].startswith(
        "the result file records SGLang's requested lengths L (random_input_len, random_output_len) but no usable "
        "random_range_ratio r")
    [nan] = import_sglang_bench_serving(sglang_line(random_range_ratio=float("nan")))
    assert nan.as_sweep_point().flags == ("range_ratio_unknown",)
    # Without the lengths themselves the flag stays lengths_unknown.
    [bare] = import_sglang_bench_serving(sglang_line(random_range_ratio=..., random_input_len=...,
                                                     random_output_len=...))
    assert bare.as_sweep_point().flags == ("lengths_unknown",)


def test_an_sglang_run_without_the_range_ratio_reads_its_per_request_lengths() -> None:
    # --output-details writes input_lens and output_lens; 152612 and 160347 tokens over 300 requests.
    ins = [509] * 212 + [508] * 88
    outs = [535] * 147 + [534] * 153
    assert (sum(ins), sum(outs)) == (152612, 160347)
    [varied] = import_sglang_bench_serving(sglang_line(random_range_ratio=..., input_lens=ins, output_lens=outs))
    point = varied.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (None, None, ("variable_lengths",))
    assert varied.input_lens_min_max == (508, 509) and varied.output_lens_min_max == (534, 535)
    assert varied.length_distribution_note == (
        "random_range_ratio is not recorded, so the length distribution is unknown: SGLang draws lengths from "
        "[L*r, L] for its --random-range-ratio r. Input lengths varied from 508 to 509 tokens (input_lens), so this "
        "is not a fixed-length run. Output lengths varied from 534 to 535 tokens (output_lens, produced), so this "
        "is not a fixed-length run.")
    # Every request 1024 in and 1024 out: a fixed-length run, ranked as one.
    duration = 298.3675805060193
    [fixed] = import_sglang_bench_serving(sglang_line(
        random_range_ratio=..., input_lens=[1024] * 300, output_lens=[1024] * 300, total_input_tokens=307200,
        total_output_tokens=307200, output_throughput=307200 / duration))
    point = fixed.as_sweep_point()
    assert (point.input_len, point.output_len, point.flags) == (1024, 1024, ())
    assert "Every completed request produced 1024 output tokens (output_lens: produced, not requested, lengths; " \
           "equal produced lengths are what --ignore-eos" in fixed.length_distribution_note
