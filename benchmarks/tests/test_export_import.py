"""Import of other harnesses' files as runs (the real fixtures, case C12), their original file kept,
and CSV/JSON export of runs and sweeps."""
from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest

from benchmarks.analysis import ANALYSIS_VERSION
from benchmarks.choices import RunSource, RunStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import (
    run_export_csv, run_export_json, run_import, runs_compare, sweep_export_csv, sweep_export_json,
)
from controlplane.errors import InvalidInput

DATA = Path(__file__).parent / "data"
SGLANG = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
VLLM = (DATA / "vllm-bench-serve.json").read_text()

pytestmark = pytest.mark.django_db


def test_it_imports_the_sglang_line_with_its_measured_input_mean(operator) -> None:
    [run] = run_import(text=SGLANG, filename="h200.jsonl", user=operator)
    run.refresh_from_db()
    line = json.loads(SGLANG.splitlines()[0])
    assert (run.source, run.status, run.import_format) == (RunSource.IMPORTED, RunStatus.DONE, "sglang-bench-serving")
    assert round(run.summary["input_tokens_actual_mean"], 1) == 508.7
    assert run.summary["successes"] == line["completed"]
    assert run.output_tok_s == line["output_throughput"]
    assert run.summary["ttft_ms"]["p50"] == line["median_ttft_ms"] and run.ttft_p99_ms is None
    assert run.original_text == SGLANG and run.original_filename == "h200.jsonl" and run.source_line == 1
    # lengths drawn from [1, 1024]: not a fixed-length run, so no lengths and a flag saying why
    assert (run.input_len, run.output_len) == (None, None) and "variable_lengths" in run.flags


def test_it_imports_the_vllm_file_with_null_goodput_kept_null(operator) -> None:
    [run] = run_import(text=VLLM, filename="vllm.json", user=operator)
    obj = json.loads(VLLM)
    assert run.summary["goodput_req_s"] is None
    assert run.summary["request_throughput_req_s"] == obj["request_throughput"]
    assert run.served_model_name == obj["model_id"] and run.num_requests == obj["num_prompts"]
    assert run.request_rate == obj["request_rate"]


def test_it_reads_goodput_from_the_old_trailing_colon_key(operator) -> None:
    obj = json.loads(VLLM)
    obj.pop("request_goodput", None)
    obj["request_goodput:"] = 3.2
    [run] = run_import(text=json.dumps(obj), filename="old.json", user=operator)
    assert run.summary["goodput_req_s"] == 3.2


def test_it_refuses_a_malformed_file_naming_the_line_and_stores_nothing(operator) -> None:
    good = SGLANG.strip()
    with pytest.raises(InvalidInput) as exc:
        run_import(text=good + "\n{not json\n", filename="bad.jsonl", user=operator)
    assert list(exc.value.errors) == ["line 2"]
    assert BenchmarkRun.objects.count() == 0


def _measured_run(sweep: BenchmarkSweep | None, *, c: int, tok_s: float, flags: list[str] | None = None,
                  ordinal: int = 0) -> BenchmarkRun:
    summary = {"requests": 2 * c, "successes": 2 * c, "failures": 0, "duration_s": 10.0,
               "output_throughput_tok_s": tok_s, "request_throughput_req_s": 0.5,
               "ttft_s": {"mean": 0.5, "p50": 0.4, "p90": 0.8, "p99": 0.9, "std": 0.1, "count": 2 * c},
               "tpot_s": {"mean": 0.094, "p50": 0.094, "p90": 0.1, "p99": 0.11, "std": 0.0, "count": 2 * c},
               "itl_s": {"mean": 0.094, "p50": 0.094, "p90": 0.1, "p99": 0.12, "std": 0.0, "count": 10},
               "e2e_s": {"mean": 24.5, "p50": 24.4, "p90": 25.0, "p99": 25.5, "std": 0.2, "count": 2 * c},
               "input_tokens_actual_mean": 256.0, "output_tokens_mean": 256.0,
               "flags": {f: True for f in flags or []}}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=c,
                                       input_len=256, output_len=256, num_requests=2 * c, num_gpus=8,
                                       summary=summary, flags=flags or [], output_tok_s=tok_s,
                                       served_model_name="DeepSeek-V4-Flash")


def test_it_exports_a_run_as_csv_with_ms_latencies_and_empty_cells_for_absent_values() -> None:
    run = _measured_run(None, c=8, tok_s=24.5)
    rows = list(csv.DictReader(io.StringIO(run_export_csv(run=run))))
    assert len(rows) == 1
    row = rows[0]
    assert row["run_id"] == str(run.pk) and row["concurrency"] == "8"
    assert row["output_throughput_tok_s"] == "24.5" and row["tok_s_per_gpu"] == "3.0625"
    assert row["ttft_ms_p99"] == "900.0" and row["tpot_ms_mean"] == "94.0" and row["e2e_ms_p50"] == "24400.0"
    assert row["goodput_req_s"] == "" and row["request_rate_req_s"] == ""
    # how long it ran, named apart from the API's duration_s (the grid's time limit)
    assert row["measured_duration_s"] == "10.0" and "duration_s" not in row


def test_it_exports_a_sweep_as_json_and_csv_in_grid_order() -> None:
    sweep = BenchmarkSweep.objects.create(name="s", grid={"concurrency": [1, 8]}, status="done", num_gpus=8,
                                          analysis={"findings": ["decode-bound"], "version": ANALYSIS_VERSION})
    _measured_run(sweep, c=1, tok_s=9.95, ordinal=0)
    _measured_run(sweep, c=8, tok_s=24.5, ordinal=1)
    body = json.loads(sweep_export_json(sweep=sweep))
    assert body["sweep"]["grid"] == {"concurrency": [1, 8]} and body["analysis"]["findings"] == ["decode-bound"]
    assert [r["concurrency"] for r in body["runs"]] == [1, 8]
    assert body["runs"][1]["metrics"]["ttft_ms"]["p99"] == 900.0
    rows = list(csv.DictReader(io.StringIO(sweep_export_csv(sweep=sweep))))
    assert [r["output_throughput_tok_s"] for r in rows] == ["9.95", "24.5"]
    single = json.loads(run_export_json(run=sweep.runs.first()))
    assert single["summary"]["ttft_s"]["p99"] == 0.9


def test_the_sweep_json_exports_analysis_is_the_object_the_analysis_endpoint_answers(viewer_api) -> None:
    # Finished with a stored report, and still running (computed from the runs so far): both keep
    # provisional, and the export's analysis is never another shape than /analysis/.
    done = BenchmarkSweep.objects.create(name="d", grid={"concurrency": [1, 8]}, status="done", num_gpus=8,
                                         analysis={"findings": ["decode-bound"], "version": ANALYSIS_VERSION})
    running = BenchmarkSweep.objects.create(name="r", grid={"concurrency": [1, 8]}, status="running", num_gpus=8)
    for sweep in (done, running):
        _measured_run(sweep, c=1, tok_s=9.95, ordinal=0)
        _measured_run(sweep, c=8, tok_s=24.5, ordinal=1)
    for sweep, provisional in ((done, False), (running, True)):
        answered = viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/").json()
        exported = json.loads(viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json").content)["analysis"]
        assert answered["provisional"] is provisional
        assert exported == answered


def test_it_refuses_to_rank_a_length_mismatched_run_and_says_so() -> None:
    ok = _measured_run(None, c=8, tok_s=24.5)
    short = _measured_run(None, c=8, tok_s=80.0, flags=["output_length_mismatch"])
    other = _measured_run(None, c=8, tok_s=25.0)
    result = runs_compare(runs=[ok, short, other])
    entries = {e["id"]: e for e in result["runs"]}
    assert entries[short.pk]["rankable"] is False
    assert "not ranked: output_length_mismatch" in entries[short.pk]["refusal"]
    # the two rankable runs have the same TTFT p99 and TPOT mean: a tie, no best named for those
    assert result["notes"][0] == entries[short.pk]["refusal"]
    assert (f"no best run for TTFT p99: runs #{ok.pk} 900, #{other.pk} 900 ms are equal, under the 2 % tie threshold "
            "(run-to-run noise)") in result["notes"]
    assert (f"no best run for TPOT mean: runs #{ok.pk} 94, #{other.pk} 94 ms are equal, under the 2 % tie "
            "threshold (run-to-run noise)") in result["notes"]
    # the mismatched run has the highest tok/s but is not named best
    assert result["best"]["output_throughput_tok_s"] == other.pk
    tok = next(f for f in result["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["values"] == [24.5, 80.0, 25.0]


def test_it_names_no_best_run_across_different_loads_and_says_why() -> None:
    light = _measured_run(None, c=1, tok_s=10.0)
    heavy = _measured_run(None, c=16, tok_s=25.0)
    middle = _measured_run(None, c=8, tok_s=20.0)
    result = runs_compare(runs=[light, heavy, middle])
    assert all(v is None for v in result["best"].values()), result["best"]
    assert ("the rankable runs ran at different loads (c=1, c=8, c=16): a best across loads would set one operating "
            "point's latency against another's throughput; no best run is named (compare runs of one load, or read "
            "a sweep's ceiling analysis across its loads)") in result["notes"]
    assert {"field": "concurrency", "values": [1, 16, 8]} in result["config_differs"]
    # the deltas against the baseline are still given
    tok = next(f for f in result["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["deltas_pct"] == [0, 150.0, 100.0]


def test_it_imports_through_the_management_command() -> None:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("import_results", str(DATA / "vllm-bench-serve.json"), stdout=out)
    run = BenchmarkRun.objects.get()
    assert out.getvalue().startswith(f"run #{run.pk} (vllm-bench-serve): ")  # one object: no line to name
    assert run.original_filename == "vllm-bench-serve.json"


def test_it_refuses_a_second_import_of_the_same_file_unless_told_and_the_command_says_why(operator, tmp_path) -> None:
    from django.core.management import CommandError, call_command

    from controlplane.errors import Conflict

    [first] = run_import(text=VLLM, filename="vllm.json", user=operator)
    assert first.original_sha256 == hashlib.sha256(VLLM.encode("utf-8")).hexdigest()
    with pytest.raises(Conflict) as exc:
        run_import(text=VLLM, filename="again.json", user=operator)
    assert f"already imported as run #{first.pk} (vllm.json)" in str(exc.value)
    path = tmp_path / "vllm.json"
    path.write_text(VLLM)
    with pytest.raises(CommandError, match=f"vllm.json: this file was already imported as run #{first.pk}"):
        call_command("import_results", str(path))
    out = io.StringIO()
    call_command("import_results", str(path), "--allow-duplicate", stdout=out)
    assert BenchmarkRun.objects.filter(original_sha256=first.original_sha256).count() == 2
    assert out.getvalue().startswith("run #")
