"""``GET /api/runs/<id>/records/``: an ``offset`` or ``limit`` that is not a whole number in its range
is a 400 naming the parameter, quoting the value and giving the range (limit 1 to 5000, offset 0 to
999999999999999, the bound of every list's offset), every wrong one at once, as every other
refused query value is (not DRF's "A valid integer is required." or "Ensure this value ...")."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun

pytestmark = pytest.mark.django_db

LIMIT = "must be a whole number between 1 and 5000, got '{}'"
OFFSET = "must be a whole number between 0 and 999999999999999, got '{}'"


@pytest.fixture
def url() -> str:
    run = BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8, summary={})
    return f"/api/runs/{run.pk}/records/"


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "5001", "1.5", "1e3", "９", "99999999999999999999999"])
def test_it_names_a_bad_limit_and_gives_its_range(viewer_api, url, raw):
    answer = viewer_api.get(url, {"limit": raw})
    assert answer.status_code == 400
    assert answer.json() == {"limit": [LIMIT.format(raw)]}


@pytest.mark.parametrize("raw", ["abc", "-1", "1.5", "1000000000000000", "99999999999999999999999"])
def test_it_names_a_bad_offset_and_gives_its_range(viewer_api, url, raw):
    answer = viewer_api.get(url, {"offset": raw})
    assert answer.status_code == 400
    assert answer.json() == {"offset": [OFFSET.format(raw)]}


def test_it_names_both_at_once(viewer_api, url):
    answer = viewer_api.get(url, {"limit": "lots", "offset": "-3"})
    assert answer.json() == {"limit": [LIMIT.format("lots")], "offset": [OFFSET.format("-3")]}


@pytest.mark.parametrize("query", [{"limit": ""}, {"offset": ""}, {"limit": "1"}, {"limit": "5000"}, {"offset": "0"},
                                   {"offset": "999999999999999", "limit": "1000"}])
def test_it_takes_values_in_range(viewer_api, url, query):
    # past the query's check (an empty value is the default, as on every list): this run has no
    # records, which is the 404 that says so
    answer = viewer_api.get(url, query)
    assert answer.status_code == 404 and "has no per-request records" in answer.json()["detail"]
