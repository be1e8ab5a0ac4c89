"""A refused value is quoted as it was sent: ``manage.py sweep`` quotes a number as the user typed
it (``got 10001``, not ``got 10001.0``) and names a list item that is no number beside every other
problem of the grid; a JSON list or object is quoted with its contents, numbers bare."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.sweeps import json_shown
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus


@pytest.fixture
def starting(db):
    """A deployment still starting: a sweep of it is created and waits (nothing runs here)."""
    return sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING,
                                 recipe_name="cli-typed")


def _refusal(*args: str) -> list[str]:
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-typed", "--lengths", "8:8", *args, stdout=io.StringIO())
    lines = str(exc.value).split("\n")
    assert lines[0] == "the sweep grid is refused:", lines
    assert exc.value.returncode == 2, lines  # refused input: argparse's status, one line per problem
    return lines[1:]


def test_it_quotes_a_number_typed_as_an_integer_as_typed(starting) -> None:
    assert _refusal("--request-rates", "10001", "--requests", "5") == [
        "  --request-rates (grid.request_rates.0): must be at most 10,000 requests/s (what one load-generator "
        "process can send on schedule), got 10001"]
    assert _refusal("--wait-ready", "100000") == [
        "  --wait-ready (grid.wait_ready_s): must be seconds 0..86400, got 100000"]
    assert _refusal("--requests-per-concurrency", "2000") == [
        "  --requests-per-concurrency (grid.requests_per_concurrency): must be a number in (0, 1000], got 2000"]
    assert _refusal("--duration", "0") == [
        "  --duration (grid.duration_s): must be at least 1 s and at most 86400 s (24 h), got 0"]
    # a rate typed with a point or an exponent is a float, quoted as JavaScript writes it (1e5: 100000)
    assert _refusal("--request-rates", "10001.5,1e5", "--requests", "5") == [
        "  --request-rates (grid.request_rates.0): must be at most 10,000 requests/s (what one load-generator "
        "process can send on schedule), got 10001.5",
        "  --request-rates (grid.request_rates.1): must be at most 10,000 requests/s (what one load-generator "
        "process can send on schedule), got 100000"]
    assert not starting.sweeps.exists()


def test_a_list_item_that_is_no_number_is_named_beside_every_other_problem(starting) -> None:
    assert _refusal("--concurrency", "1,x,8.5", "--request-rates", "2,fast", "--seed", "-1",
                    "--slo-ttft", "0") == [
        '  --concurrency (grid.concurrency.1): must be an integer 1..4096, got the string "x"',
        "  --concurrency (grid.concurrency.2): must be an integer 1..4096, got 8.5",
        '  --request-rates (grid.request_rates.1): must be a number of requests/s > 0, got the string "fast"',
        "  --requests (grid.requests): open-loop points (--request-rates) need --requests or --duration",
        "  --slo-ttft (grid.slo.ttft_s): must be seconds > 0, got 0",
        "  --seed (grid.seed): must be an integer 0..2^31-1, got -1"]
    assert not starting.sweeps.exists()
    # a number option that is no number at all is the grid's to refuse too, in the API's words
    with pytest.raises(CommandError) as exc:
        call_command("sweep", "cli-typed", "--wait-ready", "soon", stdout=io.StringIO())
    assert str(exc.value).split("\n")[1:] == [
        '  --wait-ready (grid.wait_ready_s): must be seconds 0..86400, got the string "soon"']


def test_the_numbers_a_user_types_are_stored_as_the_api_stores_them(starting, django_capture_on_commit_callbacks):
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=False):
        call_command("sweep", "cli-typed", "--concurrency", " 1, 4", "--request-rates", "2,4.5", "--requests", "8",
                     "--lengths", "16:8", "--slo-ttft", "1", "--wait-ready", "30", "--duration", "60", stdout=out)
    sweep = starting.sweeps.get()
    assert {k: sweep.grid[k] for k in ("concurrency", "request_rates", "slo", "wait_ready_s", "duration_s")} == {
        "concurrency": [1, 4], "request_rates": [2.0, 4.5], "slo": {"ttft_s": 1.0}, "wait_ready_s": 30.0,
        "duration_s": 60.0}
    assert out.getvalue().startswith(f"sweep #{sweep.pk} created: 4 points")


def test_a_refused_list_or_object_is_quoted_with_its_contents_and_numbers_bare() -> None:
    assert [json_shown(v) for v in (100000, -1.0, [8, 8, 8], {"in": 8}, [], {})] == [
        "100000", "-1", "the list [8, 8, 8]", 'the object {"in": 8}', "the list []", "the object {}"]
    assert json_shown(list(range(100))) == "the list [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, …"
