"""Run summary arithmetic on hand-made records (formulas of metrics.md)."""
from __future__ import annotations

import math
from array import array

import numpy as np
import pytest

from benchmarks.loadgen import (
    Api, LoadConfig, RecordStore, RequestOutcome, RunResult, Slo, WorkerStats, distribution, in_flight,
    nearest_rank, run_summary,
)
from benchmarks.views import record_arrays
from benchmarks.views.run_pages import _check_facts

MS = 1_000_000


def result_of(outcomes: list[RequestOutcome], **cfg: object) -> RunResult:
    store = RecordStore()
    for o in outcomes:
        store.add(o)
    config = LoadConfig(base_url="http://x", api=Api.CHAT, model="m", concurrency=2, **cfg)  # type: ignore[arg-type]
    return RunResult(records=store, config=config, t0=0, workers=[WorkerStats(0, 1 * MS, 100 * MS, 100, len(outcomes))])


def req(start_ms: int, events_ms: list[int], end_ms: int, tokens: int, ok: bool = True,
        ev_tokens: list[int] | None = None) -> RequestOutcome:
    return RequestOutcome(scheduled=start_ms * MS, start=start_ms * MS, end=end_ms * MS,
                          events=array("q", [e * MS for e in events_ms]),
                          event_tokens=array("H", ev_tokens or [0] * len(events_ms)), output_tokens=tokens,
                          input_tokens=10, ok=ok, error=None if ok else "boom")


def test_it_computes_ttft_tpot_e2e_and_throughput() -> None:
    r = result_of([req(0, [100, 200, 300], 310, 3), req(100, [150, 250], 400, 2), req(0, [], 50, 0, ok=False)])
    s = run_summary(r, slo=Slo(ttft_s=0.08))
    assert s["ttft_s"]["mean"] == pytest.approx((0.1 + 0.05) / 2)
    assert s["tpot_s"]["mean"] == pytest.approx((0.1 + 0.1) / 2)
    assert s["e2e_s"]["p50"] == pytest.approx(0.225)
    assert s["duration_s"] == pytest.approx(0.4)
    assert s["output_throughput_tok_s"] == pytest.approx(5 / 0.4)
    assert s["request_throughput_req_s"] == pytest.approx(2 / 0.4)
    assert s["total_token_throughput_tok_s"] == pytest.approx((5 + 20) / 0.4)
    assert s["goodput_req_s"] == pytest.approx(1 / 0.4)
    assert s["slo_attainment"] == pytest.approx(1 / 3)  # over all requests sent, the failure included
    assert s["error_adjusted"]["ttft_s"]["p99"] == math.inf
    assert s["error_adjusted"]["ttft_s"]["p50"] == pytest.approx(0.1)


def test_it_gives_per_token_itl_when_chunks_carry_known_token_counts() -> None:
    s = run_summary(result_of([req(0, [10, 30, 70], 80, 7, ev_tokens=[1, 2, 4])]))
    assert s["itl_s"]["count"] == 2 and s["itl_s"]["mean"] == pytest.approx(0.03)
    assert s["itl_per_token_s"]["count"] == 6
    assert s["itl_per_token_s"]["mean"] == pytest.approx((2 * 0.01 + 4 * 0.01) / 6)


def test_it_uses_linear_interpolation_and_nearest_rank() -> None:
    d = distribution(np.array([1.0, 2.0, 3.0, 4.0]))
    assert (d["p50"], d["p90"]) == pytest.approx((2.5, 3.7))
    assert d["std"] == pytest.approx(np.sqrt(1.25))
    assert nearest_rank(np.array([1.0, 2.0, 3.0, np.inf]), 50) == 2.0
    assert nearest_rank(np.array([1.0, 2.0, 3.0, np.inf]), 90) == math.inf


def test_it_measures_time_weighted_and_peak_concurrency() -> None:
    mean, peak = in_flight(np.array([0, 0, 50]), np.array([100, 50, 100]), 0, 100)
    assert mean == pytest.approx(2.0)
    assert peak == 2  # the request ending at 50 and the one starting at 50 do not overlap


def test_it_flags_a_server_token_count_that_disagrees_by_more_than_2_percent() -> None:
    r = result_of([req(0, [10, 20], 30, 100)])
    r.server_tokens_before, r.server_tokens_after = 1000.0, 1103.0
    assert run_summary(r)["flags"]["server_token_mismatch"] is True
    r.server_tokens_after = 1101.0
    assert run_summary(r)["flags"]["server_token_mismatch"] is False


def test_it_flags_a_cpu_bound_client() -> None:
    r = result_of([req(0, [10, 20], 30, 2)])
    r.workers = [WorkerStats(0, cpu_ns=95 * MS, wall_ns=100 * MS, events=2000, requests=1)]
    s = run_summary(r)
    assert s["flags"]["client_cpu_bound"] is True
    assert s["client_cpu_us_per_event"] == pytest.approx(47.5)


def test_it_gives_no_cpu_per_event_over_too_few_events_and_no_cpu_flag_without_output() -> None:
    # 128 events: a sweep worker's background CPU would read as ~1 ms per event.
    r = result_of([req(0, [10, 20], 30, 2)])
    r.workers = [WorkerStats(0, cpu_ns=95 * MS, wall_ns=100 * MS, events=128, requests=1)]
    s = run_summary(r)
    assert s["client_cpu_us_per_event"] is None
    assert s["client_cpu_note"] == ("128 streamed events at 1280 events/s: too few (< 1000) or too sparse (< 500/s) "
                                    "to attribute the client's CPU per event")
    # Enough events, but sparse: 4096 events over 160 s (a sim decode at c=16).
    sparse = result_of([req(0, [10, 20], 30, 2)])
    sparse.workers = [WorkerStats(0, cpu_ns=1800 * MS, wall_ns=160_000 * MS, events=4096, requests=16)]
    assert run_summary(sparse)["client_cpu_us_per_event"] is None
    assert s["flags"]["client_cpu_bound"] is True  # the share of a core is measured whatever the event count
    # Refused connections in a tight loop: busy, but nothing streamed, so nothing was slowed.
    failed = result_of([req(0, [], 30, 0, ok=False)])
    failed.workers = [WorkerStats(0, cpu_ns=99 * MS, wall_ns=100 * MS, events=5000, requests=500)]
    assert run_summary(failed)["flags"]["client_cpu_bound"] is False


def test_a_request_whose_output_came_in_one_read_is_left_out_of_tpot() -> None:
    # Three tokens 100 ms apart (TPOT 100 ms), and three tokens in one read at 100 ms (E2E - TTFT = 0).
    r = result_of([req(0, [100, 200, 300], 310, 3), req(0, [100, 100, 100], 110, 3), req(0, [100], 110, 1)])
    s = run_summary(r, slo=Slo(tpot_s=0.05))
    assert s["tpot_s"]["count"] == 1 and s["tpot_s"]["mean"] == pytest.approx(0.1)
    assert s["tpot_s"]["p50"] == pytest.approx(0.1)
    assert s["tpot_unmeasured"] == 1
    # The one-token request meets the TPOT SLO (not applicable); the one-read request's TPOT is
    # unknown, so it is not known to meet it (test_goodput_does_not_count_an_unmeasured_tpot_as_met).
    assert s["goodput_req_s"] == pytest.approx(1 / 0.31)
    assert s["slo_tpot_not_applicable"] == 1 and s["slo_tpot_unmeasured"] == 1
    # The run page's TPOT CDF, from the same records, leaves it out too.
    assert record_arrays(r.records)["tpot"].tolist() == pytest.approx([100.0])
    assert ("Requests left out of TPOT", 1, "requests",
            "all their output came in one network read, so E2E − TTFT is 0 from the client's side: their TPOT was "
            "not measured") in _check_facts(s)


def test_itl_coalesced_is_raised_from_one_zero_gap_in_ten() -> None:
    # 10 gaps of 20 ms, one of them zero: 10 % of the gaps, flagged; 9 of 91 gaps zero (9.9 %), not.
    ten = [0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 180]
    s = run_summary(result_of([req(0, ten, 190, 11)]))
    assert s["itl_zero_gap_fraction"] == pytest.approx(0.1) and s["flags"]["itl_coalesced"] is True
    events = sorted([20 * i for i in range(83)] + [20 * i for i in range(9)])
    assert len(events) - 1 == 91
    s = run_summary(result_of([req(0, events, 1700, 92)]))
    assert s["itl_zero_gap_fraction"] == pytest.approx(9 / 91) and round(100 * 9 / 91, 1) == 9.9
    assert s["flags"]["itl_coalesced"] is False


def test_goodput_does_not_count_an_unmeasured_tpot_as_met() -> None:
    # TPOT 100 ms measured; three tokens in one read (TPOT unknown, not 0); one token (no TPOT).
    r = result_of([req(0, [100, 200, 300], 310, 3), req(0, [100, 100, 100], 110, 3), req(0, [100], 110, 1)])
    s = run_summary(r, slo=Slo(tpot_s=0.2))
    # The measured request meets 200 ms, the one-token one is not applicable (met), the one-read
    # one is not known to meet it: 2 of 3, over 310 ms.
    assert s["slo_attainment"] == pytest.approx(2 / 3) and s["goodput_req_s"] == pytest.approx(2 / 0.31)
    assert s["slo_tpot_unmeasured"] == 1 and s["flags"]["tpot_slo_unmeasured"] is True
    assert s["slo_tpot_not_applicable"] == 1 and s["flags"]["tpot_slo_not_applicable"] is True
    assert ("Requests the TPOT SLO could not judge", 1, "requests",
            "output all in one network read, so their TPOT was not measured: not counted as meeting the TPOT SLO, "
            "so goodput may leave out up to this many requests that met it") in _check_facts(s)
    # Without a TPOT SLO there is nothing to judge: every request meets a TTFT SLO of 150 ms.
    ttft_only = run_summary(r, slo=Slo(ttft_s=0.15))
    assert ttft_only["slo_attainment"] == 1.0 and ttft_only["goodput_req_s"] == pytest.approx(3 / 0.31)
    assert ttft_only["slo_tpot_unmeasured"] == 0 and ttft_only["flags"]["tpot_slo_unmeasured"] is False
    assert not any(f[0] == "Requests the TPOT SLO could not judge" for f in _check_facts(ttft_only))
