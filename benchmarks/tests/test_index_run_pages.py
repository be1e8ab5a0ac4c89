"""The benchmarks index lists every run, newest first, 20 a page (``?page=N``), with previous and
next links and "page X of Y"; a page number that names no page is a 404 saying why, and a page
parameter that is no page number (``-1``, ``abc``, given twice) a 400 naming it."""
from __future__ import annotations

import re

import pytest

from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client
from benchmarks.views.common import INDEX_RUNS_PER_PAGE

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(db) -> list[int]:
    """45 runs; their ids, newest first (all made in one instant, so the id breaks the tie)."""
    made = [BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8,
                                        summary={"output_throughput_tok_s": 100.0 + i}) for i in range(45)]
    return [r.pk for r in reversed(made)]


def listed(html: str) -> list[int]:
    return [int(x) for x in re.findall(r'name="run" value="(\d+)"', html)]


def test_the_first_page_shows_the_20_newest_and_links_to_the_next(viewer, runs):
    assert INDEX_RUNS_PER_PAGE == 20
    page = logged_in_client(viewer).get("/benchmarks/")
    html = page.content.decode()
    assert page.status_code == 200
    assert listed(html) == runs[:20]
    assert "page 1 of 3 (45 runs)" in html
    assert 'href="?page=2#runs" rel="next"' in html and 'rel="prev"' not in html


def test_the_middle_and_last_pages_show_the_older_runs(viewer, runs):
    client = logged_in_client(viewer)
    middle = client.get("/benchmarks/?page=2").content.decode()
    assert listed(middle) == runs[20:40]
    assert "page 2 of 3 (45 runs)" in middle
    assert 'href="?page=1#runs" rel="prev"' in middle and 'href="?page=3#runs" rel="next"' in middle
    last = client.get("/benchmarks/", {"page": "3"}).content.decode()
    assert listed(last) == runs[40:] and len(runs[40:]) == 5
    assert "page 3 of 3 (45 runs)" in last and 'rel="next"' not in last


def test_an_empty_page_parameter_is_the_first_page(viewer, runs):
    assert listed(logged_in_client(viewer).get("/benchmarks/?page=").content.decode()) == runs[:20]


@pytest.mark.parametrize(("query", "message"), [
    ("page=4", "no page 4 of the runs: there are 3 pages (45 runs, 20 a page)"),
    ("page=0", "no page 0 of the runs: there are 3 pages (45 runs, 20 a page)"),
    ("page=" + "9" * 30, "no page " + "9" * 30 + " of the runs: there are 3 pages"),
])
def test_a_page_that_is_not_there_is_a_404_saying_why(viewer, runs, query, message):
    page = logged_in_client(viewer).get(f"/benchmarks/?{query}")
    assert page.status_code == 404
    assert message in page.content.decode()


@pytest.mark.parametrize(("query", "message"), [
    ("page=abc", "page takes a page number (e.g. 2), got &#x27;abc&#x27;; there are 3 pages (45 runs, 20 a page)"),
    ("page=-1", "page takes a page number (e.g. 2), got &#x27;-1&#x27;; there are 3 pages"),
    ("page=1&page=2", "the parameter page is given 2 times (1, 2): give it once; there are 3 pages"),
])
def test_a_malformed_page_is_a_400_saying_why(viewer, runs, query, message):
    page = logged_in_client(viewer).get(f"/benchmarks/?{query}")
    assert page.status_code == 400
    assert message in page.content.decode()


def test_no_runs_is_one_empty_page(viewer):
    client = logged_in_client(viewer)
    html = client.get("/benchmarks/?page=1").content.decode()
    assert "No runs yet." in html and listed(html) == []
    answer = client.get("/benchmarks/?page=2")
    assert answer.status_code == 404
    assert "no page 2 of the runs: there is 1 page (0 runs, 20 a page)" in answer.content.decode()


def test_exactly_one_page_of_runs_has_no_page_links(viewer):
    for i in range(20):
        BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8, summary={})
    html = logged_in_client(viewer).get("/benchmarks/").content.decode()
    assert len(listed(html)) == 20 and "page 1 of 1 (20 runs)" in html
    assert 'rel="next"' not in html and 'rel="prev"' not in html
