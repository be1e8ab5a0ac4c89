"""REST API of sweeps and runs: roles, creation, import through the API (original kept and
downloadable), export, records, compare, cancel."""
from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.analysis import ANALYSIS_VERSION
from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services.runs import BEST_METRICS
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import ServerProcess

DATA = Path(__file__).parent / "data"
SGLANG = (DATA / "sglang-bench-serving-h200.jsonl").read_text()
VLLM = (DATA / "vllm-bench-serve.json").read_text()

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment():
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)


GRID = {"concurrency": [1, 8, 16], "lengths": ["256:256"], "requests_per_concurrency": 2}


def test_it_needs_a_token(anon_api) -> None:
    assert anon_api.get("/api/sweeps/").status_code == 401
    assert anon_api.get("/api/runs/").status_code == 401


def test_it_lets_a_viewer_read_but_not_create_or_import(viewer_api, outsider_api, deployment) -> None:
    assert viewer_api.get("/api/sweeps/").status_code == 200
    assert viewer_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json").status_code == 403
    assert viewer_api.post("/api/runs/import/", {"text": VLLM}, format="json").status_code == 403
    assert outsider_api.get("/api/runs/").status_code == 403


def test_it_creates_a_sweep_for_an_operator(operator_api, deployment, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "pending" and body["points_total"] == 3 and body["requests_total"] == 2 + 16 + 32
    assert body["grid"]["lengths"] == [[256, 256]] and body["num_gpus"] == 4 and body["created_by"] == "oscar-operator"
    assert len(callbacks) == 1  # the task is sent only after the commit


def test_it_refuses_a_second_sweep_while_one_is_active_on_the_deployment(
        operator_api, deployment, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        first = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
        second = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert first.status_code == 201
    assert second.status_code == 409
    assert first.json()["queue_note"] == "queued for a benchmark worker"
    assert second.json()["detail"] == (f"sweep #{first.json()['id']} is already pending on deployment "
                                       f"#{deployment.pk} (queued for a benchmark worker); wait for it or cancel it "
                                       "first (concurrent sweeps would skew each other)")
    # Its status as it is when the second create comes: claimed by a worker, waiting for the
    # deployment (starting) to be ready; then running.
    BenchmarkSweep.objects.filter(pk=first.json()["id"]).update(status=SweepStatus.WAITING)
    waiting = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert waiting.status_code == 409
    assert waiting.json()["detail"] == (f"sweep #{first.json()['id']} is already waiting on deployment "
                                        f"#{deployment.pk} (waiting for the deployment to be ready: deployment "
                                        f"#{deployment.pk} is starting; the sweep fails after "
                                        f"{first.json()['grid']['wait_ready_s']:.0f} s of waiting); wait for it or "
                                        "cancel it first (concurrent sweeps would skew each other)")
    BenchmarkSweep.objects.filter(pk=first.json()["id"]).update(status=SweepStatus.RUNNING)
    running = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert running.json()["detail"] == (f"sweep #{first.json()['id']} is already running on deployment "
                                        f"#{deployment.pk}; wait for it or cancel it first (concurrent sweeps would "
                                        "skew each other)")


def test_it_says_why_a_pending_sweep_has_not_started(operator_api, deployment, settings,
                                                     django_capture_on_commit_callbacks) -> None:
    from datetime import timedelta

    settings.CEILING_CONTROL_CONCURRENCY = 1
    other = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                  recipe_name="sim-other")
    # On a CPU of its own: a sweep of a deployment sharing the first one's CPU would wait for it instead.
    ServerProcess.objects.filter(deployment=other).update(cpus="1", effective_cpus="1")
    with django_capture_on_commit_callbacks(execute=False):
        first = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json").json()
        second = operator_api.post("/api/sweeps/", {"deployment": other.pk, "grid": GRID}, format="json").json()
    assert first["queue_note"] == "queued for a benchmark worker"
    assert second["queue_note"] == f"queued for a benchmark worker; 1 pending sweep before it (#{first['id']})"
    # The one worker slot is taken: the second waits for it, and that is no sign of a dead worker.
    BenchmarkSweep.objects.filter(pk=first["id"]).update(status=SweepStatus.RUNNING)
    BenchmarkSweep.objects.filter(pk=second["id"]).update(created_at=first_created(second) - timedelta(seconds=60))
    assert operator_api.get(f"/api/sweeps/{second['id']}/").json()["queue_note"] == (
        f"queued for a benchmark worker: its 1 slot is busy (#{first['id']} running); it starts when one ends")
    # A free slot and nobody took it for a minute: the control worker is the suspect.
    settings.CEILING_CONTROL_CONCURRENCY = 2
    note = operator_api.get(f"/api/sweeps/{second['id']}/").json()["queue_note"]
    assert note.startswith("queued for a benchmark worker for 6") and "control worker may not be running" in note
    # A sweep never counts itself among the busy slots (a worker may take it before its own row is read).
    BenchmarkSweep.objects.filter(pk=second["id"]).update(status=SweepStatus.PENDING)
    BenchmarkSweep.objects.filter(pk=first["id"]).update(status=SweepStatus.PENDING)
    settings.CEILING_CONTROL_CONCURRENCY = 1
    BenchmarkSweep.objects.filter(pk=second["id"]).update(status=SweepStatus.WAITING)
    from benchmarks.selectors import sweep_queue_note
    row = BenchmarkSweep.objects.get(pk=second["id"])
    row.status = SweepStatus.PENDING  # as a create's response still holds it
    assert "busy" not in sweep_queue_note(sweep=row)
    BenchmarkSweep.objects.filter(pk=second["id"]).update(status=SweepStatus.DONE)
    # Waiting: the deployment, its status and the limit.
    BenchmarkSweep.objects.filter(pk=first["id"]).update(status=SweepStatus.WAITING)
    note = operator_api.get(f"/api/sweeps/{first['id']}/").json()["queue_note"]
    wait = BenchmarkSweep.objects.get(pk=first["id"]).grid["wait_ready_s"]
    assert note == (f"waiting for the deployment to be ready: deployment #{deployment.pk} is starting; "
                    f"the sweep fails after {wait:.0f} s of waiting")
    deployment.status = DeploymentStatus.READY
    deployment.save(update_fields=["status"])
    assert operator_api.get(f"/api/sweeps/{first['id']}/").json()["queue_note"] == (
        f"deployment #{deployment.pk} is ready; the sweep starts within a second")
    BenchmarkSweep.objects.filter(pk=first["id"]).update(status=SweepStatus.DONE)
    assert operator_api.get(f"/api/sweeps/{first['id']}/").json()["queue_note"] is None


def first_created(body: dict):
    return BenchmarkSweep.objects.get(pk=body["id"]).created_at


def test_it_names_the_bad_grid_field(operator_api, deployment) -> None:
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk,
                                                  "grid": {"concurrency": [0], "lengths": ["256x256"]}}, format="json")
    assert response.status_code == 400
    text = json.dumps(response.json())
    assert "grid.concurrency.0" in text and "grid.lengths.0" in text


def test_it_cancels_a_pending_sweep(operator_api, viewer_api, deployment, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        sweep_id = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID},
                                     format="json").json()["id"]
    assert viewer_api.post(f"/api/sweeps/{sweep_id}/cancel/").status_code == 403
    response = operator_api.post(f"/api/sweeps/{sweep_id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == SweepStatus.CANCELLED
    assert operator_api.post(f"/api/sweeps/{sweep_id}/cancel/").status_code == 409


@pytest.mark.parametrize("ended", [SweepStatus.DONE, SweepStatus.FAILED, SweepStatus.CANCELLED])
def test_a_cancel_of_a_sweep_that_already_ended_is_a_409_naming_its_state(operator_api, deployment, ended,
                                                                           django_capture_on_commit_callbacks) -> None:
    """Like a cancel of a deployment that is over (README): nothing is left to cancel, and a 200
    would read as if this request had ended it. The row is left as it was."""
    with django_capture_on_commit_callbacks(execute=False):
        sweep_id = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID},
                                     format="json").json()["id"]
    BenchmarkSweep.objects.filter(pk=sweep_id).update(status=ended)
    response = operator_api.post(f"/api/sweeps/{sweep_id}/cancel/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"sweep #{sweep_id} already ended ({ended}); cancel only applies to a sweep that is pending, "
                  "waiting or running. There is nothing to cancel.", "code": "conflict"}
    sweep = BenchmarkSweep.objects.get(pk=sweep_id)
    assert sweep.status == ended and not sweep.cancel_requested


def test_it_imports_both_fixtures_and_serves_the_original_file(operator_api, viewer_api) -> None:
    upload = SimpleUploadedFile("h200.jsonl", SGLANG.encode(), content_type="application/jsonl")
    response = operator_api.post("/api/runs/import/", {"file": upload}, format="multipart")
    assert response.status_code == 201, response.json()
    [sg] = response.json()["created"]
    assert round(sg["metrics"]["input_tokens_mean"], 1) == 508.7 and sg["source"] == "imported"
    response = operator_api.post("/api/runs/import/", {"text": VLLM, "filename": "vllm.json"}, format="json")
    assert response.status_code == 201
    [vl] = response.json()["created"]
    assert vl["metrics"]["goodput_req_s"] is None and vl["original_filename"] == "vllm.json"
    original = viewer_api.get(f"/api/runs/{sg['id']}/original/")
    assert original.status_code == 200 and original.content.decode() == SGLANG
    assert 'filename="h200.jsonl"' in original["Content-Disposition"]
    records = viewer_api.get(f"/api/runs/{sg['id']}/records/")
    assert records.status_code == 404 and records.json() == {
        "detail": f"run #{sg['id']} has no per-request records (imported: see its original file)"}


def test_it_names_the_line_of_a_malformed_import(operator_api) -> None:
    response = operator_api.post("/api/runs/import/", {"text": SGLANG.strip() + "\n[1, 2]\n"}, format="json")
    assert response.status_code == 400
    assert "line 2" in json.dumps(response.json())
    assert BenchmarkRun.objects.count() == 0


def test_it_exports_and_compares_through_the_api(operator_api, viewer_api) -> None:
    a = operator_api.post("/api/runs/import/", {"text": VLLM}, format="json").json()["created"][0]
    b = operator_api.post("/api/runs/import/", {"text": SGLANG}, format="json").json()["created"][0]
    csv_response = viewer_api.get(f"/api/runs/{a['id']}/export/?format=csv")
    assert csv_response.status_code == 200 and csv_response["Content-Type"] == "text/csv"
    [row] = list(csv.DictReader(io.StringIO(csv_response.content.decode())))
    assert float(row["output_throughput_tok_s"]) == json.loads(VLLM)["output_throughput"]
    assert viewer_api.get(f"/api/runs/{a['id']}/export/?format=xml").status_code == 400
    compare = viewer_api.get(f"/api/runs/compare/?ids={a['id']},{b['id']}")
    assert compare.status_code == 200
    body = compare.json()
    assert [r["id"] for r in body["runs"]] == [a["id"], b["id"]]
    assert any(d["field"] == "import_format" for d in body["config_differs"])
    assert viewer_api.get(f"/api/runs/compare/?ids=999999,{a['id']}").json() == {"ids": ["no run with id 999999"]}


def test_it_exports_a_sweep_and_serves_its_analysis(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="s", grid={}, status="done", analysis={"findings": ["x"],
                                                                                       "version": ANALYSIS_VERSION})
    assert viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/").json()["findings"] == ["x"]
    response = viewer_api.get(f"/api/sweeps/{sweep.pk}/export/?format=json")
    assert response.status_code == 200 and json.loads(response.content)["sweep"]["id"] == sweep.pk


def test_it_refuses_a_duplicate_import_with_409_naming_the_run(operator_api) -> None:
    [first] = operator_api.post("/api/runs/import/", {"text": VLLM, "filename": "vllm.json"},
                                format="json").json()["created"]
    again = operator_api.post("/api/runs/import/", {"text": VLLM, "filename": "copy.json"}, format="json")
    assert again.status_code == 409
    body = again.json()
    assert body["code"] == "conflict"
    assert body["detail"].startswith(f"this file was already imported as run #{first['id']} (vllm.json) on ")
    assert first["original_sha256"] == hashlib.sha256(VLLM.encode()).hexdigest()
    # the same bytes: the file's SHA-256 in full, and the API's own field as the way out
    assert body["detail"].endswith(f"(same content, SHA-256 {first['original_sha256']}); set allow_duplicate to "
                                   "true to import it again")
    assert body["sha256"] == first["original_sha256"]
    assert "Tick" not in body["detail"] and "Import again" not in body["detail"]
    # the same bytes as a multipart upload are the same file
    upload = SimpleUploadedFile("vllm.json", VLLM.encode(), content_type="application/json")
    assert operator_api.post("/api/runs/import/", {"file": upload}, format="multipart").status_code == 409
    assert BenchmarkRun.objects.count() == 1
    kept = operator_api.post("/api/runs/import/", {"text": VLLM, "allow_duplicate": True}, format="json")
    assert kept.status_code == 201 and BenchmarkRun.objects.count() == 2
    # every line of a multi-run file is named
    many = "\n".join([SGLANG.strip(), SGLANG.strip().replace('"max_concurrency": null', '"max_concurrency": 16')]) + "\n"
    runs = operator_api.post("/api/runs/import/", {"text": many}, format="json").json()["created"]
    refused = operator_api.post("/api/runs/import/", {"text": many}, format="json").json()["detail"]
    assert f"runs #{runs[0]['id']}, #{runs[1]['id']} (pasted.json)" in refused


def test_it_validates_the_duration_per_point_with_dotted_paths(operator_api, deployment,
                                                               django_capture_on_commit_callbacks) -> None:
    for bad, why in ((0, "must be at least 1 s and at most 86400 s (24 h), got 0"),
                     (86_401, "got 86401"), ("60", 'got the string "60"'), (True, "got the boolean true")):
        response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk,
                                                      "grid": {**GRID, "duration_s": bad}}, format="json")
        assert response.status_code == 400, bad
        [message] = response.json()["grid.duration_s"]
        assert why in message
    rates = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [], "lengths": ["8:8"], "request_rates": [2.0]}}, format="json")
    assert rates.json()["grid.requests"] == [
        "open-loop points (request_rates) need a fixed number of requests or a duration_s"]
    with django_capture_on_commit_callbacks(execute=False):
        timed = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
            "concurrency": [1, 4], "lengths": ["8:8"], "request_rates": [2.0], "duration_s": 30}}, format="json")
    assert timed.status_code == 201, timed.json()
    body = timed.json()
    assert body["grid"]["duration_s"] == 30.0 and body["grid"]["requests_per_concurrency"] is None
    assert body["points_total"] == 3 and body["requests_total"] is None  # known only once the points ran


def test_it_names_a_number_too_large_for_a_double_in_the_grid(operator_api, deployment) -> None:
    for grid, path in (('{"concurrency": [1], "lengths": ["32:32"], "duration_s": 1e400}', "grid.duration_s"),
                       ('{"concurrency": [1], "lengths": ["32:32"], "request_rates": [2, -1e400], "requests": 4}',
                        "grid.request_rates.1"),
                       ('{"concurrency": [1], "lengths": ["32:32"], "slo": {"ttft_s": 1e999}}', "grid.slo.ttft_s")):
        body = '{"deployment": %d, "grid": %s}' % (deployment.pk, grid)
        response = operator_api.post("/api/sweeps/", body, content_type="application/json")
        assert response.status_code == 400, grid
        errors = response.json()
        assert list(errors) == [path], errors
        # as the sweep form and manage.py sweep name it: the body's own spelling, and why
        [message] = errors[path]
        assert message in ("must be a finite number, got 1e400 (too large for a 64-bit float)",
                           "must be a finite number, got -1e400 (too large for a 64-bit float)",
                           "must be a finite number, got 1e999 (too large for a 64-bit float)"), message
    assert not BenchmarkSweep.objects.exists()


def test_it_refuses_nan_and_infinity_literals_in_a_grid_at_their_path(operator_api, deployment) -> None:
    for literal in ("NaN", "Infinity", "-Infinity"):
        body = '{"deployment": %d, "grid": {"concurrency": [1], "lengths": ["32:32"], "duration_s": %s}}' % (
            deployment.pk, literal)
        response = operator_api.post("/api/sweeps/", body, content_type="application/json")
        assert response.status_code == 400, literal
        why = "not a number" if literal == "NaN" else "infinite"
        assert response.json() == {"grid.duration_s": [f"must be a finite number, got {literal} ({why})"]}
    assert not BenchmarkSweep.objects.exists()


def test_it_gives_the_time_of_a_very_slow_open_loop_point_in_a_short_message(operator_api, deployment) -> None:
    for rate, shown, seconds in ((1e-300, "1e-300", "4e+300 s"), (5e-324, "5e-324", "8.1e+323 s"),
                                 (1e-9, "1e-9", "4,000,000,000 s")):
        response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
            "concurrency": [], "lengths": ["8:8"], "request_rates": [rate], "requests": 4}}, format="json")
        assert response.status_code == 400, rate
        [message] = response.json()["grid.request_rates.0"]
        assert f"4 requests at {shown} req/s take about {seconds}; at most 86400 s" in message
        assert len(message) < 160, message


def test_it_refuses_non_ascii_digits_like_any_malformed_number(operator_api, viewer_api, deployment) -> None:
    # "²".isdigit() is true, but int("²") raises: a 400 naming the field, never a 500
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [1], "lengths": ["\u00b2:8"], "requests": 4}}, format="json")
    assert response.status_code == 400
    assert response.json()["grid.lengths.0"] == [
        "must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string \"\u00b2:8\""]
    for url, field in (("/api/sweeps/?deployment=%C2%B2", "deployment"), ("/api/runs/?sweep=%C2%B2", "sweep"),
                       ("/api/sweeps/?deployment=%EF%BC%91", "deployment"), ("/api/runs/compare/?ids=%C2%B2", "ids")):
        response = viewer_api.get(url)  # like ?deployment=x, fullwidth "１" included: a 400 naming it
        assert response.status_code == 400, url
        assert list(response.json()) == [field], url


def test_it_answers_ids_too_large_for_the_database_with_a_400_never_a_500(viewer_api, deployment) -> None:
    # 2**63 overflows SQLite's INTEGER: filters say their limit, compare says the id names no run
    for url, field in (("/api/sweeps/?deployment=99999999999999999999999", "deployment"),
                       ("/api/runs/?sweep=99999999999999999999999", "sweep")):
        response = viewer_api.get(url)
        assert response.status_code == 400, url
        assert response.json() == {field: ["must be a whole number between 1 and 2147483647, "
                                           "got '99999999999999999999999'"]}
    for url, detail in (("/api/runs/compare/?ids=9223372036854775808", "no run with id 9223372036854775808"),
                        ("/api/runs/compare/?ids=9223372036854775807", "no run with id 9223372036854775807")):
        response = viewer_api.get(url)
        assert response.status_code == 400, url
        assert response.json() == {"ids": [detail]}
    response = viewer_api.get("/api/runs/compare/?sweeps=9223372036854775808")
    assert response.status_code == 400
    assert response.json() == {"sweeps": ["no sweep with id 9223372036854775808"]}
    assert viewer_api.get("/api/runs/compare/?ids=-1").json() == {"ids": ["must be comma-separated integer ids, got '-1'"]}
    assert viewer_api.get("/api/runs/compare/?ids=1,abc").json() == {
        "ids": ["must be comma-separated integer ids, got 'abc'"]}
    assert viewer_api.get("/api/runs/compare/?sweeps=2,%201x%20,3").json() == {
        "sweeps": ["must be comma-separated integer ids, got '1x'"]}
    sweep = BenchmarkSweep.objects.create(deployment=deployment, name="s", grid={}, status=SweepStatus.DONE)
    listed = viewer_api.get(f"/api/sweeps/?deployment={deployment.pk}").json()
    assert [s["id"] for s in listed["results"]] == [sweep.pk]


def test_it_refuses_a_list_filter_that_can_match_nothing_naming_what_is_allowed(viewer_api, deployment) -> None:
    done = BenchmarkSweep.objects.create(deployment=deployment, name="s", grid={}, status=SweepStatus.DONE)
    run = BenchmarkRun.objects.create(sweep=done, ordinal=0, status=RunStatus.DONE, concurrency=1, input_len=8,
                                      output_len=8)
    for url, field, message in (
        ("/api/sweeps/?deployment=abc", "deployment", "must be a whole number between 1 and 2147483647, got 'abc'"),
        ("/api/runs/?sweep=abc", "sweep", "must be a whole number between 1 and 2147483647, got 'abc'"),
        ("/api/sweeps/?status=bogus", "status",
         "must be one of pending, waiting, running, done, failed, cancelled; got 'bogus'"),
        ("/api/runs/?status=bogus", "status", "must be one of running, done, failed, cancelled; got 'bogus'"),
        ("/api/runs/?source=bogus", "source", "must be one of measured, imported; got 'bogus'"),
    ):
        response = viewer_api.get(url)
        assert response.status_code == 400, url
        assert response.json() == {field: [message]}, url
    # valid filters still filter, and an empty one is refused naming it, never read as no filter
    assert [s["id"] for s in viewer_api.get("/api/sweeps/?status=done").json()["results"]] == [done.pk]
    assert viewer_api.get("/api/sweeps/?status=running").json()["count"] == 0
    empty = viewer_api.get("/api/sweeps/?deployment=&status=")
    assert empty.status_code == 400
    assert empty.json() == {key: [f"filter '{key}' is empty: give a value or leave it out"]
                            for key in ("deployment", "status")}
    assert [r["id"] for r in viewer_api.get(f"/api/runs/?sweep={done.pk}&source=measured").json()["results"]] == [
        run.pk]
    assert viewer_api.get(f"/api/runs/?sweep={done.pk + 1}").json()["count"] == 0


def test_it_answers_every_bad_grid_field_at_once(operator_api, deployment) -> None:
    body = ('{"deployment": %d, "grid": {"concurrency": [0, 2], "lengths": ["256x256"], "warmup": -1, '
            '"duration_s": 1e400, "request_rates": [-3], "slo": {"ttft_s": 0, "p50": 1}, "seed": "x", "api": "nope", '
            '"colour": "red"}}' % deployment.pk)
    response = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert response.status_code == 400
    errors = response.json()
    assert sorted(errors) == ["grid.api", "grid.colour", "grid.concurrency.0", "grid.duration_s", "grid.lengths.0",
                              "grid.request_rates.0", "grid.seed", "grid.slo.p50", "grid.slo.ttft_s", "grid.warmup"]
    assert errors["grid.duration_s"] == ["must be a finite number, got 1e400 (too large for a 64-bit float)"]
    assert errors["grid.warmup"] == ["must be an integer 0..10000, got -1"]
    # The size bounds are judged with the other errors (they need only valid counts), each bound once.
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": [4096, 2048], "lengths": ["1000:8"], "requests_per_concurrency": 1000, "seed": -1}},
        format="json")
    errors = response.json()
    assert sorted(errors) == ["grid", "grid.lengths", "grid.requests_per_concurrency", "grid.seed"]
    assert errors["grid.requests_per_concurrency"] == [
        "point c=2048 1000/8 would send 2,048,000 requests; at most 100,000 per point"]
    assert errors["grid.lengths"][0].startswith("point c=2048 1000/8 needs 2,048,000,000 prompt tokens")
    assert errors["grid"] == ["the sweep would send 6,144,000 requests; at most 1,000,000 per sweep"]
    assert not BenchmarkSweep.objects.exists()


def test_it_answers_a_bad_deployment_together_with_the_grids_errors(operator_api) -> None:
    for deployment in (999_999, "abc"):
        response = operator_api.post("/api/sweeps/", {"deployment": deployment, "grid": {
            "concurrency": [0], "lengths": []}}, format="json")
        assert response.status_code == 400
        assert sorted(response.json()) == ["deployment", "grid.concurrency.0", "grid.lengths"], deployment


def test_it_never_ranks_a_failed_or_metricless_run_in_the_api(operator_api, viewer_api, deployment) -> None:
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.FAILED, num_gpus=4)
    summary = {"requests": 10, "successes": 10, "failures": 0, "duration_s": 1.0,
               "ttft_s": {"mean": 0.2, "p50": 0.2, "p90": 0.2, "p99": 0.2}, "tpot_s": {"mean": 0.02}}

    def run(ordinal: int, status: str, tok_s: float | None, **extra) -> BenchmarkRun:
        s = {**summary, "output_throughput_tok_s": tok_s, **extra.pop("summary", {})}
        return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=status, concurrency=8, input_len=64,
                                           output_len=64, num_gpus=4, summary=s if tok_s is not None else {},
                                           **extra)

    good = run(0, RunStatus.DONE, 100.0)
    better = run(1, RunStatus.DONE, 120.0)
    crashed = run(2, RunStatus.FAILED, 900.0, reason="router #0 killed by signal 9 (SIGKILL)",
                  summary={"failures": 36, "successes": 2, "ttft_s": {"p99": 0.001}})
    cancelled = run(3, RunStatus.CANCELLED, None, progress={"done": 5, "failed": 0})
    empty = run(4, RunStatus.DONE, 0.0, summary={"successes": 0, "failures": 10, "ttft_s": {}})
    ids = [good.pk, better.pk, crashed.pk, cancelled.pk, empty.pk]
    body = viewer_api.get(f"/api/runs/compare/?ids={','.join(map(str, ids))}").json()
    # equal TTFT and TPOT mean: a tie, no best named for them; nor for what no run recorded
    assert body["best"] == {**{key: None for key, _ in BEST_METRICS}, "output_throughput_tok_s": better.pk,
                            "tok_s_per_gpu": better.pk}
    assert body["ties"] == {key: [good.pk, better.pk] for key in ("ttft_ms.mean", "ttft_ms.p50", "ttft_ms.p90",
                                                                   "ttft_ms.p99", "tpot_ms.mean")}
    assert body["excluded"] == [
        {"id": crashed.pk, "reason": "it failed (router #0 killed by signal 9 (SIGKILL))"},
        {"id": cancelled.pk, "reason": "it was cancelled"},
        {"id": empty.pk, "reason": "none of its 10 requests succeeded"}]
    by_id = {r["id"]: r for r in body["runs"]}
    assert [by_id[i]["rankable"] for i in ids] == [True, True, False, False, False]
    assert by_id[crashed.pk]["refusal"] == f"run #{crashed.pk} is not ranked: it failed (router #0 killed by " \
                                           "signal 9 (SIGKILL))"
    assert by_id[crashed.pk]["refusal"] in body["notes"]
    fields = {f["key"]: f["values"] for f in body["fields"]}
    assert fields["output_throughput_tok_s"] == [100.0, 120.0, None, None, None]
    assert fields["ttft_ms.p99"] == [200.0, 200.0, None, None, None]
    assert fields["failures"] == [0, 0, 36, None, 10]  # failures stay visible
    assert by_id[crashed.pk]["metrics"]["output_throughput_tok_s"] == 900.0  # what was recorded, unranked


def _llamacpp_deployment():
    from deployments.models import Deployment, Node, Recipe

    node, _ = Node.objects.get_or_create(name="local", defaults={"hostname": "localhost", "cpu_count": 2})
    spec = {"served_model_name": "tiny", "startup_timeout_s": 5, "roles": {"single": {"cpus": "0-1", "port": 8080}}}
    recipe = Recipe.objects.create(name="local-llamacpp", engine="llamacpp", topology="single", node=node, spec=spec)
    return Deployment.objects.create(recipe=recipe, recipe_version=1, spec_snapshot=spec, node=node,
                                     status=DeploymentStatus.STARTING)


def test_it_refuses_an_api_the_deployments_engine_does_not_serve(operator_api, deployment,
                                                                   django_capture_on_commit_callbacks) -> None:
    llama = _llamacpp_deployment()
    grid = {"concurrency": [1], "lengths": "64:16", "requests": 4}
    refused = operator_api.post("/api/sweeps/", {"deployment": llama.pk, "grid": {**grid, "api": "sglang-generate"}},
                                format="json")
    assert refused.status_code == 400
    assert refused.json() == {"grid.api": ["sglang-generate is not served by this deployment's engine (llamacpp); "
                                           "it serves openai-completions, openai-chat"]}
    assert not BenchmarkSweep.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        chat = operator_api.post("/api/sweeps/", {"deployment": llama.pk, "grid": {**grid, "api": "openai-chat"}},
                                 format="json")
        assert chat.status_code == 201 and chat.json()["grid"]["api"] == "openai-chat"
        operator_api.post(f"/api/sweeps/{chat.json()['id']}/cancel/")
        default = operator_api.post("/api/sweeps/", {"deployment": llama.pk, "grid": grid}, format="json")
        assert default.status_code == 201 and default.json()["grid"]["api"] == "openai-completions"
        assert default.json()["num_gpus"] == 0   # CPU-only: a known zero, not an unknown count
        # the sim speaks SGLang's API: /generate is fine there
        sim = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {**grid, "api": "sglang-generate"}},
                                format="json")
        assert sim.status_code == 201 and sim.json()["grid"]["api"] == "sglang-generate"


def test_it_refuses_unknown_top_level_fields_with_every_other_error(operator_api, deployment) -> None:
    grid = {"concurrency": [1], "lengths": "64:16", "requests": 4}
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": grid, "extra": 2},
                                 format="json")
    assert response.status_code == 400
    assert response.json() == {"extra": ["unknown field 'extra'; allowed: deployment, grid, name"]}
    # together with the grid's errors, judged for the deployment's engine
    llama = _llamacpp_deployment()
    response = operator_api.post("/api/sweeps/", {"deployment": llama.pk, "grid": {**grid, "api": "sglang-generate",
                                                                                   "concurrency": [0]},
                                                  "priority": "high", "name": "x"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "priority": ["unknown field 'priority'; allowed: deployment, grid, name"],
        "grid.concurrency.0": ["must be an integer 1..4096, got 0"],
        "grid.api": ["sglang-generate is not served by this deployment's engine (llamacpp); it serves "
                     "openai-completions, openai-chat"]}
    assert not BenchmarkSweep.objects.exists()


def _compare_run(sweep: BenchmarkSweep, ordinal: int, status: str, *, num_gpus: int | None = 4,
                 spec: dict | None = None) -> BenchmarkRun:
    summary = {"requests": 4, "successes": 4, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 463.7,
               "ttft_s": {"mean": 0.02, "p50": 0.02, "p90": 0.03, "p99": 0.031}, "tpot_s": {"mean": 0.002}}
    return BenchmarkRun.objects.create(
        sweep=sweep, ordinal=ordinal, status=status, concurrency=1, input_len=64, output_len=16, num_gpus=num_gpus,
        summary=summary if status == RunStatus.DONE else {}, snapshot={"engine": "llamacpp", "spec": spec or {}},
        reason="" if status == RunStatus.DONE else "cancelled on request")


def test_it_names_the_only_rankable_run_best_and_says_so(viewer_api, deployment) -> None:
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.CANCELLED)
    done = _compare_run(sweep, 0, RunStatus.DONE)
    cancelled = _compare_run(sweep, 1, RunStatus.CANCELLED)
    body = viewer_api.get(f"/api/runs/compare/?ids={done.pk},{cancelled.pk}").json()
    recorded = ("output_throughput_tok_s", "tok_s_per_gpu", "ttft_ms.mean", "ttft_ms.p50", "ttft_ms.p90",
                "ttft_ms.p99", "tpot_ms.mean")
    assert body["best"] == {key: done.pk if key in recorded else None for key, _ in BEST_METRICS}
    assert body["excluded"] == [{"id": cancelled.pk, "reason": "it was cancelled (cancelled on request)"}]
    assert body["notes"][:2] == [
        f"run #{cancelled.pk} is not ranked: it was cancelled (cancelled on request)",
        f"run #{done.pk} is the only rankable run: it is named best with no other run to rank it against"]
    # every metric without a best says why
    assert "no rankable run has a goodput (a run has one only when it was measured against an SLO); no best run " \
           "is named for it" in body["notes"]
    assert "no rankable run has a value for ITL p99; no best run is named for it" in body["notes"]
    # a metric no rankable run has is named null, with the reason
    no_gpus = _compare_run(sweep, 2, RunStatus.DONE, num_gpus=None)
    body = viewer_api.get(f"/api/runs/compare/?ids={no_gpus.pk},{cancelled.pk}").json()
    assert body["best"] == {key: no_gpus.pk if key in recorded and key != "tok_s_per_gpu" else None
                            for key, _ in BEST_METRICS}
    assert "no rankable run has a value for output throughput per GPU; no best run is named for it" in body["notes"]
    # nothing rankable: nothing named, and why
    also_cancelled = _compare_run(sweep, 3, RunStatus.CANCELLED)
    body = viewer_api.get(f"/api/runs/compare/?ids={cancelled.pk},{also_cancelled.pk}").json()
    assert set(body["best"].values()) == {None}
    assert body["notes"][-1] == "no run is rankable; no best run is named"


def test_it_returns_the_compared_roles_and_env_as_objects(viewer_api, deployment) -> None:
    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.DONE)
    roles = {"single": {"cpus": "0-1", "port": 8080, "flags": {"n_ctx": 512}}}
    a = _compare_run(sweep, 0, RunStatus.DONE, spec={"roles": roles, "env": {"OMP_NUM_THREADS": "2"}})
    b = _compare_run(sweep, 1, RunStatus.DONE, spec={"roles": roles})
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}").json()
    configs = [r["config"] for r in body["runs"]]
    assert [c["roles"] for c in configs] == [roles, roles]
    assert [c["env"] for c in configs] == [{"OMP_NUM_THREADS": "2"}, None]
    assert {"field": "env", "values": [{"OMP_NUM_THREADS": "2"}, None]} in body["config_differs"]
    assert "roles" not in {d["field"] for d in body["config_differs"]}


@pytest.mark.django_db
@pytest.mark.parametrize("body,kind", [("[]", "an array"), ("null", "null"), ('"x"', "a string"), ("5", "a number"),
                                       ('[{"deployment": 2}]', "an array")])
def test_a_sweep_body_that_is_not_an_object_is_a_400_naming_what_it_got(operator_api, body, kind):
    r = operator_api.post("/api/sweeps/", body, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json() == {"non_field_errors": [
        f"expected a JSON object with deployment, grid and optionally name; got {kind}"]}
