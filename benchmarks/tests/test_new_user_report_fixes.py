"""What a new user found: a sim run's ``input_tokens_source`` (the stream counted its prompts),
refused numbers quoted as JSON writes them, a comparison whose first run cannot be ranked naming
the baseline it took instead, and an ended time-limited sweep's ``requests_total``."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from benchmarks.choices import RunSource, RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import first_run_done_wait, sim_deployment_create
from deployments.choices import DeploymentStatus


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


def _csv_rows(api, url: str) -> list[dict[str, str]]:
    response = api.get(url)
    assert response.status_code == 200, response.content
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
def test_a_sim_run_says_the_stream_counted_its_input_tokens(sim_url: str, operator, viewer_api) -> None:
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "lengths": "32:16", "requests": 4})
    assert sweep_execute(sweep_id=sweep.pk) == SweepStatus.DONE
    [run] = sweep.runs.all()
    assert run.summary["input_tokens_source"] == "stream" and run.summary["input_tokens_actual_mean"] == 32.0

    body = viewer_api.get(f"/api/runs/{run.pk}/").json()
    assert body["summary"]["input_tokens_source"] == "stream"
    assert body["summary"]["input_tokens_actual_mean"] == 32.0 and body["metrics"]["input_tokens_mean"] == 32.0
    [row] = _csv_rows(viewer_api, f"/api/sweeps/{sweep.pk}/export/?format=csv")
    assert row["input_tokens_source"] == "stream" and row["input_tokens_mean"] == "32.0"
    exported = viewer_api.get(f"/api/runs/{run.pk}/export/?format=json").json()
    assert exported["summary"]["input_tokens_source"] == "stream"


@pytest.mark.django_db
def test_a_run_stored_without_the_source_has_it_derived_when_read_where_it_can_be(viewer_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPED)
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, num_gpus=1)
    base = {"requests": 4, "successes": 4, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 64.0}

    def run(ordinal: int, summary: dict, source: str = RunSource.MEASURED) -> BenchmarkRun:
        return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=2,
                                           input_len=256, output_len=16, num_gpus=1, source=source,
                                           summary={**base, **summary})

    older = run(0, {"input_tokens_actual_mean": 256.0})  # stored before the key: only the stream gave a mean
    unknown = run(1, {"input_tokens_actual_mean": None})
    imported = run(2, {"mean_input_tokens": 256.0}, source=RunSource.IMPORTED)
    stored_null = run(3, {"input_tokens_actual_mean": None, "input_tokens_source": None})
    body = viewer_api.get(f"/api/runs/{older.pk}/").json()
    assert body["summary"]["input_tokens_source"] == "stream" and body["summary"]["input_tokens_actual_mean"] == 256.0
    assert viewer_api.get(f"/api/runs/{unknown.pk}/").json()["summary"]["input_tokens_source"] is None
    assert "input_tokens_source" not in viewer_api.get(f"/api/runs/{imported.pk}/").json()["summary"]
    assert viewer_api.get(f"/api/runs/{stored_null.pk}/").json()["summary"]["input_tokens_source"] is None
    rows = {int(r["run_id"]): r for r in _csv_rows(viewer_api, f"/api/sweeps/{sweep.pk}/export/?format=csv")}
    assert rows[older.pk]["input_tokens_source"] == "stream"
    assert rows[unknown.pk]["input_tokens_source"] == rows[imported.pk]["input_tokens_source"] == ""
    older.refresh_from_db()
    assert "input_tokens_source" not in older.summary  # derived when read, the stored summary untouched


# --- refused numbers as JSON.stringify writes them ------------------------------------------------


def test_the_shared_number_spelling_is_javascripts() -> None:
    from controlplane.jsonsafe import js_number, json_number, json_spelled, shown_value

    values = (1e9, 1.0, -0.0, 0.0, 1e21, 1e20, 0.5, -1.0, 1e-7, 2.5e-5, 123.456, float("nan"), float("-inf"))
    assert [json_number(v) for v in values] == ["1000000000", "1", "0", "0", "1e+21", "100000000000000000000", "0.5",
                                                "-1", "1e-7", "0.000025", "123.456", "NaN", "-Infinity"]
    assert [js_number(v) for v in values] == [json_number(v) for v in values]
    assert json_spelled([1e9, {"a": -0.0}]) == '[1000000000, {"a": 0}]' and shown_value(9.0) == "the number 9"


@pytest.mark.django_db
def test_a_sweep_refusal_quotes_a_whole_float_as_json_stringify_writes_it(operator_api) -> None:
    from benchmarks.tests.sweep_support import sim_deployment_create

    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1e9], "lengths": "8:8", "requests": 1e5}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["grid.concurrency.0"] == ["must be an integer 1..4096, got 1000000000"]
    assert response.json()["grid.requests"] == [
        "must be an integer 1..100000, got 100000 written with a decimal point or exponent (write 100000)"]


def test_a_recipe_refusal_quotes_a_whole_float_and_negative_zero_as_json_stringify_writes_them() -> None:
    from controlplane.errors import InvalidInput
    from deployments.examples import example_recipe, seed_node_facts_example
    from deployments.recipes import recipe_validate

    spec = example_recipe("seed-v4-flash-pd")["spec"]
    spec["roles"]["prefill"]["dp"] = 1.0
    spec["startup_timeout_s"] = -0.0
    with pytest.raises(InvalidInput) as info:
        recipe_validate(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example())
    errors = info.value.errors
    assert errors["spec.roles.prefill.dp"] == ["must be an integer, got 1 written with a decimal point or exponent (write 1)"]
    assert errors["spec.startup_timeout_s"] == ["must be an integer, got 0 written with a decimal point or exponent (write 0)"]


# --- a comparison whose first run cannot be the baseline says so -----------------------------------


def _compared_runs() -> tuple[BenchmarkRun, BenchmarkRun, BenchmarkRun]:
    """An unchecked run (flag ``input_length_unchecked``, 900 tok/s) first, then two checked ones."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STOPPED)
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE, num_gpus=1)
    summary = {"requests": 10, "successes": 10, "failures": 0, "duration_s": 1.0,
               "ttft_s": {"mean": 0.2, "p50": 0.2, "p90": 0.2, "p99": 0.2}, "tpot_s": {"mean": 0.02}}

    def run(ordinal: int, tok_s: float, flags: list[str]) -> BenchmarkRun:
        return BenchmarkRun.objects.create(
            sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=8, input_len=64, output_len=64,
            num_gpus=1, flags=flags, summary={**summary, "output_throughput_tok_s": tok_s})

    return run(0, 900.0, ["input_length_unchecked"]), run(1, 100.0, []), run(2, 120.0, [])


@pytest.mark.django_db
def test_a_first_run_that_is_not_rankable_is_named_when_another_becomes_the_baseline(viewer, viewer_api) -> None:
    from django.urls import reverse

    from benchmarks.tests.page_support import logged_in_client

    unchecked, good, better = _compared_runs()
    note = (f"run #{unchecked.pk} is not rankable: its input length was not checked (flags: input_length_unchecked); "
            f"run #{good.pk}, the first ranked run, is the baseline (baseline={unchecked.pk} takes run "
            f"#{unchecked.pk} anyway, without deltas)")
    body = viewer_api.get(f"/api/runs/compare/?ids={unchecked.pk},{good.pk},{better.pk}").json()
    assert body["baseline"] == good.pk and body["baseline_note"] == note and note in body["notes"]
    tok = next(f for f in body["fields"] if f["key"] == "output_throughput_tok_s")
    assert tok["deltas_pct"] == [800.0, 0.0, 20.0]
    rows = {int(r["run_id"]): r for r in _csv_rows(viewer_api, f"/api/runs/compare/?ids={unchecked.pk},{good.pk},"
                                                              f"{better.pk}&format=csv")}
    assert rows[good.pk]["baseline"] == "true" and rows[good.pk]["baseline_note"] == note
    assert rows[unchecked.pk]["baseline"] == "false" and rows[unchecked.pk]["baseline_note"] == ""
    client = logged_in_client(viewer)
    html = client.get(reverse("benchmarks:compare") + f"?runs={unchecked.pk},{good.pk},{better.pk}").content.decode()
    assert f"<p>R{note[1:]}.</p>" in html.replace("&#x27;", "'")  # the page's notes, capitalised

    # The first id is the baseline when it is rankable, or when baseline= names it: no such note.
    body = viewer_api.get(f"/api/runs/compare/?ids={good.pk},{unchecked.pk}").json()
    assert body["baseline"] == good.pk and body["baseline_note"] is None
    body = viewer_api.get(f"/api/runs/compare/?ids={unchecked.pk},{good.pk}&baseline={unchecked.pk}").json()
    assert body["baseline"] == unchecked.pk and body["baseline_note"] is None


# --- an ended time-limited sweep has its requests_total --------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop", ["cancel", "deployment stopping"])
def test_a_time_limited_sweep_that_ended_early_gives_the_requests_it_sent(sim_url: str, operator, operator_api,
                                                                         stop: str) -> None:
    import threading

    from django.test import Client
    from django.urls import reverse

    from benchmarks.services import sweep_cancel
    from deployments.models import Deployment

    deployment = sim_deployment_create(base_url=sim_url)
    # Two points limited by time alone (~1.3 s requests, two at a time); stopped within the first.
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2, 4], "lengths": [[16, 256]], "duration_s": 30})
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["requests_total"] is None
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    first_run_done_wait(sweep, 2)
    # Running: the total is not known yet.
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["requests_total"] is None
    if stop == "cancel":
        sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    else:
        Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPING)
    thread.join(60)
    assert result["status"] == (SweepStatus.CANCELLED if stop == "cancel" else SweepStatus.FAILED)

    sweep.refresh_from_db()
    [run] = sweep.runs.all()  # the second point never ran
    s = run.summary
    assert s["aborted"] >= 1 and s["requests"] == s["successes"] + s["failures"] + s["aborted"] >= 3
    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["requests_total"] == sweep.requests_total == s["requests"]  # what it sent, aborted ones included
    assert body["requests_done"] == s["requests"] - s["aborted"] < body["requests_total"]

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("benchmarks:sweep-progress", args=[sweep.pk])).content.decode()
    cell = page.split('class="requests-done"')[1].split("</dd>")[0]
    assert f"{body['requests_done']} finished of {s['requests']} sent" in cell and "not known" not in cell


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_an_ended_sweep_mixing_time_limited_and_capped_points_adds_0_for_a_capped_point_that_never_ran(
        sim_url: str, operator, operator_api) -> None:
    """Points c=2 (20 requests) and 1 req/s (time alone) for 16/256, then the same for 16/8: a
    cancel in the first point leaves the third (20 requests planned) unrun, and it adds 0."""
    import threading

    from benchmarks.services import sweep_cancel

    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator,
                         grid={"concurrency": [2], "request_rates": [1], "requests_per_concurrency": 10,
                               "lengths": [[16, 256], [16, 8]], "duration_s": 30})
    assert sweep.requests_total == 40  # the two capped points' planned counts
    assert operator_api.get(f"/api/sweeps/{sweep.pk}/").json()["requests_total"] is None
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sweep_execute(sweep_id=sweep.pk)))
    thread.start()
    first_run_done_wait(sweep, 2)
    sweep_cancel(sweep=BenchmarkSweep.objects.get(pk=sweep.pk), user=operator)
    thread.join(60)
    assert result["status"] == SweepStatus.CANCELLED

    sweep.refresh_from_db()
    [run] = sweep.runs.all()  # the c=2 point of 16/256; the other three never ran
    assert (run.ordinal, run.concurrency) == (0, 2)
    sent = run.summary["requests"]
    assert 3 <= sent < 20
    body = operator_api.get(f"/api/sweeps/{sweep.pk}/").json()
    assert body["requests_total"] == sweep.requests_total == sent  # not sent + 20 for the unrun c=2 of 16/8


@pytest.mark.django_db
def test_an_ended_sweep_of_capped_points_alone_counts_what_it_sent(operator) -> None:
    """Points with a request count alike: a sweep that failed before its points ran counts 0 for
    each of them, not their planned counts."""
    from benchmarks.services.sweeps import _finish

    sweep = BenchmarkSweep.objects.create(status=SweepStatus.RUNNING, requests_total=40,
                                          grid={"concurrency": [2, 4], "lengths": [[16, 8]], "requests": 20})
    assert _finish(sweep.pk, SweepStatus.FAILED, "deployment #1 is stopped")
    sweep.refresh_from_db()
    assert (sweep.status, sweep.requests_total, sweep.requests_total_known) == (SweepStatus.FAILED, 0, 0)
