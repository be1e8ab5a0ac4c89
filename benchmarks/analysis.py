"""Ceiling analysis of a benchmark sweep: where throughput stops growing, and why.

Pure functions over plain dataclasses (no database). The input is one :class:`SweepPoint` per grid
point of a sweep at one input/output length pair, as the load generator summarises a run
(field names and units follow its summary: ``output_throughput_tok_s``, ``ttft_ms``, ...; metric
definitions in ``/work/shared/design/metrics.md``). :func:`ceiling_analyse` returns a
:class:`CeilingReport` holding:

* a least-squares fit of the decode step time against the running batch,
  ``TPOT(b) = fixed_ms + per_seq_ms * b``, where the running batch ``b`` is estimated with
  Little's law (``b = output tok/s * TPOT``: each sequence in the decode batch yields one token
  per step) instead of assuming ``b = concurrency``; at high concurrency part of the requests
  wait for prefill or admission and are not in the decode batch;
* the throughput ceiling: the observed plateau when throughput stopped growing, else the fit's
  asymptote ``lim b / TPOT(b) = 1000 / per_seq_ms`` tok/s (or ``cap / TPOT(cap)`` when the
  engine's maximum running batch is given), else "not reached";
* queueing steps: TTFT growing with load while throughput stays flat;
* a bottleneck class (decode, prefill, queueing, none reached, unknown);
* an optional per-GPU comparison with a sweep of the same model on another topology (PD vs a
  single node), like with like: the same concurrency and lengths, saying what was compared;
* ``findings``: short plain sentences with the numbers, units and the fit's quality.

Points where more than ``MAX_FAILED_FRACTION`` of the requests failed are left out of all of the
above (their latency and throughput describe the failures, not the engine) and named in a finding.
A fit whose per-sequence or fixed cost comes out negative is not a decode cost
(:attr:`DecodeFit.is_decode_cost`): it is reported as "the step time does not grow with the running
batch", and it neither bounds the ceiling nor makes decode the bottleneck. Throughput that falls as
load rises is reported as falling (failures or overload), never as a ceiling above the best point.

Thresholds (all named constants below) are judgement calls, not taken from a harness: they are
chosen so that a measured sweep with a few percent of noise is classified the same way twice.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from controlplane.errors import InvalidInput

Topology = Literal["pd", "single"]
BatchSource = Literal["littles_law", "concurrency"]
Bottleneck = Literal["decode", "prefill", "queueing", "none", "unknown"]

# A straight line through fewer than three distinct batch sizes always fits, so its R² says nothing.
MIN_FIT_POINTS = 3
# Throughput within this fraction of the best point counts as "on the plateau" (10 %: larger than
# the run-to-run noise of a closed-loop sweep, smaller than one doubling of load on a rising curve).
PLATEAU_FRACTION = 0.90
# Load must grow at least this much across the plateau for "throughput stopped growing" to mean
# anything (one step of a 1, 2, 4, ... grid is 2x).
PLATEAU_MIN_LOAD_GROWTH = 1.5
# Throughput that grows by less than this factor between two points is "flat".
FLAT_THROUGHPUT_GROWTH = 1.10
# TTFT that grows by at least this factor between two points is "growing".
TTFT_GROWTH = 1.5
# TPOT that grows by at least this factor from the lightest to the heaviest point "grows with batch".
TPOT_GROWTH = 1.25
# The fraction of the ceiling whose concurrency is reported ("where the ceiling is reached").
CEILING_REACHED_FRACTION = 0.90
# Per-GPU ratios inside [1 - x, 1 + x] are "about the same".
SAME_PER_GPU = 0.05
# A point where more than this fraction of the requests failed (failed / (completed + failed)) is left
# out of the fit, the ceiling, the queueing and the bottleneck. A rejected request never enters the
# decode batch and ends fast, so the survivors' tok/s, TPOT and TTFT describe a lighter load than the
# point's concurrency; a few percent of failures barely moves them, a tenth or more does.
MAX_FAILED_FRACTION = 0.10


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency metric over the successful requests of a run, in milliseconds.

    ``mean`` and the percentiles (linear interpolation, metrics.md) are None when the run did not
    measure them. The analysis uses ``mean`` and falls back to ``p50`` when only the median exists.
    """

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> LatencyStats:
        """Build from ``{"mean": .., "p50": .., "p90": .., "p99": ..}`` (missing keys stay None;
        ``median`` is accepted for ``p50``)."""
        if not raw:
            return cls()
        p50 = raw.get("p50", raw.get("median"))
        return cls(mean=_opt_float(raw.get("mean")), p50=_opt_float(p50),
                   p90=_opt_float(raw.get("p90")), p99=_opt_float(raw.get("p99")))

    def central(self) -> float | None:
        """The mean, or the median when no mean was recorded (ms)."""
        return self.mean if self.mean is not None else self.p50


@dataclass(frozen=True)
class SweepPoint:
    """One grid point (one run) of a sweep, in the load generator's summary vocabulary.

    ``concurrency`` is the closed-loop slot count (None for an open-loop run driven by
    ``request_rate`` in requests/s; None there means unbounded). ``input_len`` / ``output_len`` are
    the requested tokens per request. ``output_throughput_tok_s`` = output tokens of successful
    requests / run duration; ``request_throughput`` in requests/s. Latencies in ms (TTFT, TPOT =
    (E2E - TTFT) / (output tokens - 1), ITL gaps, E2E). ``num_gpus`` is informational; the GPU count
    used for per-GPU numbers is the one passed to :func:`ceiling_analyse`. ``flags`` are the run's
    warnings (e.g. ``concurrency_not_reached``, ``output_length_mismatch``).
    """

    concurrency: int | None
    output_throughput_tok_s: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    request_rate: float | None = None
    input_len: int | None = None
    output_len: int | None = None
    request_throughput: float | None = None
    itl_ms: LatencyStats = field(default_factory=LatencyStats)
    e2e_ms: LatencyStats = field(default_factory=LatencyStats)
    num_gpus: int | None = None
    completed: int | None = None
    failed: int | None = None
    flags: tuple[str, ...] = ()

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> SweepPoint:
        """Build from a load-generator run summary dict (the field names of this class; latency
        fields are ``{"mean", "p50", "p90", "p99"}`` dicts). Unknown keys are ignored.

        Raises :class:`InvalidInput` naming the field when ``output_throughput_tok_s`` is missing.
        """
        if summary.get("output_throughput_tok_s") is None:
            raise InvalidInput({"output_throughput_tok_s": ["is required for the analysis"]})
        flags = summary.get("flags") or ()
        if isinstance(flags, Mapping):  # {"flag": true, ...} as well as ["flag", ...]
            flags = [k for k, v in flags.items() if v]
        return cls(
            concurrency=_opt_int(summary.get("concurrency")),
            output_throughput_tok_s=float(summary["output_throughput_tok_s"]),
            ttft_ms=LatencyStats.from_mapping(summary.get("ttft_ms")),
            tpot_ms=LatencyStats.from_mapping(summary.get("tpot_ms")),
            request_rate=_opt_float(summary.get("request_rate")),
            input_len=_opt_int(summary.get("input_len")),
            output_len=_opt_int(summary.get("output_len")),
            request_throughput=_opt_float(summary.get("request_throughput")),
            itl_ms=LatencyStats.from_mapping(summary.get("itl_ms")),
            e2e_ms=LatencyStats.from_mapping(summary.get("e2e_ms")),
            num_gpus=_opt_int(summary.get("num_gpus")),
            completed=_opt_int(summary.get("completed")),
            failed=_opt_int(summary.get("failed")),
            flags=tuple(str(f) for f in flags),
        )

    @property
    def label(self) -> str:
        """``c=8`` for a closed-loop point, ``2 req/s`` for an open-loop one."""
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        if self.request_rate is not None and math.isfinite(self.request_rate):
            return f"{_num(self.request_rate)} req/s"
        return "unbounded rate"

    @property
    def load(self) -> float:
        """The load axis used for ordering and growth ratios: concurrency, else request rate."""
        if self.concurrency is not None:
            return float(self.concurrency)
        if self.request_rate is not None:
            return self.request_rate
        return math.inf


@dataclass
class PointAnalysis:
    """Derived numbers for one point: means (ms), the estimated running decode batch (sequences)
    and where it came from, E2E (measured, or TTFT + TPOT * (output_len - 1) when ``e2e_estimated``),
    the decode share of E2E ((E2E - TTFT) / E2E, 0..1) and output tok/s per GPU."""

    label: str
    concurrency: int | None
    request_rate: float | None
    output_throughput_tok_s: float
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    e2e_estimated: bool
    running_batch: float | None
    running_batch_source: BatchSource | None
    decode_share: float | None
    tok_s_per_gpu: float


@dataclass
class DecodeFit:
    """Least-squares fit ``TPOT_ms = fixed_ms + per_seq_ms * running_batch``.

    ``possible`` False means no fit was made, with ``reason`` saying why; the numbers are then None
    (never invented). ``r_squared`` is None when TPOT is the same at every point (nothing to
    explain). ``residuals_ms`` are measured minus fitted TPOT per point, in ``labels`` order and
    ``tpot_ms`` holds the measured TPOT there. ``is_decode_cost`` is True only when the line is a
    physical decode cost (``per_seq_ms > 0`` and ``fixed_ms >= 0``); otherwise the numbers are kept
    but are not a cost: with ``per_seq_ms <= 0`` the step time does not grow with the running batch
    over the measured range, with ``fixed_ms < 0`` it is not a fixed plus a per-sequence cost there.
    """

    possible: bool
    reason: str | None
    batch_source: BatchSource
    n_points: int
    labels: list[str] = field(default_factory=list)
    running_batch: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    fixed_ms: float | None = None
    per_seq_ms: float | None = None
    r_squared: float | None = None
    residuals_ms: list[float] = field(default_factory=list)

    def running_batch_at_zero(self) -> float:
        """The running batch where the fitted line gives a zero step time; requires a sloped fit."""
        assert self.fixed_ms is not None and self.per_seq_ms
        return -self.fixed_ms / self.per_seq_ms

    @property
    def is_decode_cost(self) -> bool:
        """True when a fit was made and both costs are physical (per sequence > 0, fixed >= 0)."""
        return (self.possible and self.fixed_ms is not None and self.per_seq_ms is not None
                and self.per_seq_ms > 0 and self.fixed_ms >= 0)

    def step_ms(self, batch: float) -> float:
        """The fitted decode step time at ``batch`` running sequences (ms); requires a fit."""
        assert self.fixed_ms is not None and self.per_seq_ms is not None
        return self.fixed_ms + self.per_seq_ms * batch


@dataclass
class Ceiling:
    """The throughput ceiling in output tok/s.

    ``source``: ``observed_plateau`` (throughput stopped growing: the best observed point is the
    ceiling), ``fit_asymptote`` (1000 / per_seq_ms, the limit of b / TPOT(b) as b grows),
    ``fit_capped`` (cap / TPOT(cap) for the given maximum running batch), or None when no ceiling is
    in sight. ``reached`` is whether an observed point got to ``CEILING_REACHED_FRACTION`` of it;
    ``reached_at_label`` names the first such point. ``batch_for_fraction`` is the fit's running
    batch needed for that fraction when no point reached it (a concurrency of at least that many).
    ``falls`` is True when the heaviest point is below ``PLATEAU_FRACTION`` of the best one, that is
    throughput fell as load rose past ``observed_max_label``: failures or overload, not a ceiling
    above the best point.
    """

    tok_s: float | None
    source: Literal["observed_plateau", "fit_asymptote", "fit_capped"] | None
    reached: bool
    reached_at_label: str | None
    observed_max_tok_s: float
    observed_max_label: str
    asymptote_tok_s: float | None
    capped_tok_s: float | None
    cap_batch: int | None
    plateau_from_label: str | None
    plateau_min_tok_s: float | None
    plateau_max_tok_s: float | None
    batch_for_fraction: float | None
    falls: bool = False


@dataclass
class QueueingStep:
    """Growth between two consecutive points (by load): ratios of TTFT, output tok/s and load.
    ``queueing`` is TTFT growing by at least ``TTFT_GROWTH`` while throughput stays under
    ``FLAT_THROUGHPUT_GROWTH``: the extra requests wait instead of being served."""

    from_label: str
    to_label: str
    load_growth: float
    ttft_growth: float | None
    throughput_growth: float
    queueing: bool


@dataclass
class MatchedPair:
    """One like-for-like pair: the same concurrency (and lengths) in both sweeps, tok/s and per-GPU."""

    label: str
    tok_s: float
    tok_s_per_gpu: float
    other_tok_s: float
    other_tok_s_per_gpu: float
    per_gpu_ratio: float


@dataclass
class TopologyComparison:
    """Output tok/s per GPU of the analysed sweep against ``compare_with``.

    ``basis``: ``same_concurrency`` (ratios over the concurrencies both sweeps ran),
    ``best_observed`` (no common concurrency: best point of each, at different loads), or
    ``not_comparable`` (different input/output lengths; no verdict). ``per_gpu_ratio`` is this
    sweep's tok/s per GPU over the other's (at the matched points: their geometric mean).
    ``verdict``: ``gain`` / ``no_gain`` / ``mixed`` for this sweep against the other, or None.
    """

    topology: Topology
    num_gpus: int
    other_topology: Topology
    other_num_gpus: int
    basis: Literal["same_concurrency", "best_observed", "not_comparable"]
    matched: list[MatchedPair]
    best_tok_s: float
    best_label: str
    other_best_tok_s: float
    other_best_label: str
    per_gpu_ratio: float | None
    verdict: Literal["gain", "no_gain", "mixed"] | None


@dataclass
class CeilingReport:
    """Everything :func:`ceiling_analyse` concluded, plus ``findings`` as plain sentences.

    ``points`` are the analysed points only. ``excluded`` names every point left out, with why
    (``c=32 (no successful output)``, ``c=8 (15 of 16 requests failed)``); ``failed_excluded`` is
    the labels of those left out for more than ``MAX_FAILED_FRACTION`` failed requests.
    """

    topology: Topology
    num_gpus: int
    input_len: int | None
    output_len: int | None
    points: list[PointAnalysis]
    excluded: list[str]
    fit: DecodeFit
    ceiling: Ceiling
    queueing: list[QueueingStep]
    queueing_detected: bool
    bottleneck: Bottleneck
    bottleneck_reason: str
    comparison: TopologyComparison | None
    findings: list[str]
    failed_excluded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready nested dict (floats stay floats; no infinities are produced)."""
        return asdict(self)


def ceiling_analyse(
    points: Sequence[SweepPoint],
    *,
    num_gpus: int,
    topology: Topology,
    compare_with: Sequence[SweepPoint] | None = None,
    compare_num_gpus: int | None = None,
    compare_topology: Topology | None = None,
    max_running_batch: int | None = None,
    batch_source: BatchSource = "littles_law",
) -> CeilingReport:
    """Analyse one sweep (one input/output length pair) for its throughput ceiling and bottleneck.

    ``points``: the sweep's runs in any order; runs without successful output (``completed`` 0,
    or zero tok/s) and runs where more than ``MAX_FAILED_FRACTION`` of the requests failed are left
    out of every conclusion and listed in ``excluded``. ``num_gpus``: GPUs the deployment used
    (all roles together for PD). ``compare_with`` / ``compare_num_gpus`` / ``compare_topology``: an
    optional second sweep of the same model on another topology; all three are needed for the
    per-GPU comparison. ``max_running_batch``: the engine's cap on running sequences
    (``--max-running-requests``) when known, to bound the fitted ceiling. ``batch_source``:
    ``littles_law`` (default; running batch = tok/s * TPOT, capped at the concurrency) or
    ``concurrency`` (assume every request is in the decode batch).

    Returns a :class:`CeilingReport`. Raises :class:`InvalidInput` (field path ``points`` etc.) for
    an empty sweep, a sweep where no point is left to analyse, mixed input/output lengths, a
    non-positive GPU count or a half-given comparison.
    """
    _validate(points, num_gpus=num_gpus, compare_with=compare_with, compare_num_gpus=compare_num_gpus,
              compare_topology=compare_topology, max_running_batch=max_running_batch)
    usable, excluded, failed = _usable(points)
    if not usable:
        raise InvalidInput({"points": [_nothing_left(excluded, failed)]})
    analysed = [_point_analysis(p, num_gpus=num_gpus, batch_source=batch_source) for p in usable]
    fit = _decode_fit(analysed, batch_source=batch_source, failed_excluded=[p.label for p in failed])
    ceiling = _ceiling(usable, fit, max_running_batch=max_running_batch)
    steps = _queueing_steps(usable)
    bottleneck, reason = _bottleneck(usable, analysed, steps, fit, ceiling)
    comparison = None
    if compare_with is not None and compare_num_gpus is not None and compare_topology is not None:
        comparison = _compare(usable, num_gpus=num_gpus, topology=topology, other=compare_with,
                              other_num_gpus=compare_num_gpus, other_topology=compare_topology)
    report = CeilingReport(
        topology=topology, num_gpus=num_gpus, input_len=usable[0].input_len, output_len=usable[0].output_len,
        points=analysed, excluded=excluded, fit=fit, ceiling=ceiling, queueing=steps,
        queueing_detected=any(s.queueing for s in steps), bottleneck=bottleneck, bottleneck_reason=reason,
        comparison=comparison, findings=[], failed_excluded=[p.label for p in failed],
    )
    report.findings = _findings(report, usable, failed)
    return report


# --- validation and per-point numbers -------------------------------------------------------------


def _validate(points: Sequence[SweepPoint], *, num_gpus: int, compare_with: Sequence[SweepPoint] | None,
              compare_num_gpus: int | None, compare_topology: Topology | None,
              max_running_batch: int | None) -> None:
    errors: dict[str, list[str]] = {}
    if not points:
        errors["points"] = ["a sweep needs at least one point"]
    lengths = {(p.input_len, p.output_len) for p in points}
    if len(lengths) > 1:
        shown = ", ".join(f"{i}/{o}" for i, o in sorted(lengths, key=str))
        errors["points"] = [f"mixes input/output lengths ({shown}); analyse one length pair at a time"]
    if num_gpus < 1:
        errors["num_gpus"] = ["must be >= 1"]
    given = [compare_with is not None, compare_num_gpus is not None, compare_topology is not None]
    if any(given) and not all(given):
        errors["compare_with"] = ["compare_with, compare_num_gpus and compare_topology go together"]
    if compare_num_gpus is not None and compare_num_gpus < 1:
        errors["compare_num_gpus"] = ["must be >= 1"]
    if compare_with is not None and not compare_with:
        errors["compare_with"] = ["is empty"]
    if max_running_batch is not None and max_running_batch < 1:
        errors["max_running_batch"] = ["must be >= 1"]
    if errors:
        raise InvalidInput(errors)


def _failed_fraction(p: SweepPoint) -> float | None:
    """failed / (completed + failed), or None when the run did not count both."""
    if p.failed is None or p.completed is None or p.completed + p.failed <= 0:
        return None
    return p.failed / (p.completed + p.failed)


def _failures_of(p: SweepPoint) -> str:
    """``15 of 16 requests failed``."""
    total = (p.completed or 0) + (p.failed or 0)
    return f"{p.failed} of {total} request{'s' if total != 1 else ''} failed"


def _usable(points: Iterable[SweepPoint]) -> tuple[list[SweepPoint], list[str], list[SweepPoint]]:
    """Points with output and at most MAX_FAILED_FRACTION failed requests, sorted by load; the
    labels of all those left out, with why; and the points left out for failures, sorted by load."""
    usable: list[SweepPoint] = []
    excluded: list[str] = []
    failed: list[SweepPoint] = []
    for p in points:
        fraction = _failed_fraction(p)
        if p.completed == 0 or p.output_throughput_tok_s <= 0:
            excluded.append(f"{p.label} (no successful output)")
        elif fraction is not None and fraction > MAX_FAILED_FRACTION:
            excluded.append(f"{p.label} ({_failures_of(p)})")
            failed.append(p)
        else:
            usable.append(p)
    usable.sort(key=lambda p: p.load)
    failed.sort(key=lambda p: p.load)
    return usable, excluded, failed


def _nothing_left(excluded: list[str], failed: list[SweepPoint]) -> str:
    if failed:
        return (f"no point is left to analyse: {', '.join(excluded)}; more than {MAX_FAILED_FRACTION:.0%} "
                f"failed requests make a point's latency unreadable, so fix the failures first")
    return "no point has successful output; nothing to analyse"


def _point_analysis(p: SweepPoint, *, num_gpus: int, batch_source: BatchSource) -> PointAnalysis:
    ttft = p.ttft_ms.central()
    tpot = p.tpot_ms.central()
    e2e = p.e2e_ms.central()
    estimated = False
    if e2e is None and ttft is not None and tpot is not None and p.output_len:
        e2e = ttft + tpot * (p.output_len - 1)
        estimated = True
    share = (e2e - ttft) / e2e if e2e and ttft is not None and e2e > 0 else None
    running: float | None = None
    source: BatchSource | None = None
    if batch_source == "littles_law" and tpot is not None:
        # tok/s x s/token-per-sequence = sequences in the decode batch, time-averaged over the run.
        running = p.output_throughput_tok_s * tpot / 1000.0
        if p.concurrency is not None:
            running = min(running, float(p.concurrency))
        source = "littles_law"
    elif p.concurrency is not None:
        running = float(p.concurrency)
        source = "concurrency"
    return PointAnalysis(
        label=p.label, concurrency=p.concurrency, request_rate=p.request_rate,
        output_throughput_tok_s=p.output_throughput_tok_s, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e,
        e2e_estimated=estimated, running_batch=running, running_batch_source=source, decode_share=share,
        tok_s_per_gpu=p.output_throughput_tok_s / num_gpus,
    )


# --- decode fit and ceiling -----------------------------------------------------------------------


def _decode_fit(points: list[PointAnalysis], *, batch_source: BatchSource,
                failed_excluded: Sequence[str] = ()) -> DecodeFit:
    """Least-squares line through (running batch, TPOT) of the analysed points; ``failed_excluded``
    (labels left out for failed requests) only goes into the reason when too few points remain."""
    pairs = [(a.label, a.running_batch, a.tpot_ms) for a in points
             if a.running_batch is not None and a.tpot_ms is not None]
    fit = DecodeFit(possible=False, reason=None, batch_source=batch_source, n_points=len(pairs),
                    labels=[lb for lb, _, _ in pairs], running_batch=[b for _, b, _ in pairs],
                    tpot_ms=[t for _, _, t in pairs])
    distinct = len({round(b, 1) for _, b, _ in pairs})
    if len(pairs) < MIN_FIT_POINTS or distinct < MIN_FIT_POINTS:
        missing = len(points) - len(pairs)
        why = f"{distinct} distinct running batch size{'s' if distinct != 1 else ''}"
        if missing:
            why += f" ({missing} point{'s' if missing != 1 else ''} without TPOT)"
        if failed_excluded:
            verb = "is" if len(failed_excluded) == 1 else "are"
            why += f" once {', '.join(failed_excluded)} {verb} excluded for failed requests"
        fit.reason = f"{why}; at least {MIN_FIT_POINTS} are needed for a line whose quality can be judged"
        return fit
    xs = [b for _, b, _ in pairs]
    ys = [t for _, _, t in pairs]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    residuals = [y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True)]
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum(r * r for r in residuals)
    fit.possible = True
    fit.fixed_ms = intercept
    fit.per_seq_ms = slope
    fit.r_squared = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    fit.residuals_ms = residuals
    return fit


def _plateau(points: list[SweepPoint]) -> tuple[int | None, float]:
    """Index of the first point from which every later point stays within PLATEAU_FRACTION of the
    best, provided load grew by PLATEAU_MIN_LOAD_GROWTH over that stretch; and the best tok/s."""
    best = max(p.output_throughput_tok_s for p in points)
    floor = PLATEAU_FRACTION * best
    start = len(points)
    for i in range(len(points) - 1, -1, -1):
        if points[i].output_throughput_tok_s < floor:
            break
        start = i
    if start >= len(points) - 1:
        return None, best
    first, last = points[start].load, points[-1].load
    if not math.isfinite(last) or first <= 0 or last / first < PLATEAU_MIN_LOAD_GROWTH:
        return None, best
    return start, best


def _ceiling(points: list[SweepPoint], fit: DecodeFit, *, max_running_batch: int | None) -> Ceiling:
    best_point = max(points, key=lambda p: p.output_throughput_tok_s)
    observed = best_point.output_throughput_tok_s
    asymptote = capped = None
    # Only a physical cost bounds the ceiling: a negative fixed or per-sequence cost is no decode path.
    if fit.is_decode_cost and fit.per_seq_ms is not None and _tpot_grows(points):
        asymptote = 1000.0 / fit.per_seq_ms
        if max_running_batch is not None and fit.step_ms(max_running_batch) > 0:
            capped = 1000.0 * max_running_batch / fit.step_ms(max_running_batch)
    start, _ = _plateau(points)
    tok_s: float | None
    source: Literal["observed_plateau", "fit_asymptote", "fit_capped"] | None
    if start is not None:
        tok_s, source = observed, "observed_plateau"
    elif capped is not None:
        # A point above the fitted bound means the line underestimates at large batches; the
        # measured number is then the better lower bound for the ceiling.
        tok_s, source = max(capped, observed), "fit_capped"
    elif asymptote is not None:
        tok_s, source = max(asymptote, observed), "fit_asymptote"
    else:
        tok_s, source = None, None
    reached_at = None
    batch_needed = None
    if tok_s is not None:
        target = CEILING_REACHED_FRACTION * tok_s
        reached_at = next((p.label for p in points if p.output_throughput_tok_s >= target), None)
        if reached_at is None and fit.fixed_ms is not None and fit.per_seq_ms:
            # Solve 1000 * b / (f + p*b) = target for b: b = k*f / (1 - k*p) with k = target / 1000.
            k = target / 1000.0
            if 1 - k * fit.per_seq_ms > 0 and fit.fixed_ms > 0:
                batch_needed = k * fit.fixed_ms / (1 - k * fit.per_seq_ms)
    plateau = points[start:] if start is not None else []
    return Ceiling(
        tok_s=tok_s, source=source, reached=reached_at is not None, reached_at_label=reached_at,
        observed_max_tok_s=observed, observed_max_label=best_point.label, asymptote_tok_s=asymptote,
        capped_tok_s=capped, cap_batch=max_running_batch if capped is not None else None,
        plateau_from_label=plateau[0].label if plateau else None,
        plateau_min_tok_s=min(p.output_throughput_tok_s for p in plateau) if plateau else None,
        plateau_max_tok_s=max(p.output_throughput_tok_s for p in plateau) if plateau else None,
        batch_for_fraction=batch_needed,
        falls=start is None and points[-1].output_throughput_tok_s < PLATEAU_FRACTION * observed,
    )


def _tpot_grows(points: list[SweepPoint]) -> bool:
    lo, hi = points[0].tpot_ms.central(), points[-1].tpot_ms.central()
    return lo is not None and hi is not None and lo > 0 and len(points) > 1 and hi / lo >= TPOT_GROWTH


# --- queueing and bottleneck ----------------------------------------------------------------------


def _queueing_steps(points: list[SweepPoint]) -> list[QueueingStep]:
    steps: list[QueueingStep] = []
    for a, b in zip(points, points[1:], strict=False):
        ta, tb = a.ttft_ms.central(), b.ttft_ms.central()
        ttft_growth = tb / ta if ta and tb is not None and ta > 0 else None
        tput_growth = b.output_throughput_tok_s / a.output_throughput_tok_s
        load_growth = b.load / a.load if a.load > 0 and math.isfinite(b.load) else math.nan
        # Repeated runs at the same load are noise, not queueing; an unknown (NaN) growth still counts.
        queueing = (ttft_growth is not None and ttft_growth >= TTFT_GROWTH
                    and tput_growth < FLAT_THROUGHPUT_GROWTH and not load_growth <= 1.0)
        steps.append(QueueingStep(from_label=a.label, to_label=b.label, load_growth=load_growth,
                                  ttft_growth=ttft_growth, throughput_growth=tput_growth, queueing=queueing))
    return steps


def _bottleneck(points: list[SweepPoint], analysed: list[PointAnalysis], steps: list[QueueingStep],
                fit: DecodeFit, ceiling: Ceiling) -> tuple[Bottleneck, str]:
    """Classify at the heaviest point: decode-bound when decode time dominates E2E and TPOT grows
    with load (and a fit, when one was made, gives a physical per-sequence cost); prefill-bound when
    TTFT dominates without queueing; queueing when TTFT dominates and grows while throughput is
    flat; none when decode dominates but TPOT stays flat and throughput does not fall. Unknown when
    TPOT grows but the fit says the step time does not grow with the running batch, or when
    throughput falls with load and nothing else explains it."""
    hi = analysed[-1]
    if len(points) < 2:
        return "unknown", "one point: how TPOT and TTFT grow with load cannot be judged"
    grows = _tpot_grows(points)
    queueing = any(s.queueing for s in steps)
    share = hi.decode_share
    if grows and fit.possible and not fit.is_decode_cost and (share is None or share >= 0.5):
        assert fit.per_seq_ms is not None and fit.fixed_ms is not None
        lo = analysed[0]
        rises = f"TPOT rises from {_ms(lo.tpot_ms)} at {lo.label} to {_ms(hi.tpot_ms)} at {hi.label}"
        if fit.per_seq_ms <= 0:
            return "unknown", (f"{rises}, but not with the running batch: {_no_growth_numbers(fit)}; so decode is "
                               f"not named the bottleneck")
        return "unknown", (f"{rises}, but the line through TPOT against the running batch has a negative fixed "
                           f"cost ({_ms(fit.fixed_ms)}), which is no decode cost, so decode is not named the "
                           f"bottleneck")
    if share is None:
        if grows:
            return "decode", "TPOT grows with load (E2E unknown, so its share is not checked)"
        return "unknown", "E2E and output length unknown at the heaviest point: shares cannot be computed"
    if share >= 0.5:
        if grows:
            return "decode", f"decode is {share:.0%} of E2E at {hi.label} and TPOT grows with load"
        if ceiling.falls:
            return "unknown", (f"throughput falls as load rises, {_falls_numbers(points)}, while TPOT does not "
                               f"grow: failures or overload, not a bottleneck this sweep can name")
        return "none", f"decode is {share:.0%} of E2E at {hi.label} but TPOT stays flat: not saturated"
    if queueing:
        return "queueing", f"TTFT is {1 - share:.0%} of E2E at {hi.label} and grows while throughput is flat"
    return "prefill", f"TTFT is {1 - share:.0%} of E2E at {hi.label} without queueing"


# --- topology comparison --------------------------------------------------------------------------


def _compare(points: list[SweepPoint], *, num_gpus: int, topology: Topology, other: Sequence[SweepPoint],
             other_num_gpus: int, other_topology: Topology) -> TopologyComparison:
    others, other_excluded, other_failed = _usable(other)
    if not others:
        raise InvalidInput({"compare_with": [_nothing_left(other_excluded, other_failed)]})
    best = max(points, key=lambda p: p.output_throughput_tok_s)
    other_best = max(others, key=lambda p: p.output_throughput_tok_s)
    cmp = TopologyComparison(
        topology=topology, num_gpus=num_gpus, other_topology=other_topology, other_num_gpus=other_num_gpus,
        basis="not_comparable", matched=[], best_tok_s=best.output_throughput_tok_s, best_label=best.label,
        other_best_tok_s=other_best.output_throughput_tok_s, other_best_label=other_best.label,
        per_gpu_ratio=None, verdict=None,
    )
    lengths = {(p.input_len, p.output_len) for p in points}
    other_lengths = {(p.input_len, p.output_len) for p in others}
    if lengths != other_lengths:
        return cmp
    by_c = {p.concurrency: p for p in others if p.concurrency is not None}
    for p in points:
        q = by_c.get(p.concurrency) if p.concurrency is not None else None
        if q is None:
            continue
        mine, theirs = p.output_throughput_tok_s / num_gpus, q.output_throughput_tok_s / other_num_gpus
        cmp.matched.append(MatchedPair(label=p.label, tok_s=p.output_throughput_tok_s, tok_s_per_gpu=mine,
                                       other_tok_s=q.output_throughput_tok_s, other_tok_s_per_gpu=theirs,
                                       per_gpu_ratio=mine / theirs))
    if cmp.matched:
        cmp.basis = "same_concurrency"
        ratios = [m.per_gpu_ratio for m in cmp.matched]
        cmp.per_gpu_ratio = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    else:
        cmp.basis = "best_observed"
        ratios = [(best.output_throughput_tok_s / num_gpus) / (other_best.output_throughput_tok_s / other_num_gpus)]
        cmp.per_gpu_ratio = ratios[0]
    if all(r <= 1 + SAME_PER_GPU for r in ratios):
        cmp.verdict = "no_gain"
    elif all(r > 1 + SAME_PER_GPU for r in ratios):
        cmp.verdict = "gain"
    else:
        cmp.verdict = "mixed"
    return cmp


# --- findings -------------------------------------------------------------------------------------


def _findings(r: CeilingReport, points: list[SweepPoint], failed: list[SweepPoint]) -> list[str]:
    out: list[str] = []
    lengths = f"{r.input_len}/{r.output_len} tokens in/out" if r.input_len and r.output_len else None
    for p in failed:
        out.append(f"{p.label} excluded: {_failures_of(p)} — fix the failures before reading its latency "
                   f"(more than {MAX_FAILED_FRACTION:.0%} failed, so it is left out of the fit, the ceiling, "
                   f"the queueing and the bottleneck).")
    out.append(_fit_sentence(r.fit))
    out.append(_bottleneck_sentence(r, points))
    out.extend(_ceiling_sentences(r, points))
    out.extend(_queueing_sentences(r))
    if r.comparison is not None:
        out.extend(_comparison_sentences(r.comparison, lengths))
    for p in points:
        notes = []
        if p.flags:
            notes.append(f"is flagged ({', '.join(p.flags)})")
        if p.failed:
            total = (p.completed or 0) + p.failed
            notes.append(f"had {p.failed} failed request{'s' if p.failed != 1 else ''} of {total}")
        if notes:
            out.append(f"{p.label} {' and '.join(notes)}; its numbers are used as measured.")
    failed_labels = {p.label for p in failed}
    others = [e for e in r.excluded if e.split(" (", 1)[0] not in failed_labels]
    if others:
        out.append(f"Left out: {', '.join(others)}.")
    return [s for s in out if s]


def _fit_sentence(fit: DecodeFit) -> str:
    if not fit.possible:
        return f"The decode step-time fit is not possible: {fit.reason}."
    assert fit.fixed_ms is not None and fit.per_seq_ms is not None
    if not fit.is_decode_cost:
        if fit.per_seq_ms <= 0:
            return (f"Decode step time does not grow with the running batch over the measured range: "
                    f"{_no_growth_numbers(fit)}; a straight line through these points falls "
                    f"({_r2(fit)}), which no decode step does, so no per-sequence decode cost is read from it.")
        return (f"Decode step time is not a fixed plus a per-sequence cost over the measured range: "
                f"{_no_growth_numbers(fit)}, but a straight line through these points crosses zero at "
                f"{fit.running_batch_at_zero():.1f} running sequences (a negative fixed cost, {_r2(fit)}), which "
                f"no decode step has, so no decode cost is read from it.")
    how = ("Little's law (running batch = tok/s x TPOT, capped at the concurrency)"
           if fit.batch_source == "littles_law" else "the concurrency (every request assumed in the batch)")
    batches = ", ".join(f"{b:.1f} at {lb}" for lb, b in zip(fit.labels, fit.running_batch, strict=True))
    worst = max(abs(x) for x in fit.residuals_ms)
    return (f"Decode step time fits {_ms(fit.fixed_ms)} + {fit.per_seq_ms:.1f} ms per running sequence "
            f"({_r2(fit)} over {fit.n_points} points, largest residual {_ms(worst)}); the running batch "
            f"comes from {how}: {batches}.")


def _bottleneck_sentence(r: CeilingReport, points: list[SweepPoint]) -> str:
    lo, hi = r.points[0], r.points[-1]
    fit = r.fit
    fit_txt = (f" (fit {_ms(fit.fixed_ms)} + {fit.per_seq_ms:.1f} ms per running sequence, {_r2(fit)})"
               if fit.is_decode_cost and fit.fixed_ms is not None and fit.per_seq_ms is not None else "")
    share = (f", and decode takes {hi.decode_share:.0%} of E2E at {hi.label}"
             if hi.decode_share is not None else "")
    if r.bottleneck == "decode":
        return (f"Decode is the bottleneck: TPOT grows from {_ms(lo.tpot_ms)} at {lo.label} to "
                f"{_ms(hi.tpot_ms)} at {hi.label}{fit_txt}{share}.")
    if r.bottleneck == "prefill":
        return (f"Prefill is the bottleneck: TTFT is {_ms(hi.ttft_ms)} of {_ms(hi.e2e_ms)} E2E at {hi.label} "
                f"({1 - (hi.decode_share or 0):.0%}), growing from {_ms(lo.ttft_ms)} at {lo.label} while "
                f"throughput still grows; TPOT {_span_ms(lo.tpot_ms, hi.tpot_ms, moving='goes')}.")
    if r.bottleneck == "queueing":
        return (f"Requests queue for admission: TTFT is {_ms(hi.ttft_ms)} of {_ms(hi.e2e_ms)} E2E at "
                f"{hi.label} and grows while throughput is flat; more concurrency only adds waiting.")
    if r.bottleneck == "none":
        tpots = _vals(r, "tpot_ms")
        return (f"No bottleneck is reached: TPOT {_span_ms(min(tpots), max(tpots), moving='stays')} from "
                f"{lo.label} to {hi.label}, and throughput {_throughput_change(points[0], points[-1])}.")
    return f"The bottleneck cannot be classified: {r.bottleneck_reason}."


def _ceiling_sentences(r: CeilingReport, points: list[SweepPoint]) -> list[str]:
    c = r.ceiling
    out: list[str] = []
    if c.source == "observed_plateau":
        assert c.plateau_min_tok_s is not None and c.plateau_max_tok_s is not None
        first = next(p for p in points if p.label == c.plateau_from_label)
        last = points[-1]
        growth = last.output_throughput_tok_s / first.output_throughput_tok_s - 1
        out.append(f"Throughput plateaus at {_tok(c.plateau_min_tok_s, c.plateau_max_tok_s)} from "
                   f"{c.plateau_from_label}: going to {last.label} (x{last.load / first.load:.1f} load) changes it "
                   f"by {growth:+.0%} ({_num(first.output_throughput_tok_s)} -> {_num(last.output_throughput_tok_s)} "
                   f"tok/s).")
        out.append(f"The ceiling is about {_num(c.observed_max_tok_s)} tok/s (observed at {c.observed_max_label}, "
                   f"{_num(c.observed_max_tok_s / r.num_gpus)} tok/s per GPU on {r.num_gpus} GPUs); "
                   f"{CEILING_REACHED_FRACTION:.0%} of it is reached by {c.reached_at_label}.")
        if c.asymptote_tok_s is not None and r.fit.per_seq_ms is not None:
            out.append(f"The fit's asymptote, {_num(c.asymptote_tok_s)} tok/s (1000 / {r.fit.per_seq_ms:.1f} ms "
                       f"per sequence), bounds what any batch size could give on this decode path.")
        return out
    if c.source in ("fit_asymptote", "fit_capped") and c.tok_s is not None:
        assert r.fit.per_seq_ms is not None
        how = (f"{c.cap_batch} / TPOT({c.cap_batch}) with the engine's cap of {c.cap_batch} running sequences"
               if c.source == "fit_capped" else f"1000 / {r.fit.per_seq_ms:.1f} ms per sequence")
        out.append(f"The fit puts the ceiling at {_num(c.tok_s)} tok/s ({how}); the best observed is "
                   f"{_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label} "
                   f"({c.observed_max_tok_s / c.tok_s:.0%} of it).")
        if c.reached_at_label:
            out.append(f"{CEILING_REACHED_FRACTION:.0%} of the ceiling is reached by {c.reached_at_label}.")
        elif c.batch_for_fraction is not None:
            need = c.batch_for_fraction
            out.append(f"{CEILING_REACHED_FRACTION:.0%} of the ceiling needs a running batch of about {need:.0f} "
                       f"sequences (so a concurrency of at least {math.ceil(need)}), beyond this sweep: "
                       f"an extrapolation.")
        if c.falls:
            out.append(_falls_sentence(c, points))
        return out
    if c.falls:
        out.append(_falls_sentence(c, points))
    elif len(points) >= 2:
        first, last = points[0], points[-1]
        growth = last.output_throughput_tok_s / first.output_throughput_tok_s
        if growth >= 1:
            out.append(f"No ceiling is reached: throughput grows x{growth:.1f} from {first.label} to {last.label} "
                       f"(x{_load_ratio(first, last):.1f} load), so the ceiling is above the best observed "
                       f"{_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}.")
        else:
            out.append(f"Throughput does not grow with load: from {first.label} to {last.label} it "
                       f"{_throughput_change(first, last)}; this points at failures or overload, not at a ceiling "
                       f"above the best point ({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")
    else:
        out.append(f"One point ({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}) cannot show a ceiling.")
    return out


def _falls_sentence(c: Ceiling, points: list[SweepPoint]) -> str:
    return (f"Throughput falls as load rises, {_falls_numbers(points)}; this points at failures or overload, "
            f"not at a ceiling above the best point ({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")


def _queueing_sentences(r: CeilingReport) -> list[str]:
    out = []
    for s in r.queueing:
        if s.queueing and s.ttft_growth is not None:
            out.append(f"Queueing from {s.from_label} to {s.to_label}: TTFT grows x{s.ttft_growth:.1f} while "
                       f"throughput changes x{s.throughput_growth:.2f} (x{s.load_growth:.1f} load).")
    if not out and len(r.points) > 1:
        out.append("No queueing: TTFT never grows while throughput stays flat between neighbouring points.")
    return out


def _comparison_sentences(c: TopologyComparison, lengths: str | None) -> list[str]:
    name = {"pd": "PD", "single": "single-node"}
    me, them = name[c.topology], name[c.other_topology]
    if c.basis == "not_comparable":
        return [f"{me} and {them} sweeps ran different input/output lengths, so their tok/s per GPU is not compared."]
    out: list[str] = []
    verdict = {"gain": "a gain", "no_gain": "no gain", "mixed": "a mixed result"}[c.verdict or "mixed"]
    at = f", {lengths}" if lengths else ""
    if c.basis == "same_concurrency":
        for m in c.matched:
            out.append(f"At {m.label}{at}: {me} gives {_num(m.tok_s)} tok/s on {c.num_gpus} GPUs "
                       f"({_num(m.tok_s_per_gpu)} tok/s per GPU); {them} gives {_num(m.other_tok_s)} tok/s on "
                       f"{c.other_num_gpus} GPUs ({_num(m.other_tok_s_per_gpu)} tok/s per GPU): "
                       f"x{m.per_gpu_ratio:.2f} per GPU for {me}.")
        labels = ", ".join(m.label for m in c.matched)
        out.append(f"{me} gives {verdict} per GPU over {them}, compared at the same concurrency ({labels}).")
        matched = {m.label for m in c.matched}
        if c.best_label not in matched:
            out.append(f"{me}'s best, {_num(c.best_tok_s)} tok/s at {c.best_label} "
                       f"({_num(c.best_tok_s / c.num_gpus)} tok/s per GPU), has no {them} run at that concurrency, "
                       f"so it is not compared.")
        return out
    out.append(f"No concurrency was run on both: comparing best points at different loads, {me} gives "
               f"{_num(c.best_tok_s)} tok/s at {c.best_label} on {c.num_gpus} GPUs "
               f"({_num(c.best_tok_s / c.num_gpus)} tok/s per GPU) and {them} {_num(c.other_best_tok_s)} tok/s at "
               f"{c.other_best_label} on {c.other_num_gpus} GPUs ({_num(c.other_best_tok_s / c.other_num_gpus)} tok/s "
               f"per GPU): {verdict} per GPU for {me} (x{c.per_gpu_ratio:.2f}).")
    return out


# --- formatting -----------------------------------------------------------------------------------


def _load_ratio(first: SweepPoint, last: SweepPoint) -> float:
    return last.load / first.load if first.load > 0 and math.isfinite(last.load) else math.nan


def _throughput_change(first: SweepPoint, last: SweepPoint) -> str:
    """``grows x8.0 for x8.0 load`` when it grew, ``falls from 40.0 to 12.0 tok/s (x0.30) for x16.0
    load`` when it fell: a factor below one is never called growth."""
    a, b = first.output_throughput_tok_s, last.output_throughput_tok_s
    load = _load_ratio(first, last)
    if b >= a:
        return f"grows x{b / a:.1f} for x{load:.1f} load"
    return f"falls from {_num(a)} to {_num(b)} tok/s (x{b / a:.2f}) for x{load:.1f} load"


def _falls_numbers(points: list[SweepPoint]) -> str:
    """``from 42.0 tok/s at c=2, the best point, to 12.0 tok/s at c=16, x0.29 for x8.0 load``."""
    best = max(points, key=lambda p: p.output_throughput_tok_s)
    last = points[-1]
    ratio = last.output_throughput_tok_s / best.output_throughput_tok_s
    return (f"from {_num(best.output_throughput_tok_s)} tok/s at {best.label}, the best point, to "
            f"{_num(last.output_throughput_tok_s)} tok/s at {last.label}, x{ratio:.2f} for "
            f"x{_load_ratio(best, last):.1f} load")


def _no_growth_numbers(fit: DecodeFit) -> str:
    """The measured TPOT at the smallest and largest running batch of the fit."""
    pairs = sorted(zip(fit.running_batch, fit.tpot_ms, fit.labels, strict=True))
    (b0, t0, l0), (b1, t1, l1) = pairs[0], pairs[-1]
    return (f"TPOT is {_ms(t0)} at {b0:.1f} running sequences ({l0}) and {_ms(t1)} at {b1:.1f} "
            f"({l1})")


def _vals(r: CeilingReport, attr: str) -> list[float]:
    return [v for v in (getattr(a, attr) for a in r.points) if v is not None]


def _num(x: float) -> str:
    """Three significant figures for tok/s and rates (9.95, 24.5, 125)."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _tok(lo: float, hi: float) -> str:
    return f"{_num(lo)} tok/s" if _num(lo) == _num(hi) else f"{_num(lo)}-{_num(hi)} tok/s"


def _ms(x: float | None) -> str:
    """A duration given in ms: ``94 ms`` below a second, ``2.0 s`` above."""
    if x is None:
        return "unknown"
    if abs(x) < 1000:
        return f"{x:.0f} ms"
    return f"{x / 1000:.1f} s"


def _span_ms(a: float | None, b: float | None, *, moving: str) -> str:
    """``stays at 20 ms`` when both round the same, else ``<moving> from 15 ms to 30 ms`` (or
    ``stays between`` for an unordered min/max pair)."""
    if _ms(a) == _ms(b):
        return f"stays at {_ms(a)}"
    if moving == "stays":
        return f"stays between {_ms(a)} and {_ms(b)}"
    return f"{moving} from {_ms(a)} to {_ms(b)}"


def _r2(fit: DecodeFit) -> str:
    return f"R² {fit.r_squared:.3f}" if fit.r_squared is not None else "R² undefined: TPOT is the same everywhere"


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
