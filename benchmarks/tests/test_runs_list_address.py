"""``/benchmarks/runs/``, the parent of every run page, is no 404: it leads a signed-in user to the
run list on the benchmarks index (newest first, paged, each run linking to its page, units in the
headers), keeping the page asked for; a visitor who is not signed in goes to the login page."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun
from benchmarks.tests.page_support import logged_in_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(db) -> list[int]:
    """25 runs; their ids, newest first."""
    made = [BenchmarkRun.objects.create(status="done", concurrency=1, input_len=8, output_len=8,
                                        summary={"output_throughput_tok_s": 100.0 + i}) for i in range(25)]
    return [r.pk for r in reversed(made)]


def test_it_leads_to_the_run_list_newest_first_with_links_and_units(viewer, runs):
    client = logged_in_client(viewer)
    response = client.get("/benchmarks/runs/")
    assert (response.status_code, response["Location"]) == (302, "/benchmarks/#runs")

    page = client.get("/benchmarks/runs/", follow=True)
    html = page.content.decode()
    assert page.status_code == 200 and page.redirect_chain == [("/benchmarks/#runs", 302)]
    assert [int(x) for x in re.findall(r'name="run" value="(\d+)"', html)] == runs[:20]
    assert f'href="/benchmarks/runs/{runs[0]}/"' in html
    assert "Output (tok/s)" in html and "TTFT p99 (ms)" in html
    assert "page 1 of 2 (25 runs)" in html


def test_it_keeps_the_page_asked_for_and_its_refusals(viewer, runs):
    client = logged_in_client(viewer)
    response = client.get("/benchmarks/runs/?page=2")
    assert (response.status_code, response["Location"]) == (302, "/benchmarks/?page=2#runs")
    second = client.get("/benchmarks/runs/?page=2", follow=True).content.decode()
    assert [int(x) for x in re.findall(r'name="run" value="(\d+)"', second)] == runs[20:]
    past = client.get("/benchmarks/runs/?page=9", follow=True)
    assert past.status_code == 404
    assert "no page 9 of the runs: there are 2 pages (25 runs, 20 a page)" in past.content.decode()


def test_a_visitor_not_signed_in_goes_to_the_login_page(runs):
    response = Client().get("/benchmarks/runs/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/benchmarks/runs/")
