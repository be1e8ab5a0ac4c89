"""A sweep grid with several problems gets all of them in one answer: the per-sweep request cap is
judged whenever the loads, lengths and request counts are valid, whatever else is wrong (API and
:func:`benchmarks.sweeps.grid_validate`), and the HTML form names every bad item of a list field."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from benchmarks.models import BenchmarkSweep
from benchmarks.sweeps import MAX_REQUESTS_PER_SWEEP, grid_validate
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.errors import InvalidInput
from deployments.choices import DeploymentStatus

ELEVEN = list(range(1, 12))
SWEEP_CAP = f"the sweep would send 1,100,000 requests; at most {MAX_REQUESTS_PER_SWEEP:,} per sweep"


def errors_of(grid: dict) -> dict[str, list[str]]:
    with pytest.raises(InvalidInput) as exc:
        grid_validate(grid)
    return exc.value.errors


def test_it_reports_the_per_sweep_cap_next_to_unrelated_field_errors() -> None:
    errors = errors_of({"concurrency": ELEVEN, "lengths": "10:10", "requests": 100_000, "api": "bad", "warmup": -1})
    assert errors == {
        "grid.warmup": ["must be an integer 0..10000, got -1"],
        "grid.api": ["must be one of openai-completions, openai-chat, sglang-generate, got the string \"bad\""],
        "grid": [SWEEP_CAP],
    }
    # over the valid items of a list with bad ones, and next to a non-finite duration
    errors = errors_of({"concurrency": [*ELEVEN, 0], "lengths": ["10:10", "x"], "requests": 100_000, "seed": -1,
                        "duration_s": float("inf")})
    assert errors["grid"] == [SWEEP_CAP]
    assert {"grid.concurrency.11", "grid.lengths.1", "grid.seed", "grid.duration_s"} <= set(errors)


def test_it_judges_the_prompt_tokens_only_with_a_valid_warmup() -> None:
    tokens = ("point c=1 100000/10 needs 100,500,000 prompt tokens ((requests + warmup) x input_len); at most "
              "10,000,000 per point, so its prompts fit in the client's memory")
    errors = errors_of({"concurrency": ELEVEN, "lengths": "100000:10", "requests": 1000, "warmup": 5, "api": "bad"})
    assert errors["grid.lengths"] == [tokens] and "grid.api" in errors
    errors = errors_of({"concurrency": ELEVEN, "lengths": "100000:10", "requests": 100_000, "warmup": "x"})
    assert "grid.lengths" not in errors  # the warmup is part of the count, so the bound is not guessed
    assert errors["grid"] == [SWEEP_CAP]


def test_it_leaves_the_caps_out_when_the_counts_they_need_are_wrong() -> None:
    errors = errors_of({"concurrency": ELEVEN, "lengths": "10:10", "requests": 100_000,
                        "requests_per_concurrency": 2, "api": "bad"})
    assert "grid" not in errors and errors["grid.requests"] == ["give requests or requests_per_concurrency, not both"]
    errors = errors_of({"concurrency": ELEVEN, "lengths": "10:10", "duration_s": "x"})
    assert list(errors) == ["grid.duration_s"]  # a time-limited point's prompts need its time


@pytest.mark.django_db
def test_it_reports_the_per_sweep_cap_through_the_api_with_the_other_errors(operator_api) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.READY)
    response = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": {
        "concurrency": ELEVEN, "lengths": "10:10", "requests": 100_000, "api": "bad", "warmup": -1}}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["grid"] == [SWEEP_CAP] and "grid.warmup" in body and "grid.api" in body
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.django_db
def test_it_names_every_bad_item_of_a_list_field_in_the_form(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.READY)
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "-1, x, 1e400", "lengths": "8:8, 9, 0:1", "rates": "0 nan 2",
    })
    assert response.status_code == 400
    html = response.content.decode()
    # each bad item judged by the API's grid validation, in its words
    for message in ("must be an integer 1..4096, got -1", 'must be an integer 1..4096, got the string "x"',
                    "must be a finite number, got 1e400 (too large for a 64-bit float)",
                    '''must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string "9"''',
                    '''must be [input_len, output_len] or 'in:out' with 1..1000000 tokens, got the string "0:1"''',
                    "must be a number of requests/s > 0, got 0",
                    "must be a finite number, got nan (not a number)"):
        assert escape(message) in html
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.django_db
def test_the_form_quotes_a_refused_rate_as_the_api_and_the_command_do(operator, operator_api) -> None:
    import re

    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.READY)
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "lengths": "8:8", "requests": "5", "rates": "20000, 20000.5",
    })
    assert response.status_code == 400
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))
    bound = "must be at most 10,000 requests/s (what one load-generator process can send on schedule), got "
    assert re.findall(re.escape(bound) + r"(\S+)", text) == ["20000", "20000.5"]
    api = operator_api.post("/api/sweeps/", {"deployment": deployment.pk,
                                             "grid": {"lengths": [[8, 8]], "requests": 5, "request_rates": [20000]}},
                            format="json")
    assert api.json() == {"grid.request_rates.0": [bound + "20000"]}
    assert not BenchmarkSweep.objects.exists()


@pytest.mark.django_db
def test_it_takes_spaces_in_the_form_as_separators_not_as_nothing(operator) -> None:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.READY)
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1 8", "lengths": "16 : 8  32:4", "requests": "8",
    })
    assert response.status_code == 302
    sweep = BenchmarkSweep.objects.get()
    assert sweep.grid["concurrency"] == [1, 8]  # "1 8" is two points, never concurrency 18
    assert sweep.grid["lengths"] == [[16, 8], [32, 4]]
