"""Grid and body input as a new user met it: a request rate past what the load generator
can send is a 400 naming the bound (the API and ``manage.py sweep`` alike), and a huge number reads
as such in the analysis; a refusal quotes the value in JSON spelling (``got the boolean true``,
never ``True``) and a JSON boolean is only ``true`` or ``false``; ``manage.py sweep`` of a recipe
whose latest deployment ended says so and how to go on, as the API's 409 does."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks.analysis import LatencyStats, SweepPoint, ceiling_analyse
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import MAX_REQUEST_RATE, json_shown
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus
from deployments.models import Node, Recipe

DATA = Path(__file__).parent / "data"
VLLM = (DATA / "vllm-bench-serve.json").read_text()


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def starting(db):
    """A deployment still starting: a sweep of it is created and waits (nothing runs here)."""
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="first-use-sim")


def _sweep_post(client, deployment, **grid):
    return client.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {"lengths": "8:8", **grid}}, format="json")


# --- request rates: bounded, and large numbers written sanely --------------------------------


def test_it_refuses_a_request_rate_past_what_one_load_generator_can_send(
        operator_api, starting, django_capture_on_commit_callbacks) -> None:
    assert MAX_REQUEST_RATE == 10_000
    response = _sweep_post(operator_api, starting, request_rates=[1e308], requests=5)
    assert response.status_code == 400
    assert response.json() == {"grid.request_rates.0": [
        "must be at most 10,000 requests/s (what one load-generator process can send on schedule), got 1e+308"]}
    assert _sweep_post(operator_api, starting, request_rates=[10_000.5], requests=5).status_code == 400
    assert not BenchmarkSweep.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        at_bound = _sweep_post(operator_api, starting, request_rates=[10_000], requests=5)
    assert at_bound.status_code == 201, at_bound.json()


def test_it_bounds_the_requests_of_a_rate_point_limited_by_time_alone(operator_api, starting) -> None:
    # 200 req/s for 1000 s would draw and record about 200,000 requests: past the per-point bound.
    response = _sweep_post(operator_api, starting, request_rates=[2, 200], duration_s=1000)
    assert response.status_code == 400
    assert response.json() == {"grid.request_rates.1": [
        "200 req/s for 1000 s is about 200,000 requests; at most 100,000 per point: lower the rate or duration_s, "
        "or give requests"]}


def test_the_sweep_command_applies_the_same_rate_bound(starting) -> None:
    with pytest.raises(CommandError) as exc:
        call_command("sweep", str(starting.pk), "--request-rates", "2,1e308", "--requests", "5", "--lengths", "8:8",
                     stdout=io.StringIO())
    assert str(exc.value).split("\n") == [
        "the sweep grid is refused:",
        "  --request-rates (grid.request_rates.1): must be at most 10,000 requests/s (what one load-generator "
        "process can send on schedule), got 1e+308"]
    assert exc.value.returncode == 2
    assert not starting.sweeps.exists()


def _open_point(rate: float, tok_s: float, tpot_ms: float) -> SweepPoint:
    return SweepPoint(concurrency=None, request_rate=rate, output_throughput_tok_s=tok_s,
                      tpot_ms=LatencyStats(mean=tpot_ms), ttft_ms=LatencyStats(mean=50.0), input_len=8, output_len=8,
                      completed=5, failed=0)


def test_the_analysis_writes_huge_numbers_in_a_few_characters() -> None:
    # A sweep stored before the bound (a first run's 1e308 req/s), and factors between rates far apart.
    assert _open_point(1e308, 40.0, 5.0).label == "1e+308 req/s"
    report = ceiling_analyse([_open_point(1e-9, 0.5, 5.0), _open_point(5e3, 40.0, 6.0),
                              _open_point(1e308, 3e7, 7.0)], num_gpus=1, topology="single")
    text = " ".join(report.findings + report.excluded + [p.label for p in report.points])
    assert "1e+308 req/s" in text and "3e+07 tok/s" in text
    assert not re.search(r"\d{10}", text), text
    assert max(len(word) for word in text.split()) < 40

# --- JSON spelling, and JSON booleans that are booleans ----------------------------------------


def test_it_quotes_refused_values_in_json_spelling(operator_api, starting) -> None:
    response = _sweep_post(operator_api, starting, concurrency=[1.5, True, None], warmup=None, seed="7",
                           requests=False, slo={"ttft_s": True}, api=None)
    assert response.status_code == 400
    body = response.json()
    assert body["grid.concurrency.0"] == ["must be an integer 1..4096, got 1.5"]
    assert body["grid.concurrency.1"] == ["must be an integer 1..4096, got the boolean true"]
    assert body["grid.concurrency.2"] == ["must be an integer 1..4096, got null"]
    assert body["grid.warmup"] == ["must be an integer 0..10000, got null"]
    assert body["grid.seed"] == ['must be an integer 0..2^31-1, got the string "7"']
    assert body["grid.requests"] == ["must be an integer 1..100000, got the boolean false"]
    assert body["grid.slo.ttft_s"] == ["must be seconds > 0, got the boolean true"]
    text = json.dumps(body)
    assert not re.search(r"\b(True|False|None)\b", text), text
    lengths = _sweep_post(operator_api, starting, concurrency=[1], lengths=[[8, 8, 8], {"in": 8}]).json()
    assert lengths == {"grid.lengths.0": ["must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, "
                                          "got the list [8, 8, 8]"],
                       "grid.lengths.1": ["must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, "
                                          'got the object {"in": 8}']}


def test_json_shown_writes_values_as_json_does() -> None:
    assert [json_shown(v) for v in (True, False, None, 3, -1.0, 1e308, "x", [1, None], {"a": 1}, 10**50)] == [
        "the boolean true", "the boolean false", "null", "3", "-1", "1e+308", 'the string "x"',
        "the list [1, null]", 'the object {"a": 1}', "1.00e+50"]


def test_a_grid_list_given_as_another_type_quotes_it(operator_api, starting) -> None:
    body = _sweep_post(operator_api, starting, concurrency=1).json()
    assert body == {"grid.concurrency": ["must be a list of integers, got the number 1"]}
    body = _sweep_post(operator_api, starting, concurrency=[1], request_rates="2").json()
    assert body == {"grid.request_rates": ['must be a list of requests/s > 0, got the string "2"']}
    body = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {"concurrency": [1], "lengths": 8}},
                             format="json").json()
    assert body == {"grid.lengths": ["give at least one [input_len, output_len] pair, e.g. [[256, 256]], "
                                     "got the number 8"]}


def test_a_float_is_quoted_as_json_stringify_writes_it(operator_api, starting) -> None:
    # Where Python writes an exponent JavaScript does not (1e-05, 1e+16) or pads it (1e-07), a refusal
    # quotes the number as JSON.stringify does; 1e+300 is how both write 1e300.
    for value, shown in ((1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (1e-5, "0.00001"), (1e300, "1e+300")):
        body = _sweep_post(operator_api, starting, concurrency=[1], requests=1, duration_s=value).json()
        assert body["grid.duration_s"][0].endswith(f", got {shown}"), body
    body = _sweep_post(operator_api, starting, concurrency=[1], request_rates=[1e16], duration_s=10).json()
    assert body["grid.request_rates.0"][0].endswith("got 10000000000000000"), body
    body = _sweep_post(operator_api, starting, concurrency=[1.5e-7]).json()
    assert body["grid.concurrency.0"] == ["must be an integer 1..4096, got 1.5e-7"]


def test_an_import_takes_allow_duplicate_only_as_a_json_boolean(operator_api) -> None:
    assert operator_api.post("/api/runs/import/", {"text": VLLM}, format="json").status_code == 201
    for value, shown in (("yes", 'the string "yes"'), ("true", 'the string "true"'), (1, "the number 1"),
                         (0, "the number 0")):
        response = operator_api.post("/api/runs/import/", {"text": VLLM, "allow_duplicate": value}, format="json")
        assert response.status_code == 400, value
        assert response.json() == {"allow_duplicate": [f"must be true or false, got {shown}"]}
    assert operator_api.post("/api/runs/import/", {"text": VLLM, "allow_duplicate": False},
                             format="json").status_code == 409
    assert operator_api.post("/api/runs/import/", {"text": VLLM, "allow_duplicate": True},
                             format="json").status_code == 201
    # A multipart upload sends text: its "true" is read as DRF reads a form's boolean.
    upload = io.BytesIO(VLLM.encode())
    upload.name = "again.json"
    multipart = operator_api.post("/api/runs/import/", {"file": upload, "allow_duplicate": "true"},
                                  format="multipart")
    assert multipart.status_code == 201, multipart.json()
    assert BenchmarkRun.objects.count() == 3


# --- manage.py sweep of a recipe whose deployment ended ---------------------------------------


@pytest.mark.django_db
def test_the_sweep_command_says_a_recipes_latest_deployment_ended() -> None:
    failed = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.FAILED,
                                   recipe_name="local-sim-single")
    failed.reason = "single #0 exited with code 1 (ModuleNotFoundError: no module named x)\nlast log lines: ..."
    failed.save(update_fields=["reason"])
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "local-sim-single", "--concurrency", "1", stdout=io.StringIO())
    assert str(exc.value) == (
        f"recipe 'local-sim-single': its latest deployment #{failed.pk} is failed (single #0 exited with code 1 "
        "(ModuleNotFoundError: no module named x)); deploy it again and sweep the new deployment")
    # Refused input, each on one line: argparse's exit status for a bad option, 2.
    assert exc.value.returncode == 2
    # By its id, the service's own refusal, as the API's 409 says it.
    with pytest.raises(CommandError, match=rf"deployment #{failed.pk} is failed; deploy its recipe again and sweep "
                                           "the new deployment") as exc:
        call_command("sweep", str(failed.pk), "--concurrency", "1", stdout=io.StringIO())
    assert exc.value.returncode == 2 and "\n" not in str(exc.value)
    Recipe.objects.create(name="never-deployed", engine="sim", topology="single", node=Node.objects.get(name="local"),
                          spec=failed.spec_snapshot)
    with pytest.raises(CommandError, match="^recipe 'never-deployed' has no deployment; deploy it first to sweep it$") \
            as exc:
        call_command("sweep", "never-deployed", stdout=io.StringIO())
    assert exc.value.returncode == 2
    with pytest.raises(CommandError, match=r"^no deployment 'nothing-here' \(give an id, or the name of a recipe") \
            as exc:
        call_command("sweep", "nothing-here", stdout=io.StringIO())
    assert exc.value.returncode == 2


@pytest.mark.django_db
def test_a_key_given_twice_is_named_beside_every_other_problem_of_a_sweep_or_import_body(operator_api):
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    dep = deployment.pk

    def post(url, text):
        response = operator_api.post(url, text, content_type="application/json")
        assert response.status_code == 400, response.content
        return response.json()

    assert post("/api/sweeps/", '{"deployment": %d, "grid": {"concurrency": [1], "concurrency": [2], '
                                '"lengths": "64:64"}, "name": 5, "foo": 1}' % dep) == {
        "name": ["must be a string, got the number 5"],
        "foo": ["unknown field 'foo'; allowed: deployment, grid, name"],
        "grid.concurrency": ["is given 2 times ([1], [2]): give it once"]}
    assert post("/api/sweeps/", '{"deployment": %d, "grid": {"concurrency": [1], "lengths": "64:64", '
                                '"warmup": 1, "warmup": 2, "duration_s": 0}}' % dep) == {
        "grid.warmup": ["is given 2 times (1, 2): give it once"],
        "grid.duration_s": ["must be at least 1 s and at most 86400 s (24 h), got 0"]}
    assert post("/api/sweeps/", '{"deployment": %d, "deployment": 3, "grid": {"concurrency": [0], '
                                '"lengths": "64:64"}}' % dep) == {
        "deployment": ["is given 2 times (%d, 3): give it once" % dep],
        "grid.concurrency.0": ["must be an integer 1..4096, got 0"]}
    assert post("/api/runs/import/", '{"text": 5, "allow_duplicate": "yes", "allow_duplicate": 1}') == {
        "text": ["must be a string, got the number 5"],
        "allow_duplicate": ['is given 2 times ("yes", 1): give it once']}
