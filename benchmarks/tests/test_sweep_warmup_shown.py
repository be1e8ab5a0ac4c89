"""A sweep's warm-up requests per point (its grid's ``warmup``) are on its page beside the time
limit and a top-level field of the API's sweep and of its JSON export, not only inside the grid's JSON: "3 requests a
point, not counted", "none" for a grid without warm-up, nothing (null) for a sweep of imported
runs, which has no grid."""
import json
import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkSweep

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1, 4], "lengths": [[64, 64]], "requests_per_concurrency": 2}


def _page(viewer, sweep) -> str:
    page = Client()
    page.force_login(viewer)
    answer = page.get(f"/benchmarks/sweeps/{sweep.pk}/")
    assert answer.status_code == 200
    return answer.content.decode()


def _warmup_fact(viewer, sweep) -> str | None:
    found = re.search(r'<dt>Warm-up</dt><dd class="warmup">(.*?)</dd>', _page(viewer, sweep))
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", found.group(1))) if found else None


@pytest.mark.parametrize("grid, fact, field", [
    ({**GRID, "warmup": 3}, "3 requests a point, not counted (sent at the point's load before it is measured; "
                            "their results are dropped)", 3),
    ({**GRID, "warmup": 1}, "1 request a point, not counted (sent at the point's load before it is measured; "
                            "their results are dropped)", 1),
    ({**GRID, "warmup": 0}, "none (every request of a point is measured)", 0),
    (GRID, "none (every request of a point is measured)", 0),
    ({}, None, None),
])
def test_the_warmup_is_on_the_sweep_page_and_a_field_of_the_api(viewer, viewer_api, grid, fact, field):
    sweep = BenchmarkSweep.objects.create(name="w", engine="sim", topology="single", status="done", grid=grid)
    assert _warmup_fact(viewer, sweep) == fact
    detail = viewer_api.get(f"/api/sweeps/{sweep.pk}/")
    assert detail.status_code == 200
    assert detail.json()["warmup_requests"] == field
    assert detail.json()["grid"] == grid
    listed = viewer_api.get("/api/sweeps/")
    assert [s["warmup_requests"] for s in listed.json()["results"] if s["id"] == sweep.pk] == [field]
    exported = viewer_api.get(f"/api/sweeps/{sweep.pk}/export/")
    assert exported.status_code == 200
    assert exported.json()["sweep"]["warmup_requests"] == field
    page = Client()
    page.force_login(viewer)
    download = page.get(f"/benchmarks/sweeps/{sweep.pk}/export.json")
    assert download.status_code == 200
    assert json.loads(download.content)["sweep"]["warmup_requests"] == field


def test_the_warmup_fact_follows_the_time_limit(viewer):
    sweep = BenchmarkSweep.objects.create(name="w", engine="sim", topology="single", status="done",
                                          grid={**GRID, "duration_s": 30, "warmup": 2})
    body = _page(viewer, sweep)
    assert body.index("<dt>Time limit</dt>") < body.index("<dt>Warm-up</dt>") < body.index("<dt>GPUs</dt>")


def test_the_api_schema_describes_the_field(viewer_api):
    schema = viewer_api.get("/api/schema/", {"format": "json"}).json()
    field = schema["components"]["schemas"]["Sweep"]["properties"]["warmup_requests"]
    assert field["type"] == "integer" and field["nullable"] is True and field["readOnly"] is True
    assert field["description"].startswith("warm-up requests each point sends at its load before it is measured")
