"""``?format=api``, REST framework's browsable page, is a documented way to read the API (README,
"Users, roles and the API"): every endpoint with the browsable renderer answers it with the same
status as the JSON, errors included, and names ``api`` among the formats it offers; the endpoints
the README lists as exceptions refuse it like any other format they do not offer."""
from __future__ import annotations

import pytest

from benchmarks.models import BenchmarkRun
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> BenchmarkRun:
    return BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8, summary={})


@pytest.mark.parametrize("path", ["/api/", "/api/recipes/", "/api/nodes/{node}/", "/api/runs/{run}/",
                                  "/api/kernel-best/", "/api/nodes/{node}/telemetry/"])
def test_a_read_answers_on_the_browsable_page_as_in_json(viewer_api, run, path):
    url = path.format(node=cpu_node_create(name="browsable").name, run=run.pk)
    page = viewer_api.get(url, {"format": "api"})
    assert page.status_code == viewer_api.get(url, {"format": "json"}).status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert viewer_api.get(url, HTTP_ACCEPT="text/html")["Content-Type"].startswith("text/html")
    refused = viewer_api.get(url, {"format": "xml"})
    assert refused.status_code == 400 and refused.json() == {"format": ["must be one of json, api; got 'xml'"]}


def test_an_error_has_the_same_status_on_the_browsable_page(viewer_api, run):
    url = f"/api/runs/{run.pk}/records/"
    as_json = viewer_api.get(url, {"limit": "lots"})
    page = viewer_api.get(url, {"limit": "lots", "format": "api"})
    assert page.status_code == as_json.status_code == 400
    assert page["Content-Type"].startswith("text/html") and "must be a whole number between 1 and 5000" in page.content.decode()


def test_the_listed_exceptions_refuse_api_like_any_format_they_do_not_offer(viewer_api, run):
    cases = {"/api/schema/": "must be one of yaml, json; got 'api'",
             "/api/auth/token/": "must be one of json; got 'api'",
             f"/api/runs/{run.pk}/export/": "must be one of csv, json; got 'api'"}
    for url, message in cases.items():
        answer = viewer_api.get(url, {"format": "api"})
        assert answer.status_code == 400 and answer["Content-Type"] == "application/json", url
        assert answer.json() == {"format": [message]}, url
        xml = viewer_api.get(url, {"format": "xml"})
        assert xml.status_code == 400 and xml.json() == {"format": [message.replace("'api'", "'xml'")]}, url


@pytest.mark.parametrize(("path", "crumbs"), [
    ("/api/recipes/", [("Api Root", "/api/"), ("Recipe List", "/api/recipes/")]),
    ("/api/runs/{run}/", [("Api Root", "/api/"), ("Run List", "/api/runs/"), ("Run Instance", "/api/runs/{run}/")]),
])
def test_the_breadcrumbs_name_no_api_not_found_between_the_pages(viewer_api, run, path, crumbs):
    import re
    page = viewer_api.get(path.format(run=run.pk), {"format": "api"}).content.decode()
    trail = page[page.index('class="breadcrumb"'):]
    trail = trail[:trail.index("</ul>")]
    assert "Not Found" not in trail
    found = [(name.strip(), href.split("?")[0]) for href, name in re.findall(r'<a href="([^"]*)"[^>]*>([^<]*)</a>', trail)]
    assert found == [(name, href.format(run=run.pk)) for name, href in crumbs]
