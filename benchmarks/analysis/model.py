"""The vocabulary of the ceiling analysis: its thresholds (each a named judgement call, with
why), the input :class:`SweepPoint` and its :class:`LatencyStats`, and the dataclasses of the
report :func:`benchmarks.analysis.ceiling_analyse` returns."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from controlplane.errors import InvalidInput

Topology = Literal["pd", "single"]
BatchSource = Literal["decode_events", "littles_law", "concurrency"]
# A decode fit's source: its points' one source, or ``mixed`` when they differ.
FitSource = Literal["decode_events", "littles_law", "concurrency", "mixed"]
Bottleneck = Literal["decode", "prefill", "queueing", "none", "unknown"]
Stat = Literal["mean", "p50"]
LoadKind = Literal["closed", "open"]

# A straight line through fewer than three distinct batch sizes always fits, so its R² says nothing.
MIN_FIT_POINTS = 3
# The version of the analysis a stored report was made by (its ``version``). Bump it whenever a
# change here, in :mod:`.compute` or :mod:`.findings` (or in how the sweep service builds the
# points) would give a stored report other numbers, sentences or keys: a sweep's report stored
# under another version, or under none, is computed again when it is next read
# (:func:`benchmarks.services.sweep_stored_analysis`).
ANALYSIS_VERSION = 9
#: What ended a sweep point as planned (:attr:`SweepPoint.limited_by`): a request cap alone, a time
#: limit alone, or both (whichever came first).
PointLimit = Literal["requests", "duration", "both"]
POINT_LIMITS = ("requests", "duration", "both")
# Throughput within this fraction of the best point counts as "on the plateau" (10 %: larger than
# the run-to-run noise of a closed-loop sweep, smaller than one doubling of load on a rising curve).
PLATEAU_FRACTION = 0.90
# Load must grow at least this much across the plateau for "throughput stopped growing" to mean
# anything (one step of a 1, 2, 4, ... grid is 2x).
PLATEAU_MIN_LOAD_GROWTH = 1.5
# Throughput whose heaviest point is within PLATEAU_FRACTION of its lightest (either way) while load
# grew at least this much is flat: more load bought nothing, so the ceiling is reached at the lowest
# load, whatever a point in between did (two doublings of a 1, 2, 4, ... grid).
FLAT_MIN_LOAD_GROWTH = 4.0
# A point below this fraction of the best lighter-load point is throughput falling, not noise
# (PLATEAU_FRACTION squared, 0.81: two steps of run-to-run noise; 0.72 of it is a fall).
FALL_FRACTION = PLATEAU_FRACTION ** 2
# Throughput that grows by less than this factor between two points is "flat".
FLAT_THROUGHPUT_GROWTH = 1.10
# TTFT that grows by at least this factor between two points is "growing".
TTFT_GROWTH = 1.5
# Queueing relative to load, for steps whose throughput is not flat but grows by at most this share
# of the load's growth (half: each added request got at most half the service the earlier ones
# did), while TTFT grows by at least TTFT_GROWTH times the load's growth. Prefill work per step grows
# at most with the number of prompts in flight, so TTFT outgrowing the load itself by the margin that
# counts as "growing" is time spent waiting for a slot. A one-slot server (llama.cpp) going from c=1
# to c=8 gains x1.46 throughput while TTFT grows x57: the absolute flat-throughput test misses it.
QUEUEING_MAX_THROUGHPUT_SHARE = 0.5
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
# The flag of a point stopped partway (a sweep cancelled while it ran): its latencies cover only the
# requests that completed before the stop (its output throughput also counts the tokens the aborted
# ones had streamed), at a load that was ending, so it is shown and exported but never analysed or
# ranked (the sweep service also stores it cancelled, not done).
PARTIAL_FLAG = "cancelled_partial"
# The flag of a point whose time overlapped a run of another sweep on a deployment sharing a CPU or
# GPU with its own on the same node: it measured that load as well as its own, so it is shown and
# exported but never analysed or ranked (the summary's ``shared_load`` names the other runs).
SHARED_LOAD_FLAG = "shared_load"
# The load generator's flag for a run whose output events came in few network reads: its gaps
# between events are not the token cadence, so no decode step is read from them.
COALESCED_FLAG = "itl_coalesced"
# A point's decode pauses (its ``decode_stall_share``: time between output events beyond a typical
# step, over all decode time) are named in the findings from this share up: below it they move
# mean TPOT by less than the run-to-run noise of a point.
STALL_SHARE_NOTED = 0.05
# A point that completed fewer requests than this is flagged with TOO_FEW_FLAG: the percentiles and
# mean of so few samples, and a throughput over so short a run, move with one request's luck, so
# they are no basis for comparison (2 requests in 77 ms at c=1 on llama.cpp read 1669 tok/s against
# 566 tok/s at c=8). It stays in the report, measured as it is; every finding that leans on it says
# it is too small to conclude from. 10 is a judgement call, like the thresholds above: enough for a
# mean and a p50 to stop hanging on one request, still reached by a short sweep's heavier points.
MIN_COMPARED_REQUESTS = 10
TOO_FEW_FLAG = "too_few_requests"


def queueing_ttft_needed(load_growth: float, throughput_growth: float) -> float | None:
    """The TTFT growth that makes a step queueing, or None when its throughput rules queueing out.
    Throughput under ``FLAT_THROUGHPUT_GROWTH`` (flat): TTFT x``TTFT_GROWTH``. Otherwise, with a known
    load growth above 1 and throughput growing by at most ``QUEUEING_MAX_THROUGHPUT_SHARE`` of it:
    TTFT x``TTFT_GROWTH`` times the load's growth, since prefill work grows at most with the load and
    what TTFT gains beyond it is waiting. The load check itself (repeated runs at one load are noise)
    is the caller's."""
    if throughput_growth < FLAT_THROUGHPUT_GROWTH:
        return TTFT_GROWTH
    if math.isfinite(load_growth) and load_growth > 1.0 and \
            throughput_growth <= QUEUEING_MAX_THROUGHPUT_SHARE * load_growth:
        return TTFT_GROWTH * load_growth
    return None


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

    def central_stat(self) -> Stat | None:
        """Which statistic :meth:`central` returns: ``"mean"``, ``"p50"``, or None when neither."""
        if self.mean is not None:
            return "mean"
        return "p50" if self.p50 is not None else None


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

    The decode step seen from the client (the load generator's ``decode_steps``; None for runs
    without per-event records, e.g. imported ones): ``decode_step_ms``, the mean gap between
    output events with decode pauses left out (ms per token); ``decode_batch``, the mean number of
    requests in their decode phase at those events (sequences); ``decode_stall_share``, the share
    of decode time (E2E - TTFT, summed) the pauses added (0..1).

    ``achieved_concurrency``: the most requests a closed-loop run had in flight at once (None when
    unknown); below ``concurrency`` (a run that sent fewer requests than its slots, flagged
    ``concurrency_shortfall``) it, not the label, is the point's :attr:`load`.

    ``limited_by``: what ended the point as its sweep planned it: ``"requests"`` (a request cap
    alone), ``"duration"`` (a time limit alone, ``duration_s``), ``"both"`` (a cap and a time
    limit, whichever came first), or None when unknown (an imported run). It picks the advice a
    point that completed too few requests gets.
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
    decode_step_ms: float | None = None
    decode_batch: float | None = None
    decode_stall_share: float | None = None
    achieved_concurrency: float | None = None
    limited_by: PointLimit | None = None

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> SweepPoint:
        """Build from a load-generator run summary dict (the field names of this class; latency
        fields are ``{"mean", "p50", "p90", "p99"}`` dicts; ``decode_step_ms``, ``decode_batch``
        and ``decode_stall_share`` are numbers). Unknown keys are ignored.

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
            decode_step_ms=_opt_float(summary.get("decode_step_ms")),
            decode_batch=_opt_float(summary.get("decode_batch")),
            decode_stall_share=_opt_float(summary.get("decode_stall_share")),
            achieved_concurrency=_opt_float(summary.get("achieved_concurrency")),
            limited_by=summary.get("limited_by") if summary.get("limited_by") in POINT_LIMITS else None,
        )

    @property
    def _rate_driven(self) -> bool:
        """Whether the point sent at a finite request rate (an open loop), with or without a cap
        on requests in flight."""
        return self.request_rate is not None and math.isfinite(self.request_rate)

    @property
    def label(self) -> str:
        """``c=8`` for a closed-loop point, ``2 req/s`` for an open-loop one, ``2 req/s (at most
        8 in flight)`` for an open loop capped at a concurrency (an imported run with both)."""
        if self._rate_driven:
            cap = f" (at most {self.concurrency} in flight)" if self.concurrency is not None else ""
            return f"{_num(self.request_rate)} req/s{cap}"  # type: ignore[arg-type]
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        return "unbounded rate"

    @property
    def load_kind(self) -> LoadKind:
        """``closed`` (a closed loop, its load the concurrency) or ``open`` (an open loop, its load
        the request rate, also when a concurrency caps it): two scales that are never compared
        with each other."""
        return "open" if self._rate_driven or self.concurrency is None else "closed"

    @property
    def load(self) -> float:
        """The load axis used for ordering and growth ratios: the concurrency, or the achieved
        concurrency where the run reached less (``achieved_concurrency``: c=3 that sent one request
        is a load of 1, not 3), else the request rate (an open loop's, capped or not)."""
        if self._rate_driven:
            return self.request_rate  # type: ignore[return-value]
        if self.concurrency is not None:
            if self.achieved_concurrency is not None and 0 < self.achieved_concurrency < self.concurrency:
                return float(self.achieved_concurrency)
            return float(self.concurrency)
        if self.request_rate is not None:
            return self.request_rate
        return math.inf


@dataclass
class PointAnalysis:
    """Derived numbers for one point: TTFT, TPOT and E2E (ms) as the statistic named in
    ``ttft_stat`` / ``tpot_stat`` / ``e2e_stat`` (``mean``, or ``p50`` for a run that recorded only
    the median; None when absent), the estimated running decode batch (sequences) and where it came
    from, E2E (measured, or TTFT + TPOT * (output_len - 1) when ``e2e_estimated``), the decode share
    of E2E ((E2E - TTFT) / E2E, 0..1) and output tok/s per GPU. ``step_ms`` is the decode step time
    the fit uses for the point: the client-seen step (``decode_step_ms``, pauses left out) with
    ``running_batch_source`` ``decode_events``, else the TPOT. ``decode_step_ms`` is the point's
    client-seen step (ms per token, the load generator's ``decode_steps.step_s``) whatever the fit
    used, and ``stall_share`` the share of decode time spent paused beyond that step (0..1): the
    load generator computes the share against that step, never against the TPOT, so a sentence
    that quotes the share quotes this step with it. Both are None when unknown or when the point is
    flagged :data:`COALESCED_FLAG` (its gaps between events are network reads, not steps)."""

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
    tok_s_per_gpu: float | None  # None when the GPU count is unknown
    ttft_stat: Stat | None = None
    tpot_stat: Stat | None = None
    e2e_stat: Stat | None = None
    step_ms: float | None = None
    stall_share: float | None = None
    decode_step_ms: float | None = None


@dataclass
class DecodeFit:
    """Least-squares fit ``step time (ms) = fixed_ms + per_seq_ms * running_batch`` of the decode step.

    ``batch_source`` says what was fitted: ``decode_events`` (every point has the load generator's
    client-seen decode step: the step time is the mean gap between output events with decode
    pauses left out, ``running_batch`` the requests in their decode phase counted at those events),
    else ``littles_law`` (the step time is the TPOT, ``running_batch`` tok/s x TPOT, capped at the
    concurrency: a time average that also counts prefill time, so it undercounts the batch of a
    point whose prefill takes a large share of the time, and TPOT includes decode pauses; runs
    without per-event records, e.g. imported ones, only allow this), ``concurrency``, or ``mixed``:
    each point by its own records (:func:`benchmarks.analysis.compute.point_running_batch`), the
    client-seen step and batch where a point has them and Little's law on TPOT where it does not
    (a coalesced or imported point); the steps of such a fit are judged for growth like a
    ``decode_events`` fit's. ``batch_sources`` names each fitted point's source in ``labels`` order.

    ``possible`` False means no fit was made, with ``reason`` saying why; the numbers are then None
    (never invented). ``r_squared`` is None when the step time is the same at every point (nothing
    to explain). ``residuals_ms`` are measured minus fitted step time per point, in ``labels``
    order; ``steps_ms`` holds the fitted step times, ``tpot_ms`` the points' measured TPOT and
    ``stall_shares`` their decode-pause shares (None where unknown). ``is_decode_cost`` is True
    only when the line is a physical decode cost (``per_seq_ms > 0`` and ``fixed_ms >= 0``); otherwise the numbers are kept
    but are not a cost: with ``per_seq_ms <= 0`` the step time does not grow with the running batch
    over the measured range, with ``fixed_ms < 0`` it is not a fixed plus a per-sequence cost there.
    ``tpot_stats`` names the TPOT statistic of each fitted point (``mean``, or ``p50`` where a run
    recorded no mean). ``load_kinds`` gives each fitted point's load kind in ``labels`` order
    (``closed`` or ``open``): one fit per server, with the points of every load kind, since its
    x axis is the measured running batch, not the load.
    """

    possible: bool
    reason: str | None
    batch_source: FitSource
    n_points: int
    labels: list[str] = field(default_factory=list)
    running_batch: list[float] = field(default_factory=list)
    tpot_ms: list[float | None] = field(default_factory=list)
    steps_ms: list[float] = field(default_factory=list)
    stall_shares: list[float | None] = field(default_factory=list)
    fixed_ms: float | None = None
    per_seq_ms: float | None = None
    r_squared: float | None = None
    residuals_ms: list[float] = field(default_factory=list)
    tpot_stats: list[str] = field(default_factory=list)
    load_kinds: list[LoadKind] = field(default_factory=list)
    batch_sources: list[BatchSource] = field(default_factory=list)

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
    ``falls`` is True when the heaviest point is below ``PLATEAU_FRACTION`` of the best one (no
    plateau), that is throughput fell as load rose past ``observed_max_label``, or when any point is
    below ``FALL_FRACTION`` of the best lighter-load point, also on a plateau it came back to:
    overload (or failures, when requests failed), not a ceiling above the best point.
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
    ``queueing`` is load growing and either TTFT growing by at least ``TTFT_GROWTH`` while
    throughput stays under ``FLAT_THROUGHPUT_GROWTH``, or, relative to load, TTFT growing by at
    least ``TTFT_GROWTH`` times the load's growth while throughput grows by at most
    ``QUEUEING_MAX_THROUGHPUT_SHARE`` of it (:func:`queueing_ttft_needed`): the extra requests
    wait instead of being served."""

    from_label: str
    to_label: str
    load_growth: float
    ttft_growth: float | None
    throughput_growth: float
    queueing: bool


@dataclass
class LoadGroup:
    """The points of one load kind (``closed``: by concurrency; ``open``: by request rate) and what
    was concluded from them alone: the trend of throughput (``ceiling``), the ``queueing`` steps
    between neighbouring points and the ``bottleneck`` class, judged without the points named in
    ``timings_skipped`` (flagged :data:`COALESCED_FLAG`: their output events came in one network
    read, so their TTFT, TPOT and ITL are not prefill and decode times). Concurrency and request
    rate are different scales, so points of different kinds are never compared as heavier or
    lighter."""

    kind: LoadKind
    labels: list[str]
    ceiling: Ceiling
    queueing: list[QueueingStep]
    bottleneck: Bottleneck
    bottleneck_reason: str
    # Points flagged COALESCED_FLAG, whose TTFT's share of E2E is not used for the bottleneck.
    timings_skipped: list[str] = field(default_factory=list)


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
    the labels of those left out for more than ``MAX_FAILED_FRACTION`` failed requests;
    ``failed_requests`` the failed requests over every point given (analysed or not), which decides
    whether falling throughput is put down to failures or to overload. ``too_few_requests`` names the
    analysed points that completed fewer than :data:`MIN_COMPARED_REQUESTS` requests
    (:data:`TOO_FEW_FLAG`): kept, but every finding that names one says it is too small to conclude
    from. ``gpus_known`` is False
    when ``num_gpus`` was a stand-in (no per-GPU figure is quoted). ``groups`` holds one
    :class:`LoadGroup` per load kind present (closed loop first): the trend, queueing and bottleneck
    of each kind on its own; ``ceiling``, ``bottleneck`` and ``bottleneck_reason`` are those of the
    group holding the best point, ``queueing`` the steps of every group (never across kinds).
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
    failed_requests: int = 0
    gpus_known: bool = True
    groups: list[LoadGroup] = field(default_factory=list)
    too_few_requests: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready nested dict (floats stay floats; no infinities are produced). ``num_gpus`` is
        None when the count was a stand-in (``gpus_known`` False)."""
        out = asdict(self)
        if not self.gpus_known:
            out["num_gpus"] = None
        return out


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


# From this magnitude on a number in a sentence or label is written with three significant
# figures and an exponent (``1.23e+06``): fixed-point notation would print every digit (a rate
# of 1e308 req/s once came out as a 309-digit label that widened the sweep page to 3105 px).
BIG_NUMBER = 1e6


def _fixed(x: float, digits: int) -> str:
    """``x`` with ``digits`` decimals (``8.0``, ``0.35``), or with three significant figures and
    an exponent from :data:`BIG_NUMBER` on (``1.2e+13``); ``inf`` and ``nan`` as such. For the
    factors, counts and times the findings quote, whose size the analysis does not bound."""
    if not math.isfinite(x) or abs(x) >= BIG_NUMBER:
        return f"{x:.3g}"
    return f"{x:.{digits}f}"


def _num(x: float) -> str:
    """Three significant figures for tok/s and rates (9.95, 24.5, 125; ``1.23e+06`` from
    :data:`BIG_NUMBER` on); used by point labels and the findings."""
    if abs(x) >= 100:
        return _fixed(x, 0)
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"
