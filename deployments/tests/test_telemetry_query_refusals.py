"""A telemetry re-sync's ``since`` or ``until`` that is not a number of unix seconds in range is a
400 naming the parameter, quoting the value and giving the range in unix seconds, as every other
refused query value is, on both endpoints (not DRF's "A valid number is required.")."""
from __future__ import annotations

import pytest

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

RANGE = "must be a number of unix seconds between 0 and 253402300799, got '{}'"


@pytest.fixture
def urls() -> list[str]:
    node = cpu_node_create(name="telemetry-refusals")
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    return [f"/api/nodes/{node.name}/telemetry/", f"/api/deployments/{deployment.pk}/telemetry/"]


@pytest.mark.parametrize("raw", ["abc", "-1", "253402300800", "1e400", "nan", "inf", "-inf", "1_000",
                                 " 5", "0x10", "1,5"])
@pytest.mark.parametrize("name", ["since", "until"])
def test_it_names_the_time_quotes_it_and_gives_the_range(viewer_api, urls, name, raw):
    for url in urls:
        answer = viewer_api.get(url, {name: raw})
        assert answer.status_code == 400, url
        assert answer.json() == {name: [RANGE.format(raw)]}, url


def test_it_names_both_times_at_once(viewer_api, urls):
    for url in urls:
        answer = viewer_api.get(url, {"since": "yesterday", "until": "now"})
        assert answer.json() == {"since": [RANGE.format("yesterday")], "until": [RANGE.format("now")]}, url


@pytest.mark.parametrize("raw", ["0", "1767225600", "1767225600.25", "1.7672256e9", "+1767225600", ".5"])
def test_it_takes_a_decimal_number_of_unix_seconds(viewer_api, urls, raw):
    # An empty value is refused, naming the parameter (test_empty_action_query_values.py); leaving it out is the default.
    for url in urls:
        assert viewer_api.get(url, {"until": raw}).status_code == 200, url
