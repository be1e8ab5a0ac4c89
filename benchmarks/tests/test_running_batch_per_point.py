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


# --- the what-if quotes the analysis' figures ------------------------------------------------------


def _stored_sweep(engine: str):
    from benchmarks.models import BenchmarkRun, BenchmarkSweep

    snapshot = {"spec": {"sim": {"profile": "seed-sm120-fallback"}}} if engine == "sim" else {}
    sweep = BenchmarkSweep.objects.create(name="per-point", engine=engine, topology="single", status="done",
                                          num_gpus=1, snapshot=snapshot)
    for i, p in enumerate(SWEEP):
        steps = {"step_s": p.decode_step_ms / 1000, "batch_mean": p.decode_batch, "stall_share": 0.0}
        BenchmarkRun.objects.create(
            sweep=sweep, ordinal=i, status="done", concurrency=p.concurrency, input_len=1024, output_len=128,
            num_requests=4 * p.concurrency, flags=list(p.flags), summary={
                "output_throughput_tok_s": p.output_throughput_tok_s, "ttft_ms": {"mean": 30.0},
                "tpot_ms": {"mean": p.tpot_ms.mean}, "successes": 4 * p.concurrency, "failures": 0,
                "decode_steps": steps})
    return sweep


@pytest.mark.django_db
def test_the_whatif_of_a_fitted_sweep_uses_the_analysis_running_batch(viewer_api) -> None:
    from benchmarks.services import sweep_analysis
    from kernels.whatif import whatif_compute

    sweep = _stored_sweep("sglang")
    report = sweep_analysis(sweep=sweep)["lengths"]["1024/128"]
    assert [p["running_batch_source"] for p in report["points"]] == ["littles_law", "decode_events", "decode_events"]
    out = whatif_compute(sweep=sweep, speedup=2.0)
    rows = out["lengths"]["1024/128"]
    assert [r["running_batch"] for r in rows] == [pytest.approx(0.76), 3.9, 7.8]
    assert [r["measured_running_batch"] for r in rows] == [pytest.approx(0.76), 3.9, 7.8]
    assert [r["running_batch_source"] for r in rows] == ["littles_law", "decode_events", "decode_events"]
    fit = report["fit"]
    # c=4 by hand: TPOT(3.9) = fixed + per_seq x 3.9, the line through the analysis' own points.
    assert rows[1]["model_tpot_ms"] == pytest.approx(fit["fixed_ms"] + fit["per_seq_ms"] * 3.9)
    api = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "speedup": 2}).json()
    assert [r["measured_running_batch"] for r in api["lengths"]["1024/128"]] == [pytest.approx(0.76), 3.9, 7.8]
    assert not any("running batch" in n for n in api["notes"])


@pytest.mark.django_db
def test_the_whatif_of_a_sim_sweep_says_why_its_running_batch_differs(viewer, viewer_api) -> None:
    from django.test import Client

    sweep = _stored_sweep("sim")
    api = viewer_api.get("/api/kernel-whatif/", {"sweep": sweep.pk, "speedup": 2}).json()
    rows = api["lengths"]["1024/128"]
    # The seed profile: 1024 + 64 KV tokens a sequence, 5376 in the cache: at most 4 at once.
    assert [r["running_batch"] for r in rows] == [1.0, 4.0, 4.0]
    assert [r["measured_running_batch"] for r in rows] == [pytest.approx(0.76), 3.9, 7.8]
    [note] = [n for n in api["notes"] if n.startswith("the running batch of the sim-profile model")]
    assert ("(1024/128 c=1: model 1.0, analysis 0.76; 1024/128 c=4: model 4.0, analysis 3.90; 1024/128 c=8: "
            "model 4.0, analysis 7.80)") in note
    assert "so using it there would count that time twice" in note
    client = Client()
    client.force_login(viewer)
    html = client.get(f"/kernels/whatif/?sweep={sweep.pk}&speedup=2").content.decode()
    assert "Running batch, model / ceiling analysis (sequences)" in html
    assert "3.90 <span class=\"muted small\">(decode events)</span>" in html
    assert "the running batch of the sim-profile model is not the ceiling analysis&#x27;" in html
