"""A one-request-at-a-time engine (llama.cpp on a CPU) is at its ceiling from c=1: throughput that
stays flat while load grows many-fold reads as a ceiling reached at the lowest load, and a point
that drops to 0.72x of a lighter one on the way is reported as a fall, in findings that agree."""
from __future__ import annotations

from benchmarks.analysis import FALL_FRACTION, FLAT_MIN_LOAD_GROWTH, LatencyStats, SweepPoint, ceiling_analyse


def point(c: int, tok_s: float, tpot_ms: float, ttft_ms: float) -> SweepPoint:
    return SweepPoint(concurrency=c, output_throughput_tok_s=tok_s, tpot_ms=LatencyStats(mean=tpot_ms),
                      ttft_ms=LatencyStats(mean=ttft_ms), input_len=256, output_len=64)


# The demo's llama.cpp sweep: 619.8 tok/s at c=1, 443.9 at c=8 (x0.72), 636 at c=16 (x1.03 of c=1).
DEMO = [point(1, 619.8, 1.6, 12.0), point(4, 601.2, 1.6, 320.0), point(8, 443.9, 1.7, 1010.0),
        point(16, 636.0, 1.6, 1580.0)]


def test_a_flat_sweep_reaches_its_ceiling_at_the_lowest_load_and_its_dip_is_a_fall() -> None:
    assert FLAT_MIN_LOAD_GROWTH <= 16 and 443.9 / 619.8 < FALL_FRACTION
    r = ceiling_analyse(DEMO, num_gpus=1, topology="single")
    c = r.ceiling
    assert c.source == "observed_plateau" and c.plateau_from_label == "c=1"
    assert c.reached and c.reached_at_label == "c=1"
    assert c.falls
    assert r.bottleneck == "queueing"
    assert not any("No ceiling is reached" in f for f in r.findings), r.findings
    assert any(f.startswith("Requests queue for admission") and "from c=1 to c=4 (x4.0 load) mean TTFT grows x26.7 "
               "while throughput stays flat (x0.97); from c=4 to c=8" in f for f in r.findings), r.findings
    assert any(f.startswith("The ceiling is about 636 tok/s (observed at c=16") and f.endswith("reached by c=1.")
               for f in r.findings), r.findings
    assert "Throughput plateaus at 444-636 tok/s from c=1: going to c=16 (x16.0 load) changes it by +3% " \
           "(620 -> 636 tok/s)." in r.findings
    assert ("Throughput falls on the way, from 620 tok/s at c=1 to 444 tok/s at c=8, x0.72 for x8.0 load "
            "(a fall is below x0.81), before 636 tok/s at c=16; this points at overload (no request failed) "
            "at that point, not at a ceiling above the best point (636 tok/s at c=16).") in r.findings, r.findings


def test_a_shallow_dip_is_noise_and_a_short_flat_sweep_needs_a_shallow_one() -> None:
    # x0.87 is above FALL_FRACTION: noise, no fall.
    shallow = [point(1, 385.2, 2.5, 9.0), point(8, 337.3, 2.9, 1270.0), point(16, 391.3, 2.4, 2408.0)]
    r = ceiling_analyse(shallow, num_gpus=1, topology="single")
    assert r.ceiling.source == "observed_plateau" and not r.ceiling.falls
    assert not any(f.startswith("Throughput falls") for f in r.findings)
    # Over only x2 load a deep dip is no plateau; the fall is still said, with its own numbers.
    short = [point(1, 620.0, 1.6, 12.0), point(2, 430.0, 1.6, 300.0), point(2, 610.0, 1.6, 700.0)]
    r = ceiling_analyse(short, num_gpus=1, topology="single")
    assert r.ceiling.falls
    assert not any("No ceiling is reached" in f for f in r.findings), r.findings


def test_a_nearly_flat_sweep_with_a_deep_dip_over_a_narrow_load_range_says_it_cannot_tell() -> None:
    # 100, 84, 105 tok/s at c=1, 2, 3: 84 is x0.80 of the best (deeper than noise, so no plateau
    # over x3 load) but x0.84 of c=1 (not a fall); end to end throughput is flat within 10 %.
    narrow = [point(1, 100.0, 1.6, 12.0), point(2, 84.0, 1.6, 300.0), point(3, 105.0, 1.6, 700.0)]
    r = ceiling_analyse(narrow, num_gpus=1, topology="single")
    assert r.ceiling.source is None and not r.ceiling.falls
    assert not any("No ceiling is reached" in f for f in r.findings), r.findings
    assert ("The load range is too narrow to tell whether a ceiling is reached: throughput grows x1.1 for x3.0 "
            "load from c=1 to c=3, dipping to 84.0 tok/s at c=2 (x0.80 of the best) on the way; a nearly flat "
            "sweep reads as a ceiling at the lowest load over x1.5 load with no point below x0.81 of the best, or "
            "over x4 load whatever the dip; sweep to higher load to tell (best observed 105 tok/s at c=3).") \
        in r.findings, r.findings
    # The same shape over x4 load is a ceiling at the lowest load; a real rise still says no ceiling.
    wide = [point(1, 100.0, 1.6, 12.0), point(2, 84.0, 1.6, 300.0), point(4, 105.0, 1.6, 700.0)]
    assert ceiling_analyse(wide, num_gpus=1, topology="single").ceiling.plateau_from_label == "c=1"
    rising = [point(1, 100.0, 1.6, 12.0), point(2, 84.0, 1.6, 300.0), point(3, 140.0, 1.6, 700.0)]
    assert any(f.startswith("No ceiling is reached: throughput grows x1.4")
               for f in ceiling_analyse(rising, num_gpus=1, topology="single").findings)


def test_a_queueing_sweep_whose_throughput_outgrew_its_load_early_never_says_it_grew_only() -> None:
    """The demo's llama.cpp sweep on a busy host: throughput grew x19.9 from c=1 to c=16 (x16 load)
    because c=1 was slow, and the queueing is in the last step alone; the sentence quotes that step."""
    sweep = [point(1, 22.3, 40.0, 30.0), point(8, 451.1, 1.6, 300.0), point(16, 444.2, 1.6, 1300.0)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.bottleneck == "queueing"
    queue = [f for f in r.findings if f.startswith("Requests queue for admission")]
    assert queue == ["Requests queue for admission: mean TTFT is 1.3 s of 1.4 s mean E2E at c=16, and from c=8 to "
                     "c=16 (x2.0 load) mean TTFT grows x4.3 while throughput stays flat (x0.98); more load there "
                     "only adds waiting."], r.findings
    assert not any("x19.9" in f and "only" in f for f in r.findings)
