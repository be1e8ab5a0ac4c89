"""Defects a new user reported in the benchmarks area, each checked from outside: the admin, the
comparison's numbers and notes, the reason of a sweep stopped with its deployment, the index
page's runs, and the run API's two durations."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.tests.page_support import logged_in_client


def _done_run(sweep: BenchmarkSweep, ordinal: int, *, summary: dict, concurrency: int = 8) -> BenchmarkRun:
    return BenchmarkRun.objects.create(sweep=sweep, ordinal=ordinal, status=RunStatus.DONE, concurrency=concurrency,
                                       input_len=256, output_len=256, num_gpus=1, summary=summary)


# --- 1. admin has no "Add" for rows only the system writes ---------------------------------------


@pytest.mark.django_db
def test_it_offers_no_add_in_admin_for_sweeps_or_runs(admin_user) -> None:
    superuser = User.objects.create_superuser("root", "root@example.org", "correct-horse-battery")
    sweep = BenchmarkSweep.objects.create(name="kept", status=SweepStatus.DONE)
    run = _done_run(sweep, 0, summary={"requests": 1})
    for user in (admin_user, superuser):
        client = logged_in_client(user)
        for model, pk in (("benchmarksweep", sweep.pk), ("benchmarkrun", run.pk)):
            assert client.get(f"/admin/benchmarks/{model}/add/").status_code == 403, model
            assert client.post(f"/admin/benchmarks/{model}/add/", {}).status_code == 403, model
            changelist = client.get(f"/admin/benchmarks/{model}/").content.decode()
            assert f"/admin/benchmarks/{model}/add/" not in changelist, model
            assert client.get(f"/admin/benchmarks/{model}/{pk}/change/").status_code == 200, model  # still readable
        index = client.get("/admin/").content.decode()
        assert "/admin/benchmarks/benchmarksweep/add/" not in index
        assert "/admin/benchmarks/benchmarkrun/add/" not in index
    # Nothing was created by the refused posts.
    assert list(BenchmarkSweep.objects.values_list("pk", flat=True)) == [sweep.pk]
    assert list(BenchmarkRun.objects.values_list("pk", flat=True)) == [run.pk]
