"""A point whose output events came in one network read (``itl_coalesced``: gaps of zero, TPOT about
0 ms, TTFT nearly all of E2E) feeds no bottleneck finding: its TTFT, TPOT and ITL time the reads, not
prefill and decode. Measured on the real sim engine started with ``--stream-coalesce 16``: the events
of a request's 16 output tokens go out in one network write, as a buffering proxy delivers them, so
the client reads them at once whatever the host's scheduling (``--time-scale 0.0001`` keeps the
points short)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.analysis import SweepPoint, ceiling_analyse
from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset, run_summary
from benchmarks.sweeps import summary_point
from benchmarks.tests.sweep_support import sim_start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
# Runs of the steady point before giving up: a busy host can group even 1 ms steps into one read.
MAX_ATTEMPTS = 3
# Output tokens of every request of these tests; the fast sim writes all their events at once.
OUTPUT_LEN = 16


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sim engine whose modelled times are 10,000 times shorter and that writes a request's
    :data:`OUTPUT_LEN` token events in one network write: its tokens come coalesced."""
    base, proc = sim_start(tmp_path_factory.mktemp("sim") / "sim.log", time_scale=0.0001,
                           extra=("--stream-coalesce", str(OUTPUT_LEN)))
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _point(base: str, c: int) -> SweepPoint:
    cfg = LoadConfig(base_url=base, api=Api.GENERATE, model="sim-model", concurrency=c, ignore_eos=True,
                     fixed_output=True)
    s = run_summary(loadgen_run(config=cfg, specs=random_dataset(num=4 * c, input_len=16, output_len=OUTPUT_LEN,
                                                                 seed=c)))
    flags = [k for k, v in s["flags"].items() if v]
    return SweepPoint.from_summary(summary_point(summary=s, concurrency=c, request_rate=None, input_len=16,
                                                 output_len=OUTPUT_LEN, num_gpus=1, flags=flags))


def test_a_coalesced_points_timings_feed_no_bottleneck_finding(sim_url: str, fast_sim: str) -> None:
    for _ in range(MAX_ATTEMPTS):
        steady = _point(sim_url, 1)
        if "itl_coalesced" not in steady.flags:
            break
    assert "itl_coalesced" not in steady.flags, f"c=1 came coalesced on all {MAX_ATTEMPTS} attempts"
    coalesced = _coalesced_point(fast_sim, 3)
    report = ceiling_analyse([steady, coalesced], num_gpus=1, topology="single")
    text = " ".join(report.findings)
    # Judged without c=3 (TTFT all of its E2E, TPOT about 0): one point, no class named.
    assert "Prefill is the bottleneck" not in text and "Decode is the bottleneck" not in text, text
    assert report.bottleneck == "unknown" and report.bottleneck_reason.startswith("one point"), report
    assert ("c=3 is left out of the bottleneck: its output events came grouped into network reads (itl_coalesced), "
            "so its TTFT may hold decode time and its E2E cannot be split into prefill and decode.") in text, text
    assert "Not used: TTFT's share of E2E for the bottleneck" in text
    assert "its numbers are used as measured" not in text, text
    assert report.groups[0].timings_skipped == ["c=3"]


def _coalesced_point(base: str, c: int) -> SweepPoint:
    """A point of the fast sim: every request's token events came in one read."""
    point = _point(base, c)
    assert "itl_coalesced" in point.flags, f"c={c} on the fast sim came event by event: {point}"
    return point


def test_a_sweep_of_coalesced_points_names_no_bottleneck_and_says_why(fast_sim: str) -> None:
    points = [_coalesced_point(fast_sim, c) for c in (3, 6)]
    report = ceiling_analyse(points, num_gpus=1, topology="single")
    assert report.bottleneck == "unknown"
    assert ("The bottleneck cannot be classified: the output events of every point came grouped into network reads "
            "(itl_coalesced: c=3, c=6), so their TTFT may hold decode time and their E2E cannot be split into "
            "prefill and decode.") in report.findings
    # Their throughput still stands: the ceiling is judged over both.
    assert report.ceiling.observed_max_tok_s == max(p.output_throughput_tok_s for p in points)
