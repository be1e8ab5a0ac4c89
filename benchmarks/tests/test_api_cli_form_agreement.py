"""The API, the sweep form and ``manage.py sweep`` agree: the run list is newest first as the runs
page is; a change that rounds to zero is 0, never -0, in the comparison's CSV and JSON; a grid
without lengths gets the same 256:256 everywhere (and the schema says so); the bound of a point's
time limit is checked and worded alike; the command's refusals name its options; and the sweep
form takes the API's name, api, warmup and seed with their defaults, bounds and refusals."""
from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils.html import escape
from django.utils import timezone

from benchmarks.choices import RunSource, RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import DEFAULT_LENGTHS, DURATION_RULE
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.csvsafe import csv_cell
from deployments.choices import DeploymentStatus
from deployments.models import Recipe

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "requests": 4}


@pytest.fixture
def starting():
    """A deployment still starting: a sweep of it is created and waits (nothing runs here)."""
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="agree-sim")


def _summary(tok_s: float) -> dict:
    dist = {"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": 0.2}
    return {"requests": 100, "successes": 100, "failures": 0, "duration_s": 10.0,
            "output_throughput_tok_s": tok_s, "request_throughput_req_s": 10.0,
            "ttft_s": dist, "tpot_s": dist, "itl_s": dist, "e2e_s": dist}


def _measured(sweep: BenchmarkSweep, ordinal: int, *, tok_s: float = 500.0) -> BenchmarkRun:
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=4,
                                       input_len=128, output_len=64, num_gpus=2, summary=_summary(tok_s))


def _imported() -> BenchmarkRun:
    return BenchmarkRun.objects.create(source=RunSource.IMPORTED, status=RunStatus.DONE, concurrency=4,
                                       input_len=128, output_len=64, summary=_summary(400.0),
                                       original_text="{}", original_filename="bench.json")


# --- the run list: newest first, ties by id descending -------------------------------------------


def test_it_lists_runs_newest_first_with_imported_runs_in_their_place(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="order", status=SweepStatus.DONE)
    oldest, newest = _measured(sweep, 0), _measured(sweep, 1)
    middle = _imported()
    tie_a, tie_b = _measured(sweep, 2), _imported()
    now = timezone.now()
    for run, age_s in ((oldest, 400), (middle, 300), (tie_a, 200), (tie_b, 200), (newest, 100)):
        BenchmarkRun.objects.filter(pk=run.pk).update(created_at=now - dt.timedelta(seconds=age_s))

    listed = [r["id"] for r in viewer_api.get("/api/runs/").json()["results"]]
    assert listed == [newest.pk, tie_b.pk, tie_a.pk, middle.pk, oldest.pk]
    # a sweep's runs alone keep the same order
    assert [r["id"] for r in viewer_api.get(f"/api/runs/?sweep={sweep.pk}").json()["results"]] == [
        newest.pk, tie_a.pk, oldest.pk]
    # the explicit orders: ties by id in the order's own direction
    assert [r["id"] for r in viewer_api.get("/api/runs/?order=-created_at").json()["results"]] == listed
    assert [r["id"] for r in viewer_api.get("/api/runs/?order=created_at").json()["results"]] == [
        oldest.pk, middle.pk, tie_a.pk, tie_b.pk, newest.pk]

    schema = viewer_api.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/runs/"]["get"]
    assert "Newest first (`-created_at`, ties by id descending)" in operation["description"]
    [order] = [p for p in operation["parameters"] if p["name"] == "order"]
    assert "default -created_at (newest first" in order["description"]


# --- no negative zero in the comparison ----------------------------------------------------------


def test_a_change_that_rounds_to_zero_is_zero_in_the_compare_csv_and_json(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="zero", status=SweepStatus.DONE)
    base = _measured(sweep, 0, tok_s=500.0)
    hair_below = _measured(sweep, 1, tok_s=500.0 - 1e-9)   # -2e-10 % rounds to -0.0

    body = viewer_api.get(f"/api/runs/compare/?ids={base.pk},{hair_below.pk}").json()
    fields = {f["key"]: f for f in body["fields"]}
    delta = fields["output_throughput_tok_s"]["deltas_pct"][1]
    assert delta == 0.0 and math.copysign(1.0, delta) == 1.0

    response = viewer_api.get(f"/api/runs/compare/?ids={base.pk},{hair_below.pk}&format=csv")
    text = response.content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[1]["output_throughput_tok_s_delta_pct"] == "0.0"
    assert all(not cell.startswith("-0") or cell.startswith("-0.") and float(cell) != 0
               for row in rows for cell in row.values())
    assert ",-0.0," not in text and not text.rstrip("\n").endswith(",-0.0")
    # every CSV cell of every export goes through csv_cell
    assert csv_cell(-0.0) == 0.0 and math.copysign(1.0, csv_cell(-0.0)) == 1.0
    assert csv_cell(-1.5) == -1.5 and csv_cell(0) == 0


# --- one default for lengths ---------------------------------------------------------------------


def test_a_grid_without_lengths_gets_256_256_from_the_api_the_form_and_the_command(
        operator_api, operator, starting, django_capture_on_commit_callbacks) -> None:
    assert DEFAULT_LENGTHS == "256:256"
    with django_capture_on_commit_callbacks(execute=False):
        created = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": GRID}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["grid"]["lengths"] == [[256, 256]]
    BenchmarkSweep.objects.filter(pk=created.json()["id"]).update(status=SweepStatus.CANCELLED)

    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", "agree-sim", "--concurrency", "1", "--requests", "4", "--user", operator.username,
                     stdout=io.StringIO())
    cli = BenchmarkSweep.objects.exclude(pk=created.json()["id"]).get()
    assert cli.grid["lengths"] == [[256, 256]]
    cli.status = SweepStatus.CANCELLED
    cli.save(update_fields=["status"])

    page = logged_in_client(operator).get(reverse("benchmarks:sweep-create") + f"?deployment={starting.pk}")
    assert 'value="256:256"' in page.content.decode()
    # a body that gives lengths as null or [] still has none: refused, not defaulted
    refused = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {**GRID, "lengths": []}},
                                format="json")
    assert refused.status_code == 400
    assert refused.json()["grid.lengths"] == ["give at least one [input_len, output_len] pair, e.g. [[256, 256]]"]

    schema = operator_api.get("/api/schema/?format=json").json()
    grid = schema["components"]["schemas"]["SweepCreateRequest"]["properties"]["grid"]
    assert grid["properties"]["lengths"]["default"] == "256:256"
    assert grid["properties"]["duration_s"]["minimum"] == 1 and grid["properties"]["duration_s"]["maximum"] == 86400


# --- one bound for a point's time limit, said one way -------------------------------------------


@pytest.mark.parametrize("typed,shown", [("0", "0"), ("0.5", "0.5"), ("86401", "86401"), ("-3", "-3")])
def test_the_duration_bound_is_checked_and_worded_alike_everywhere(
        operator_api, operator, starting, typed, shown) -> None:
    assert DURATION_RULE == "at least 1 s and at most 86400 s (24 h)"
    value = float(typed) if "." in typed else int(typed)
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {**GRID, "duration_s": value}},
                            format="json")
    assert api.status_code == 400
    assert api.json() == {"grid.duration_s": [f"must be at least 1 s and at most 86400 s (24 h), got {shown}"]}

    with pytest.raises(CommandError) as exc:
        call_command("sweep", "agree-sim", "--concurrency", "1", "--duration", typed, stdout=io.StringIO())
    assert str(exc.value).split("\n") == [
        "the sweep grid is refused:",
        f"  --duration (grid.duration_s): must be at least 1 s and at most 86400 s (24 h), got {shown}"]

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "duration": typed})
    assert form.status_code == 400
    assert form.context["errors"]["duration"] == [f"must be at least 1 s and at most 86400 s (24 h), got {shown}"]
    assert not BenchmarkSweep.objects.exists()


def test_the_duration_bounds_themselves_are_taken(operator_api, starting, django_capture_on_commit_callbacks) -> None:
    for value in (1, 86400):
        with django_capture_on_commit_callbacks(execute=False):
            created = operator_api.post("/api/sweeps/", {"deployment": starting.pk,
                                                         "grid": {**GRID, "duration_s": value}}, format="json")
        assert created.status_code == 201, created.json()
        assert created.json()["grid"]["duration_s"] == float(value)
        BenchmarkSweep.objects.filter(pk=created.json()["id"]).update(status=SweepStatus.CANCELLED)


# --- the command's refusals name its options ----------------------------------------------------


def _refusal(*args: str) -> list[str]:
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "agree-sim", "--lengths", "8:8", *args, stdout=io.StringIO())
    lines = str(exc.value).split("\n")
    assert lines[0] == "the sweep grid is refused:", lines
    assert exc.value.returncode == 2
    return lines[1:]


def test_the_command_names_the_options_typed_not_the_api_fields(starting) -> None:
    assert _refusal("--request-rates", "2") == [
        "  --requests (grid.requests): open-loop points (--request-rates) need --requests or --duration"]
    assert _refusal("--requests", "4", "--requests-per-concurrency", "2") == [
        "  --requests (grid.requests): give --requests or --requests-per-concurrency, not both"]
    assert _refusal("--concurrency", "", "--request-rates", "0.00001", "--requests", "5") == [
        "  --request-rates (grid.request_rates.0): 5 requests at 0.00001 req/s take about 500,000 s; at most "
        "86400 s (24 h) per point: raise the rate or give --duration"]
    assert _refusal("--concurrency", "", "--request-rates", "10000", "--duration", "86400") == [
        "  --request-rates (grid.request_rates.0): 10000 req/s for 86400 s is about 864,000,000 requests; at most "
        "100,000 per point: lower the rate or --duration, or give --requests"]
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "agree-sim", "--concurrency", "1", "--lengths", "8-8", stdout=io.StringIO())
    assert str(exc.value).split("\n")[1] == (
        '''  --lengths (grid.lengths.0): must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, '''
        '''got the string "8-8"''')
    assert not starting.sweeps.exists()


def test_an_order_the_runs_list_does_not_take_is_quoted(viewer_api) -> None:
    answer = viewer_api.get("/api/runs/?order=bogus")
    assert answer.status_code == 400
    [said] = answer.json()["order"]
    assert said.startswith("must be one of ") and said.endswith("; got 'bogus'")


# --- the sweep form has the API's name, api, warmup and seed -------------------------------------


def test_the_form_shows_the_apis_defaults_for_name_api_warmup_and_seed(operator, starting) -> None:
    html = logged_in_client(operator).get(
        reverse("benchmarks:sweep-create") + f"?deployment={starting.pk}").content.decode()
    assert '<input type="text" autocomplete="off" maxlength="200" id="id_name" name="name" value="">' in html
    assert '<details class="advanced">' in html   # folded: nothing in it is refused
    assert 'id="id_warmup" name="warmup" value="0"' in html and "0 to 10000, default 0" in html
    assert 'id="id_seed" name="seed" value="0"' in html and "0 to 2147483647 (2^31-1), default 0" in html
    # the sim engine serves all three APIs; its default, sglang-generate, is chosen
    options = re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', html)
    assert options == [("sglang-generate", " selected", "sglang-generate (/generate)"),
                       ("openai-completions", "", "openai-completions (/v1/completions)"),
                       ("openai-chat", "", "openai-chat (/v1/chat/completions)")]


def test_a_form_sweep_gets_the_name_and_grid_the_api_gives_for_the_same_values(
        operator_api, operator, starting, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, "name": "  warm chat  ", "concurrency": "1,8", "lengths": "64:64",
            "requests": "8", "api": "openai-chat", "warmup": "2", "seed": "7"})
    assert form.status_code == 302
    from_form = BenchmarkSweep.objects.get()
    assert from_form.name == "warm chat"   # trimmed, as the API trims it
    assert (from_form.grid["api"], from_form.grid["warmup"], from_form.grid["seed"]) == ("openai-chat", 2, 7)
    from_form.status = SweepStatus.CANCELLED
    from_form.save(update_fields=["status"])

    with django_capture_on_commit_callbacks(execute=False):
        api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "name": "  warm chat  ", "grid": {
            "concurrency": [1, 8], "lengths": "64:64", "requests": 8, "api": "openai-chat", "warmup": 2,
            "seed": 7}}, format="json")
    assert api.status_code == 201, api.json()
    assert api.json()["name"] == from_form.name
    assert api.json()["grid"] == from_form.grid


@pytest.mark.parametrize("typed", [" 2 ", "2", "+2", "02", "\t2\n"])
def test_the_form_reads_a_warmup_count_with_spaces_or_a_sign_as_the_api_takes_2(
        operator_api, operator, starting, django_capture_on_commit_callbacks, typed) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "requests": "4", "warmup": typed})
    assert form.status_code == 302, form.content.decode()
    from_form = BenchmarkSweep.objects.get()
    assert from_form.grid["warmup"] == 2 and type(from_form.grid["warmup"]) is int
    from_form.status = SweepStatus.CANCELLED
    from_form.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=False):
        api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {
            "concurrency": [1], "lengths": "8:8", "requests": 4, "warmup": 2}}, format="json")
    assert api.status_code == 201, api.json()
    assert api.json()["grid"] == from_form.grid


def test_the_api_refuses_a_warmup_count_written_as_text_that_the_form_would_read(operator_api, starting) -> None:
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {**GRID, "warmup": " 2 "}},
                            format="json")
    assert api.status_code == 400
    assert api.json() == {"grid.warmup": ['must be an integer 0..10000, got the string " 2 "']}
    assert not BenchmarkSweep.objects.exists()


def test_a_form_sweep_left_at_the_defaults_gets_the_apis_defaults(
        operator_api, operator, starting, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
            "deployment": starting.pk, "name": "", "concurrency": "1", "lengths": "8:8", "requests": "4",
            "api": "sglang-generate", "warmup": "0", "seed": "0"})
    assert form.status_code == 302
    sweep = BenchmarkSweep.objects.get()
    assert sweep.name == "agree-sim c=1 8/8"   # a blank name is made up as the API makes it up
    assert (sweep.grid["api"], sweep.grid["warmup"], sweep.grid["seed"]) == ("sglang-generate", 0, 0)


@pytest.mark.parametrize("field,typed,body", [
    ("warmup", "-1", {"grid": {**GRID, "warmup": -1}}),
    ("warmup", "10001", {"grid": {**GRID, "warmup": 10001}}),
    ("warmup", "abc", {"grid": {**GRID, "warmup": "abc"}}),
    ("warmup", "2.5", {"grid": {**GRID, "warmup": 2.5}}),
    ("warmup", "2.0", {"grid": {**GRID, "warmup": 2.0}}),       # told to be written without its point
    ("warmup", "2e0", {"grid": {**GRID, "warmup": 2.0}}),
    ("warmup", "99999999999999999999", {"grid": {**GRID, "warmup": 99999999999999999999}}),
    ("warmup", "2 3", {"grid": {**GRID, "warmup": "2 3"}}),
    ("seed", "2147483648", {"grid": {**GRID, "seed": 2147483648}}),
    ("seed", "1e3", {"grid": {**GRID, "seed": 1e3}}),
    ("api", "openai-responses", {"grid": {**GRID, "api": "openai-responses"}}),
    ("name", "n" * 201, {"grid": GRID, "name": "n" * 201}),
    ("name", "bad\x1b[31m", {"grid": GRID, "name": "bad\x1b[31m"}),
])
def test_the_form_refuses_what_the_api_refuses_in_its_words(operator_api, operator, starting, field, typed,
                                                            body) -> None:
    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, **body}, format="json")
    assert api.status_code == 400
    [(key, said)] = api.json().items()
    assert key == (field if field == "name" else f"grid.{field}")

    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "requests": "4", field: typed})
    assert form.status_code == 400
    html = form.content.decode()
    shown = re.search(rf'<div class="field has-error">\s*<label for="id_{field}">.*?<ul class="errorlist">(.*?)</ul>',
                      html, re.S)
    assert shown is not None, html
    assert re.findall(r"<li>(.*?)</li>", shown.group(1)) == [escape(m) for m in said]
    if field != "name":
        assert '<details class="advanced" open>' in html   # a refused advanced field is in view
    assert not BenchmarkSweep.objects.exists()


def test_the_form_offers_only_the_apis_the_engine_serves_and_refuses_another_as_the_api_does(
        operator_api, operator, starting) -> None:
    Recipe.objects.filter(pk=starting.recipe_id).update(engine="llamacpp")
    client = logged_in_client(operator)
    html = client.get(reverse("benchmarks:sweep-create") + f"?deployment={starting.pk}").content.decode()
    assert re.findall(r'<option value="([^"]*)"( selected)?>', html) == [
        ("openai-completions", " selected"), ("openai-chat", "")]
    assert "those this deployment's engine (llamacpp) serves; default openai-completions" in html

    api = operator_api.post("/api/sweeps/", {"deployment": starting.pk, "grid": {**GRID, "api": "sglang-generate"}},
                            format="json")
    said = ["sglang-generate is not served by this deployment's engine (llamacpp); it serves "
            "openai-completions, openai-chat"]
    assert api.status_code == 400 and api.json() == {"grid.api": said}
    form = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": starting.pk, "concurrency": "1", "lengths": "8:8", "requests": "4", "api": "sglang-generate"})
    assert form.status_code == 400
    assert escape(said[0]) in form.content.decode()
    assert not BenchmarkSweep.objects.exists()


def test_the_form_posted_for_no_deployment_keeps_the_new_fields_and_judges_them(operator, starting) -> None:
    form = logged_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": "999", "name": "n" * 201, "concurrency": "1", "lengths": "8:8", "requests": "4",
        "warmup": "3", "seed": "-1"})
    assert form.status_code == 400
    html = form.content.decode()
    assert "no deployment with id 999" in html
    assert "Use at most 200 characters; got 201." in html
    assert 'id="id_warmup" name="warmup" value="3"' in html
    assert "must be an integer 0..2^31-1, got -1" in html
    # no engine known: every API offered, the engine's default chosen
    assert re.findall(r'<option value="([^"]*)"( selected)?>', html) == [
        ("", " selected"), ("openai-completions", ""), ("openai-chat", ""), ("sglang-generate", "")]
    assert not BenchmarkSweep.objects.exists()
