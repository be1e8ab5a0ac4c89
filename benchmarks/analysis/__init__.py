"""Ceiling analysis of a benchmark sweep: where throughput stops growing, and why.

Pure functions over plain dataclasses (no database). The input is one :class:`SweepPoint` per grid
point of a sweep at one input/output length pair, as the load generator summarises a run
(field names and units follow its summary: ``output_throughput_tok_s``, ``ttft_ms``, ...; metric
definitions in ``/work/shared/design/metrics.md``). :func:`ceiling_analyse` returns a
:class:`CeilingReport` holding:

* a least-squares fit of the decode step time against the running batch,
  ``step(b) = fixed_ms + per_seq_ms * b``, where the running batch ``b`` of each point is
  measured from its per-event records (the requests between their first and last output event,
  with the step the mean gap between output events) and, for a point without them (imported, or
  its events coalesced), estimated with Little's law (``b = output tok/s * TPOT``, the step its
  TPOT), point by point (:func:`point_running_batch`), instead of assuming ``b = concurrency``;
  at high concurrency part of the requests wait for prefill or admission and are not in the
  decode batch;
* the throughput ceiling: the observed plateau when throughput stopped growing (also a sweep that
  stays flat, its heaviest point within ``PLATEAU_FRACTION`` of its lightest over
  ``PLATEAU_MIN_LOAD_GROWTH`` load with no point below ``PLATEAU_FRACTION``² of the best, or over
  ``FLAT_MIN_LOAD_GROWTH`` load whatever the dip: reached at the lowest load), else the fit's
  asymptote ``lim b / TPOT(b) = 1000 / per_seq_ms`` tok/s (or ``cap / TPOT(cap)`` when the
  engine's maximum running batch is given), else "not reached";
* queueing steps: TTFT growing with load while throughput stays flat;
* the trend of throughput, the queueing steps and the bottleneck are judged within one load kind:
  closed-loop points by concurrency, open-loop points by request rate (``groups``); a sweep with
  both kinds gets a sentence for each, never a comparison of a concurrency with a rate (the decode
  fit uses every point: its x axis is the measured running batch, not the load; and as both kinds
  ran on one server, the fitted ceiling is one, said once with each kind's best point against it);
* a bottleneck class (decode, prefill, queueing, none reached, unknown);
* an optional per-GPU comparison with a sweep of the same model on another topology (PD vs a
  single node), like with like: the same concurrency and lengths, saying what was compared;
* ``findings``: short plain sentences with the numbers, units and the fit's quality.

Points where more than ``MAX_FAILED_FRACTION`` of the requests failed are left out of all of the
above (their latency and throughput describe the failures, not the engine) and named in a finding;
so are points flagged ``PARTIAL_FLAG`` (stopped partway by a cancel: what completed before the stop,
kept for the record but no measurement of the point's load).
Points that completed fewer than ``MIN_COMPARED_REQUESTS`` requests stay in, measured as they are,
but are named in ``too_few_requests`` (``TOO_FEW_FLAG``), and every finding that names one says it
is too small to conclude from (so few requests are no basis for comparison).
A fit whose per-sequence or fixed cost comes out negative is not a decode cost
(:attr:`DecodeFit.is_decode_cost`): it is reported as "the step time does not grow with the running
batch", and it neither bounds the ceiling nor makes decode the bottleneck. Throughput that falls as
load rises (a point below ``FALL_FRACTION`` of a lighter-load one) is reported as falling, never
as a ceiling above the best point: put down to overload
when no request of the sweep failed, to failures or overload when some did.

Latencies are per-point means (a run that recorded only the median, as some imported files do,
contributes its p50 instead); every finding that quotes TTFT, TPOT or E2E names the statistic
("mean TPOT", "p50 TTFT").

The package: :mod:`.model` (thresholds, input and report dataclasses), :mod:`.compute` (the
analysis), :mod:`.findings` (the sentences) and :mod:`.wording` (numbers in words). Everything
public is importable from ``benchmarks.analysis``.

A sweep's stored report carries the :data:`ANALYSIS_VERSION` that made it; bump the constant when
the analysis changes, and a report stored under another version is computed again when it is read.

Thresholds (all named constants in :mod:`.model`) are judgement calls, not taken from a harness: they are
chosen so that a measured sweep with a few percent of noise is classified the same way twice.
"""
from benchmarks.analysis.compute import ceiling_analyse, point_running_batch
from benchmarks.analysis.model import (
    ANALYSIS_VERSION, BatchSource, Bottleneck, Ceiling, CeilingReport, DecodeFit, FitSource, LatencyStats, LoadGroup, LoadKind, MatchedPair, PointAnalysis,
    QueueingStep, Stat, SweepPoint, Topology, TopologyComparison, CEILING_REACHED_FRACTION,
    FALL_FRACTION, FLAT_MIN_LOAD_GROWTH, FLAT_THROUGHPUT_GROWTH, MAX_FAILED_FRACTION, MIN_COMPARED_REQUESTS, MIN_FIT_POINTS,
    PARTIAL_FLAG, TOO_FEW_FLAG,
    PLATEAU_FRACTION, PLATEAU_MIN_LOAD_GROWTH, QUEUEING_MAX_THROUGHPUT_SHARE, SAME_PER_GPU, TPOT_GROWTH, TTFT_GROWTH,
)

__all__ = [
    "ANALYSIS_VERSION",
    "BatchSource",
    "Bottleneck",
    "CEILING_REACHED_FRACTION",
    "Ceiling",
    "CeilingReport",
    "DecodeFit",
    "FALL_FRACTION",
    "FLAT_MIN_LOAD_GROWTH",
    "FLAT_THROUGHPUT_GROWTH",
    "FitSource",
    "LatencyStats",
    "LoadGroup",
    "LoadKind",
    "MAX_FAILED_FRACTION",
    "MIN_COMPARED_REQUESTS",
    "MIN_FIT_POINTS",
    "MatchedPair",
    "PARTIAL_FLAG",
    "PLATEAU_FRACTION",
    "PLATEAU_MIN_LOAD_GROWTH",
    "PointAnalysis",
    "QueueingStep",
    "SAME_PER_GPU",
    "Stat",
    "SweepPoint",
    "TOO_FEW_FLAG",
    "TPOT_GROWTH",
    "QUEUEING_MAX_THROUGHPUT_SHARE",
    "TTFT_GROWTH",
    "Topology",
    "TopologyComparison",
    "ceiling_analyse",
    "point_running_batch",
]
