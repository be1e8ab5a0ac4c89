"""The kernels index and a package's page list the jobs 20 a page (``?page=N``), newest first, with
previous and next links and "page X of Y"; a page number that names no page is a 404 saying why, as
the benchmarks index does (:mod:`controlplane.paging`)."""
from __future__ import annotations

import re

import pytest

from benchmarks.tests.page_support import logged_in_client
from kernels.tests.conftest import listed
from kernels.models import KernelJob

pytestmark = pytest.mark.django_db


def test_the_jobs_are_paged_20_at_a_time_newest_first(viewer, jobs):
    client = logged_in_client(viewer)
    first = client.get("/kernels/").content.decode()
    assert listed(first) == jobs[:20]
    assert "page 1 of 2 (25 jobs)" in first and 'href="?page=2#jobs" rel="next"' in first
    second = client.get("/kernels/?page=2").content.decode()
    assert listed(second) == jobs[20:]
    assert "page 2 of 2 (25 jobs)" in second and 'href="?page=1#jobs" rel="prev"' in second


def test_page_999_is_a_404_naming_the_number_of_pages(viewer, jobs):
    page = logged_in_client(viewer).get("/kernels/?page=999")
    assert page.status_code == 404
    assert "no page 999 of the jobs: there are 2 pages (25 jobs, 20 a page)" in page.content.decode()


def test_a_package_page_pages_its_own_jobs_and_its_next_link_leads_to_the_older_ones(viewer, jobs, split_package):
    other = KernelJob.objects.create(package=split_package, target_cc="9.0", status="done").pk
    client = logged_in_client(viewer)
    url = "/kernels/packages/toy_attn/"
    first = client.get(url).content.decode()
    assert listed(first) == jobs[:20] and other not in listed(first)
    assert "page 1 of 2 (25 jobs)" in first and 'rel="prev"' not in first
    link = re.search(r'href="(\?page=\d+)#jobs" rel="next"', first)
    assert link is not None
    second = client.get(url + link.group(1)).content.decode()
    assert listed(second) == jobs[20:]
    assert "page 2 of 2 (25 jobs)" in second and 'href="?page=1#jobs" rel="prev"' in second
    assert 'rel="next"' not in second
    missing = client.get(url + "?page=3")
    assert missing.status_code == 404
    assert "no page 3 of the jobs: there are 2 pages (25 jobs, 20 a page)" in missing.content.decode()
