"""``/kernels/jobs/`` and ``/kernels/packages/``, the parents of every job and package page, are no
404: they lead a signed-in user to the job list (keeping the page asked for) and the package list
on the kernels index; a visitor who is not signed in goes to the login page."""
from __future__ import annotations

import pytest
from django.test import Client

from benchmarks.tests.page_support import logged_in_client
from kernels.tests.conftest import listed

pytestmark = pytest.mark.django_db


def test_jobs_lead_to_the_job_list_keeping_the_page_asked_for(viewer, jobs):
    client = logged_in_client(viewer)
    response = client.get("/kernels/jobs/")
    assert (response.status_code, response["Location"]) == (302, "/kernels/#jobs")
    assert listed(client.get("/kernels/jobs/", follow=True).content.decode()) == jobs[:20]

    response = client.get("/kernels/jobs/?page=2")
    assert (response.status_code, response["Location"]) == (302, "/kernels/?page=2#jobs")
    second = client.get("/kernels/jobs/?page=2", follow=True).content.decode()
    assert listed(second) == jobs[20:] and "page 2 of 2 (25 jobs)" in second
    past = client.get("/kernels/jobs/?page=9", follow=True)
    assert past.status_code == 404
    assert "no page 9 of the jobs: there are 2 pages (25 jobs, 20 a page)" in past.content.decode()


def test_packages_lead_to_the_package_list(viewer, toy_package):
    client = logged_in_client(viewer)
    response = client.get("/kernels/packages/?page=2")
    assert (response.status_code, response["Location"]) == (302, "/kernels/#packages")

    page = client.get("/kernels/packages/", follow=True)
    html = page.content.decode()
    assert page.status_code == 200 and page.redirect_chain == [("/kernels/#packages", 302)]
    assert '<h2 id="packages">Packages</h2>' in html
    assert '<a href="/kernels/packages/toy_attn/">toy_attn</a>' in html


@pytest.mark.parametrize("url", ["/kernels/jobs/", "/kernels/packages/"])
def test_a_visitor_not_signed_in_goes_to_the_login_page(url):
    response = Client().get(url)
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={url}")
