"""A comma-separated id list with an empty item (``?ids=1,,2``, ``?ids=1,2,``, ``?sweeps=,3``) is a
400 naming the parameter and the item, never read as the ids around it: an empty item is a typo or a
list gone wrong. A blank value (``?ids=``) is still none given. The comparison page refuses the same
lists in the same words, and the node telemetry's ``fields`` list is judged alike."""
from __future__ import annotations

import uuid

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 463.7}


def _runs() -> list[BenchmarkRun]:
    sweep = BenchmarkSweep.objects.create(name="two runs", status=SweepStatus.DONE)
    return [BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status=RunStatus.DONE, concurrency=1 + i,
                                        input_len=64, output_len=16, summary=SUMMARY) for i in range(2)]


@pytest.mark.parametrize(("query", "field", "item"), [
    ("ids={a},,{b}", "ids", 2), ("ids={a},{b},", "ids", 3), ("ids=,{a},{b}", "ids", 1),
    ("ids={a}, ,{b}", "ids", 2), ("ids={a},{b}&sweeps={s},", "sweeps", 2)])
def test_the_api_refuses_an_empty_item_naming_the_parameter(viewer_api, query, field, item) -> None:
    a, b = _runs()
    response = viewer_api.get("/api/runs/compare/?" + query.format(a=a.pk, b=b.pk, s=a.sweep_id))
    assert response.status_code == 400
    assert response.json() == {field: [f"item {item} is empty: give {field} as 1,2,3"]}


def test_the_api_still_compares_a_list_without_empty_items(viewer_api) -> None:
    a, b = _runs()
    response = viewer_api.get(f"/api/runs/compare/?ids={a.pk}, {b.pk}&sweeps=")
    assert response.status_code == 200 and [r["id"] for r in response.json()["runs"]] == [a.pk, b.pk]
    # a blank list is none given: the prompt for ids
    assert viewer_api.get("/api/runs/compare/?ids=").json() == {
        "ids": ["give run ids (ids=1,2) or sweep ids (sweeps=3,4)"]}


@pytest.mark.parametrize("key", ["runs", "ids", "sweeps"])
def test_the_page_refuses_an_empty_item_as_the_api_does(viewer, key) -> None:
    a, b = _runs()
    response = logged_in_client(viewer).get(f"/benchmarks/compare/?{key}={a.pk},,{b.pk}")
    assert response.status_code == 400
    html = response.content.decode()
    assert f"{key.capitalize()} item 2 is empty: give {key} as 1,2,3." in html
    assert "Side by side" not in html
    # checkboxes (?run=1&run=2) and a blank list still work
    response = logged_in_client(viewer).get(f"/benchmarks/compare/?run={a.pk}&run={b.pk}&runs=")
    assert response.status_code == 200 and "Side by side" in response.content.decode()


def test_node_telemetry_refuses_an_empty_field_item(viewer_api) -> None:
    node = cpu_node_create(name=f"api-{uuid.uuid4().hex[:8]}")
    response = viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"fields": "power_w,,host_cpu_pct"})
    assert response.status_code == 400
    assert response.json() == {"fields": ["item 2 is empty: give fields as power_w,host_cpu_pct"]}
    assert viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"fields": "power_w"}).status_code == 200
    assert viewer_api.get(f"/api/nodes/{node.name}/telemetry/", {"fields": ""}).status_code == 200
