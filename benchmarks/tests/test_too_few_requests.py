"""A point that completed fewer than MIN_COMPARED_REQUESTS requests is named in the analysis
(``too_few_requests``), and every finding that leans on it says it is too small to conclude from
instead of stating a comparison flatly: 2 requests in a short burst at c=1 are no basis for
"1669 tok/s, the best point" against 566 tok/s at c=8."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.analysis import MIN_COMPARED_REQUESTS, LatencyStats, SweepPoint, ceiling_analyse
from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_analyse
from benchmarks.tests.page_support import logged_in_client
from benchmarks.tests.sweep_support import sim_deployment_create
from benchmarks.tests.test_export_import import _measured_run
from deployments.choices import DeploymentStatus

CAVEAT = "; but c=1 completed only 2 requests, too few to conclude from (too_few_requests)."
NOTE = ("c=1 completed fewer than 10 requests (2 at c=1; too_few_requests): the percentiles and mean throughput of "
        "so few requests are no basis for comparison, so every finding that uses it says so; send more requests per "
        "point (requests or requests_per_concurrency) to compare it.")


def _point(c: int, tok_s: float, tpot_ms: float, ttft_ms: float, completed: int) -> SweepPoint:
    return SweepPoint(concurrency=c, output_throughput_tok_s=tok_s, ttft_ms=LatencyStats(mean=ttft_ms),
                      tpot_ms=LatencyStats(mean=tpot_ms), e2e_ms=LatencyStats(mean=ttft_ms + 63 * tpot_ms),
                      input_len=128, output_len=64, completed=completed, failed=0)


def test_it_says_a_fall_from_a_two_request_point_is_too_small_to_conclude_from() -> None:
    r = ceiling_analyse([_point(1, 1669.0, 0.6, 1.0, 2), _point(8, 566.0, 14.0, 40.0, 32),
                         _point(16, 590.0, 27.0, 80.0, 64)], num_gpus=1, topology="single")
    assert MIN_COMPARED_REQUESTS == 10 and r.too_few_requests == ["c=1"]
    assert r.as_dict()["too_few_requests"] == ["c=1"]
    assert ("Throughput falls as load rises, from 1669 tok/s at c=1, the best point, to 590 tok/s at c=16, x0.35 for "
            "x16.0 load; this points at overload (no request failed), not at a ceiling above the best point "
            "(1669 tok/s at c=1)" + CAVEAT) in r.findings
    assert "Queueing from c=1 to c=8: mean TTFT grows x40.0 while throughput changes x0.34 (x8.0 load)" + CAVEAT \
        in r.findings
    # A finding about c=8 and c=16 alone is stated as it is: c=1 is not read into c=16.
    assert "Queueing from c=8 to c=16: mean TTFT grows x2.0 while throughput changes x1.04 (x2.0 load)." in r.findings
    assert r.findings[-1] == NOTE
    assert sum("too_few_requests" in f for f in r.findings) == 5  # fit, bottleneck, fall, one queueing step, note


def test_ten_completed_requests_are_enough_and_nine_are_not() -> None:
    def analyse(n: int):
        return ceiling_analyse([_point(1, 100.0, 10.0, 20.0, n), _point(2, 190.0, 10.5, 21.0, 20),
                                _point(4, 360.0, 11.0, 22.0, 40)], num_gpus=1, topology="single")

    enough, short = analyse(10), analyse(9)
    assert enough.too_few_requests == [] and not any("too_few_requests" in f for f in enough.findings)
    assert short.too_few_requests == ["c=1"]
    assert short.findings[-1].startswith("c=1 completed fewer than 10 requests (9 at c=1; too_few_requests)")
    # The numbers themselves are the same: the point is kept, measured as it is.
    assert short.fit.labels == enough.fit.labels == ["c=1", "c=2", "c=4"]
    assert short.ceiling.observed_max_tok_s == enough.ceiling.observed_max_tok_s == 360.0


@pytest.mark.django_db
def test_the_sweep_report_its_api_and_its_page_carry_the_note(viewer, viewer_api) -> None:
    sweep = BenchmarkSweep.objects.create(name="s", status=SweepStatus.DONE, topology="single", num_gpus=8,
                                          served_model_name="m", ended_at=timezone.now())
    for ordinal, (c, tok_s) in enumerate(((1, 9.95), (8, 24.5), (16, 25.5))):
        _measured_run(sweep, c=c, tok_s=tok_s, ordinal=ordinal)  # 2 x c requests each: 2, 16 and 32
    analysis = sweep_analyse(sweep=sweep)
    report = analysis["lengths"]["256/256"]
    assert report["too_few_requests"] == ["c=1"]
    assert analysis["findings"][-1] == NOTE
    sweep.analysis = analysis
    sweep.save(update_fields=["analysis"])
    body = viewer_api.get(f"/api/sweeps/{sweep.pk}/analysis/").json()
    assert body["lengths"]["256/256"]["too_few_requests"] == ["c=1"] and NOTE in body["findings"]
    page = logged_in_client(viewer).get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert "c=1 completed fewer than 10 requests (2 at c=1; too_few_requests)" in page


def test_the_one_point_sentence_concludes_nothing_and_takes_no_caveat() -> None:
    # A sweep of one point too small to compare (the demo's single-node baseline: 1 request at c=1):
    # "cannot show a ceiling; but c=1 completed only 1 request" read as if more requests could
    # have shown one. The note naming the small point is still there.
    r = ceiling_analyse([_point(1, 10.4, 94.0, 700.0, 1)], num_gpus=4, topology="single")
    assert r.too_few_requests == ["c=1"]
    assert "One point (10.4 tok/s at c=1) cannot show a ceiling." in r.findings
    assert not [f for f in r.findings if "cannot show a ceiling;" in f], r.findings
    assert any(f.startswith("c=1 completed fewer than 10 requests (1 at c=1; too_few_requests)") for f in r.findings)


def _sweep_of_grid(operator_api, grid: dict, django_capture_on_commit_callbacks) -> BenchmarkSweep:
    """A sweep made through the API with ``grid`` (normalised as the API stores it), its task not
    sent, then given one measured point at c=2 that completed 2 requests."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    with django_capture_on_commit_callbacks(execute=False):
        made = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": grid}, format="json")
    assert made.status_code == 201, made.json()
    sweep = BenchmarkSweep.objects.get(pk=made.json()["id"])
    run = _measured_run(sweep, c=1, tok_s=9.95)   # 2 requests completed
    run.duration_s = sweep.grid["duration_s"]
    run.save(update_fields=["duration_s"])
    return sweep


@pytest.mark.django_db
@pytest.mark.parametrize(("limits", "advice"), [
    ({"duration_s": 6}, "give each point a longer time limit (duration_s, in seconds) to compare it: it was limited "
                        "by time alone, and a request cap (requests) could only end a point sooner."),
    ({"duration_s": 6, "requests": 4}, "raise both the request cap (requests or requests_per_concurrency) and the "
                                       "time limit (duration_s, in seconds) to compare it: a point ends at whichever "
                                       "it reaches first."),
    ({"requests_per_concurrency": 2}, "send more requests per point (requests or requests_per_concurrency) to "
                                      "compare it."),
])
def test_the_advice_for_too_few_requests_follows_what_limited_the_point(
        operator_api, django_capture_on_commit_callbacks, limits, advice) -> None:
    sweep = _sweep_of_grid(operator_api, {"concurrency": [1], "lengths": "16:16", **limits},
                           django_capture_on_commit_callbacks)
    note = sweep_analyse(sweep=sweep)["findings"][-1]
    assert note == ("c=1 completed fewer than 10 requests (2 at c=1; too_few_requests): the percentiles and mean "
                    "throughput of so few requests are no basis for comparison, so every finding that uses it says "
                    "so; " + advice)
    if "requests" not in limits and "requests_per_concurrency" not in limits:
        assert "send more requests" not in note


def test_an_imported_point_whose_limit_is_unknown_gets_the_request_advice() -> None:
    points = [_point(1, 100.0, 10.0, 20.0, 2), _point(2, 190.0, 10.5, 21.0, 20), _point(4, 360.0, 11.0, 22.0, 40)]
    assert points[0].limited_by is None
    assert ceiling_analyse(points, num_gpus=1, topology="single").findings[-1].endswith(
        "send more requests per point (requests or requests_per_concurrency) to compare it.")
    timed = SweepPoint.from_summary({"concurrency": 1, "output_throughput_tok_s": 1.0, "limited_by": "duration"})
    assert timed.limited_by == "duration"
    assert SweepPoint.from_summary({"concurrency": 1, "output_throughput_tok_s": 1.0,
                                    "limited_by": "tokens"}).limited_by is None
