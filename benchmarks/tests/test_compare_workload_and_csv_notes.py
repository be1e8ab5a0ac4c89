"""A comparison of runs measured at unlike workloads says so (per run, in a note, on the page and
in the CSV), the CSV carries every note of the comparison, one run given is named in the refusal,
and run ids in quotes name the same runs as without them."""
from __future__ import annotations

import csv
import re
import io

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import runs_compare
from benchmarks.services.runs import runs_compare_csv
from benchmarks.tests.page_support import logged_in_client

pytestmark = pytest.mark.django_db


def _run(sweep: BenchmarkSweep, ordinal: int, *, tok_s: float = 25.0, **fields) -> BenchmarkRun:
    summary = {"requests": 20, "successes": 20, "failures": 0, "duration_s": 200.0, "output_throughput_tok_s": tok_s,
               "request_throughput_req_s": 0.1, "ttft_s": {"mean": 0.5, "p50": 0.5, "p90": 0.5, "p99": 0.6}}
    values = {"concurrency": 1, "input_len": 256, "output_len": 256, "num_gpus": 8, **fields}
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, summary=summary,
                                       **values)


def _sweep() -> BenchmarkSweep:
    return BenchmarkSweep.objects.create(name="first-use", status=SweepStatus.DONE)


def test_runs_of_unlike_workloads_are_labelled_and_still_compared(viewer_api) -> None:
    sweep = _sweep()
    a = _run(sweep, 0)
    b = _run(sweep, 1, tok_s=50.0, input_len=1024, concurrency=4)
    c = _run(sweep, 2, tok_s=20.0, request_rate=2.5)
    d = _run(sweep, 3, tok_s=30.0)
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk},{c.pk},{d.pk}")
    assert response.status_code == 200
    body = response.json()
    by_id = {e["id"]: e for e in body["runs"]}
    assert by_id[a.pk]["workload_differs"] == [] and by_id[d.pk]["workload_differs"] == []
    assert by_id[b.pk]["workload_differs"] == [
        {"field": "input_len", "label": "input length", "unit": "tokens", "value": 1024, "baseline_value": 256},
        {"field": "concurrency", "label": "concurrency", "unit": "requests in flight", "value": 4,
         "baseline_value": 1}]
    assert by_id[c.pk]["workload_differs"] == [
        {"field": "request_rate_req_s", "label": "request rate", "unit": "req/s", "value": 2.5,
         "baseline_value": None}]
    note = (f"deltas compare unlike workloads, so they measure the workload change as well as any other: against "
            f"the baseline run #{a.pk}, run #{b.pk} has input length 1024 tokens (baseline 256 tokens) and "
            f"concurrency 4 requests in flight (baseline 1 request in flight); run #{c.pk} has request rate 2.5 "
            "req/s (baseline closed loop)")
    assert body["workload_note"] == note and note in body["notes"]
    # Labelled, not refused: the deltas are still given.
    tok_s = next(f for f in body["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok_s["deltas_pct"] == [0.0, 100.0, -20.0, 20.0]

    # Another baseline: the differences are told against it.
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&baseline={b.pk}").json()
    assert [e["workload_differs"] for e in body["runs"]] == [[
        {"field": "input_len", "label": "input length", "unit": "tokens", "value": 256, "baseline_value": 1024},
        {"field": "concurrency", "label": "concurrency", "unit": "requests in flight", "value": 1,
         "baseline_value": 4}], []]
    assert body["workload_note"].endswith(f"against the baseline run #{b.pk}, run #{a.pk} has input length 256 "
                                          "tokens (baseline 1024 tokens) and concurrency 1 request in flight "
                                          "(baseline 4 requests in flight)")


def test_engine_gpus_and_deployment_are_workload_differences_and_alike_runs_have_none() -> None:
    sweep = _sweep()
    a = _run(sweep, 0, snapshot={"engine": "vllm", "topology": "pd", "deployment_id": 3})
    b = _run(sweep, 1, num_gpus=4, snapshot={"engine": "sglang", "topology": "pd", "deployment_id": 4})
    body = runs_compare(runs=[a, b])
    assert [d["field"] for d in body["runs"][1]["workload_differs"]] == ["engine", "num_gpus", "deployment_id"]
    assert body["workload_note"] == (
        "deltas compare unlike workloads, so they measure the workload change as well as any other: against the "
        f"baseline run #{a.pk}, run #{b.pk} has engine sglang (baseline vllm), GPUs 4 (baseline 8) and "
        "deployment #4 (baseline #3)")
    same = runs_compare(runs=[a, _run(sweep, 2, snapshot={"engine": "vllm", "topology": "pd", "deployment_id": 3})])
    assert same["workload_note"] is None
    assert not any(n.startswith("deltas compare unlike workloads") for n in same["notes"])
    # An imported run records no deployment: not known is no difference.
    imported = _run(sweep, 3, snapshot={})
    assert runs_compare(runs=[a, imported])["runs"][1]["workload_differs"] == []


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_csv_carries_every_note_and_the_workload_columns(viewer_api) -> None:
    sweep = _sweep()
    failed = BenchmarkRun.objects.create(sweep=sweep, ordinal=0, status=RunStatus.FAILED, reason="engine died",
                                         concurrency=1, input_len=256, output_len=256, num_gpus=8)
    a = _run(sweep, 1)
    b = _run(sweep, 2, tok_s=50.0, output_len=1024)
    response = viewer_api.get(f"/api/runs/compare/?ids={failed.pk},{a.pk},{b.pk}&format=csv")
    assert response.status_code == 200
    body = viewer_api.get(f"/api/runs/compare/?ids={failed.pk},{a.pk},{b.pk}").json()
    rows = _csv(response.content.decode())
    header = list(rows[0])
    assert header[-3:] == ["best_for", "workload_differs_from_baseline", "notes"]
    # The failed first run is not the baseline (a is); it ran a's workload, b did not.
    assert [r["baseline"] for r in rows] == ["false", "true", "false"]
    assert [r["workload_differs_from_baseline"] for r in rows] == ["", "", "output_len"]
    # Every note of the API, one a line, on every row: a row read alone keeps them.
    assert body["baseline_note"] and body["workload_note"]
    assert all(r["notes"].split("\n") == body["notes"] for r in rows)
    assert body["baseline_note"] in rows[1]["notes"].split("\n")
    assert body["workload_note"] == (
        "deltas compare unlike workloads, so they measure the workload change as well as any other: against the "
        f"baseline run #{a.pk}, run #{b.pk} has output length 1024 tokens (baseline 256 tokens)")
    assert body["workload_note"] in rows[0]["notes"].split("\n")
    assert rows[1]["baseline_note"] == body["baseline_note"] and body["baseline_note"].startswith(
        f"run #{failed.pk} is not rankable: it failed (engine died)")
    assert rows[2]["output_throughput_tok_s_delta_pct"] == "100.0"


def test_the_csv_notes_cell_reads_back_with_pandas_defaults_shape() -> None:
    # The csv module reads what pandas.read_csv reads without options: a quoted cell with line breaks.
    sweep = _sweep()
    a, b = _run(sweep, 0), _run(sweep, 1, concurrency=8)
    comparison = runs_compare(runs=[a, b])
    text = runs_compare_csv(comparison=comparison)
    lines = text.split("\n")
    assert len(_csv(text)) == 2
    assert len(lines) > 3   # the notes cell spans lines, quoted
    assert _csv(text)[1]["notes"].split("\n") == comparison["notes"]
    assert _csv(text)[1]["concurrency"] == "8" and _csv(text)[1]["workload_differs_from_baseline"] == "concurrency"


def test_the_page_shows_the_unlike_workload(viewer) -> None:
    sweep = _sweep()
    a, b = _run(sweep, 0), _run(sweep, 1, input_len=1024)
    html = logged_in_client(viewer).get(f"/benchmarks/compare/?runs={a.pk},{b.pk}").content.decode()
    assert "Workload vs baseline" in html
    assert ('<span class="tag warn small">unlike workload</span> input length 1024 tokens (baseline 256 tokens)'
            in html)
    assert (f"Deltas compare unlike workloads, so they measure the workload change as well as any other: against "
            f"the baseline run #{a.pk}, run #{b.pk} has input length 1024 tokens (baseline 256 tokens).") in html
    same = _run(sweep, 2)
    html = logged_in_client(viewer).get(f"/benchmarks/compare/?runs={a.pk},{same.pk}").content.decode()
    assert "Workload vs baseline" not in html and "unlike workload" not in html


def test_one_run_is_named_and_quoted_ids_are_the_same_ids(viewer, viewer_api) -> None:
    sweep = _sweep()
    a, b = _run(sweep, 0), _run(sweep, 1, tok_s=50.0)
    for query in (f"ids={a.pk}", f'ids="{a.pk}"', f"ids='{a.pk}'"):
        response = viewer_api.get(f"/api/runs/compare/?{query}")
        assert response.status_code == 400, query
        assert response.json() == {"ids": [f"only run {a.pk} was given; give at least two runs to compare"]}, query
    plain = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}&baseline={b.pk}").json()
    for query in (f'ids="{a.pk}","{b.pk}"&baseline="{b.pk}"', f'ids="{a.pk},{b.pk}"&baseline={b.pk}',
                  f"ids='{a.pk}', '{b.pk}'&baseline='{b.pk}'"):
        response = viewer_api.get(f"/api/runs/compare/?{query}")
        assert response.status_code == 200, query
        assert response.json() == plain, query
    assert plain["baseline"] == b.pk
    # The page reads them alike.
    page = logged_in_client(viewer).get(f'/benchmarks/compare/?runs="{a.pk},{b.pk}"&baseline="{b.pk}"')
    assert page.status_code == 200 and "Side by side" in page.content.decode()
    page = logged_in_client(viewer).get(f'/benchmarks/compare/?runs="{a.pk}"&compare=1')
    assert page.status_code == 400
    assert f"Only run {a.pk} was given; give at least two runs to compare." in page.content.decode()
    # A quote that does not close is still refused, in the usual words.
    response = viewer_api.get(f'/api/runs/compare/?ids="{a.pk},{b.pk}')
    assert response.status_code == 400
    assert response.json() == {"ids": [f"must be comma-separated integer ids, got '\"{a.pk}'"]}


def test_a_sims_gpus_are_said_to_be_modelled_in_the_note_and_the_configuration_table(viewer) -> None:
    sweep = _sweep()
    a = _run(sweep, 0, snapshot={"engine": "sim", "topology": "pd"})
    b = _run(sweep, 1, num_gpus=4, snapshot={"engine": "sim", "topology": "pd"})
    c = _run(sweep, 2, num_gpus=2, snapshot={"engine": "sglang", "topology": "pd"})
    body = runs_compare(runs=[a, b, c])
    assert body["workload_note"].endswith(
        f"run #{b.pk} has GPUs 4 modelled (baseline 8 modelled); run #{c.pk} has engine sglang (baseline sim) "
        "and GPUs 2 (baseline 8 modelled)")
    page = logged_in_client(viewer).get(f"/benchmarks/compare/?runs={a.pk},{b.pk},{c.pk}").content.decode()
    row = re.search(r'<tr class="config differs"><td>num_gpus.*?</tr>', page).group(0)
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
    assert cells == ["num_gpus (modelled: by the sim profile, not GPUs it ran on; used for tok/s per GPU) differs",
                     "8 modelled", "4 modelled", "2"]
    assert f"GPUs 4 modelled (baseline 8 modelled)</td>" in page
