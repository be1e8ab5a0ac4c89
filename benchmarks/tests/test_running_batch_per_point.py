"""The running batch is decided point by point: a point with trustworthy per-event records uses
them, a coalesced or imported point falls back to Little's law on its own, and each point names
its source; the what-if quotes the analysis' figures."""
from __future__ import annotations

import pytest

from benchmarks.analysis import LatencyStats, SweepPoint, ceiling_analyse, point_running_batch


def _pt(c: int, tok_s: float, tpot: float, **extra: object) -> SweepPoint:
    return SweepPoint(concurrency=c, output_throughput_tok_s=tok_s, tpot_ms=LatencyStats(mean=tpot),
                      ttft_ms=LatencyStats(mean=30.0), input_len=1024, output_len=128, **extra)


# The reported sweep: c=1 flagged itl_coalesced, c=4 and c=8 with per-event decode steps.
SWEEP = [
    _pt(1, 152.0, 5.0, decode_step_ms=1.2, decode_batch=1.0, flags=("itl_coalesced",)),
    _pt(4, 400.0, 7.625, decode_step_ms=7.66, decode_batch=3.9),
    _pt(8, 640.0, 9.9, decode_step_ms=9.5, decode_batch=7.8),
]


def test_each_point_uses_its_own_per_event_estimate_and_names_its_source() -> None:
    r = ceiling_analyse(SWEEP, num_gpus=1, topology="single")
    assert [p.running_batch_source for p in r.points] == ["littles_law", "decode_events", "decode_events"]
    # c=1: tok/s x TPOT = 152 x 5.0 ms = 0.76 sequences; c=4 and c=8: the measured batch and step.
    assert [p.running_batch for p in r.points] == [pytest.approx(0.76), 3.9, 7.8]
    assert [p.step_ms for p in r.points] == [5.0, 7.66, 9.5]
    assert r.fit.batch_source == "mixed"
    assert r.fit.batch_sources == ["littles_law", "decode_events", "decode_events"]
    assert r.fit.running_batch == [pytest.approx(0.76), 3.9, 7.8]
    assert r.fit.steps_ms == [5.0, 7.66, 9.5]
    sentence = next(f for f in r.findings if f.startswith("Decode step time"))
    assert ("the running batch comes from the requests between their first and last output event, counted at each "
            "output event, at c=4, c=8, and Little's law (running batch = tok/s x mean TPOT, capped at the "
            "concurrency) at c=1, whose output events came coalesced or were not recorded: 0.8 at c=1, 3.9 at c=4, "
            "7.8 at c=8.") in sentence
    assert sentence.startswith("Decode step time (mean gap between output events, decode pauses left out, at c=4, "
                               "c=8; mean TPOT at c=1) fits ")


def test_one_function_gives_the_batch_the_report_quotes() -> None:
    r = ceiling_analyse(SWEEP, num_gpus=1, topology="single")
    for p, a in zip(SWEEP, r.points):
        assert point_running_batch(p) == (a.running_batch, a.step_ms, a.running_batch_source)
    assert point_running_batch(SWEEP[0], batch_source="decode_events") == (None, None, None)
    assert point_running_batch(SWEEP[1], batch_source="littles_law") == (pytest.approx(3.05), 7.625, "littles_law")


def test_a_sweep_of_one_source_keeps_that_source() -> None:
    measured = [_pt(c, 1000.0 * c / (4 + c), 4.0 + c, decode_step_ms=4.0 + c, decode_batch=float(c)) for c in (1, 4, 8)]
    assert ceiling_analyse(measured, num_gpus=1, topology="single").fit.batch_source == "decode_events"
    imported = [_pt(c, 1000.0 * c / (4 + c), 4.0 + c) for c in (1, 4, 8)]
    r = ceiling_analyse(imported, num_gpus=1, topology="single")
    assert r.fit.batch_source == "littles_law" and r.fit.batch_sources == ["littles_law"] * 3
