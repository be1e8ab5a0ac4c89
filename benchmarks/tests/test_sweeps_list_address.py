"""``/benchmarks/sweeps/``, the parent of every sweep page, is no 404: it leads a signed-in user to
the sweep list on the benchmarks index (newest first, each sweep linking to its page); a visitor
who is not signed in goes to the login page."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from benchmarks.models import BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweeps(db) -> list[int]:
    """3 sweeps without a deployment; their ids, newest first."""
    made = [BenchmarkSweep.objects.create(name=f"sweep {i}", grid={}) for i in range(3)]
    return [s.pk for s in reversed(made)]


def test_it_leads_to_the_sweep_list_newest_first_with_links(viewer, sweeps):
    client = logged_in_client(viewer)
    response = client.get("/benchmarks/sweeps/")
    assert (response.status_code, response["Location"]) == (302, "/benchmarks/#sweeps")

    page = client.get("/benchmarks/sweeps/", follow=True)
    html = page.content.decode()
    assert page.status_code == 200 and page.redirect_chain == [("/benchmarks/#sweeps", 302)]
    assert '<h2 id="sweeps">Sweeps</h2>' in html
    assert [int(x) for x in re.findall(r'<td class="name"><a href="/benchmarks/sweeps/(\d+)/">', html)] == sweeps


def test_the_runs_page_asked_for_is_not_carried_to_the_sweeps(viewer, sweeps):
    response = logged_in_client(viewer).get("/benchmarks/sweeps/?page=9")
    assert (response.status_code, response["Location"]) == (302, "/benchmarks/#sweeps")


def test_a_visitor_not_signed_in_goes_to_the_login_page(sweeps):
    response = Client().get("/benchmarks/sweeps/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/benchmarks/sweeps/")
