"""A closed-loop point that sends fewer requests than its concurrency never reaches it: the grid is
refused at creation naming the point and both numbers, a run that did so anyway (the load generator
called directly, a run stored before the refusal, an imported one) is flagged
``concurrency_shortfall``, and the analysis takes its load as the concurrency it reached."""
from __future__ import annotations

import pytest

from benchmarks.analysis import SweepPoint, ceiling_analyse
from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset, run_summary
from benchmarks.sweeps import grid_validate, summary_point
from controlplane.errors import InvalidInput


def test_a_request_count_below_a_points_concurrency_is_refused_naming_the_point() -> None:
    with pytest.raises(InvalidInput) as err:
        grid_validate({"concurrency": [8], "lengths": "16:16", "requests": 2})
    assert err.value.errors == {"grid.requests": [
        "point c=8 16/16 would send 2 requests, fewer than its concurrency of 8: it could never have 8 requests "
        "in flight; give at least 8 requests per point or a lower concurrency"]}
    with pytest.raises(InvalidInput) as err:
        grid_validate({"concurrency": [1, 3], "lengths": "16:16", "requests_per_concurrency": 0.3})
    assert err.value.errors == {"grid.requests_per_concurrency": [
        "point c=3 16/16 would send 1 request (requests_per_concurrency 0.3 x 3, rounded up), fewer than its "
        "concurrency of 3: it could never have 3 requests in flight; the rounded-up count "
        "requests_per_concurrency x c must be at least c: give a larger requests_per_concurrency (1 always fits) "
        "or a lower concurrency"]}
    # At least one request per slot is accepted, and so is a fraction that still covers c=1 alone.
    assert grid_validate({"concurrency": [8], "lengths": "16:16", "requests": 8})["requests"] == 8
    assert grid_validate({"concurrency": [1], "lengths": "16:16", "requests_per_concurrency": 0.3})
    # The count is k x c rounded up: 0.99 x 3 and 0.9 x 3 send 3 requests and fit; 0.6 x 3 sends 2.
    for k in (0.99, 0.9):
        assert grid_validate({"concurrency": [3], "lengths": "16:16", "requests_per_concurrency": k})
    with pytest.raises(InvalidInput) as err:
        grid_validate({"concurrency": [3], "lengths": "16:16", "requests_per_concurrency": 0.6})
    assert err.value.errors["grid.requests_per_concurrency"][0].startswith(
        "point c=3 16/16 would send 2 requests (requests_per_concurrency 0.6 x 3, rounded up), fewer than its "
        "concurrency of 3")
    # Open-loop points have no slots to fill.
    assert grid_validate({"request_rates": [2.0], "lengths": "16:16", "requests": 2})


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_closed_loop_that_sends_fewer_requests_than_its_slots_is_flagged(sim_url: str) -> None:
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="m", concurrency=8, ignore_eos=True,
                     fixed_output=True)
    s = run_summary(loadgen_run(config=cfg, specs=random_dataset(num=2, input_len=16, output_len=16, seed=1)))
    assert s["successes"] == 2 and s["achieved_concurrency_max"] == 2 and s["target_concurrency"] == 8
    assert s["flags"]["concurrency_shortfall"] is True
    cfg = LoadConfig(base_url=sim_url, api=Api.GENERATE, model="m", concurrency=2, ignore_eos=True,
                     fixed_output=True)
    s = run_summary(loadgen_run(config=cfg, specs=random_dataset(num=4, input_len=16, output_len=16, seed=1)))
    assert s["achieved_concurrency_max"] == 2 and s["flags"]["concurrency_shortfall"] is False


def _stored(c: int, tok_s: float, *, peak: int | None = None, sent: int | None = None) -> SweepPoint:
    """A point as the sweep service reads a stored summary: measured (``peak``: the run's
    ``achieved_concurrency_max``, flagged by the old rule, i.e. not at all) or imported (``sent``
    requests, no peak)."""
    summary = {"output_throughput_tok_s": tok_s, "ttft_s": {"mean": 0.010}, "tpot_s": {"mean": 0.001},
               "e2e_s": {"mean": 0.025}, "successes": sent if sent is not None else 2 * c, "failures": 0}
    if peak is not None:
        summary["achieved_concurrency_max"] = peak
    return SweepPoint.from_summary(summary_point(summary=summary, concurrency=c, request_rate=None, input_len=16,
                                                 output_len=16, num_gpus=1, flags=[]))


def test_stored_and_imported_points_below_their_concurrency_are_analysed_at_the_load_they_reached() -> None:
    measured = _stored(3, 1000.0, peak=1)
    assert measured.flags == ("concurrency_shortfall",) and measured.load == 1.0 and measured.label == "c=3"
    imported = _stored(8, 1000.0, sent=2)
    assert imported.flags == ("concurrency_shortfall",) and imported.load == 2.0
    full = _stored(4, 1000.0, peak=4)
    assert full.flags == () and full.load == 4.0
    report = ceiling_analyse([_stored(1, 1000.0, peak=1), measured], num_gpus=1, topology="single")
    text = " ".join(report.findings)
    assert "x3.0 load" not in text and "x1.0 load" in text, text
    assert ("c=3 never had 3 requests in flight: at most 1 at once (concurrency_shortfall), so its load is taken "
            "as 1 in every load ratio and ordering, not its label.") in report.findings


def test_every_point_below_its_concurrency_is_named() -> None:
    with pytest.raises(InvalidInput) as err:
        grid_validate({"concurrency": [4, 8], "lengths": [[64, 16], [32, 8]], "requests": 6})
    assert [m.split(",")[0] for m in err.value.errors["grid.requests"]] == [
        "point c=8 64/16 would send 6 requests", "point c=8 32/8 would send 6 requests"]
