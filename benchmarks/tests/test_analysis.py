"""Ceiling analysis: the seed table, a measured sim sweep, and synthetic sweeps with known answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.analysis import LatencyStats, SweepPoint, ceiling_analyse
from controlplane.errors import InvalidInput

DATA = Path(__file__).parent / "data"


def point(c: int, tok_s: float, tpot_ms: float, ttft_ms: float, *, input_len: int = 256, output_len: int = 256,
          **extra: object) -> SweepPoint:
    return SweepPoint(concurrency=c, output_throughput_tok_s=tok_s, tpot_ms=LatencyStats(mean=tpot_ms),
                      ttft_ms=LatencyStats(mean=ttft_ms), input_len=input_len, output_len=output_len, **extra)


# The seed table (architecture.md): PD on 8 GPUs at c = 1, 8, 16; single-node TP4 on 4 GPUs at bs = 1.
SEED_PD = [point(1, 9.95, 94, 893), point(8, 24.5, 282, 2000), point(16, 25.0, 510, 8800)]
SEED_SINGLE = [point(1, 10.2, 94, 696)]


def closed_loop(fixed_ms: float, per_seq_ms: float, concurrencies: list[int], *, max_running: int | None = None,
                ttft_ms: float = 50.0) -> list[SweepPoint]:
    """A sweep whose decode step is exactly fixed + per_seq * running, running = min(c, max_running)."""
    out = []
    for c in concurrencies:
        running = min(c, max_running or c)
        step = fixed_ms + per_seq_ms * running
        out.append(point(c, 1000.0 * running / step, step, ttft_ms * (c / running)))
    return out


def test_it_concludes_decode_bound_plateau_and_no_pd_gain_on_the_seed_table() -> None:
    r = ceiling_analyse(SEED_PD, num_gpus=8, topology="pd", compare_with=SEED_SINGLE, compare_num_gpus=4,
                        compare_topology="single")
    assert r.bottleneck == "decode"
    assert r.fit.possible and r.fit.batch_source == "littles_law" and r.fit.n_points == 3
    # Little's law: running = tok/s x TPOT, not the concurrency.
    assert r.fit.running_batch == pytest.approx([9.95 * 0.094, 24.5 * 0.282, 25.0 * 0.510])
    assert r.fit.fixed_ms == pytest.approx(53.7, abs=0.1)
    assert r.fit.per_seq_ms == pytest.approx(35.2, abs=0.1)
    assert r.fit.r_squared == pytest.approx(0.996, abs=0.001)
    assert [round(x, 1) for x in r.fit.residuals_ms] == [7.4, -14.9, 7.5]
    assert r.ceiling.source == "observed_plateau"
    assert r.ceiling.tok_s == 25.0 and r.ceiling.plateau_from_label == "c=8"
    assert (r.ceiling.plateau_min_tok_s, r.ceiling.plateau_max_tok_s) == (24.5, 25.0)
    assert r.ceiling.reached_at_label == "c=8"
    assert r.ceiling.asymptote_tok_s == pytest.approx(28.4, abs=0.05)
    assert [s.queueing for s in r.queueing] == [False, True]
    assert r.queueing[1].ttft_growth == pytest.approx(4.4)
    cmp = r.comparison
    assert cmp is not None and cmp.basis == "same_concurrency" and cmp.verdict == "no_gain"
    assert [m.label for m in cmp.matched] == ["c=1"]
    assert cmp.matched[0].tok_s_per_gpu == pytest.approx(1.244, abs=0.001)
    assert cmp.matched[0].other_tok_s_per_gpu == pytest.approx(2.55)
    assert cmp.per_gpu_ratio == pytest.approx(0.488, abs=0.001)
    assert r.findings == [
        "Decode step time (mean TPOT) fits 54 ms + 35.2 ms per running sequence (R² 0.996 over 3 points, largest "
        "residual 15 ms); the running batch comes from Little's law (running batch = tok/s x mean TPOT, capped at "
        "the concurrency): 0.9 at c=1, 6.9 at c=8, 12.8 at c=16.",
        "Decode is the bottleneck: mean TPOT grows from 94 ms at c=1 to 510 ms at c=16 (fit 54 ms + 35.2 ms per "
        "running sequence, R² 0.996), and decode takes 94% of mean E2E at c=16.",
        "Throughput plateaus at 24.5-25.0 tok/s from c=8: going to c=16 (x2.0 load) changes it by +2% "
        "(24.5 -> 25.0 tok/s).",
        "The ceiling is about 25.0 tok/s (observed at c=16, 3.12 tok/s per GPU on 8 GPUs); 90% of it is reached "
        "by c=8.",
        "The fit's asymptote, 28.4 tok/s (1000 / 35.2 ms per sequence), bounds what any batch size could give "
        "on this decode path.",
        "Queueing from c=8 to c=16: mean TTFT grows x4.4 while throughput changes x1.02 (x2.0 load).",
        "At c=1, 256/256 tokens in/out: PD gives 9.95 tok/s on 8 GPUs (1.24 tok/s per GPU); single-node gives "
        "10.2 tok/s on 4 GPUs (2.55 tok/s per GPU): x0.49 per GPU for PD.",
        "PD gives no gain per GPU over single-node, compared at the same concurrency (c=1).",
        "PD's best, 25.0 tok/s at c=16 (3.12 tok/s per GPU), has no single-node run at that concurrency, so it "
        "is not compared.",
    ]


def test_it_reaches_the_same_conclusions_on_a_measured_sim_sweep_of_the_seed_profile() -> None:
    raw = json.loads((DATA / "sim-seed-sm120-fallback-sweep.json").read_text())
    pd = [SweepPoint.from_summary(p) for p in raw["pd"]["points"]]
    single = [SweepPoint.from_summary(p) for p in raw["single"]["points"]]
    r = ceiling_analyse(pd, num_gpus=raw["pd"]["num_gpus"], topology="pd", compare_with=single,
                        compare_num_gpus=raw["single"]["num_gpus"], compare_topology="single")
    assert r.bottleneck == "decode"
    assert 25.0 <= r.ceiling.tok_s <= 30.0 and r.ceiling.plateau_from_label == "c=8"
    assert r.ceiling.asymptote_tok_s == pytest.approx(31.0, abs=0.1)
    assert r.fit.r_squared > 0.99
    assert r.comparison is not None and r.comparison.verdict == "no_gain"
    assert r.comparison.per_gpu_ratio == pytest.approx(0.495, abs=0.005)
    assert "Decode is the bottleneck: mean TPOT grows from 94 ms at c=1 to 489 ms at c=16" in r.findings[1]
    assert r.findings[2].startswith("Throughput plateaus at 25.4-27.0 tok/s from c=8")
    assert "PD gives no gain per GPU over single-node, compared at the same concurrency (c=1)." in r.findings


def test_it_recovers_a_known_fixed_and_per_sequence_cost() -> None:
    r = ceiling_analyse(closed_loop(40.0, 5.0, [1, 2, 4, 8, 16, 32]), num_gpus=1, topology="single")
    assert r.fit.running_batch == pytest.approx([1, 2, 4, 8, 16, 32])
    assert r.fit.fixed_ms == pytest.approx(40.0)
    assert r.fit.per_seq_ms == pytest.approx(5.0)
    assert r.fit.r_squared == pytest.approx(1.0)
    assert max(abs(x) for x in r.fit.residuals_ms) < 1e-9
    # Still rising at c=32 (160 tok/s, 80% of 1000 / 5 ms): the ceiling comes from the fit, not reached.
    assert r.ceiling.source == "fit_asymptote" and r.ceiling.tok_s == pytest.approx(200.0)
    assert not r.ceiling.reached
    assert r.ceiling.batch_for_fraction == pytest.approx(72.0)  # 0.9 C: b = 9 f / p
    assert r.bottleneck == "decode"
    assert ("The fit puts the ceiling at 200 tok/s (1000 / 5.0 ms per sequence); the best observed is 160 tok/s "
            "at c=32 (80% of it).") in r.findings
    assert ("90% of the ceiling needs a running batch of about 72 sequences (so a concurrency of at least 72), "
            "beyond this sweep: an extrapolation.") in r.findings


def test_it_bounds_the_ceiling_by_the_engines_running_batch_cap() -> None:
    r = ceiling_analyse(closed_loop(40.0, 5.0, [1, 2, 4, 8, 16, 32]), num_gpus=1, topology="single",
                        max_running_batch=32)
    assert r.ceiling.source == "fit_capped"
    assert r.ceiling.capped_tok_s == pytest.approx(160.0)  # 32 / (40 + 5 * 32) ms
    assert r.ceiling.reached_at_label == "c=32"


def test_it_uses_littles_law_when_not_every_request_is_in_the_decode_batch() -> None:
    # KV capacity holds 8 sequences: from c=8 on, the rest wait and TTFT grows instead.
    sweep = closed_loop(40.0, 5.0, [1, 2, 4, 8, 16, 32], max_running=8)
    r = ceiling_analyse(sweep, num_gpus=2, topology="single")
    assert r.fit.running_batch == pytest.approx([1, 2, 4, 8, 8, 8])
    assert (r.fit.fixed_ms, r.fit.per_seq_ms) == (pytest.approx(40.0), pytest.approx(5.0))
    assert r.ceiling.source == "observed_plateau" and r.ceiling.tok_s == pytest.approx(100.0)
    assert r.ceiling.plateau_from_label == "c=8"
    assert [s.queueing for s in r.queueing] == [False, False, False, True, True]
    naive = ceiling_analyse(sweep, num_gpus=2, topology="single", batch_source="concurrency")
    assert naive.fit.running_batch == [1, 2, 4, 8, 16, 32]
    assert naive.fit.per_seq_ms < 2.0 and naive.fit.r_squared < 0.6  # the wrong batch hides the cost
    assert "the running batch comes from the concurrency (every request assumed in the batch)" in naive.findings[0]


def test_it_classifies_a_prefill_bound_sweep() -> None:
    # 4096-token prompts, 32 output tokens: TTFT dominates and grows, throughput still grows, TPOT flat.
    sweep = [point(1, 25.3, 15.0, 800.0, input_len=4096, output_len=32),
             point(2, 38.4, 15.2, 1200.0, input_len=4096, output_len=32),
             point(4, 51.9, 15.1, 2000.0, input_len=4096, output_len=32)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.bottleneck == "prefill"
    assert not r.queueing_detected
    assert r.points[-1].e2e_estimated and r.points[-1].e2e_ms == pytest.approx(2000 + 31 * 15.1)
    assert r.findings[1] == ("Prefill is the bottleneck: mean TTFT is 2.0 s of 2.5 s mean E2E at c=4 (81%), growing "
                             "from 800 ms at c=1 while throughput still grows; mean TPOT stays at 15 ms.")


def test_it_classifies_queueing_when_ttft_grows_and_throughput_is_flat() -> None:
    sweep = [point(4, 100.0, 20.0, 1000.0, output_len=128), point(8, 102.0, 20.0, 3000.0, output_len=128),
             point(16, 101.0, 20.0, 7000.0, output_len=128)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.bottleneck == "queueing" and r.queueing_detected
    assert r.ceiling.source == "observed_plateau" and r.ceiling.plateau_from_label == "c=4"


def test_it_calls_queueing_relative_to_load_when_throughput_grows_far_less_than_load() -> None:
    # llama.cpp (one slot) at c=1, 8, 16: x8 load buys x1.46 throughput while mean TTFT grows x56.8,
    # then x2 load buys x0.94 while TTFT grows x2.2. Both steps queue.
    sweep = [point(1, 200.0, 5.0, 20.0, output_len=64), point(8, 292.0, 5.2, 1136.0, output_len=64),
             point(16, 274.48, 5.1, 2499.2, output_len=64)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert [s.queueing for s in r.queueing] == [True, True]
    assert r.queueing[0].ttft_growth == pytest.approx(56.8) and r.queueing[0].load_growth == 8
    assert ("Requests queue for admission: mean TTFT is 2.5 s of 2.8 s mean E2E at c=16, and from c=1 to c=8 "
            "(x8.0 load) mean TTFT grows x56.8 while throughput grows only (x1.46); from c=8 to c=16 (x2.0 load) "
            "mean TTFT grows x2.2 while throughput falls (x0.94); more load there only adds waiting.") in r.findings
    # The bottleneck sentence quotes every queueing step: they are not said a second time.
    assert not any(f.startswith("Queueing from") for f in r.findings), r.findings
    # TTFT growing less than x1.5 the load's growth is not queueing however little throughput grew,
    # and neither is throughput growing by more than half the load's growth however much TTFT grew.
    short = [point(1, 200.0, 5.0, 20.0, output_len=64), point(8, 292.0, 5.2, 230.0, output_len=64)]
    assert not ceiling_analyse(short, num_gpus=1, topology="single").queueing_detected
    served = [point(1, 200.0, 5.0, 20.0, output_len=64), point(8, 840.0, 5.2, 1136.0, output_len=64)]
    assert not ceiling_analyse(served, num_gpus=1, topology="single").queueing_detected


def test_it_calls_a_flat_sweep_with_one_dip_a_plateau_from_its_first_point() -> None:
    # llama.cpp (one sequence at a time) on a busy 2-core host: 385, 337, 391 tok/s at c=1, 8, 16.
    sweep = [point(1, 385.2, 2.5, 9.0, output_len=64), point(8, 337.3, 2.9, 1270.0, output_len=64),
             point(16, 391.3, 2.4, 2408.0, output_len=64)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.ceiling.source == "observed_plateau" and r.ceiling.plateau_from_label == "c=1"
    assert r.ceiling.reached_at_label == "c=1"
    assert ("Throughput plateaus at 337-391 tok/s from c=1: going to c=16 (x16.0 load) changes it by +2% "
            "(385 -> 391 tok/s).") in r.findings
    assert not any("No ceiling is reached" in f for f in r.findings)
    # A deeper dip over x16 load is still a plateau from c=1, and the dip is reported as a fall.
    deep = [point(1, 385.2, 2.5, 9.0, output_len=64), point(8, 250.0, 2.9, 1270.0, output_len=64),
            point(16, 391.3, 2.4, 2408.0, output_len=64)]
    deep_ceiling = ceiling_analyse(deep, num_gpus=1, topology="single").ceiling
    assert deep_ceiling.source == "observed_plateau" and deep_ceiling.reached_at_label == "c=1" and deep_ceiling.falls


def test_it_names_the_nearest_miss_instead_of_saying_ttft_never_grows() -> None:
    # The demo's PD sweep on a busy host: mean TTFT x1.499 from c=8 to c=16, just under the rule.
    sweep = [point(1, 10.3, 94.1, 906.0), point(8, 25.2, 305.8, 2395.6), point(16, 26.4, 504.6, 3590.6)]
    r = ceiling_analyse(sweep, num_gpus=8, topology="pd")
    assert not r.queueing_detected
    assert ("No queueing by the rule (mean TTFT growing x1.5 or more while throughput grows less than x1.10, "
            "or x1.5 the load's growth or more while throughput grows at most 50% of the load's growth, between "
            "neighbouring points); the nearest: c=8 to c=16, mean TTFT x1.49 with throughput x1.05 (x2.0 load).") \
        in r.findings
    assert not any("never grows" in f for f in r.findings)


def test_it_says_throughput_falls_when_requests_queue_and_it_falls() -> None:
    sweep = [point(1, 385.0, 2.5, 9.0, output_len=64), point(8, 340.0, 2.9, 1270.0, output_len=64),
             point(16, 316.0, 2.4, 2408.0, output_len=64)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    queue = [f for f in r.findings if f.startswith("Requests queue for admission")]
    assert queue == ["Requests queue for admission: mean TTFT is 2.4 s of 2.6 s mean E2E at c=16, and from c=1 "
                     "to c=8 (x8.0 load) mean TTFT grows x141.1 while throughput falls (x0.88); from c=8 to c=16 "
                     "(x2.0 load) mean TTFT grows x1.9 while throughput falls (x0.93); more load there only adds "
                     "waiting."], r.findings


def test_it_says_no_ceiling_is_reached_on_a_linear_sweep() -> None:
    sweep = [point(c, c * 49.4, tpot, 50.0, output_len=128) for c, tpot in ((1, 20.0), (2, 20.2), (4, 20.1), (8, 20.4))]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.ceiling.tok_s is None and r.ceiling.source is None and not r.ceiling.reached
    assert r.bottleneck == "none"
    assert not r.queueing_detected
    assert ("No ceiling is reached: throughput grows x8.0 from c=1 to c=8 (x8.0 load), so the ceiling is above "
            "the best observed 395 tok/s at c=8.") in r.findings
    assert ("No bottleneck is reached: mean TPOT stays at 20 ms from c=1 to c=8, and throughput grows x8.0 for x8.0 "
            "load.") in r.findings


def test_it_refuses_to_fit_too_few_points() -> None:
    r = ceiling_analyse([point(1, 10.0, 94, 700), point(8, 24.0, 280, 2000)], num_gpus=8, topology="pd")
    assert not r.fit.possible
    assert r.fit.fixed_ms is None and r.fit.per_seq_ms is None and r.fit.r_squared is None
    assert r.findings[0] == ("The decode step-time fit is not possible: 2 distinct running batch sizes; at least "
                             "3 are needed for a line whose quality can be judged.")
    assert r.ceiling.asymptote_tok_s is None
    repeats = ceiling_analyse([point(4, 50.0, 60, 100)] * 3, num_gpus=1, topology="single")
    assert not repeats.fit.possible and repeats.bottleneck in ("none", "unknown")
    one = ceiling_analyse([point(1, 10.0, 94, 700)], num_gpus=4, topology="single")
    assert one.bottleneck == "unknown"
    assert "One point (10.0 tok/s at c=1) cannot show a ceiling." in one.findings


def test_it_compares_best_points_when_no_concurrency_matches_and_refuses_different_lengths() -> None:
    r = ceiling_analyse(SEED_PD[1:], num_gpus=8, topology="pd", compare_with=SEED_SINGLE, compare_num_gpus=4,
                        compare_topology="single")
    assert r.comparison is not None and r.comparison.basis == "best_observed"
    assert r.comparison.per_gpu_ratio == pytest.approx(3.125 / 2.55)
    assert r.comparison.verdict == "gain"
    assert "comparing best points at different loads" in r.findings[-1]
    other = ceiling_analyse(SEED_PD, num_gpus=8, topology="pd", compare_with=[point(1, 30.0, 20, 100, input_len=1024)],
                            compare_num_gpus=4, compare_topology="single")
    assert other.comparison is not None and other.comparison.basis == "not_comparable"
    assert other.comparison.verdict is None


def test_it_reports_flagged_failed_and_empty_points() -> None:
    sweep = [*SEED_PD[:2], point(16, 25.0, 510, 8800, flags=("concurrency_not_reached",), completed=29, failed=3),
             point(32, 0.0, 0, 0, completed=0, failed=64)]
    r = ceiling_analyse(sweep, num_gpus=8, topology="pd")
    assert r.excluded == ["c=32 (no successful output)"]
    assert ("c=16 is flagged (concurrency_not_reached) and had 3 failed requests of 32; its numbers are used as "
            "measured.") in r.findings
    assert r.findings[-1] == "Left out: c=32 (no successful output)."


def test_it_says_once_that_points_flagged_alike_are_used_as_measured() -> None:
    """A llama.cpp sweep flags every point tokens_estimated: one sentence names them all, and a point
    flagged alike but with failed requests keeps its own sentence."""
    est = ("tokens_estimated",)
    sweep = [point(1, 479.0, 1.9, 14, flags=est), point(8, 740.0, 1.2, 556, flags=est),
             point(16, 797.0, 1.2, 1051, flags=est), point(32, 800.0, 1.2, 2100, flags=est, completed=63, failed=1)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    flagged = [f for f in r.findings if "flagged" in f]
    assert flagged == [
        "c=1, c=8 and c=16 are flagged (tokens_estimated); their numbers are used as measured.",
        "c=32 is flagged (tokens_estimated) and had 1 failed request of 64; its numbers are used as measured.",
    ]


def test_it_rejects_invalid_sweeps_with_field_paths() -> None:
    with pytest.raises(InvalidInput) as exc:
        ceiling_analyse([point(1, 10, 90, 100), point(2, 20, 90, 100, input_len=1024)], num_gpus=0, topology="pd")
    assert set(exc.value.errors) == {"points", "num_gpus"}
    assert "mixes input/output lengths (1024/256, 256/256)" in exc.value.errors["points"][0]
    with pytest.raises(InvalidInput) as exc:
        ceiling_analyse(SEED_PD, num_gpus=8, topology="pd", compare_with=SEED_SINGLE)
    assert list(exc.value.errors) == ["compare_with"]
    with pytest.raises(InvalidInput, match="output_throughput_tok_s"):
        SweepPoint.from_summary({"concurrency": 1})


def test_it_reads_a_load_generator_summary() -> None:
    p = SweepPoint.from_summary({
        "concurrency": 8, "request_rate": None, "input_len": 256, "output_len": 256,
        "output_throughput_tok_s": 24.5, "request_throughput": 0.09, "num_gpus": 8, "completed": 16, "failed": 0,
        "ttft_ms": {"mean": 2000.0, "p50": 1900.0, "p90": 2600.0, "p99": 2700.0},
        "tpot_ms": {"mean": 282.0, "p50": 280.0}, "itl_ms": {"mean": 281.0}, "e2e_ms": {"median": 73000.0},
        "flags": {"output_length_mismatch": False, "concurrency_not_reached": True}, "extra": "ignored",
    })
    assert p.ttft_ms == LatencyStats(mean=2000.0, p50=1900.0, p90=2600.0, p99=2700.0)
    assert p.e2e_ms.central() == 73000.0 and p.tpot_ms.p90 is None
    assert p.flags == ("concurrency_not_reached",) and p.label == "c=8"
    report = ceiling_analyse(SEED_PD, num_gpus=8, topology="pd")
    assert json.loads(json.dumps(report.as_dict()))["ceiling"]["tok_s"] == 25.0


# A sweep against a server that rejected concurrent requests: c=8 and c=16 answered almost nothing,
# so their survivors saw no load (TPOT 6 and 5 ms, a running batch of 0.1).
REJECTING = [point(1, 40.0, 24.0, 80.0, completed=16, failed=0), point(2, 76.0, 25.0, 90.0, completed=16, failed=0),
             point(4, 140.0, 27.0, 110.0, completed=16, failed=1), point(8, 9.0, 6.0, 20.0, completed=1, failed=15),
             point(16, 12.0, 5.0, 25.0, completed=2, failed=14)]


def test_it_excludes_points_with_too_many_failed_requests_from_every_conclusion() -> None:
    r = ceiling_analyse(REJECTING, num_gpus=1, topology="single")
    assert r.excluded == ["c=8 (15 of 16 requests failed)", "c=16 (14 of 16 requests failed)"]
    assert r.failed_excluded == ["c=8", "c=16"]
    assert [a.label for a in r.points] == ["c=1", "c=2", "c=4"]  # c=4: 1 of 17 failed (6%) stays
    assert r.fit.labels == ["c=1", "c=2", "c=4"]
    assert r.fit.fixed_ms == pytest.approx(23.0, abs=0.1) and r.fit.per_seq_ms == pytest.approx(1.06, abs=0.01)
    assert r.ceiling.observed_max_label == "c=4" and r.ceiling.observed_max_tok_s == 140.0
    assert [(s.from_label, s.to_label) for s in r.queueing] == [("c=1", "c=2"), ("c=2", "c=4")]
    assert r.bottleneck == "none"
    assert r.findings[:2] == [
        "c=8 excluded: 15 of 16 requests failed — fix the failures before reading its latency (more than 10% "
        "failed, so it is left out of the fit, the ceiling, the queueing and the bottleneck).",
        "c=16 excluded: 14 of 16 requests failed — fix the failures before reading its latency (more than 10% "
        "failed, so it is left out of the fit, the ceiling, the queueing and the bottleneck).",
    ]
    assert ("No ceiling is reached: throughput grows x3.5 from c=1 to c=4 (x4.0 load), so the ceiling is above "
            "the best observed 140 tok/s at c=4.") in r.findings
    assert "c=4 had 1 failed request of 17; its numbers are used as measured." in r.findings
    assert not any("c=8 had" in f or "c=16 had" in f or f.startswith("Left out") for f in r.findings)


def test_it_says_the_fit_is_not_possible_when_too_few_points_survive_the_failures() -> None:
    r = ceiling_analyse([REJECTING[0], REJECTING[1], REJECTING[3], REJECTING[4]], num_gpus=1, topology="single")
    assert not r.fit.possible and r.fit.fixed_ms is None and r.fit.n_points == 2
    assert r.findings[2] == ("The decode step-time fit is not possible: 2 distinct running batch sizes once c=8, "
                             "c=16 are excluded for failed requests; at least 3 are needed for a line whose quality "
                             "can be judged.")
    # 2 of 16 failed (12.5%) is over the 10% threshold; 3 of 32 (9.4%) in the seed test is not.
    two = ceiling_analyse([*SEED_PD[:2], point(16, 25.0, 510, 8800, completed=14, failed=2)], num_gpus=8,
                          topology="pd")
    assert two.excluded == ["c=16 (2 of 16 requests failed)"] and not two.fit.possible
    with pytest.raises(InvalidInput) as exc:
        ceiling_analyse(REJECTING[3:], num_gpus=1, topology="single")
    assert exc.value.errors["points"] == [
        "no point is left to analyse: c=8 (15 of 16 requests failed), c=16 (14 of 16 requests failed); more than "
        "10% failed requests make a point's latency unreadable, so fix the failures first"]


def test_it_never_reports_a_negative_per_sequence_cost_as_a_decode_cost() -> None:
    # TPOT rises from c=1 to c=4, but the running batch at c=4 is 0.3: against the batch, TPOT falls.
    sweep = [point(1, 40.0, 24.0, 80.0), point(2, 80.0, 20.0, 85.0), point(4, 10.0, 31.0, 90.0)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.fit.possible and r.fit.per_seq_ms == pytest.approx(-8.5, abs=0.1)
    assert not r.fit.is_decode_cost
    assert r.bottleneck == "unknown"
    assert r.ceiling.asymptote_tok_s is None
    assert r.findings[0] == ("Decode step time (mean TPOT) does not grow with the running batch over the measured "
                             "range: mean TPOT is 31 ms at 0.3 running sequences (c=4) and 20 ms at 1.6 (c=2); a "
                             "straight line through all 3 points (c=1, c=2, c=4) falls (R² 0.977), which no decode step does, so no "
                             "per-sequence decode cost is read from it.")
    assert r.findings[1] == ("The bottleneck cannot be classified: mean TPOT rises from 24 ms at c=1 to 31 ms at "
                             "c=4, but not with the running batch: mean TPOT is 31 ms at 0.3 running sequences (c=4) "
                             "and 20 ms at 1.6 (c=2); so decode is not named the bottleneck.")
    assert not any("per running sequence" in f or "Decode is the bottleneck" in f for f in r.findings)


def test_it_never_reports_a_negative_fixed_cost_as_a_decode_cost() -> None:
    # TPOT = -10 + 10 * c: grows with the batch, but no decode step costs -10 ms at zero sequences.
    sweep = [point(2, 150.0, 10.0, 50.0, output_len=128), point(4, 160.0, 30.0, 50.0, output_len=128),
             point(8, 170.0, 70.0, 50.0, output_len=128)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single", batch_source="concurrency")
    assert (r.fit.fixed_ms, r.fit.per_seq_ms) == (pytest.approx(-10.0), pytest.approx(10.0))
    assert not r.fit.is_decode_cost and r.ceiling.asymptote_tok_s is None
    assert r.bottleneck == "unknown"
    assert r.findings[0] == ("Decode step time (mean TPOT) is not a fixed plus a per-sequence cost over the "
                             "measured range: mean TPOT is 10 ms at 2.0 running sequences (c=2) and 70 ms at 8.0 "
                             "(c=8), but a straight line through all 3 points (c=2, c=4, c=8) crosses zero at 1.0 "
                             "running sequences "
                             "(a negative fixed cost, R² 1.000), which no decode step has, so no decode cost is read "
                             "from it.")
    assert r.bottleneck_reason == ("mean TPOT rises from 10 ms at c=2 to 70 ms at c=8, but the line through mean "
                                   "TPOT against the running batch has a negative fixed cost (-10 ms), which is no "
                                   "decode cost, so decode is not named the bottleneck")


def test_it_says_throughput_falls_instead_of_growing_below_one() -> None:
    sweep = [point(1, 40.0, 24.0, 80.0), point(2, 42.0, 24.5, 85.0), point(4, 30.0, 25.0, 90.0),
             point(8, 12.0, 25.0, 95.0)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.ceiling.falls and r.ceiling.source is None and r.ceiling.observed_max_label == "c=2"
    assert r.bottleneck == "unknown"
    assert ("Throughput falls as load rises, from 42.0 tok/s at c=2, the best point, to 12.0 tok/s at c=8, x0.29 "
            "for x4.0 load; this points at overload (no request failed), not at a ceiling above the best point "
            "(42.0 tok/s at c=2).") in r.findings
    assert not any("grows x0" in f or "No ceiling is reached" in f for f in r.findings)
    # A small fall over too little load for a plateau: still "falls", with the numbers.
    small = ceiling_analyse([point(4, 100.0, 24.0, 80.0), point(5, 95.0, 24.5, 85.0)], num_gpus=1, topology="single")
    assert not small.ceiling.falls and small.bottleneck == "none"
    assert small.findings[1:3] == [
        "No bottleneck is reached: mean TPOT stays at 24 ms from c=4 to c=5, and throughput falls from 100 to "
        "95.0 tok/s (x0.95) for x1.2 load.",
        "Throughput does not grow with load: from c=4 to c=5 it falls from 100 to 95.0 tok/s (x0.95) for x1.2 load; "
        "this points at overload (no request failed), not at a ceiling above the best point (100 tok/s at c=4).",
    ]
    assert not any("grows x0" in f for f in small.findings)
    assert not any("failures" in f for f in r.findings + small.findings)


def test_it_puts_falling_throughput_down_to_failures_only_when_requests_failed() -> None:
    sweep = [point(1, 40.0, 24.0, 80.0, completed=16, failed=0), point(2, 42.0, 24.5, 85.0, completed=16, failed=0),
             point(4, 30.0, 25.0, 90.0, completed=16, failed=1), point(8, 12.0, 25.0, 95.0, completed=31, failed=1)]
    r = ceiling_analyse(sweep, num_gpus=1, topology="single")
    assert r.failed_requests == 2 and r.ceiling.falls
    assert ("Throughput falls as load rises, from 42.0 tok/s at c=2, the best point, to 12.0 tok/s at c=8, x0.29 "
            "for x4.0 load; this points at failures (2 failed requests) or overload, not at a ceiling above the "
            "best point (42.0 tok/s at c=2).") in r.findings
    assert r.bottleneck_reason.endswith("failures (2 failed requests) or overload, not a bottleneck this sweep can "
                                        "name")
    # Failures in a point left out of the analysis still count: they are what the heavier load did.
    excluded = ceiling_analyse([*sweep[:3], point(8, 12.0, 25.0, 95.0, completed=4, failed=12)], num_gpus=1,
                               topology="single")
    assert excluded.failed_requests == 13
    clean = ceiling_analyse([point(c, t, 24.0, 80.0, completed=8, failed=0) for c, t in ((1, 40.0), (2, 42.0),
                                                                                         (4, 30.0), (8, 12.0))],
                            num_gpus=1, topology="single")
    assert clean.failed_requests == 0
    assert "overload (no request failed)" in clean.bottleneck_reason
    assert not any("failures" in f for f in clean.findings)


def test_it_names_the_statistic_of_every_latency_it_quotes() -> None:
    # Imported runs may carry only the median: the sentences then say p50, never an unqualified TPOT.
    medians = [SweepPoint(concurrency=c, output_throughput_tok_s=t, tpot_ms=LatencyStats(p50=tp),
                          ttft_ms=LatencyStats(p50=tt), input_len=256, output_len=256)
               for c, t, tp, tt in ((1, 9.95, 94, 893), (8, 24.5, 282, 2000), (16, 25.0, 510, 8800))]
    r = ceiling_analyse(medians, num_gpus=8, topology="pd")
    assert [a.tpot_stat for a in r.points] == ["p50", "p50", "p50"]
    assert r.findings[0].startswith("Decode step time (p50 TPOT) fits 54 ms")
    assert r.findings[1].startswith("Decode is the bottleneck: p50 TPOT grows from 94 ms at c=1 to 510 ms at c=16")
    assert "Queueing from c=8 to c=16: p50 TTFT grows x4.4" in " ".join(r.findings)
    mixed = ceiling_analyse([SEED_PD[0], *medians[1:]], num_gpus=8, topology="pd")
    assert mixed.findings[1].startswith("Decode is the bottleneck: TPOT (mean, or p50 where a run recorded no mean) "
                                        "grows from 94 ms")
    for report in (r, mixed, ceiling_analyse(SEED_PD, num_gpus=8, topology="pd")):
        for sentence in report.findings:
            for metric in ("TTFT", "TPOT", "E2E"):
                for i in [j for j in range(len(sentence)) if sentence.startswith(metric, j)]:
                    before, after = sentence[max(0, i - 5):i], sentence[i + len(metric):i + len(metric) + 7]
                    assert (before.endswith(("mean ", "p50 ")) or after.startswith(" (mean")
                            or sentence[i + len(metric):].startswith("(")), sentence
