"""A kernel job that stopped part-way reads as such: its progress bar is filled as far as it got
(31 of 88 variants is 35 %, not 100 %), its compile timing is the time until the stop with the
builds stored, and ``manage.py kernel_job`` names the target as the pages do (``cc 9.0``)."""
from __future__ import annotations

import html
import io
import re

import pytest
from django.core.management import call_command
from django.test import Client

from kernels.models import KernelJob
from kernels.services import kernel_job_create


@pytest.fixture
def pages(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def _bar(text: str) -> tuple[str, str]:
    now = re.search(r'aria-valuenow="([0-9]+)"', text).group(1)
    width = re.search(r'data-f="fill" style="width: ([0-9]+)%"', text).group(1)
    return now, width


@pytest.mark.django_db
def test_a_cancelled_job_fills_its_bar_as_far_as_it_got_and_times_its_compile(pages, toy_package, cpu_node):
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    KernelJob.objects.filter(pk=job.pk).update(status="cancelled", phase="compile", variants_total=88,
                                               progress_done=31, builds_ok=29, builds_failed=2, build_s=12.34,
                                               built_at=None, reason="cancelled on request")
    text = html.unescape(pages.get(f"/kernels/jobs/{job.pk}/progress/").content.decode())
    assert _bar(text) == ("35", "35")
    assert "31 / 88 variants" in text
    assert "compile 12.3 s until it was cancelled (31 of 88 builds stored), benchmark —" in text
    assert "compile —" not in text

    KernelJob.objects.filter(pk=job.pk).update(status="done", progress_done=88, built_at="2026-01-01T00:00:00Z",
                                               bench_s=4.0)
    text = html.unescape(pages.get(f"/kernels/jobs/{job.pk}/progress/").content.decode())
    assert _bar(text) == ("100", "100")
    assert "compile 12.3 s, benchmark 4.0 s" in text


@pytest.mark.django_db
def test_the_kernel_job_command_names_the_target_as_the_pages_do(toy_package, pages):
    out = io.StringIO()
    call_command("kernel_job", "toy_attn", "--external", "--cc", "9.0", stdout=out)
    printed = out.getvalue()
    assert ", cc 9.0, waiting for external builds and results" in printed
    assert "cuda:" not in printed
    job = KernelJob.objects.get()
    page = html.unescape(pages.get(f"/kernels/jobs/{job.pk}/").content.decode())
    assert "cc 9.0" in page
