"""The findings of a ceiling report: plain sentences with their numbers, units and the statistic
of every latency they quote."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from benchmarks.analysis.model import (
    CEILING_REACHED_FRACTION, COALESCED_FLAG, FLAT_MIN_LOAD_GROWTH, FLAT_THROUGHPUT_GROWTH, PLATEAU_FRACTION,
    PLATEAU_MIN_LOAD_GROWTH, MAX_FAILED_FRACTION, MIN_COMPARED_REQUESTS, TOO_FEW_FLAG, STALL_SHARE_NOTED, TTFT_GROWTH, Ceiling,
    CeilingReport, DecodeFit, LoadGroup, PointAnalysis, QueueingStep, SweepPoint, TopologyComparison, _fixed, _num,
    QUEUEING_MAX_THROUGHPUT_SHARE, queueing_ttft_needed,
)
from benchmarks.analysis.wording import (
    _dip_numbers, _failures_of, _falls_cause, _falls_numbers, _last_falls, _load_ratio, _metric, _ms, _no_growth_numbers, _per_seq, _r2,
    _span_ms, _step_name, _throughput_change, _tok,
)


def _findings(r: CeilingReport, points: list[SweepPoint], failed: list[SweepPoint]) -> list[str]:
    out: list[str] = []
    lengths = f"{r.input_len}/{r.output_len} tokens in/out" if r.input_len and r.output_len else None
    for p in failed:
        out.append(f"{p.label} excluded: {_failures_of(p)} — fix the failures before reading its latency "
                   f"(more than {MAX_FAILED_FRACTION:.0%} failed, so it is left out of the fit, the ceiling, "
                   f"the queueing and the bottleneck).")
    out.append(_fit_sentence(r.fit))
    out.append(_stall_sentence(r))
    groups = r.groups or [LoadGroup(kind="closed", labels=[p.label for p in points], ceiling=r.ceiling,
                                    queueing=r.queueing, bottleneck=r.bottleneck,
                                    bottleneck_reason=r.bottleneck_reason)]
    by_kind = []
    for g in groups:
        g_points = [p for p in points if p.label in g.labels]
        g_analysed = [a for a in r.points if a.label in g.labels]
        by_kind.append((g, g_points, g_analysed))
    prefix = len(groups) > 1
    for g, g_points, g_analysed in by_kind:
        out.append(_kind_prefixed(g, prefix, _bottleneck_sentence(r, g, g_analysed, g_points, quote_fit=not prefix)))
    if prefix:
        out.extend(_shared_ceiling_sentences(r, [(g, g_points) for g, g_points, _ in by_kind]))
    for g, g_points, g_analysed in by_kind:
        out.extend(_kind_prefixed(g, prefix, s) for s in _ceiling_sentences(r, g.ceiling, g_points, shared=prefix))
    for g, g_points, g_analysed in by_kind:
        out.extend(_kind_prefixed(g, prefix, s) for s in _queueing_sentences(g, g_analysed))
    if r.comparison is not None:
        out.extend(_comparison_sentences(r.comparison, lengths))
    small = [p for p in points if p.label in set(r.too_few_requests)]
    if small:
        out = [_too_few_caveat(s, small) for s in out]
        out.append(_too_few_sentence(small))
    # Points with the same flags and no failures share one sentence ("c=1, c=8 and c=16 are
    # flagged (tokens_estimated); ..."): a llama.cpp sweep flags every point alike, and one line a
    # point said the same thing three times.
    flag_groups: dict[tuple[str, ...], list[str]] = {}
    for p in points:
        if p.flags and not p.failed:
            flag_groups.setdefault(tuple(p.flags), []).append(p.label)
    for p in points:
        notes = []
        if p.flags:
            notes.append(f"is flagged ({', '.join(p.flags)})")
        if p.failed:
            total = (p.completed or 0) + p.failed
            notes.append(f"had {p.failed} failed request{'s' if p.failed != 1 else ''} of {total}")
        labels = flag_groups.get(tuple(p.flags), []) if p.flags and not p.failed else [p.label]
        if len(labels) > 1:
            if labels[0] == p.label:
                out.append(_flag_group_sentence(labels, p.flags))
        elif notes and COALESCED_FLAG in p.flags:
            out.append(f"{p.label} {' and '.join(notes)}; {_coalesced_use(p.flags, plural=False)}")
        elif notes:
            out.append(f"{p.label} {' and '.join(notes)}; its numbers are used as measured.")
        if p.concurrency is not None and p.load < p.concurrency:
            out.append(f"{p.label} never had {p.concurrency} requests in flight: at most {p.load:g} at once "
                       f"(concurrency_shortfall), so its load is taken as {p.load:g} in every load ratio "
                       "and ordering, not its label.")
    failed_labels = {p.label for p in failed}
    others = [e for e in r.excluded if e.split(" (", 1)[0] not in failed_labels]
    if others:
        out.append(f"Left out: {', '.join(others)}.")
    return [s for s in out if s]


#: The end of the sentence a ceiling of one point gets: it concludes nothing, so it takes no
#: too-few-requests caveat ("cannot show a ceiling; but c=1 completed only 1 request" read as if the
#: point could have shown one with more requests).
ONE_POINT_TAIL = "cannot show a ceiling."


def _too_few_caveat(sentence: str, small: list[SweepPoint]) -> str:
    """``sentence`` as it stands when it names none of ``small`` (points that completed fewer than
    :data:`MIN_COMPARED_REQUESTS` requests) or concludes nothing (:data:`ONE_POINT_TAIL`); else
    with the caveat that those it names are too small to conclude from: ``...; but c=1 completed
    only 2 requests, too few to conclude from (too_few_requests).`` A label is matched whole, so
    ``c=1`` is not found in ``c=16``."""
    named = [p for p in small if re.search(rf"(?<![\w.]){re.escape(p.label)}(?!\w|\.\d)", sentence)]
    if not sentence or not named or sentence.endswith(ONE_POINT_TAIL):
        return sentence
    return (f"{sentence.rstrip('.')}; but {_and(p.label for p in named)} completed only "
            f"{_and(str(p.completed) for p in named)} request{'s' if named[-1].completed != 1 else ''}, too few to "
            f"conclude from ({TOO_FEW_FLAG}).")


def _more_requests_advice(small: list[SweepPoint], it: str) -> str:
    """How to get more requests out of ``small``, by what ended them (:attr:`SweepPoint.limited_by`):
    a request cap wants more requests; a time limit alone wants a longer ``duration_s`` (a request
    cap could only end such a point sooner); a cap and a time limit want both raised; points whose
    limit is unknown (imported) get the request advice."""
    limits = {p.limited_by or "requests" for p in small}
    capped = bool(limits & {"requests", "both"})
    timed = bool(limits & {"duration", "both"})
    if timed and not capped:
        return (f"give each point a longer time limit (duration_s, in seconds) to compare {it}: "
                f"{'it was' if it == 'it' else 'they were'} limited by time alone, and a request cap (requests) "
                "could only end a point sooner")
    if timed:
        return (f"raise both the request cap (requests or requests_per_concurrency) and the time limit "
                f"(duration_s, in seconds) to compare {it}: a point ends at whichever it reaches first")
    return f"send more requests per point (requests or requests_per_concurrency) to compare {it}"


def _too_few_sentence(small: list[SweepPoint]) -> str:
    """The note that names the points that completed fewer than :data:`MIN_COMPARED_REQUESTS`
    requests, with their counts, why they are not compared and how to get more requests out of
    them (:func:`_more_requests_advice`)."""
    each = ", ".join(f"{p.completed} at {p.label}" for p in small)
    it = "it" if len(small) == 1 else "them"
    return (f"{_and(p.label for p in small)} completed fewer than {MIN_COMPARED_REQUESTS} requests ({each}; "
            f"{TOO_FEW_FLAG}): the percentiles and mean throughput of so few requests are no basis for comparison, "
            f"so every finding that uses {it} says so; {_more_requests_advice(small, it)}.")


def _and(items: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    xs = list(items)
    return xs[0] if len(xs) == 1 else f"{', '.join(xs[:-1])} and {xs[-1]}"


def _flag_group_sentence(labels: list[str], flags: list[str]) -> str:
    """One sentence for several points flagged alike with no failed request, e.g. ``c=1, c=8 and
    c=16 are flagged (tokens_estimated); their numbers are used as measured.``"""
    names = f"{', '.join(labels[:-1])} and {labels[-1]}"
    if COALESCED_FLAG in flags:
        return f"{names} are flagged ({', '.join(flags)}); {_coalesced_use(flags, plural=True)}"
    return f"{names} are flagged ({', '.join(flags)}); their numbers are used as measured."


def _coalesced_use(flags: Sequence[str], *, plural: bool) -> str:
    """Which metrics of a point flagged :data:`COALESCED_FLAG` (output events grouped into network
    reads) the analysis uses, and why: its throughput (output tokens counted from the stream when
    also ``tokens_estimated``); its TTFT, the time to the first read, for queueing (a request's wait
    for admission and prefill all comes before its first read, grouped or not); its mean TPOT
    (first to last read, over the tokens) for the decode fit's Little's-law running batch; not its
    ITL (the gaps between reads), and not TTFT's share of E2E for the bottleneck (a first read may
    hold tokens decoded after the first, so that share is no prefill time)."""
    its = "their" if plural else "its"
    counted = (" (tokens_estimated: output tokens counted from the streamed events, the server gave no count)"
               if "tokens_estimated" in flags else "")
    return (f"{its} output events came grouped into network reads ({COALESCED_FLAG}), so {its} ITL times the reads, "
            f"not decode steps, and is not used. Used as measured: {its} throughput{counted}; {its} TTFT, the time "
            f"to the first read, for queueing, since a request's wait for admission and prefill all comes before "
            f"that read; {its} mean TPOT, first to last read over the tokens, for the decode fit. Not used: TTFT's "
            f"share of E2E for the bottleneck, since a first read may hold tokens decoded after the first, so "
            f"that share is no prefill time.")


_KIND_NAMES = {"closed": "Closed loop (points by concurrency)", "open": "Open loop (points by request rate)"}
_KIND_SHORT = {"closed": "closed loop", "open": "open loop"}


def _gpus(n: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _kind_prefixed(g: LoadGroup, prefix: bool, sentence: str) -> str:
    """``sentence`` as it is for a sweep of one load kind; led by the kind (``Closed loop (points by
    concurrency): ...``) when the sweep has both, whose loads are never compared with each other."""
    if not prefix or not sentence:
        return sentence
    return f"{_KIND_NAMES[g.kind]}: {sentence[0].lower()}{sentence[1:]}"


def _all_points(fit: DecodeFit) -> str:
    """``all 3 points (c=2, c=4, c=8)``: every point the fit used, named (the sentence that quotes
    a fit shows only the first and last point's numbers)."""
    labels = list(fit.labels or [])
    return f"all {len(labels)} points ({', '.join(labels)})" if labels else f"the {fit.n_points} points"


def _fit_sentence(fit: DecodeFit) -> str:
    if not fit.possible:
        return f"The decode step-time fit is not possible: {fit.reason}."
    assert fit.fixed_ms is not None and fit.per_seq_ms is not None
    tpot = _step_name(fit)
    if not fit.is_decode_cost:
        if fit.per_seq_ms <= 0:
            return (f"Decode step time ({tpot}) does not grow with the running batch over the measured range: "
                    f"{_no_growth_numbers(fit)}; a straight line through {_all_points(fit)} falls "
                    f"({_r2(fit)}), which no decode step does, so no per-sequence decode cost is read from it.")
        return (f"Decode step time ({tpot}) is not a fixed plus a per-sequence cost over the measured range: "
                f"{_no_growth_numbers(fit)}, but a straight line through {_all_points(fit)} crosses zero at "
                f"{_fixed(fit.running_batch_at_zero(), 1)} running sequences (a negative fixed cost, "
                f"{_r2(fit)}), which no decode step has, so no decode cost is read from it.")
    how = {"decode_events": "the requests between their first and last output event, counted at each output event",
           "littles_law": f"Little's law (running batch = tok/s x {tpot}, capped at the concurrency)",
           "concurrency": "the concurrency (every request assumed in the batch)",
           "mixed": _mixed_sources(fit)}[fit.batch_source]
    kinds = fit.load_kinds if len(fit.load_kinds) == len(fit.labels) else ["closed"] * len(fit.labels)
    per_kind = [(kind, ", ".join(f"{_fixed(b, 1)} at {lb}"
                                 for lb, b, k in zip(fit.labels, fit.running_batch, kinds, strict=True) if k == kind))
                for kind in ("closed", "open") if kind in kinds]
    worst = max(abs(x) for x in fit.residuals_ms)
    if len(per_kind) > 1:
        # One server: one fit through every load kind's points, each kind's points named as such.
        batches = "; ".join(f"{_KIND_SHORT[kind]} {text}" for kind, text in per_kind)
        over = f"{fit.n_points} points of both load kinds, one server"
    else:
        batches = per_kind[0][1] if per_kind else ""
        over = f"{fit.n_points} points"
    return (f"Decode step time ({tpot}) fits {_ms(fit.fixed_ms)} + {_per_seq(fit.per_seq_ms)} per running sequence "
            f"({_r2(fit)} over {over}, largest residual {_ms(worst)}); the running batch "
            f"comes from {how}: {batches}.")


def _mixed_sources(fit: DecodeFit) -> str:
    """How a ``mixed`` fit got each point's running batch, naming the points of each source:
    ``the requests between their first and last output event, counted at each output event, at
    c=4, c=8, and Little's law (running batch = tok/s x mean TPOT, capped at the concurrency) at
    c=1, whose events came coalesced or were not recorded``."""
    at = {src: ", ".join(lb for lb, s in zip(fit.labels, fit.batch_sources, strict=True) if s == src)
          for src in ("decode_events", "littles_law", "concurrency")}
    tpot = _metric("TPOT", [t for t, s in zip(fit.tpot_stats, fit.batch_sources, strict=True) if s != "decode_events"])
    parts = []
    if at["decode_events"]:
        parts.append("the requests between their first and last output event, counted at each output event, at "
                     + at["decode_events"])
    if at["littles_law"]:
        parts.append(f"Little's law (running batch = tok/s x {tpot}, capped at the concurrency) at "
                     f"{at['littles_law']}, whose output events came coalesced or were not recorded")
    if at["concurrency"]:
        parts.append(f"the concurrency at {at['concurrency']}")
    return ", and ".join(parts)


def _stall_sentence(r: CeilingReport) -> str:
    """Decode pauses (prefill interference where other requests ran), apart from the decode cost: the
    points whose decode paused for at least :data:`STALL_SHARE_NOTED` of their decode time, with
    their mean TPOT (which includes the pauses) and the client-seen step the share was measured
    against (the load generator's ``decode_steps.step_s``: the share is the pauses' excess over a
    typical gap between output events, so it is quoted with that step, never with a TPOT the fit
    used in its place). When the fit's step time is the TPOT (not every point had a client-seen
    step: ``littles_law``), the sentence says the fit's step includes the pauses too. Empty when no
    point paused that much or none measured it."""
    paused = [a for a in r.points if a.stall_share is not None and a.stall_share >= STALL_SHARE_NOTED]
    if not paused:
        return ""
    tpot = _metric("TPOT", [a.tpot_stat for a in paused])
    # Per point: the fit's step is the client-seen step where the point had one, else its TPOT.
    measured = all(a.running_batch_source == "decode_events" for a in paused)
    on_tpot = [a.label for a in paused if a.running_batch_source != "decode_events"]
    step = "step" if measured else "step between output events"
    each = "; ".join(f"{a.stall_share:.0%} of decode time at {a.label} ({tpot} {_ms(a.tpot_ms)}"
                     + (f" against a {_ms(a.decode_step_ms)} {step})" if a.decode_step_ms is not None else ")")
                     for a in paused)
    # A closed loop of one request has no other request whose prefill could pause it: its pauses
    # are the engine's own (or its output reaching the client in bursts).
    alone = [a.label for a in paused if a.concurrency == 1]
    alone_txt = (f"; at {', '.join(alone)} no other request ran, so there the pauses are the engine's own or its "
                 f"output arriving in bursts, not prefill interference" if alone else "")
    if measured:
        tail = f"{tpot} includes these pauses, the decode step time does not"
    elif len(on_tpot) == len(paused):
        tail = (f"{tpot} includes these pauses, and so does the decode step time of the fit, which is the {tpot} "
                "here; the step between output events does not")
    else:
        tail = (f"{tpot} includes these pauses, and so does the decode step time of the fit at {', '.join(on_tpot)}, "
                f"which is the {tpot} there; the step between output events does not")
    return (f"Decode pauses: decode paused between output events (gaps over twice the median step: another "
            f"request's prefill ran, or the sequence waited) for {each}{alone_txt}; {tail}.")


def _bottleneck_sentence(r: CeilingReport, g: LoadGroup, analysed: list[PointAnalysis],
                         points: list[SweepPoint], *, quote_fit: bool = True) -> str:
    """The bottleneck of one load kind's points (``analysed``, lightest to heaviest); with
    ``quote_fit`` False (a sweep of both load kinds, whose one fit has its own sentence) the decode
    sentence does not repeat the fit. Points in ``g.timings_skipped`` (flagged
    :data:`COALESCED_FLAG`) are quoted for no TTFT, TPOT or E2E share, and the sentence says they
    are left out and why."""
    skipped = set(g.timings_skipped)
    analysed = [a for a in analysed if a.label not in skipped]
    points = [p for p in points if p.label not in skipped]
    its = "its" if len(skipped) == 1 else "their"
    left_out = (f" {', '.join(g.timings_skipped)} {'is' if len(skipped) == 1 else 'are'} left out of the "
                f"bottleneck: {its} output events came grouped into network reads ({COALESCED_FLAG}), so {its} TTFT "
                f"may hold decode time and {its} E2E cannot be split into prefill and decode." if skipped else "")
    if not analysed:
        return f"The bottleneck cannot be classified: {g.bottleneck_reason}."
    return _bottleneck_judged(r, g, analysed, points, quote_fit=quote_fit) + left_out


def _queueing_steps_said(steps: list[QueueingStep], ttft: str) -> str:
    """The steps between neighbouring points that queued (:class:`QueueingStep`), each with its
    own load, TTFT and throughput growth, so the sentence never sets the growth of the whole sweep
    (which may outgrow its load at light points) against the word "only": ``from c=8 to c=16
    (x2.0 load) mean TTFT grows x2.1 while throughput stays flat (x0.98)``. Throughput "falls"
    below x0.95, "stays flat" below ``FLAT_THROUGHPUT_GROWTH`` and otherwise "grows only": a step
    that queued by the rule grew by at most ``QUEUEING_MAX_THROUGHPUT_SHARE`` of its load's growth."""
    said = []
    for s in (s for s in steps if s.queueing):
        t = s.throughput_growth
        tput = ("falls" if t < 0.95 else "stays flat" if t < FLAT_THROUGHPUT_GROWTH else "grows only")
        # one decimal, as the "Queueing from" finding quotes the same step's TTFT growth
        grows = f" grows x{_fixed(s.ttft_growth, 1)}" if s.ttft_growth is not None else " grows"
        said.append(f"from {s.from_label} to {s.to_label} (x{_fixed(s.load_growth, 1)} load) {ttft}{grows} "
                    f"while throughput {tput} (x{_fixed(t, 2)})")
    return "; ".join(said) if said else f"{ttft} grows while throughput does not keep up with load"


def _bottleneck_judged(r: CeilingReport, g: LoadGroup, analysed: list[PointAnalysis],
                       points: list[SweepPoint], *, quote_fit: bool) -> str:
    """:func:`_bottleneck_sentence` over the points whose per-token timings are used."""
    lo, hi = analysed[0], analysed[-1]
    fit = r.fit
    tpot = _metric("TPOT", [a.tpot_stat for a in analysed])
    ttft = _metric("TTFT", [a.ttft_stat for a in analysed])
    e2e = _metric("E2E", [a.e2e_stat for a in analysed])
    fit_txt = (f" (fit {_ms(fit.fixed_ms)} + {_per_seq(fit.per_seq_ms)} per running sequence, {_r2(fit)})"
               if quote_fit and fit.is_decode_cost and fit.fixed_ms is not None and fit.per_seq_ms is not None
               else "")
    share = (f", and decode takes {hi.decode_share:.0%} of {e2e} at {hi.label}"
             if hi.decode_share is not None else "")
    if g.bottleneck == "decode":
        return (f"Decode is the bottleneck: {tpot} grows from {_ms(lo.tpot_ms)} at {lo.label} to "
                f"{_ms(hi.tpot_ms)} at {hi.label}{fit_txt}{share}.")
    if g.bottleneck == "prefill":
        return (f"Prefill is the bottleneck: {ttft} is {_ms(hi.ttft_ms)} of {_ms(hi.e2e_ms)} {e2e} at {hi.label} "
                f"({1 - (hi.decode_share or 0):.0%}), growing from {_ms(lo.ttft_ms)} at {lo.label} while "
                f"throughput still grows; {tpot} {_span_ms(lo.tpot_ms, hi.tpot_ms, moving='goes')}.")
    if g.bottleneck == "queueing":
        return (f"Requests queue for admission: {ttft} is {_ms(hi.ttft_ms)} of {_ms(hi.e2e_ms)} {e2e} at "
                f"{hi.label}, and {_queueing_steps_said(g.queueing, ttft)}; more load there only adds waiting.")
    if g.bottleneck == "none":
        tpots = [a.tpot_ms for a in analysed if a.tpot_ms is not None]
        return (f"No bottleneck is reached: {tpot} {_span_ms(min(tpots), max(tpots), moving='stays')} from "
                f"{lo.label} to {hi.label}, and throughput {_throughput_change(points[0], points[-1])}.")
    return f"The bottleneck cannot be classified: {g.bottleneck_reason}."


_FIT_SOURCES = ("fit_asymptote", "fit_capped")


def _fit_how(r: CeilingReport, c: Ceiling) -> str:
    """How the fit gives ceiling ``c``: the engine's cap, else the asymptote."""
    assert r.fit.per_seq_ms is not None
    return (f"{c.cap_batch} / TPOT({c.cap_batch}) with the engine's cap of {c.cap_batch} running sequences"
            if c.source == "fit_capped" else f"1000 / {_per_seq(r.fit.per_seq_ms)} per sequence")


def _shared_ceiling_sentences(r: CeilingReport, kinds: list[tuple[LoadGroup, list[SweepPoint]]]) -> list[str]:
    """What the one fit says of the server's ceiling in a sweep of both load kinds, said once: the
    fitted ceiling with each kind's best point against it, and the running batch that 90% of it
    needs when no kind reached that (each kind's own plateau, reach and fall stay with its kind,
    :func:`_ceiling_sentences`)."""
    out: list[str] = []
    fitted = [(g, pts) for g, pts in kinds if g.ceiling.source in _FIT_SOURCES and g.ceiling.tok_s is not None]
    if fitted:
        c = fitted[0][0].ceiling
        assert c.tok_s is not None
        bests = " and ".join(f"{_num(g.ceiling.observed_max_tok_s)} tok/s at {g.ceiling.observed_max_label} "
                             f"({g.ceiling.observed_max_tok_s / c.tok_s:.0%} of it) in the {_KIND_SHORT[g.kind]}"
                             for g, _ in fitted)
        out.append(f"The fit puts the ceiling at {_num(c.tok_s)} tok/s ({_fit_how(r, c)}), one ceiling for the "
                   f"server whichever load drives it; the best observed is {bests}.")
        short = [(g, pts) for g, pts in fitted if not g.ceiling.reached_at_label and g.ceiling.batch_for_fraction]
        if short and len(short) == len(fitted):
            need = short[0][0].ceiling.batch_for_fraction
            assert need is not None
            loads = " or ".join(_load_needed(pts, need) for _, pts in short)
            out.append(f"{CEILING_REACHED_FRACTION:.0%} of the ceiling needs a running batch of about "
                       f"{_fixed(need, 0)} sequences ({loads}), beyond this sweep: an extrapolation.")
        return out
    plateaued = [g for g, _ in kinds if g.ceiling.source == "observed_plateau" and g.ceiling.asymptote_tok_s]
    if plateaued and r.fit.per_seq_ms is not None:
        out.append(f"The fit's asymptote, {_num(plateaued[0].ceiling.asymptote_tok_s)} tok/s (1000 / "
                   f"{_per_seq(r.fit.per_seq_ms)} per sequence), bounds what any batch size could give on this "
                   f"decode path, whichever load drives it.")
    return out


def _ceiling_sentences(r: CeilingReport, c: Ceiling, points: list[SweepPoint], *, shared: bool = False) -> list[str]:
    """How throughput goes with load over one load kind's ``points`` (``c``: their ceiling). With
    ``shared`` (a sweep of both load kinds) what the fit says of the server is left to
    :func:`_shared_ceiling_sentences`, said once: only this kind's plateau, reach and fall remain."""
    out: list[str] = []
    if c.source == "observed_plateau":
        assert c.plateau_min_tok_s is not None and c.plateau_max_tok_s is not None
        first = next(p for p in points if p.label == c.plateau_from_label)
        last = points[-1]
        growth = last.output_throughput_tok_s / first.output_throughput_tok_s - 1
        out.append(f"Throughput plateaus at {_tok(c.plateau_min_tok_s, c.plateau_max_tok_s)} from "
                   f"{c.plateau_from_label}: going to {last.label} (x{_fixed(last.load / first.load, 1)} load) "
                   f"changes it by {growth:+.0%} ({_num(first.output_throughput_tok_s)} -> "
                   f"{_num(last.output_throughput_tok_s)} tok/s).")
        per_gpu = (f", {_num(c.observed_max_tok_s / r.num_gpus)} tok/s per GPU on {_gpus(r.num_gpus)}"
                   if r.gpus_known else "")
        out.append(f"The ceiling is about {_num(c.observed_max_tok_s)} tok/s (observed at {c.observed_max_label}"
                   f"{per_gpu}); {CEILING_REACHED_FRACTION:.0%} of it is reached by {c.reached_at_label}.")
        if c.asymptote_tok_s is not None and r.fit.per_seq_ms is not None and not shared:
            out.append(f"The fit's asymptote, {_num(c.asymptote_tok_s)} tok/s (1000 / {_per_seq(r.fit.per_seq_ms)} "
                       f"per sequence), bounds what any batch size could give on this decode path.")
        if c.falls:
            out.append(_falls_sentence(c, points, r.failed_requests))
        return out
    if c.source in ("fit_asymptote", "fit_capped") and c.tok_s is not None:
        if not shared:
            out.append(f"The fit puts the ceiling at {_num(c.tok_s)} tok/s ({_fit_how(r, c)}); the best observed is "
                       f"{_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label} "
                       f"({c.observed_max_tok_s / c.tok_s:.0%} of it).")
        if c.reached_at_label:
            out.append(f"{CEILING_REACHED_FRACTION:.0%} of the ceiling is reached by {c.reached_at_label}.")
        elif c.batch_for_fraction is not None and not shared:
            need = c.batch_for_fraction
            out.append(f"{CEILING_REACHED_FRACTION:.0%} of the ceiling needs a running batch of about "
                       f"{_fixed(need, 0)} sequences ({_load_needed(points, need)}), beyond this sweep: "
                       f"an extrapolation.")
        if c.falls:
            out.append(_falls_sentence(c, points, r.failed_requests))
        return out
    if c.falls:
        out.append(_falls_sentence(c, points, r.failed_requests))
    elif len(points) >= 2:
        first, last = points[0], points[-1]
        growth = last.output_throughput_tok_s / first.output_throughput_tok_s
        low = min(points, key=lambda p: p.output_throughput_tok_s)
        if 1 <= growth <= 1 / PLATEAU_FRACTION:
            # Flat or up by less than noise end to end, yet no plateau: a dip deeper than noise over less than
            # FLAT_MIN_LOAD_GROWTH of load, or too little load growth. Neither a rise nor a ceiling.
            dip = (f", dipping to {_num(low.output_throughput_tok_s)} tok/s at {low.label} "
                   f"(x{_fixed(low.output_throughput_tok_s / c.observed_max_tok_s, 2)} of the best) on the way"
                   if low is not first and low is not last else "")
            out.append(f"The load range is too narrow to tell whether a ceiling is reached: throughput "
                       f"{_throughput_change(first, last)} from {first.label} to {last.label}{dip}; a nearly flat "
                       f"sweep reads as a ceiling at the lowest load over x{_fixed(PLATEAU_MIN_LOAD_GROWTH, 1)} load "
                       f"with no point below x{_fixed(PLATEAU_FRACTION ** 2, 2)} of the best, or over "
                       f"x{_fixed(FLAT_MIN_LOAD_GROWTH, 0)} load whatever the dip; sweep to higher load to "
                       f"tell (best observed {_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")
        elif growth >= 1:
            out.append(f"No ceiling is reached: throughput grows x{_fixed(growth, 1)} from {first.label} to "
                       f"{last.label} (x{_fixed(_load_ratio(first, last), 1)} load), so the ceiling is above the "
                       f"best observed {_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}.")
        else:
            out.append(f"Throughput does not grow with load: from {first.label} to {last.label} it "
                       f"{_throughput_change(first, last)}; this points at {_falls_cause(r.failed_requests)}, "
                       f"not at a ceiling "
                       f"above the best point ({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")
    else:
        out.append(f"One point ({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}) {ONE_POINT_TAIL}")
    return out


def _load_needed(points: list[SweepPoint], batch: float) -> str:
    """What load keeps ``batch`` sequences decoding: a concurrency for a closed loop, a request rate
    high enough for an open one."""
    if points and points[0].load_kind == "open":
        return "a request rate that keeps that many requests decoding at once"
    return f"so a concurrency of at least {math.ceil(batch)}"


def _falls_sentence(c: Ceiling, points: list[SweepPoint], failed_requests: int) -> str:
    if not _last_falls(points):
        # Throughput came back at heavier load: the fall is on the way, the ceiling is not above it.
        return (f"Throughput falls on the way, {_dip_numbers(points)}; this points at "
                f"{_falls_cause(failed_requests)} at that point, not at a ceiling above the best point "
                f"({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")
    return (f"Throughput falls as load rises, {_falls_numbers(points)}; this points at "
            f"{_falls_cause(failed_requests)}, not at a ceiling above the best point "
            f"({_num(c.observed_max_tok_s)} tok/s at {c.observed_max_label}).")


def _queueing_sentences(g: LoadGroup, analysed: list[PointAnalysis]) -> list[str]:
    """Queueing between neighbouring points of one load kind. Where the bottleneck sentence already
    names queueing (:func:`_bottleneck_judged`, which quotes every queueing step with its load, TTFT
    and throughput growth), the steps are not said a second time: only the note on points whose
    TTFT is the time to the first read (:func:`_grouped_ttft`) remains, if any."""
    out = []
    ttft = _metric("TTFT", [a.ttft_stat for a in analysed])
    grouped = _grouped_ttft(g, analysed)
    skipped = set(g.timings_skipped)
    if g.bottleneck == "queueing" and any(a.label not in skipped for a in analysed):
        return [grouped.strip()] if grouped else []
    for s in g.queueing:
        if s.queueing and s.ttft_growth is not None:
            out.append(f"Queueing from {s.from_label} to {s.to_label}: {ttft} grows x{_fixed(s.ttft_growth, 1)} while "
                       f"throughput changes x{_fixed(s.throughput_growth, 2)} (x{_fixed(s.load_growth, 1)} load)."
                       + grouped)
    if not out and len(analysed) > 1:
        rule = (f"{ttft} growing x{TTFT_GROWTH:g} or more while throughput grows less than "
                f"x{FLAT_THROUGHPUT_GROWTH:.2f}, or x{TTFT_GROWTH:g} the load's growth or more while throughput "
                f"grows at most {QUEUEING_MAX_THROUGHPUT_SHARE:.0%} of the load's growth, between neighbouring points")
        # Steps whose throughput would allow queueing, with the TTFT growth each needed; repeated
        # runs at one load are noise, as in the rule.
        near_steps = [(s, need) for s in g.queueing if s.ttft_growth is not None and not s.load_growth <= 1.0
                      and (need := queueing_ttft_needed(s.load_growth, s.throughput_growth)) is not None]
        if not near_steps:
            out.append(f"No queueing by the rule ({rule}): throughput grew by more at every step where TTFT "
                       "could be compared." + grouped)
        else:
            near, need = max(near_steps, key=lambda sn: sn[0].ttft_growth / sn[1])
            out.append(f"No queueing by the rule ({rule}); the nearest: {near.from_label} to {near.to_label}, "
                       f"{ttft} x{_factor_below(near.ttft_growth, need)} with throughput "
                       f"x{_fixed(near.throughput_growth, 2)} (x{_fixed(near.load_growth, 1)} load)." + grouped)
    return out


def _grouped_ttft(g: LoadGroup, analysed: list[PointAnalysis]) -> str:
    """What a queueing sentence adds when some of its points are flagged :data:`COALESCED_FLAG`:
    their TTFT (to the first read) is used, since the wait it shows comes before any read; "" when
    none is."""
    grouped = [a.label for a in analysed if a.label in set(g.timings_skipped)]
    if not grouped:
        return ""
    return (f" Queueing is judged on TTFT and throughput only; at {', '.join(grouped)}, whose output events came "
            f"grouped into network reads ({COALESCED_FLAG}), TTFT is the time to the first read, which still "
            "counts the wait for admission and prefill.")


def _factor_below(x: float, limit: float) -> str:
    """``x`` to three significant figures, rounded down when it is under ``limit`` so that it never
    prints as the limit it missed (x1.499 as ``1.49``, not ``1.5``)."""
    text = f"{x:.3g}"
    if x < limit <= float(text):
        scale = 10 ** (2 - math.floor(math.log10(abs(x))))
        text = f"{math.floor(x * scale) / scale:.3g}"
    return text


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
            out.append(f"At {m.label}{at}: {me} gives {_num(m.tok_s)} tok/s on {_gpus(c.num_gpus)} "
                       f"({_num(m.tok_s_per_gpu)} tok/s per GPU); {them} gives {_num(m.other_tok_s)} tok/s on "
                       f"{c.other_num_gpus} GPUs ({_num(m.other_tok_s_per_gpu)} tok/s per GPU): "
                       f"x{_fixed(m.per_gpu_ratio, 2)} per GPU for {me}.")
        labels = ", ".join(m.label for m in c.matched)
        out.append(f"{me} gives {verdict} per GPU over {them}, compared at the same concurrency ({labels}).")
        matched = {m.label for m in c.matched}
        if c.best_label not in matched:
            out.append(f"{me}'s best, {_num(c.best_tok_s)} tok/s at {c.best_label} "
                       f"({_num(c.best_tok_s / c.num_gpus)} tok/s per GPU), has no {them} run at that concurrency, "
                       f"so it is not compared.")
        return out
    out.append(f"No concurrency was run on both: comparing best points at different loads, {me} gives "
               f"{_num(c.best_tok_s)} tok/s at {c.best_label} on {_gpus(c.num_gpus)} "
               f"({_num(c.best_tok_s / c.num_gpus)} tok/s per GPU) and {them} {_num(c.other_best_tok_s)} tok/s at "
               f"{c.other_best_label} on {_gpus(c.other_num_gpus)} ({_num(c.other_best_tok_s / c.other_num_gpus)} tok/s "
               f"per GPU): {verdict} per GPU for {me} (x{_fixed(c.per_gpu_ratio, 2)}).")
    return out


