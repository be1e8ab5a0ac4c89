"""The comparison page refuses more than 100 run ids or 20 sweep ids, as the compare endpoint does
and in its words (``at most 100 runs and 20 sweeps``), showing the form again with status 400
before any run or sweep is read."""
from __future__ import annotations

import pytest

from benchmarks.choices import RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services import COMPARE_TOO_MANY
from benchmarks.tests.page_support import logged_in_client

pytestmark = pytest.mark.django_db

SUMMARY = {"requests": 4, "successes": 4, "failures": 0, "duration_s": 1.0, "output_throughput_tok_s": 463.7,
           "ttft_s": {"mean": 0.02, "p50": 0.02, "p90": 0.03, "p99": 0.031}}


def _runs(count: int) -> list[int]:
    sweep = BenchmarkSweep.objects.create(name=f"{count} runs", status=SweepStatus.DONE)
    return [BenchmarkRun.objects.create(sweep=sweep, ordinal=i, status=RunStatus.DONE, concurrency=1 + i,
                                        input_len=64, output_len=16, summary=SUMMARY).pk for i in range(count)]


def _ids(ids) -> str:
    return ",".join(map(str, ids))


def test_the_wording_is_the_apis(viewer_api) -> None:
    assert COMPARE_TOO_MANY == "at most 100 runs and 20 sweeps"
    answer = viewer_api.get(f"/api/runs/compare/?ids={_ids(range(1, 102))}")
    assert answer.status_code == 400 and answer.json() == {"ids": ["at most 100 runs and 20 sweeps"]}


@pytest.mark.parametrize("query", [
    f"runs={_ids(range(1, 102))}",                                # 101 run ids
    f"ids={_ids(range(1, 102))}",                                 # the alias too
    f"runs={_ids(range(1, 51))}&ids={_ids(range(51, 102))}",      # both together name 101 runs
    f"runs=1,2&sweeps={_ids(range(1, 22))}",                      # 21 sweep ids
])
def test_the_page_refuses_more_than_the_apis_cap(viewer, query) -> None:
    page = logged_in_client(viewer).get(f"/benchmarks/compare/?{query}")
    assert page.status_code == 400
    html = page.content.decode()
    # the API's words, as the page shows every problem: capitalised, with a full stop
    assert '<div class="notice bad" role="alert"><p>At most 100 runs and 20 sweeps.</p></div>' in html
    assert 'name="runs"' in html  # the form again, to fix the query


def test_the_page_refuses_them_before_reading_a_run(viewer) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from benchmarks.models import BenchmarkRun

    client = logged_in_client(viewer)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/benchmarks/compare/?runs={_ids(range(1, 102))}")
    assert page.status_code == 400
    # the layout's own queries (sign-in, navigation) may run; the runs' table is never read
    table = BenchmarkRun._meta.db_table
    assert not [q["sql"] for q in queries.captured_queries if table in q["sql"]]


def test_100_runs_are_still_compared(viewer) -> None:
    ids = _runs(100)
    page = logged_in_client(viewer).get(f"/benchmarks/compare/?runs={_ids(ids)}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "t most 100 runs" not in html
    assert f'href="/benchmarks/runs/{ids[-1]}/"' in html


def test_20_sweeps_are_not_refused_for_their_number(viewer) -> None:
    # Sweeps that do not exist: past the cap, the page looks them up and names every missing one.
    page = logged_in_client(viewer).get(f"/benchmarks/compare/?sweeps={_ids(range(900001, 900021))}")
    assert page.status_code == 400
    assert f"No sweeps with ids {', '.join(map(str, range(900001, 900021)))}." in page.content.decode()
