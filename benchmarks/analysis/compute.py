"""The ceiling analysis itself: which points count, the decode step-time fit, the ceiling, the
queueing steps, the bottleneck class and the per-GPU comparison across topologies."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from benchmarks.analysis.findings import _findings
from benchmarks.analysis.model import (
    queueing_ttft_needed,
    CEILING_REACHED_FRACTION, COALESCED_FLAG, FLAT_MIN_LOAD_GROWTH, FLAT_THROUGHPUT_GROWTH, MAX_FAILED_FRACTION, MIN_FIT_POINTS,
    MIN_COMPARED_REQUESTS,
    PARTIAL_FLAG, PLATEAU_FRACTION, SHARED_LOAD_FLAG,
    PLATEAU_MIN_LOAD_GROWTH, SAME_PER_GPU, TPOT_GROWTH, TTFT_GROWTH, BatchSource, Bottleneck, Ceiling,
    CeilingReport, DecodeFit, FitSource, LoadGroup, MatchedPair, PointAnalysis, QueueingStep, Stat, SweepPoint, Topology,
    TopologyComparison,
)
from benchmarks.analysis.wording import (
    _dip, _failures_of, _falls_cause, _falls_numbers, _last_falls, _metric, _ms, _no_growth_numbers,
)
from controlplane.errors import InvalidInput


def ceiling_analyse(
    points: Sequence[SweepPoint],
    *,
    num_gpus: int,
    topology: Topology,
    compare_with: Sequence[SweepPoint] | None = None,
    compare_num_gpus: int | None = None,
    compare_topology: Topology | None = None,
    max_running_batch: int | None = None,
    batch_source: BatchSource | Literal["auto"] = "auto",
    gpus_known: bool = True,
) -> CeilingReport:
    """Analyse one sweep (one input/output length pair) for its throughput ceiling and bottleneck.

    ``points``: the sweep's runs in any order; runs without successful output (``completed`` 0,
    or zero tok/s) and runs where more than ``MAX_FAILED_FRACTION`` of the requests failed are left
    out of every conclusion and listed in ``excluded``; runs that completed fewer than
    ``MIN_COMPARED_REQUESTS`` requests are analysed but named in ``too_few_requests``, and every
    finding that names one says it is too small to conclude from. ``num_gpus``: GPUs the deployment used
    (all roles together for PD). ``compare_with`` / ``compare_num_gpus`` / ``compare_topology``: an
    optional second sweep of the same model on another topology; all three are needed for the
    per-GPU comparison. ``max_running_batch``: the engine's cap on running sequences
    (``--max-running-requests``) when known, to bound the fitted ceiling. ``batch_source``:
    ``auto`` (default: each point on its own, :func:`point_running_batch`: ``decode_events`` for a
    point that has the load generator's client-seen decode step and is not flagged
    ``itl_coalesced``, else ``littles_law`` for that point alone; the fit's ``batch_source`` is
    ``mixed`` when its points differ, and ``batch_sources`` names each),
    ``decode_events`` (step time = the mean gap between output events with decode pauses left out,
    running batch = the requests in their decode phase counted at those events: both as the engine
    ran its steps, so prefill time inflates neither), ``littles_law`` (step time = TPOT, running
    batch = tok/s * TPOT, capped at the concurrency: what runs without per-event records allow) or
    ``concurrency`` (assume every request is in the decode batch). ``gpus_known``: False when
    ``num_gpus`` is a stand-in (a CPU engine, a recipe without a GPU count): the findings then
    quote no per-GPU figure.

    Returns a :class:`CeilingReport`. Raises :class:`InvalidInput` (field path ``points`` etc.) for
    an empty sweep, a sweep where no point is left to analyse, mixed input/output lengths, a
    non-positive GPU count or a half-given comparison.
    """
    _validate(points, num_gpus=num_gpus, compare_with=compare_with, compare_num_gpus=compare_num_gpus,
              compare_topology=compare_topology, max_running_batch=max_running_batch)
    usable, excluded, failed = _usable(points)
    if not usable:
        raise InvalidInput({"points": [_nothing_left(excluded, failed)]})
    failed_requests = sum(p.failed or 0 for p in points)
    analysed = [_point_analysis(p, num_gpus=num_gpus, batch_source=batch_source, gpus_known=gpus_known)
                for p in usable]
    fit_source: FitSource
    if batch_source != "auto":
        fit_source = batch_source
    else:
        # Each point by its own records: one coalesced or imported point moves only itself to Little's law.
        sources = {a.running_batch_source for a in analysed
                   if a.running_batch_source is not None and a.step_ms is not None}
        fit_source = sources.pop() if len(sources) == 1 else ("mixed" if sources else "littles_law")
    fit = _decode_fit(analysed, batch_source=fit_source, failed_excluded=[p.label for p in failed])
    by_kind = [(kind, group) for kind in ("closed", "open")
               if (group := [p for p in usable if p.load_kind == kind])]
    # One server, one decode path: the fit's bound on the ceiling is the server's, whichever load
    # kind drove it, so it is judged once over every kind's points (each kind keeps its own plateau).
    bound = _fit_bound([group for _, group in by_kind], fit, max_running_batch=max_running_batch)
    best_tok_s = max(p.output_throughput_tok_s for p in usable)
    groups: list[LoadGroup] = []
    for kind, group in by_kind:
        labels = {p.label for p in group}
        g_ceiling = _ceiling(group, fit, bound=bound, max_running_batch=max_running_batch, best_tok_s=best_tok_s)
        g_steps = _queueing_steps(group)
        # A coalesced point's first read may hold tokens decoded after the first, so its TTFT's share of
        # E2E is no prefill time: the bottleneck is judged over the other points alone (its throughput
        # counts above, its TTFT in the queueing steps, its mean TPOT in the fit).
        timed = [p for p in group if COALESCED_FLAG not in p.flags]
        untimed = [p.label for p in group if COALESCED_FLAG in p.flags]
        if timed:
            timed_labels = {p.label for p in timed}
            g_bottleneck, g_reason = _bottleneck(
                timed, [a for a in analysed if a.label in timed_labels],
                g_steps if not untimed else _queueing_steps(timed), fit, g_ceiling, failed_requests=failed_requests)
        else:
            g_bottleneck, g_reason = "unknown", (
                f"the output events of every point came grouped into network reads ({COALESCED_FLAG}: "
                f"{', '.join(untimed)}), so their TTFT may hold decode time and their E2E cannot be split into "
                "prefill and decode")
        groups.append(LoadGroup(kind=kind, labels=[p.label for p in group], ceiling=g_ceiling, queueing=g_steps,
                                bottleneck=g_bottleneck, bottleneck_reason=g_reason, timings_skipped=untimed))
    best_label = max(usable, key=lambda p: p.output_throughput_tok_s).label
    main = next(g for g in groups if best_label in g.labels)
    ceiling, bottleneck, reason = main.ceiling, main.bottleneck, main.bottleneck_reason
    steps = [s for g in groups for s in g.queueing]
    comparison = None
    if compare_with is not None and compare_num_gpus is not None and compare_topology is not None:
        comparison = _compare(usable, num_gpus=num_gpus, topology=topology, other=compare_with,
                              other_num_gpus=compare_num_gpus, other_topology=compare_topology)
    report = CeilingReport(
        topology=topology, num_gpus=num_gpus, input_len=usable[0].input_len, output_len=usable[0].output_len,
        points=analysed, excluded=excluded, fit=fit, ceiling=ceiling, queueing=steps,
        queueing_detected=any(s.queueing for s in steps), bottleneck=bottleneck, bottleneck_reason=reason,
        comparison=comparison, findings=[], failed_excluded=[p.label for p in failed],
        failed_requests=failed_requests, gpus_known=gpus_known, groups=groups,
        too_few_requests=[p.label for p in usable if p.completed is not None and p.completed < MIN_COMPARED_REQUESTS],
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


def _usable(points: Iterable[SweepPoint]) -> tuple[list[SweepPoint], list[str], list[SweepPoint]]:
    """Points with output and at most MAX_FAILED_FRACTION failed requests, sorted by load within
    each load kind (closed loop first, :func:`_load_order`); the
    labels of all those left out, with why (a partial point, :data:`PARTIAL_FLAG`, and one measured
    beside another sweep's load, :data:`SHARED_LOAD_FLAG`, always are);
    and the points left out for failures, sorted by load."""
    usable: list[SweepPoint] = []
    excluded: list[str] = []
    failed: list[SweepPoint] = []
    for p in points:
        fraction = _failed_fraction(p)
        if PARTIAL_FLAG in p.flags:
            excluded.append(f"{p.label} (cancelled partway: a partial point)")
        elif SHARED_LOAD_FLAG in p.flags:
            excluded.append(f"{p.label} (shared load: another sweep ran on a deployment sharing its CPUs or GPUs)")
        elif p.completed == 0 or p.output_throughput_tok_s <= 0:
            excluded.append(f"{p.label} (no successful output)")
        elif fraction is not None and fraction > MAX_FAILED_FRACTION:
            excluded.append(f"{p.label} ({_failures_of(p)})")
            failed.append(p)
        else:
            usable.append(p)
    usable.sort(key=_load_order)
    failed.sort(key=_load_order)
    return usable, excluded, failed


def _load_order(p: SweepPoint) -> tuple[int, float]:
    """Closed-loop points by concurrency, then open-loop points by request rate: two scales, never
    interleaved."""
    return (0 if p.load_kind == "closed" else 1, p.load)


def _nothing_left(excluded: list[str], failed: list[SweepPoint]) -> str:
    if any("(shared load:" in e for e in excluded):
        return f"no point is left to analyse: {', '.join(excluded)}"
    if failed:
        return (f"no point is left to analyse: {', '.join(excluded)}; more than {MAX_FAILED_FRACTION:.0%} "
                f"failed requests make a point's latency unreadable, so fix the failures first")
    return "no point has successful output; nothing to analyse"


def _has_decode_steps(p: SweepPoint) -> bool:
    """True when ``p`` carries a client-seen decode step that can be trusted: measured (step and
    batch given) and not flagged :data:`COALESCED_FLAG` (events grouped by network reads)."""
    return p.decode_step_ms is not None and p.decode_batch is not None and COALESCED_FLAG not in p.flags


def point_running_batch(p: SweepPoint, *, batch_source: BatchSource | Literal["auto"] = "auto",
                        ) -> tuple[float | None, float | None, BatchSource | None]:
    """The running decode batch of one point (sequences), the step time the decode fit uses for it
    (ms per token) and where the batch came from: ``(batch, step_ms, source)``. The one place
    both figures are estimated; the ceiling analysis and the what-if projection
    (:mod:`kernels.whatif`, through the analysis report) quote these.

    ``auto`` decides per point: ``decode_events`` when the point has a client-seen decode step
    that can be trusted (:func:`_has_decode_steps`: the load generator's ``decode_batch``, the
    requests between their first and last output event counted at each event, and
    ``decode_step_ms``, the mean gap between output events with decode pauses left out), else
    ``littles_law`` (batch = output tok/s x TPOT, capped at the concurrency; step = TPOT): runs
    without per-event records (imported) and runs whose events came coalesced. A forced
    ``decode_events`` gives ``(None, None, None)`` for a point without those records; a forced
    ``littles_law`` on a point without TPOT, or ``concurrency``, gives the concurrency as the batch
    (``(None, TPOT, None)`` for an open-loop point)."""
    tpot = p.tpot_ms.central()
    if batch_source == "auto":
        batch_source = "decode_events" if _has_decode_steps(p) else "littles_law"
    if batch_source == "decode_events":
        if _has_decode_steps(p):
            return p.decode_batch, p.decode_step_ms, "decode_events"
        return None, None, None
    if batch_source == "littles_law" and tpot is not None:
        # tok/s x s/token-per-sequence = sequences in the decode batch, time-averaged over the run.
        running = p.output_throughput_tok_s * tpot / 1000.0
        if p.concurrency is not None:
            running = min(running, p.load)  # the concurrency it reached (SweepPoint.load)
        return running, tpot, "littles_law"
    if p.concurrency is not None:
        return p.load, tpot, "concurrency"
    return None, tpot, None


def _point_analysis(p: SweepPoint, *, num_gpus: int, batch_source: BatchSource | Literal["auto"],
                    gpus_known: bool = True) -> PointAnalysis:
    ttft = p.ttft_ms.central()
    tpot = p.tpot_ms.central()
    e2e = p.e2e_ms.central()
    estimated = False
    if e2e is None and ttft is not None and tpot is not None and p.output_len:
        e2e = ttft + tpot * (p.output_len - 1)
        estimated = True
    share = (e2e - ttft) / e2e if e2e and ttft is not None and e2e > 0 else None
    running, step, source = point_running_batch(p, batch_source=batch_source)
    # The pause share is measured against the client-seen step (metrics.py ``_decode_steps``), so it
    # travels with that step, also when the fit falls back to TPOT; a point whose events came in
    # network reads has neither.
    coalesced = COALESCED_FLAG in p.flags
    return PointAnalysis(
        label=p.label, concurrency=p.concurrency, request_rate=p.request_rate,
        output_throughput_tok_s=p.output_throughput_tok_s, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e,
        e2e_estimated=estimated, running_batch=running, running_batch_source=source, decode_share=share,
        tok_s_per_gpu=p.output_throughput_tok_s / num_gpus if gpus_known else None, ttft_stat=p.ttft_ms.central_stat(),
        tpot_stat=p.tpot_ms.central_stat(), e2e_stat=_estimated_stat(p) if estimated else p.e2e_ms.central_stat(),
        step_ms=step, stall_share=None if coalesced else p.decode_stall_share,
        decode_step_ms=None if coalesced else p.decode_step_ms,
    )


def _estimated_stat(p: SweepPoint) -> Stat | None:
    """The statistic of an E2E estimated as TTFT + TPOT * (output_len - 1): theirs when both are the
    same statistic, else None (named as the default, mean, in sentences)."""
    stat = p.ttft_ms.central_stat()
    return stat if stat == p.tpot_ms.central_stat() else None


# --- decode fit and ceiling -----------------------------------------------------------------------


def _decode_fit(points: list[PointAnalysis], *, batch_source: FitSource,
                failed_excluded: Sequence[str] = ()) -> DecodeFit:
    """Least-squares line through (running batch, step time) of the analysed points (see
    :class:`DecodeFit` for what each ``batch_source`` fits); ``failed_excluded`` (labels left out
    for failed requests) only goes into the reason when too few points remain."""
    used = [a for a in points if a.running_batch is not None and a.step_ms is not None]
    pairs = [(a.label, a.running_batch, a.step_ms) for a in used]
    fit = DecodeFit(possible=False, reason=None, batch_source=batch_source, n_points=len(pairs),
                    labels=[lb for lb, _, _ in pairs], running_batch=[b for _, b, _ in pairs],
                    tpot_ms=[a.tpot_ms for a in used], steps_ms=[t for _, _, t in pairs],
                    stall_shares=[a.stall_share for a in used], tpot_stats=[a.tpot_stat or "mean" for a in used],
                    batch_sources=[a.running_batch_source or "concurrency" for a in used],
                    load_kinds=["closed" if a.concurrency is not None else "open" for a in used])
    distinct = len({round(b, 1) for _, b, _ in pairs})
    if len(pairs) < MIN_FIT_POINTS or distinct < MIN_FIT_POINTS:
        missing = len(points) - len(pairs)
        why = f"{distinct} distinct running batch size{'s' if distinct != 1 else ''}"
        if missing:
            what = {"decode_events": "a client-seen decode step", "mixed": "a client-seen decode step or TPOT"}.get(
                batch_source, "TPOT")
            why += f" ({missing} point{'s' if missing != 1 else ''} without {what})"
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
    best, provided load grew by PLATEAU_MIN_LOAD_GROWTH over that stretch; and the best tok/s.

    A sweep whose last point is within PLATEAU_FRACTION of its first (either way) over that much
    load growth, with no point below PLATEAU_FRACTION² of the best, is flat from its first point
    even when one point in between dips (a busy host's noise, e.g. 385, 337, 391 tok/s at c=1, 8,
    16): more load bought nothing, so the ceiling was already reached, not "still above". Over
    FLAT_MIN_LOAD_GROWTH of load it is flat whatever the dip (620, 444, 636 tok/s at c=1, 8, 16: a
    one-at-a-time engine at its ceiling from c=1); the dip is then reported as a fall."""
    best = max(p.output_throughput_tok_s for p in points)
    floor = PLATEAU_FRACTION * best
    start = len(points)
    for i in range(len(points) - 1, -1, -1):
        if points[i].output_throughput_tok_s < floor:
            break
        start = i

    def grew_enough(i: int, factor: float = PLATEAU_MIN_LOAD_GROWTH) -> bool:
        first, last = points[i].load, points[-1].load
        return math.isfinite(last) and first > 0 and last / first >= factor

    if start < len(points) - 1 and grew_enough(start):
        return start, best
    head, tail = points[0].output_throughput_tok_s, points[-1].output_throughput_tok_s
    if len(points) > 1 and head > 0 and PLATEAU_FRACTION <= tail / head <= 1 / PLATEAU_FRACTION:
        shallow = min(p.output_throughput_tok_s for p in points) >= PLATEAU_FRACTION ** 2 * best
        if (shallow and grew_enough(0)) or grew_enough(0, FLAT_MIN_LOAD_GROWTH):
            return 0, best
    return None, best


def _fit_bound(kinds: list[list[SweepPoint]], fit: DecodeFit, *,
               max_running_batch: int | None) -> tuple[float | None, float | None]:
    """The fit's bound on the server's throughput in tok/s, ``(asymptote, capped)``: ``1000 /
    per_seq_ms`` and, with the engine's cap on running sequences, ``cap / step(cap)``; None where
    the fit is no decode cost or the step does not grow with load (judged over the fit's step
    times, or, for a TPOT fit, over the TPOT of any load kind in ``kinds``, each kind's points in
    load order)."""
    # Only a physical cost bounds the ceiling: a negative fixed or per-sequence cost is no decode path.
    # A coalesced point's TPOT is no decode time (its tokens came in one read): left out here too.
    grows = (_step_grows(fit) if fit.batch_source in ("decode_events", "mixed")
             else any(_tpot_grows([p for p in k if COALESCED_FLAG not in p.flags]) for k in kinds))
    if not (fit.is_decode_cost and fit.per_seq_ms is not None and grows):
        return None, None
    asymptote = 1000.0 / fit.per_seq_ms
    capped = None
    if max_running_batch is not None and fit.step_ms(max_running_batch) > 0:
        capped = 1000.0 * max_running_batch / fit.step_ms(max_running_batch)
    return asymptote, capped


def _ceiling(points: list[SweepPoint], fit: DecodeFit, *, bound: tuple[float | None, float | None],
             max_running_batch: int | None, best_tok_s: float) -> Ceiling:
    """The ceiling as one load kind's ``points`` show it: their own plateau, else the fit's
    ``bound`` (:func:`_fit_bound`, the server's), raised to ``best_tok_s`` (the best output tok/s
    of the whole sweep, every kind's) where a point beat it; so every kind of one sweep quotes the
    same fitted ceiling."""
    best_point = max(points, key=lambda p: p.output_throughput_tok_s)
    observed = best_point.output_throughput_tok_s
    asymptote, capped = bound
    start, _ = _plateau(points)
    tok_s: float | None
    source: Literal["observed_plateau", "fit_asymptote", "fit_capped"] | None
    if start is not None:
        tok_s, source = observed, "observed_plateau"
    elif capped is not None:
        # A point above the fitted bound means the line underestimates at large batches; the
        # measured number is then the better lower bound for the ceiling.
        tok_s, source = max(capped, best_tok_s), "fit_capped"
    elif asymptote is not None:
        tok_s, source = max(asymptote, best_tok_s), "fit_asymptote"
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
        falls=((start is None and points[-1].output_throughput_tok_s < PLATEAU_FRACTION * observed)
               or _dip(points) is not None),
    )


def _step_grows(fit: DecodeFit) -> bool:
    """The fitted step time at the largest running batch is at least ``TPOT_GROWTH`` times the one
    at the smallest (the step-time counterpart of :func:`_tpot_grows`)."""
    if len(fit.steps_ms) < 2:
        return False
    pairs = sorted(zip(fit.running_batch, fit.steps_ms, strict=True))
    lo, hi = pairs[0][1], pairs[-1][1]
    return lo > 0 and hi / lo >= TPOT_GROWTH


def _tpot_grows(points: list[SweepPoint]) -> bool:
    if len(points) < 2:
        return False
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
        needed = queueing_ttft_needed(load_growth, tput_growth)
        # Repeated runs at the same load are noise, not queueing; an unknown (NaN) growth still counts.
        queueing = (ttft_growth is not None and needed is not None and ttft_growth >= needed
                    and not load_growth <= 1.0)
        steps.append(QueueingStep(from_label=a.label, to_label=b.label, load_growth=load_growth,
                                  ttft_growth=ttft_growth, throughput_growth=tput_growth, queueing=queueing))
    return steps


def _bottleneck(points: list[SweepPoint], analysed: list[PointAnalysis], steps: list[QueueingStep],
                fit: DecodeFit, ceiling: Ceiling, *, failed_requests: int = 0) -> tuple[Bottleneck, str]:
    """Classify at the heaviest point: decode-bound when decode time dominates E2E and TPOT grows
    with load (and a fit, when one was made, gives a physical per-sequence cost); prefill-bound when
    TTFT dominates without queueing; queueing when TTFT dominates and a step queues (TTFT grows
    while throughput is flat, or grows by well under the load: :func:`queueing_ttft_needed`); none
    when decode dominates but TPOT stays flat and throughput does not fall (the caller passes only points not flagged :data:`COALESCED_FLAG`: a coalesced point's TTFT and TPOT time
    network reads, mean TPOT 0 ms and TTFT all of E2E, which would read as prefill). Unknown when
    TPOT grows but the fit says the step time does not grow with the running batch, or when
    throughput falls with load and nothing else explains it. Reasons that quote a latency name its
    statistic (mean, or p50 for runs that recorded only the median)."""
    hi = analysed[-1]
    tpot = _metric("TPOT", [a.tpot_stat for a in analysed])
    ttft = _metric("TTFT", [a.ttft_stat for a in analysed])
    e2e = _metric("E2E", [a.e2e_stat for a in analysed])
    if len(points) < 2:
        return "unknown", f"one point: how {tpot} and {ttft} grow with load cannot be judged"
    grows = _tpot_grows(points)
    queueing = any(s.queueing for s in steps)
    share = hi.decode_share
    if grows and fit.possible and not fit.is_decode_cost and (share is None or share >= 0.5):
        assert fit.per_seq_ms is not None and fit.fixed_ms is not None
        lo = analysed[0]
        rises = f"{tpot} rises from {_ms(lo.tpot_ms)} at {lo.label} to {_ms(hi.tpot_ms)} at {hi.label}"
        if fit.per_seq_ms <= 0:
            return "unknown", (f"{rises}, but not with the running batch: {_no_growth_numbers(fit)}; so decode is "
                               f"not named the bottleneck")
        return "unknown", (f"{rises}, but the line through {tpot} against the running batch has a negative fixed "
                           f"cost ({_ms(fit.fixed_ms)}), which is no decode cost, so decode is not named the "
                           f"bottleneck")
    if share is None:
        if grows:
            return "decode", f"{tpot} grows with load (E2E unknown, so its share is not checked)"
        return "unknown", "E2E and output length unknown at the heaviest point: shares cannot be computed"
    if share >= 0.5:
        if grows:
            return "decode", f"decode is {share:.0%} of {e2e} at {hi.label} and {tpot} grows with load"
        if ceiling.falls and _last_falls(points):
            return "unknown", (f"throughput falls as load rises, {_falls_numbers(points)}, while {tpot} does not "
                               f"grow: {_falls_cause(failed_requests)}, not a bottleneck this sweep can name")
        return "none", f"decode is {share:.0%} of {e2e} at {hi.label} but {tpot} stays flat: not saturated"
    if queueing:
        return "queueing", f"{ttft} is {1 - share:.0%} of {e2e} at {hi.label} and grows while throughput does not keep up with load"
    return "prefill", f"{ttft} is {1 - share:.0%} of {e2e} at {hi.label} without queueing"


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


