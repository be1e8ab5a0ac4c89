"""Per-run summary of a load-generator run, by the formulas of ``/work/shared/design/metrics.md``.

Per request (successes only; failures contribute no tokens and no latency):
TTFT = first output event − start; E2E = last output event − start; TPOT = (E2E − TTFT) /
(output_tokens − 1) for output_tokens ≥ 2; ITL = gaps between consecutive output events (per event),
and per token (gap / k repeated k times) when every event's token count k is known from
cumulative usage. Per run: duration = first start → last end of the measured requests (warmup and
dataset generation are outside, case C11); throughputs over that duration; percentiles p50/p90/p99
with linear interpolation over successes plus mean and std (population); an error-adjusted view
with the server's failures as +inf (requests aborted by a stop left out) and the nearest-rank method; goodput and SLO attainment (over all requests
sent); achieved concurrency (time-weighted mean requests in flight at the server side, i.e. after
any connection-pool wait, and the maximum) and achieved rate; flags.

Times in the summary are seconds (floats); rates per second.

Infinity in stored JSON: the error-adjusted percentiles are +inf where failures reach the rank
(metrics.md), and JSON has no infinity, so :func:`controlplane.jsonsafe.json_safe` stores them as
null. ``error_adjusted["infinite"]`` lists those percentiles by name (``"ttft_s.p99"``), so a
reader tells "infinite because of failures" (listed) from "no data" (null, not listed: no request
was sent, or every one was aborted by a stop). A sentinel in the number's place (a string ``"inf"``, a huge float) was not chosen: a
numeric reader would sort, chart or average it as a measurement.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from controlplane.jsonsafe import nonfinite_paths

from .driver import ABORTED_PREFIX, CPU_BOUND_FRACTION, RunResult
from .records import RecordStore
from .uncertainty import ci95, contain_estimate

__all__ = ["OUTPUT_BASIS_COMPLETED", "OUTPUT_BASIS_WITH_ABORTED", "Slo", "run_summary", "distribution", "error_kind", "error_text", "nearest_rank", "in_flight", "input_length_check"]

PERCENTILES = (50, 90, 99)
#: ``output_throughput_basis`` of a run in which no request was aborted in flight: the output
#: throughput counts the successful requests' tokens (metrics.md).
OUTPUT_BASIS_COMPLETED = "completed"
#: ``output_throughput_basis`` of a run a stop cut short with requests in flight: the output
#: throughput counts the successful requests' tokens and those the aborted ones had streamed
#: (:func:`run_summary`'s docstring says why).
OUTPUT_BASIS_WITH_ABORTED = "completed_and_aborted"
# Shortfall tolerances. Concurrency: the target must be reached at least once (max in flight);
# the time-weighted mean always falls below it by ramp-up and tail. Rate: a realised rate 5% below
# the schedule's own rate is beyond timer jitter on a busy host.
RATE_SHORTFALL_FRACTION = 0.95
# metrics.md: client tok/s vs the server's generation_tokens_total delta, more than 2% apart.
SERVER_TOKEN_TOLERANCE = 0.02
# Open loop, the sending rate against the target (``rate_off_target``). A renewal schedule of n
# requests at rate λ with gamma gaps of shape b (b = 1: Poisson) realises (n−1)/T with T the sum of
# n−1 gaps, mean (n−1)/λ and variance (n−1)/(λ²b): the realised rate's relative standard deviation
# is about 1/√(b(n−1)). Beyond this many of them (|ln(sent / target)|), the point did not send at its
# target; a correct schedule crosses it about 0.3 % of the time (normal approximation, two-sided).
RATE_TARGET_SIGMAS = 3.0
# metrics.md "Dataset random": prompts of exactly the requested length in the server's tokens. The
# server's mean prompt_tokens may differ from the requested mean by this fraction or 1 token,
# whichever is larger (a text prompt calibrated word by word can miss by one token per request)
# before ``input_length_mismatch`` is raised.
INPUT_LENGTH_TOLERANCE = 0.02
INPUT_LENGTH_TOLERANCE_TOKENS = 1.0
# Gaps between output events shorter than this are "zero": the events came in one network read
# (the client stamps a read, not an event, with its arrival time: stamping each event as it is
# parsed would only space them by the parser's microseconds).
ZERO_GAP_NS = 1_000
# ``itl_coalesced`` is raised when at least this fraction of the gaps are zero: the ITL percentiles
# then describe how the server's writes were grouped into reads, not the token cadence, and the
# decode-step estimate is not made. The fraction is over all gaps of all successful requests, the
# samples the ITL statistics are taken over, so it is the share of those samples that are zero. No
# harness defines such a bound (SGLang, vLLM, AIPerf and GuideLLM report ITL without one); this one
# is the product's: at 10 % the ITL's lowest decile is zero and, where reads pair two events (each
# zero gap leaves the gap before it two steps long), its top decile is two-step gaps, so p90 no
# longer describes one step. A run just under it is not flagged; its fraction is on the run page.
COALESCED_GAP_FRACTION = 0.10
# A gap between output events longer than this many typical (median) steps is a pause in decode
# (the engine ran another request's prefill, or the sequence was retracted), not a step.
STALL_FACTOR = 2.0
# Fewest gaps a decode-step estimate is made from.
MIN_DECODE_GAPS = 8
# Fewest streamed events over which client CPU per event is reported. Below this a sweep worker's own background work (progress writes, heartbeats:
# ~0.1 s of CPU over a 10 s point) outweighs the parsing: 1 ms+ "per event" on a 128-event point.
MIN_EVENTS_FOR_CPU = 1000
# ... and the slowest event rate: at 26 events/s (a sim decode at c=16) the same background work
# read as 440 µs per event over 4096 events. At 500 events/s it is ~20 µs of each event's cost.
MIN_EVENT_RATE_FOR_CPU = 500.0


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in seconds; None means not constrained."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None


def distribution(values: np.ndarray, *, ci: bool = False) -> dict[str, Any]:
    """mean, std (population), p50/p90/p99 (linear interpolation) of finite ``values``; None if empty,
    and std None for a single value (a spread needs 2 samples; one sample's 0 would read as none).
    With ``ci`` (one sample per request: TTFT, TPOT, E2E) also ``ci95``, each statistic's 95 %
    confidence interval ``[low, high]`` in the values' unit, ``None`` in a bound the sample
    cannot give (:func:`benchmarks.loadgen.uncertainty.ci95`), widened where needed to contain the
    statistic it goes with (:func:`benchmarks.loadgen.uncertainty.contain_estimate`); a mean's
    low is never below 0 (:func:`benchmarks.loadgen.uncertainty.mean_ci`: latencies are not
    negative)."""
    if values.size == 0:
        out = {"mean": None, "std": None, **{f"p{p}": None for p in PERCENTILES}, "count": 0}
    else:
        pct = np.percentile(values, PERCENTILES, method="linear")
        out = {"mean": float(values.mean()), "std": float(values.std()) if values.size >= 2 else None,
               **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct)}, "count": int(values.size)}
    if ci:
        # Each interval contains the statistic reported beside it: with few samples an order
        # statistic can lie beyond the interpolated percentile (uncertainty module docstring).
        out["ci95"] = {stat: contain_estimate(bounds, out[stat])
                       for stat, bounds in ci95(values, PERCENTILES).items()}
    return out


def nearest_rank(values: np.ndarray, p: float) -> float:
    """Nearest-rank percentile: the ⌈p/100·n⌉-th smallest value (1-based); may be +inf. NaN if empty."""
    if values.size == 0:
        return math.nan
    rank = max(1, math.ceil(p / 100.0 * values.size))
    return float(np.sort(values)[rank - 1])


def in_flight(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[float, int]:
    """Time-weighted mean and maximum of intervals [start, end) open at once, within [lo, hi] (ns)."""
    if starts.size == 0 or hi <= lo:
        return 0.0, 0
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    mean = float((e - s).sum()) / (hi - lo)
    # An end at the same instant as a start is counted first, so back-to-back requests do not overlap.
    times = np.concatenate([ends, starts])
    steps = np.concatenate([np.full(ends.size, -1), np.full(starts.size, 1)])
    order = np.lexsort((steps, times))
    return mean, int(np.cumsum(steps[order]).max())


def _ns(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) / 1e9


def run_summary(result: RunResult, *, slo: Slo | None = None) -> dict[str, Any]:
    """Summary dict of ``result`` (JSON-serialisable; keys documented inline below).

    Flags (booleans, each with its evidence elsewhere in the dict): ``concurrency_shortfall``
    (closed loop: ``achieved_concurrency_max`` below ``target_concurrency``, a run that sent fewer
    requests than its concurrency included; not for a run stopped early),
    ``rate_shortfall`` (sent more than 5 % slower than the run's own schedule),
    ``rate_off_target`` (open loop: the sending rate ``achieved_send_rate_req_s`` is further from
    the target than :data:`RATE_TARGET_SIGMAS` standard deviations of a correct schedule of that
    many requests; ``rate_target_check`` holds the figures), ``output_length_mismatch``
    (fixed-length runs), ``input_length_mismatch`` (the server's mean ``prompt_tokens`` differs
    from the requested mean by more than :data:`INPUT_LENGTH_TOLERANCE` or
    :data:`INPUT_LENGTH_TOLERANCE_TOKENS`; ``input_length_check`` holds the figures),
    ``tokens_estimated``, ``server_token_mismatch``, ``client_cpu_bound``, ``itl_coalesced``
    (at least :data:`COALESCED_GAP_FRACTION` of the gaps between output events are zero, i.e. the
    events came in one network read; ``itl_zero_gap_fraction`` is the fraction),
    ``no_successful_requests`` (requests were sent, none succeeded and at least one failed at the
    server, the others aborted by a stop: the latencies and throughputs are null, not zero;
    ``errors`` says why), ``all_requests_aborted`` (requests were sent and a stop aborted every
    one in flight: none completed, none failed at the server; the latencies are null, the output
    throughput counts what the aborted requests had streamed, see below),
    and
    ``tpot_slo_not_applicable`` (a TPOT SLO was given and some successful requests produced one
    output token, for which TPOT is undefined; ``slo_tpot_not_applicable`` counts them),
    ``tpot_slo_unmeasured`` (a TPOT SLO was given and some successful requests had their TPOT
    left unmeasured, output all in one network read; ``slo_tpot_unmeasured`` counts them).

    ``error_adjusted``: ``{"ttft_s": {"p50", "p90", "p99"}, "e2e_s": {...}, "failures": int,
    "aborted": int, "infinite": ["ttft_s.p99", ...]}``: the server's failures count as +inf
    (nearest rank, metrics.md); requests a stop aborted in flight are neither successes nor
    failures and are left out (``failures`` there is the summary's ``failures``);
    ``infinite`` names every percentile that is +inf because of them (stored as null, see the
    module docstring). A percentile that is null and not listed had no request to rank: none was
    sent, or every one sent was aborted.

    ``tpot_s`` leaves out the successful requests of two or more output tokens whose output all came
    in one network read (first and last output event under :data:`ZERO_GAP_NS` apart):
    their E2E - TTFT is 0 from the client's side, which is not the time the server took for the
    tokens, and a TPOT of 0 ms would pull every statistic down. ``tpot_unmeasured`` counts them
    (SGLang's and vLLM's benches keep them in, near 0).

    TPOT SLO rule: TPOT is undefined for a one-token output (metrics.md), so a TPOT SLO does not
    apply to such a request and it counts as meeting it (vLLM's ``bench serve`` goodput takes TPOT
    as 0 for outputs of at most one token; SGLang's ``bench_serving`` likewise leaves them out of
    TPOT). ``slo_tpot_not_applicable`` counts them, so a run of one-token outputs whose TPOT SLO
    therefore tested nothing says so. A request of two or more tokens whose TPOT was not measured
    (counted in ``tpot_unmeasured``) has a TPOT that is unknown, not 0: it is not counted as meeting
    a TPOT SLO, so goodput and ``slo_attainment`` count only requests known to meet every SLO (a
    lower bound by up to that many requests); ``slo_tpot_unmeasured`` counts them (0 without a
    TPOT SLO).

    ``decode_steps`` (None when it cannot be estimated, ``decode_steps_note`` says why): the
    decode step seen from the client, for the ceiling analysis. Every gap between consecutive
    output events of a successful request (per token, gap / k, when each event's k tokens are
    known) is paired with the number of requests in their decode phase at its later event (first
    output seen, last not yet: the running decode batch at that step, counted directly instead of
    averaged over the run with Little's law, which counts prefill time too). Gaps longer than
    :data:`STALL_FACTOR` times the median are decode pauses (another request's prefill ran), not
    steps. Keys: ``step_s`` (mean of the other gaps), ``step_p50_s`` (the median gap),
    ``batch_mean`` (mean decode batch over the same gaps), ``gaps``, ``stall_gaps``,
    ``stall_share`` (the pauses' excess over a median step, as a fraction of all decode time
    Σ(E2E − TTFT)), ``basis`` (``per_token`` or ``per_event``).

    ``requests`` counts the requests sent (``successes`` + ``failures`` + ``aborted``). A run the driver stopped
    early because its target was gone has ``stopped_early`` (the reason; None otherwise) and
    ``not_sent`` (planned requests never sent: not failures, in no other count; None when the plan
    had no count, a time-limited closed loop); concurrency shortfall is not flagged for it (the
    client did not fall short, the target went away). A run its caller stopped has ``halted``
    (the caller's reason, also ``stopped_early``; None otherwise): a partial run, whose in-flight
    requests were aborted: ``aborted`` counts them (0 for a run nobody stopped), neither successes
    nor ``failures`` (the requests the server failed: an error answer, a timeout, a broken stream;
    summaries stored before this rule counted the aborted ones among ``failures`` too), and
    ``unanswered_workers`` lists the workers that did not
    answer the stop in time (their requests then in flight are among the aborted ones).

    ``server_token_mismatch``: the server's ``generation_tokens_total`` delta against the client's
    count. The server also counts the tokens of failed requests, which the client counts only as
    far as they streamed before the failure; so with failures the delta must lie between the
    client's streamed tokens (successes + what the failures streamed) and that plus the rest of
    each failed request's requested output (no upper bound when a requested length is unknown).
    With no successful request nothing is compared (``server_token_note`` says why).

    Output throughput (``output_throughput_tok_s``) = (Σ output tokens of the successful requests
    + ``output_tokens_aborted``) / ``duration_s``, where ``output_tokens_aborted`` is Σ of the output
    tokens the client received from the requests a stop aborted in flight (0 when none was:
    then it is metrics.md's Σ output tokens of successes / duration). Why: a run a stop cut short
    ends with its slots still decoding, and its duration runs to the moment they were aborted; the
    completed requests' tokens alone over that duration leave out everything those slots
    delivered in it, so the figure fell far below what the latencies say the server ran at (a sim
    run of 4 slots stopped after 14 s: 146 tok/s completed-only, against 4 in flight / 18.7 ms TPOT
    ≈ 214 tok/s by Little's law; counting what the client received, it agrees). A request the
    server failed still contributes no tokens (metrics.md). The completed-only figure is kept as
    ``output_throughput_completed_tok_s`` (equal to the other when nothing was aborted) and
    ``output_throughput_basis`` says which tokens the headline figure counts:
    :data:`OUTPUT_BASIS_COMPLETED` or :data:`OUTPUT_BASIS_WITH_ABORTED`. The total token throughput
    adds the successful requests' input tokens to the same output tokens; ``request_throughput_req_s``
    counts completed requests only (an aborted one is no request served). Both are null without a
    success, as before.

    A run whose every request a stop aborted in flight (``all_requests_aborted``) has no
    successful request, but when those requests had streamed output tokens
    (``output_tokens_aborted`` > 0) over a measured duration, its output throughput is what the
    server delivered over it, like any other run a stop cut short: ``output_tokens_aborted`` /
    ``duration_s``, basis :data:`OUTPUT_BASIS_WITH_ABORTED`; ``output_throughput_completed_tok_s``
    and ``request_throughput_req_s`` are then 0.0 (no request completed in a measured duration),
    ``total_token_throughput_tok_s`` null (no success reported its input tokens). When they streamed
    nothing, or a request failed at the server (``no_successful_requests``), every throughput
    stays null: nothing was measured.

    ``errors``: failure reason -> count, one entry per kind of failure: messages that differ only in
    a per-request byte count (``after 4312 body bytes``, ``10 bytes unterminated``) are one kind
    (:func:`error_kind`), said with the count they share or the range of their counts (``after
    87–4,312 body bytes``, :func:`error_text`); each request's own message stays in the records.
    """
    rec: RecordStore = result.records
    cfg = result.config
    n = len(rec)
    ok = rec.column("ok").astype(bool)
    start, end, first, last = (rec.column(c) for c in ("start", "end", "first", "last"))
    sched, pool = rec.column("scheduled"), rec.column("pool_wait")
    out_tok = rec.column("output_tokens").astype(np.int64)
    in_tok = rec.column("input_tokens").astype(np.int64)
    req_in, req_out = rec.column("requested_input"), rec.column("requested_output")
    # Requests a stop ended in flight: not successes (no tokens, no latency) and no failures of the
    # server either, counted apart so a partial run says how many the stop ended.
    aborted = sum(1 for message in rec.errors.values() if message.startswith(ABORTED_PREFIX))
    s: dict[str, Any] = {"requests": n, "successes": int(ok.sum()), "failures": int(n - ok.sum()) - aborted}
    stopped = getattr(result, "stopped_early", None)
    s["stopped_early"] = stopped
    s["not_sent"] = getattr(result, "not_sent", 0)
    s["halted"] = getattr(result, "halted", None)
    s["aborted"] = aborted
    s["unanswered_workers"] = list(getattr(result, "unanswered_workers", None) or [])
    lo = int(start.min()) if n else 0
    hi = int(end.max()) if n else 0
    duration = (hi - lo) / 1e9
    s["duration_s"] = duration
    # A duration-limited point (LoadConfig.duration_s) ran for a time, not over the whole dataset.
    s["duration_limited"] = bool(getattr(result, "duration_limited", False))

    # ---------------------------------------------------------------- per request (successes)
    ttft = _ns(first[ok] - start[ok])
    e2e = _ns(last[ok] - start[ok])
    out_ok = out_tok[ok]
    multi = out_ok >= 2
    tpot = (e2e[multi] - ttft[multi]) / (out_ok[multi] - 1)
    # All of a request's output in one network read: E2E - TTFT is 0 (the client stamps reads), not
    # its decode time, so its TPOT is not measured and stays out of the statistics (docstring).
    one_read = (last[ok] - first[ok])[multi] < ZERO_GAP_NS
    itl_event, itl_token, per_token_known = _itls(rec, np.flatnonzero(ok))
    s["ttft_s"] = distribution(ttft, ci=True)
    s["tpot_s"] = distribution(tpot[~one_read], ci=True)
    s["tpot_unmeasured"] = int(one_read.sum())
    s["e2e_s"] = distribution(e2e, ci=True)
    s["itl_s"] = distribution(itl_event)
    s["itl_kind"] = "per_event"
    s["itl_per_token_s"] = distribution(itl_token) if per_token_known else None
    s["queue_s"] = distribution(_ns(start - sched))
    s["pool_wait_s"] = distribution(_ns(pool))

    # error-adjusted view: the server's failures as +inf, nearest rank (never interpolate with
    # inf). A request a stop aborted in flight is neither a success nor a failure of the server:
    # it is left out, so a run whose every request was aborted has no error-adjusted percentile.
    server_failures = s["failures"]

    def adjusted(values: np.ndarray) -> dict[str, float]:
        allv = np.concatenate([values, np.full(server_failures, np.inf)])
        return {f"p{p}": nearest_rank(allv, p) for p in PERCENTILES}

    adj: dict[str, Any] = {"ttft_s": adjusted(ttft), "e2e_s": adjusted(e2e)}
    adj["infinite"] = sorted(path for path, kind in nonfinite_paths(adj).items() if kind == "inf")
    adj["failures"] = server_failures
    adj["aborted"] = s["aborted"]
    s["error_adjusted"] = adj
    zero_fraction, gaps_total = _zero_gap_fraction(rec, np.flatnonzero(ok))
    s["itl_zero_gap_fraction"] = zero_fraction
    coalesced = zero_fraction is not None and zero_fraction >= COALESCED_GAP_FRACTION
    s["decode_steps"], s["decode_steps_note"] = (
        (None, f"{zero_fraction:.0%} of {gaps_total:,} gaps between output events are zero (events that came in "
               "one network read): the client did not see the token cadence") if coalesced
        else _decode_steps(rec, ok, per_token_known))

    # ---------------------------------------------------------------- throughput
    total_out = int(out_ok.sum())
    known_in = in_tok[ok]
    total_in = int(known_in[known_in >= 0].sum())
    s["output_tokens"] = total_out
    s["input_tokens"] = total_in if (known_in >= 0).any() else None
    # Unknown stays unknown (null): no success means no measured throughput (not 0), and a total
    # that would count unknown input tokens as zero is no total.
    measured = duration > 0 and bool(ok.any())
    # The output tokens the requests a stop aborted in flight had streamed (the docstring says why
    # the output throughput counts them).
    aborted_rows = np.array([i for i, m in rec.errors.items() if m.startswith(ABORTED_PREFIX)], dtype=np.int64)
    aborted_tokens = int(np.maximum(out_tok[aborted_rows], 0).sum()) if aborted_rows.size else 0
    s["output_tokens_aborted"] = aborted_tokens
    s["output_throughput_basis"] = OUTPUT_BASIS_WITH_ABORTED if aborted else OUTPUT_BASIS_COMPLETED
    # Every request aborted in flight (none failed at the server) after streaming tokens over a
    # measured duration: the server delivered those tokens, a real throughput; nothing completed
    # (0.0 completed tok/s and req/s), no latency (the docstring's rule).
    streamed_only = (duration > 0 and not ok.any() and aborted == n and aborted_tokens > 0)
    counted = measured or streamed_only
    s["output_throughput_completed_tok_s"] = total_out / duration if counted else None
    s["output_throughput_tok_s"] = (total_out + aborted_tokens) / duration if counted else None
    s["request_throughput_req_s"] = int(ok.sum()) / duration if counted else None
    s["total_token_throughput_tok_s"] = ((total_out + aborted_tokens + total_in) / duration
                                         if measured and bool((known_in >= 0).all()) else None)
    s["input_tokens_requested_mean"] = float(req_in[req_in >= 0].mean()) if (req_in >= 0).any() else None
    s["input_tokens_actual_mean"] = float(known_in[known_in >= 0].mean()) if (known_in >= 0).any() else None
    s["output_tokens_mean"] = float(out_ok.mean()) if out_ok.size else None
    s["input_length_check"] = input_length_check(req_in[ok], known_in)

    # ---------------------------------------------------------------- goodput
    if slo is not None:
        met = np.ones(int(ok.sum()), dtype=bool)
        if slo.ttft_s is not None:
            met &= ttft <= slo.ttft_s
        if slo.e2e_s is not None:
            met &= e2e <= slo.e2e_s
        if slo.tpot_s is not None:
            # The TPOT SLO rule (docstring): not applicable to one-token outputs, counted as met; an
            # unmeasured TPOT (output in one read) is unknown, so its request is not known to meet it.
            tp = np.zeros(out_ok.size)
            tp[multi] = np.where(one_read, np.inf, tpot)
            met &= tp <= slo.tpot_s
        good = int(met.sum())
        s["goodput_req_s"] = good / duration if duration > 0 else None
        s["slo_attainment"] = good / n if n else None
        s["slo"] = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s}
        s["slo_tpot_not_applicable"] = int((~multi).sum()) if slo.tpot_s is not None else 0
        s["slo_tpot_unmeasured"] = int(one_read.sum()) if slo.tpot_s is not None else 0

    # ---------------------------------------------------------------- achieved load
    sent = start + pool
    mean_c, max_c = in_flight(sent, end, lo, hi)
    s["achieved_concurrency_mean"] = mean_c
    s["achieved_concurrency_max"] = max_c
    # The send rate is what an open-loop run promises; a closed loop sends as slots free up (all
    # c at once at the start), so its "rate" would only measure that first burst: no value.
    open_loop = cfg.rate is not None
    s["achieved_rate_req_s"] = (
        (n - 1) / ((sent.max() - sent.min()) / 1e9) if open_loop and n >= 2 and sent.max() > sent.min() else None
    )
    s["achieved_send_rate_req_s"] = s["achieved_rate_req_s"]
    s["target_concurrency"] = cfg.concurrency
    s["target_rate_req_s"] = cfg.rate
    s["scheduled_rate_req_s"] = result.scheduled_rate
    s["rate_target_check"] = _rate_target_check(sent_rate=s["achieved_rate_req_s"], target=cfg.rate, n=n,
                                                burstiness=getattr(cfg, "burstiness", 1.0))
    flags: dict[str, bool] = {}
    # Against the target itself, not min(c, n): a closed loop that sent fewer requests than its
    # slots never had c in flight, whatever the reason, and its numbers describe that lighter load.
    flags["concurrency_shortfall"] = bool(cfg.concurrency and cfg.rate is None and max_c < cfg.concurrency
                                          and stopped is None)
    flags["rate_shortfall"] = bool(
        result.scheduled_rate is not None and s["achieved_rate_req_s"] is not None
        and s["achieved_rate_req_s"] < RATE_SHORTFALL_FRACTION * result.scheduled_rate
    )
    flags["rate_off_target"] = bool(s["rate_target_check"] is not None and s["rate_target_check"]["off_target"])
    flags["input_length_mismatch"] = bool(s["input_length_check"] is not None
                                          and s["input_length_check"]["mismatch"])
    flags["itl_coalesced"] = bool(coalesced)
    # No success: every request failed at the server (aborted ones aside), or, with no failure of
    # the server at all, every request was aborted in flight by a stop (nothing completed).
    flags["no_successful_requests"] = bool(n > 0 and not ok.any() and server_failures > 0)
    flags["all_requests_aborted"] = bool(n > 0 and not ok.any() and server_failures == 0)
    flags["tpot_slo_not_applicable"] = bool(s.get("slo_tpot_not_applicable"))
    flags["tpot_slo_unmeasured"] = bool(s.get("slo_tpot_unmeasured"))

    # ---------------------------------------------------------------- output length
    if cfg.fixed_output:
        mismatch = ok & (out_tok != req_out)
        s["output_length_mismatch_count"] = int(mismatch.sum())
        s["output_length_requested"] = int(req_out[0]) if n else None
        flags["output_length_mismatch"] = bool(mismatch.any())
    else:
        flags["output_length_mismatch"] = False
    est = rec.column("tokens_estimated").astype(bool) & ok
    flags["tokens_estimated"] = bool(est.any())
    s["tokens_estimated_count"] = int(est.sum())

    # ---------------------------------------------------------------- server cross-check
    delta = None
    if result.server_tokens_before is not None and result.server_tokens_after is not None:
        delta = result.server_tokens_after - result.server_tokens_before
    s["server_generation_tokens_delta"] = delta
    s["server_output_throughput_tok_s"] = delta / duration if delta is not None and duration > 0 else None
    streamed = np.where(out_tok > 0, out_tok, 0)
    ok_tokens = int(streamed[ok].sum())
    failed_streamed = int(streamed[~ok].sum())
    lo_tokens = ok_tokens + failed_streamed
    # What the failed requests could have made the server generate beyond what reached the client.
    failed_req = req_out[~ok].astype(np.int64)
    hi_tokens = (lo_tokens + int(np.maximum(failed_req - streamed[~ok], 0).sum())
                 if (failed_req >= 0).all() else math.inf)
    s["server_token_note"] = None
    mismatch = False
    if delta is not None and not ok.any():
        s["server_token_note"] = (f"not compared: no request succeeded, and the server's count ({delta:g} tokens) "
                                  "includes streams cut off before the client counted them")
    elif delta is not None:
        tol = SERVER_TOKEN_TOLERANCE * max(delta, 1.0)
        mismatch = delta < lo_tokens - tol or delta > hi_tokens + tol
        failed_n = n - int(ok.sum())
        if failed_n:
            many = f"{failed_n:,} failed request{'s' if failed_n != 1 else ''}"
            s["server_token_note"] = (
                f"{many}: the server's count may include up to {hi_tokens - lo_tokens:,} tokens the client did not "
                "receive; compared with that range" if math.isfinite(hi_tokens) else
                f"{many} of unknown requested length: the server's count was only checked not to fall short of "
                "the tokens the client received")
    flags["server_token_mismatch"] = bool(mismatch)
    s["server_scrape_errors"] = list(result.server_scrape_errors)

    # ---------------------------------------------------------------- client CPU
    cpu = sum(w.cpu_ns for w in result.workers)
    events = sum(w.events for w in result.workers)
    s["client_workers"] = len(result.workers)
    s["client_cpu_s"] = cpu / 1e9
    s["client_events"] = events
    # Process CPU includes whatever else the process does (a sweep's worker also writes progress
    # and heartbeats): over a few hundred events that background, not the client's parsing, is
    # most of it, so the per-event figure needs enough events to mean something.
    wall = max((w.wall_ns for w in result.workers), default=0) / 1e9
    rate = events / wall if wall > 0 else 0.0
    enough = events >= MIN_EVENTS_FOR_CPU and rate >= MIN_EVENT_RATE_FOR_CPU
    s["client_events_per_s"] = rate
    s["client_cpu_us_per_event"] = cpu / events / 1e3 if enough else None
    if not enough:
        s["client_cpu_note"] = (f"{events} streamed event{'s' if events != 1 else ''} at {rate:.0f} events/s: too "
                                f"few (< {MIN_EVENTS_FOR_CPU}) or too sparse (< {MIN_EVENT_RATE_FOR_CPU:.0f}/s) to "
                                "attribute the client's CPU per event")
    s["client_cpu_fraction_max"] = max((w.cpu_fraction for w in result.workers), default=0.0)
    # A client spinning through refused connections is busy but measures nothing: only a run
    # that streamed output can have been slowed by its client.
    flags["client_cpu_bound"] = bool(s["client_cpu_fraction_max"] > CPU_BOUND_FRACTION and s["successes"] > 0)
    s["flags"] = flags
    s["errors"] = _error_counts(rec)
    return s


def _rate_target_check(*, sent_rate: float | None, target: float | None, n: int,
                       burstiness: float = 1.0) -> dict[str, Any] | None:
    """The open-loop sending rate against the target (req/s): ``{"target_req_s", "sent_req_s",
    "deviation"`` (sent / target − 1)``, "bound_low", "bound_high"`` (the relative deviations
    allowed below and above the target: exp(−:data:`RATE_TARGET_SIGMAS` / √(b(n−1))) − 1, negative,
    and exp(:data:`RATE_TARGET_SIGMAS` / √(b(n−1))) − 1; the schedule's noise is symmetric in
    log(rate), not in rate)``, "bound"`` (``bound_high``, kept for older readers)``, "sigmas"`` (|ln(sent / target)| in standard deviations of a correct schedule)``,
    "off_target"}``; None for a closed loop, an unbounded rate or fewer than two requests sent.

    Why the bounds are asymmetric in rate (−50 % / +99 % for 20 Poisson requests, not ±3/√19 =
    ±69 %): the realised rate is (n−1)/T with T a sum of n−1 gamma gaps, T ~ Gamma(b(n−1)), so the
    rate follows an inverse gamma distribution, skewed upwards. The logarithm stabilises a gamma
    variable's variance, Var ln T = ψ′(k) ≈ 1/k for shape k (Bartlett & Kendall 1946, "The
    statistical analysis of variance-heterogeneity and the logarithmic transformation", J. R. Stat.
    Soc. Suppl. 8), and makes it nearly symmetric, so the 3σ rule is applied to ln(sent / target)
    and the rate bounds are exp(±3/√(b(n−1))) − 1. Simulated at n = 20, b = 1, a correct schedule
    crosses these bounds 0.45 % (above) and 0.03 % (below) of the time; symmetric bounds of ±69 %
    in rate would be crossed 2.2 % of the time above and never below (a rate cannot fall 69 %
    below its target that often, and not at all by 100 % for n ≤ 10)."""
    if target is None or not math.isfinite(target) or target <= 0 or sent_rate is None or n < 2:
        return None
    sd = 1.0 / math.sqrt(max(burstiness, 1e-9) * (n - 1))
    sigmas = abs(math.log(sent_rate / target)) / sd
    high = math.exp(RATE_TARGET_SIGMAS * sd) - 1.0
    low = math.exp(-RATE_TARGET_SIGMAS * sd) - 1.0
    return {"target_req_s": target, "sent_req_s": sent_rate, "requests": n, "deviation": sent_rate / target - 1.0,
            "bound": high, "bound_low": low, "bound_high": high, "sigmas": sigmas,
            "off_target": sigmas > RATE_TARGET_SIGMAS}


def input_length_check(requested: np.ndarray, actual: np.ndarray) -> dict[str, Any] | None:
    """Requested against the server's ``prompt_tokens`` over the successful requests where both are
    known: ``{"requested_mean", "actual_mean", "difference"`` (tokens, actual − requested)``,
    "tolerance"`` (tokens)``, "requests", "mismatch"}``; None when the server reported no prompt
    tokens or no requested length is known (a prompts file without a tokenizer)."""
    both = (requested >= 0) & (actual >= 0)
    if not both.any():
        return None
    req_mean = float(requested[both].mean())
    act_mean = float(actual[both].mean())
    tol = max(INPUT_LENGTH_TOLERANCE * req_mean, INPUT_LENGTH_TOLERANCE_TOKENS)
    return {"requested_mean": req_mean, "actual_mean": act_mean, "difference": act_mean - req_mean,
            "tolerance": tol, "requests": int(both.sum()), "mismatch": abs(act_mean - req_mean) > tol}


def _zero_gap_fraction(rec: RecordStore, idx: np.ndarray) -> tuple[float | None, int]:
    """Fraction of the gaps between output events of requests ``idx`` shorter than
    :data:`ZERO_GAP_NS` (events that came in one network read), and the number of gaps; None
    without gaps."""
    ev = rec.column("ev_time")
    off, ln = rec.column("ev_off"), rec.column("ev_len")
    zero = total = 0
    for i in idx:
        o, k = int(off[i]), int(ln[i])
        if k < 2:
            continue
        gaps = np.diff(ev[o:o + k])
        zero += int((gaps < ZERO_GAP_NS).sum())
        total += k - 1
    return (zero / total if total else None), total


def _merge_bunched(t: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events of one request with those that arrived within :data:`ZERO_GAP_NS` of the previous
    event merged into it (times ``t``, ns; tokens ``k`` summed): events bunched in one network read
    are one arrival, so the gap before the bunch is divided over all its tokens (the per-token
    basis) instead of being read as a pause followed by zero-length steps."""
    keep = np.ones(t.size, dtype=bool)
    keep[1:] = np.diff(t) >= ZERO_GAP_NS
    if keep.all():
        return t, k
    starts = np.flatnonzero(keep)
    return t[starts], np.add.reduceat(np.maximum(k, 0), starts)


def _decode_steps(rec: RecordStore, ok: np.ndarray, per_token_known: bool) -> tuple[dict[str, Any] | None, str | None]:
    """The decode step seen from the client (``run_summary``'s ``decode_steps``) and a note when it
    is None. Decode phase of a request: from its first output event (exclusive) to its last
    (inclusive), for every request that streamed output, failed or not (it was in the batch). A
    request whose last event came less than half a median step before an event is still counted
    at it: events of one step reach the client over several reads, microseconds apart. Events that
    came in one network read (within :data:`ZERO_GAP_NS` of the previous one) are merged first
    (:func:`_merge_bunched`), before the steps, the batch and the pauses are computed."""
    ev = rec.column("ev_time")
    tok = rec.column("ev_tokens")
    off, ln = rec.column("ev_off"), rec.column("ev_len")
    first, last = rec.column("first"), rec.column("last")
    times, gaps, ks = [], [], []
    for i in np.flatnonzero(ok):
        o, k = int(off[i]), int(ln[i])
        if k < 2:
            continue
        t, n = _merge_bunched(ev[o:o + k],
                              tok[o:o + k].astype(np.int64) if per_token_known else np.ones(k, dtype=np.int64))
        if t.size < 2:
            continue
        times.append(t[1:])
        gaps.append(np.diff(t))
        ks.append(n[1:])
    if not gaps:
        return None, "no successful request streamed two output events"
    t_ev = np.concatenate(times)
    k_ev = np.maximum(np.concatenate(ks), 1)
    step = np.concatenate(gaps).astype(np.float64) / k_ev  # ns per token
    if step.size < MIN_DECODE_GAPS:
        return None, f"{step.size} gap{'s' if step.size != 1 else ''} between output events (fewer than {MIN_DECODE_GAPS})"
    median = float(np.median(step))
    streamed = (first >= 0) & (last >= first)
    firsts = np.sort(first[streamed])
    lasts = np.sort(last[streamed])
    # Requests in decode at each event: first output before it, last output not before it (less half a step).
    batch = (np.searchsorted(firsts, t_ev, side="left")
             - np.searchsorted(lasts, t_ev - 0.5 * median, side="left")).astype(np.float64)
    stall = step > STALL_FACTOR * median
    typical = ~stall
    decode_ns = float((step * k_ev).sum())
    excess = float(((step[stall] - median) * k_ev[stall]).sum())
    return ({
        "basis": "per_token" if per_token_known else "per_event",
        "gaps": int(step.size),
        "step_s": float(np.average(step[typical], weights=k_ev[typical])) / 1e9,
        "step_p50_s": median / 1e9,
        "batch_mean": float(np.average(batch[typical], weights=k_ev[typical])),
        "stall_gaps": int(stall.sum()),
        "stall_share": excess / decode_ns if decode_ns > 0 else 0.0,
        "stall_factor": STALL_FACTOR,
    }, None)


def _itls(rec: RecordStore, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per-event ITLs (s) of requests ``idx`` and per-token ITLs when every event's k is known."""
    ev = rec.column("ev_time")
    tok = rec.column("ev_tokens")
    off, ln = rec.column("ev_off"), rec.column("ev_len")
    per_event, per_token, known = [], [], True
    for i in idx:
        o, k = int(off[i]), int(ln[i])
        if k < 2:
            continue
        gaps = np.diff(ev[o:o + k])
        per_event.append(gaps)
        ks = tok[o + 1:o + k].astype(np.int64)
        if known and (ks > 0).all():
            per_token.append(np.repeat(gaps / ks, ks))
        else:
            known = False
    e = _ns(np.concatenate(per_event)) if per_event else np.array([])
    t = _ns(np.concatenate(per_token)) if (known and per_token) else np.array([])
    return e, t, known and bool(per_token)


# Per-request byte counts in the client's failure messages (``after 4312 body bytes``, ``(inside
# an event: 10 bytes unterminated)``): the same failure with another count is the same kind.
_BYTE_COUNT = re.compile(r"\b(\d[\d,]*)(?= (?:body )?bytes\b)")
# Longest failure reason kept as a key (a server's error body can be long; the records keep it all).
ERROR_KEY_CHARS = 200


def _byte_counts(message: str) -> tuple[list[str], list[int]]:
    """``message`` split at its byte counts: the texts around them (one more than the counts) and
    the counts, in order."""
    texts, counts, at = [], [], 0
    for m in _BYTE_COUNT.finditer(message):
        texts.append(message[at:m.start()])
        counts.append(int(m.group(1).replace(",", "")))
        at = m.end()
    texts.append(message[at:])
    return texts, counts


def _cut(pieces: list[tuple[str, int]]) -> str:
    """The text of ``pieces`` (``(text, length in the grouping key)``) cut as :func:`error_kind`
    cuts the key: when the key runs over :data:`ERROR_KEY_CHARS` characters, no more than its
    first ``ERROR_KEY_CHARS - 1`` key characters and no more than that many characters in all,
    ending ``…``; a byte count that does not fit whole is left out."""
    if sum(n for _, n in pieces) <= ERROR_KEY_CHARS:
        return "".join(text for text, _ in pieces)
    room = ERROR_KEY_CHARS - 1
    out: list[str] = []
    used = shown = 0
    for text, n in pieces:
        take = min(room - used, room - shown)
        if take <= 0:
            break
        if n == len(text) and take < n:       # plain text: cut where the key is cut
            out.append(text[:take])
            break
        if take < max(n, len(text)):          # a byte count that does not fit whole
            break
        out.append(text)
        used, shown = used + n, shown + len(text)
    return "".join(out) + "…"


def error_kind(message: str) -> str:
    """The kind of failure ``message`` is, as the summary groups it (a key, never shown): each
    per-request byte count written ``N`` (``server closed the connection inside the response body
    after N body bytes``), at most :data:`ERROR_KEY_CHARS` characters (longer ones end with ``…``).
    :func:`error_text` says a group of them in words with its real counts."""
    texts, counts = _byte_counts(message)
    return _cut([(t, len(t)) for t in texts[:1]] + [p for t in texts[1:] for p in (("N", 1), (t, len(t)))])


def error_text(messages: list[str]) -> str:
    """The failure reason shown for ``messages``, failures of one kind (:func:`error_kind`): the
    first message with each byte count the one value the messages share at that place (``after
    4,312 body bytes``) or the range of them (``after 87–4,312 body bytes``), cut as the kind is
    (a count the cut leaves out is not shown)."""
    texts, first = _byte_counts(messages[0])
    spans: list[list[int]] = [[c, c] for c in first]
    for message in messages[1:]:
        for i, c in enumerate(_byte_counts(message)[1][:len(spans)]):
            spans[i][0], spans[i][1] = min(spans[i][0], c), max(spans[i][1], c)
    pieces = [(texts[0], len(texts[0]))]
    for (lo, hi), text in zip(spans, texts[1:]):
        pieces += [(f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}", 1), (text, len(text))]
    return _cut(pieces)


def _error_counts(rec: RecordStore) -> dict[str, int]:
    """Failure reason -> count, one entry per kind of failure (:func:`error_kind`), each said by
    :func:`error_text` with the real byte counts of its messages."""
    kinds: dict[str, list[str]] = {}
    for msg in rec.errors.values():
        kinds.setdefault(error_kind(msg), []).append(msg)
    counts: dict[str, int] = {}
    for messages in kinds.values():
        text = error_text(messages)
        counts[text] = counts.get(text, 0) + len(messages)
    return counts
