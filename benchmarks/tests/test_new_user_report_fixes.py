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


# --- 2. the comparison page prints compared numbers that can be told apart ------------------------


def _summary(*, req_s: float, tok_s: float, e2e_mean_s: float) -> dict:
    return {"requests": 246, "successes": 246, "failures": 0, "duration_s": 155.0,
            "output_throughput_tok_s": tok_s, "request_throughput_req_s": req_s,
            "ttft_s": {"mean": 0.1, "p50": 0.1, "p90": 0.1, "p99": 0.2},
            "e2e_s": {"mean": e2e_mean_s, "p50": e2e_mean_s, "p99": e2e_mean_s}}


def _cells(html: str, label: str) -> list[str]:
    """The text of each run's cell in the comparison row ``label`` (``request throughput (req/s)``),
    with ``*`` after the one in bold (the best)."""
    import re
    row = re.search(rf"<tr><td>{re.escape(label)}</td>(.*?)</tr>", html, re.S)
    assert row, label
    return [text + ("*" if " best" in cls else "")
            for cls, text in re.findall(r'<td class="num([^"]*)">(.*?)</td>', row.group(1))]


@pytest.mark.django_db
def test_it_shows_compared_numbers_with_enough_figures_to_tell_the_best_apart(viewer) -> None:
    sweep = BenchmarkSweep.objects.create(name="figures", status=SweepStatus.DONE)
    a = _done_run(sweep, 0, summary=_summary(req_s=0.098, tok_s=24688.4, e2e_mean_s=30.0))
    b = _done_run(sweep, 1, summary=_summary(req_s=0.103, tok_s=1234567.0, e2e_mean_s=24.0))
    page = logged_in_client(viewer).get(f"/benchmarks/compare/?sweeps={sweep.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    # 0.098 vs 0.103 req/s (5 % apart, past the tie threshold): the best in bold is visibly the larger.
    assert _cells(html, "request throughput (req/s)") == ["0.098", "0.103*"]
    # Large values keep every integer digit, with thousands separators.
    assert _cells(html, "output throughput (tok/s)") == ["24,688", "1,234,567*"]
    assert _cells(html, "E2E mean (ms)") == ["30,000", "24,000*"]
    assert _cells(html, "failures (requests)") == ["0", "0"]
    assert a.pk < b.pk


def test_it_adds_figures_until_different_values_print_differently() -> None:
    from benchmarks.services.runs import plain_figures
    assert plain_figures([0.098, 0.103]) == ["0.098", "0.103"]
    assert plain_figures([100.4, 100.0]) == ["100.4", "100"]
    assert plain_figures([24688.2, 24688.4], digits=4) == ["24,688.2", "24,688.4"]
    assert plain_figures([0.1, 0.1001, None, 0.1]) == ["0.1", "0.1001", None, "0.1"]
    assert plain_figures([24688.0, 1234567.89, 0.0, -3.14159]) == ["24,688", "1,234,568", "0", "-3.14"]
    assert plain_figures([float("inf"), 1e300]) == ["inf", "1e+300"]


# --- 3. the comparison's notes use plain figures -------------------------------------------------


@pytest.mark.django_db
def test_it_writes_the_comparison_notes_in_plain_figures(viewer_api) -> None:
    from benchmarks.services import runs_compare
    sweep = BenchmarkSweep.objects.create(name="notes", status=SweepStatus.DONE)
    a = _done_run(sweep, 0, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=24.688))
    b = _done_run(sweep, 1, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=24.890))
    body = viewer_api.get(f"/api/runs/compare/?ids={a.pk},{b.pk}").json()
    assert (f"no best run for E2E mean: runs #{a.pk} 24,688, #{b.pk} 24,890 ms are within 0.81 % of each other, "
            "under the 2 % tie threshold (run-to-run noise)") in body["notes"]
    assert not any("e+" in note for note in body["notes"]), body["notes"]
    # Two tied values that agree in their first five figures still print differently.
    c = _done_run(sweep, 2, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=24.6882))
    d = _done_run(sweep, 3, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=24.6884))
    notes = runs_compare(runs=[c, d])["notes"]
    assert (f"no best run for E2E mean: runs #{c.pk} 24,688.2, #{d.pk} 24,688.4 ms are within 0.00081 % of each "
            "other, under the 2 % tie threshold (run-to-run noise)") in notes


def test_it_writes_confidence_interval_notes_in_plain_figures() -> None:
    from benchmarks.services.runs import _ci_overlap
    entries = {1: {"ci95_ms": {"e2e_ms": {"p99": [24000.4, 25100.0]}}, "metrics": {"successes": 400}},
               2: {"ci95_ms": {"e2e_ms": {"p99": [24900.0, None]}}, "metrics": {"successes": 400}}}
    ids, note = _ci_overlap("e2e_ms.p99", [(24688.0, 1), (24890.0, 2)], entries, higher_better=False)
    assert ids == [1, 2]
    assert note.startswith("E2E p99: run #1 is named best (24,688 ms against #2's 24,890 ms), but their 95 % "
                           "confidence intervals overlap (#1: 24,000–25,100 ms; #2: at least 24,900 ms, not bounded above "
                           "by its 400 requests (a p99 needs 368))"), note


# --- 5. the comparison's baseline takes one id, and says so ------------------------------------


@pytest.mark.django_db
def test_it_says_baseline_takes_one_run_id_quoting_the_value(viewer, viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="baseline", status=SweepStatus.DONE)
    a = _done_run(sweep, 0, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=1.0))
    b = _done_run(sweep, 1, summary=_summary(req_s=0.2, tok_s=200.0, e2e_mean_s=2.0))
    client = logged_in_client(viewer)
    for value in ("abc", "1,2", f"{a.pk};{b.pk}"):
        page = client.get("/benchmarks/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": value})
        assert page.status_code == 400, value
        html = page.content.decode()
        assert f"Baseline takes one run id (e.g. 3), got &#x27;{value}&#x27;." in html, value
        assert "must be a comma-separated list" not in html
        api = viewer_api.get("/api/runs/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": value})
        assert api.status_code == 400 and api.json() == {"baseline": [f"takes one run id (e.g. 3), got '{value}'"]}
    # One id works on both; one no compared run has is refused by name.
    assert client.get("/benchmarks/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": str(b.pk)}).status_code == 200
    assert viewer_api.get("/api/runs/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": str(b.pk)}).json()[
        "baseline"] == b.pk
    far = client.get("/benchmarks/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": "9" * 40})
    assert far.status_code == 400 and "is not one of the compared runs" in far.content.decode()
    assert viewer_api.get("/api/runs/compare/", {"ids": f"{a.pk},{b.pk}", "baseline": "9" * 40}).status_code == 400


# --- 8. the index page's recent runs say each run's status ----------------------------------------


@pytest.mark.django_db
def test_it_lists_each_recent_run_with_its_status(viewer) -> None:
    import re
    sweep = BenchmarkSweep.objects.create(name="statuses", status=SweepStatus.RUNNING)
    done = _done_run(sweep, 0, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=1.0))
    running = BenchmarkRun.objects.create(sweep=sweep, ordinal=1, status=RunStatus.RUNNING, concurrency=16,
                                          input_len=256, output_len=256, num_gpus=1, summary={})
    failed = BenchmarkRun.objects.create(sweep=sweep, ordinal=2, status=RunStatus.FAILED, concurrency=32,
                                         input_len=256, output_len=256, num_gpus=1, summary={})
    html = logged_in_client(viewer).get("/benchmarks/").content.decode()
    table = html.split('<table class="runs">')[1].split("</table>")[0]
    assert "<th></th><th>Run</th><th>Status</th><th>Source</th>" in table
    statuses = {}
    for row in table.split("<tr>")[2:]:
        run_id = int(re.search(r'name="run" value="(\d+)"', row).group(1))
        statuses[run_id] = re.search(r'<td><span class="tag[^"]*">(\w+)</span></td>', row).group(0)
    assert statuses == {done.pk: '<td><span class="tag ok">done</span></td>',
                        running.pk: '<td><span class="tag">running</span></td>',
                        failed.pk: '<td><span class="tag bad">failed</span></td>'}


# --- 9. the run API names its two durations apart -------------------------------------------------


@pytest.mark.django_db
def test_it_gives_the_run_api_measured_duration_apart_from_the_time_limit(viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="durations", status=SweepStatus.DONE)
    by_count = _done_run(sweep, 0, summary=_summary(req_s=0.1, tok_s=100.0, e2e_mean_s=1.0))  # 155 s measured
    timed = BenchmarkRun.objects.create(sweep=sweep, ordinal=1, status=RunStatus.DONE, concurrency=4, input_len=64,
                                        output_len=64, num_gpus=1, duration_s=60.0,
                                        summary={"requests": 10, "successes": 10, "duration_s": 60.4})
    running = BenchmarkRun.objects.create(sweep=sweep, ordinal=2, status=RunStatus.RUNNING, concurrency=8,
                                          input_len=64, output_len=64, num_gpus=1, duration_s=30.0, summary={})
    got = {r.pk: viewer_api.get(f"/api/runs/{r.pk}/").json() for r in (by_count, timed, running)}
    assert {pk: (b["duration_s"], b["measured_duration_s"], b["metrics"]["duration_s"]) for pk, b in got.items()} == {
        by_count.pk: (None, 155.0, 155.0), timed.pk: (60.0, 60.4, 60.4), running.pk: (30.0, None, None)}
    # The list answers the same fields.
    listed = {r["id"]: r for r in viewer_api.get("/api/runs/").json()["results"]}
    assert listed[by_count.pk]["measured_duration_s"] == 155.0 and listed[by_count.pk]["duration_s"] is None

    # The schema says which is which.
    schema = viewer_api.get("/api/schema/?format=json").json()
    run = schema["components"]["schemas"]["Run"]["properties"]
    assert run["duration_s"]["description"].startswith("the point's time limit in seconds")
    assert "Not how long the run took: see measured_duration_s" in run["duration_s"]["description"]
    assert run["measured_duration_s"]["description"].startswith("how long the run took in seconds")
    assert run["measured_duration_s"]["nullable"] is True
    metrics = schema["components"]["schemas"]["RunMetrics"]["properties"]
    assert metrics["duration_s"]["description"].startswith("measured duration of the run in seconds")
