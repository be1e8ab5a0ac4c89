"""Chart data for the benchmark pages, as plain dicts in the format :file:`static/ceiling/charts.js`
documents (embedded with ``json_script``): CDFs of a run's latencies from its raw records (one
sample and outlier-flattened curves are said on the chart, never drawn misleadingly), the tok/s
timeline, and a sweep's numbers against load."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.choices import RunSource, RunStatus
from benchmarks.loadgen.metrics import ZERO_GAP_NS
from benchmarks.loadgen.records import RecordStore
from benchmarks.models import BenchmarkRun
from benchmarks.views.common import LATENCIES, _opt_float


# A CDF drawn with more points than a chart is wide adds nothing but page weight; quantiles
# at this many evenly spaced levels keep the curve's shape exactly at the ends (min and max kept).
CDF_MAX_POINTS = 400
# A few huge gaps (a stalled stream, a retraction) squeeze the rest of an ITL CDF against the
# y-axis. When the largest value is more than CDF_OUTLIER_FACTOR times the p99.9 (taken as the
# largest sample at or below the 99.9th percentile, so the axis ends on a measured value), the
# x-axis ends there and the chart says how many points lie beyond and the largest of them: nothing
# is dropped silently. Only from CDF_CAP_MIN_SAMPLES samples on, so what is left off the axis is
# at most about 0.1 % of them (with 3 samples, one is a third of the distribution, not an outlier).
CDF_AXIS_QUANTILE = 0.999
CDF_OUTLIER_FACTOR = 4.0
CDF_CAP_MIN_SAMPLES = 1000
# What one value of each CDF is (its y-axis is the fraction of these): ITL has one value per gap
# between consecutive output events, so its fractions are of gaps, not of requests.
CDF_SAMPLES = {"ttft": "requests", "tpot": "requests", "itl": "gaps", "e2e": "requests"}
# The tok/s timeline buckets output events per second of run time ("per 1 s").
TIMELINE_BUCKET_S = 1.0
# A last bucket the run covers less than this fraction of is merged into the bucket before it: its
# rate over a few ms would be a spike (or a dip) made by where the run happened to end.
TIMELINE_MIN_LAST_FRACTION = 0.5

# --- charts -----------------------------------------------------------------------------------


def chart_spec(*, title: str, x: tuple[str, str], y: tuple[str, str], series: list[dict[str, Any]],
               x_log: bool = False, empty: str | None = None, note: str | None = None,
               y_title: str | None = None) -> dict[str, Any]:
    """A chart for :file:`static/ceiling/charts.js`: ``x``/``y`` are ``(label, unit)``; each
    series is ``{"label": str, "points": [[x, y], ...]}`` (``"step": True`` for a CDF). ``empty``
    is shown instead of a chart without points; ``note`` is printed under a drawn chart (what is
    not drawn, and why). ``y_title`` is the y axis's title where ``label (unit)`` would be long
    for the plot's height (``tok/s per GPU`` rather than ``output per GPU (tok/s)``, which was
    cut to ``output per GPU (to``); the unit stays the one the legend's values carry.

    A chart whose series are all CDFs (``step``) has its y-axis fixed to 0-1 (``"min": 0.0,
    "max": 1.0``): a fraction of samples spans that range whatever the samples, so a CDF of two
    requests shows both of its steps from 0 (the script draws each CDF from its smallest value at
    0) instead of an axis that starts at its first fraction, 0.5."""
    spec: dict[str, Any] = {
        "title": title,
        "x": {"label": x[0], "unit": x[1], "log": x_log},
        "y": {"label": y[0], "unit": y[1], "log": False},
        "series": series,
    }
    if y_title:
        spec["y"]["title"] = y_title
    if series and all(s.get("step") for s in series):
        spec["y"].update({"min": 0.0, "max": 1.0})
    if empty:
        spec["empty"] = empty
    if note:
        spec["note"] = note
    return spec


def cdf_points(values: np.ndarray, *, max_points: int = CDF_MAX_POINTS,
               x_max: float | None = None) -> list[list[float]]:
    """Empirical CDF of ``values`` as ``[[value, fraction ≤ value], ...]`` (fraction in 0-1).
    Each point is a sample, so the first is (smallest value, 1/n); the chart script draws the
    curve from (smallest value, 0), the rise of that first sample included, on a 0-1 axis
    (:func:`chart_spec`).

    With n ≤ ``max_points`` every sorted sample is a point (fraction i/n). Past that, the curve is
    sampled at ``max_points`` evenly spaced ranks, always keeping the first and last sample, so
    the tails (p99, max) stay exact. Values are rounded by :func:`cdf_value` (0.01 ms, four
    significant figures below 10 ms). ``x_max``: samples above it are not drawn (their fractions still
    count, so the curve ends below 1.0; the caller says so on the chart).
    """
    finite = np.sort(values[np.isfinite(values)])
    n = int(finite.size)
    if n == 0:
        return []
    shown = n if x_max is None else int(np.searchsorted(finite, x_max, side="right"))
    if shown <= max_points:
        ranks = np.arange(shown)
    else:
        ranks = np.unique(np.linspace(0, shown - 1, max_points).round().astype(int))
    return [[cdf_value(finite[i]), round((int(i) + 1) / n, 6)] for i in ranks]


def cdf_value(x: float) -> float:
    """A CDF's x value in ms as drawn: to 0.01 ms (1491.37, not 1491.0: four significant figures
    would turn a second-long E2E CDF into a staircase of whole milliseconds), four significant
    figures below 10 ms so a sub-millisecond gap keeps its digits (0.02734)."""
    x = float(x)
    return float(f"{x:.4g}") if abs(x) < 10 else round(x, 2)


def cdf_axis_cap(values: np.ndarray) -> dict[str, Any] | None:
    """Where a CDF's x-axis should end, or None to draw every sample.

    Returns ``{"x_max": p99.9 (ms), "beyond": samples above it, "largest": the largest (ms)}``
    when there are at least :data:`CDF_CAP_MIN_SAMPLES` samples and the largest exceeds
    :data:`CDF_OUTLIER_FACTOR` times the :data:`CDF_AXIS_QUANTILE` quantile (the largest sample at
    or below it), i.e. when a few outliers would flatten the curve.
    """
    finite = values[np.isfinite(values)]
    if finite.size < CDF_CAP_MIN_SAMPLES:
        return None
    cap = float(np.quantile(finite, CDF_AXIS_QUANTILE, method="lower"))
    largest = float(finite.max())
    if cap <= 0 or largest <= CDF_OUTLIER_FACTOR * cap:
        return None
    return {"x_max": cdf_value(cap), "beyond": int((finite > cdf_value(cap)).sum()),
            "largest": cdf_value(largest)}


def cdf_chart(values: np.ndarray | None, *, label: str, empty: str,
              sample: str = "requests") -> dict[str, Any]:
    """The CDF chart of one latency (``values`` in ms; None when there are no records). ``sample``
    names what one value is, for the y-axis ``fraction of <sample>``: ``requests`` for TTFT, TPOT
    and E2E, ``gaps`` for ITL (one value per gap between output events, many per request).

    Two cases are said on the chart instead of drawing something misleading: one sample (a single
    step to 1.0 at that value, drawn as one marked point, with a note that a curve needs at least
    two requests), and outliers that would flatten the curve (the axis ends at the p99.9 and the
    note says ``N points beyond X ms not drawn (largest Y ms)``, :func:`cdf_axis_cap`).
    """
    title = f"{label} CDF"
    x_axis = (label, "ms")
    if values is None or not np.isfinite(values).any():
        return chart_spec(title=title, x=x_axis, y=(f"fraction of {sample}", ""),
                          series=[{"label": label, "points": [], "step": True}], empty=empty)
    finite = values[np.isfinite(values)]
    cap = cdf_axis_cap(finite)
    pts = cdf_points(finite, x_max=cap["x_max"] if cap else None)
    note = None
    if finite.size == 1:
        note = (f"one sample: the CDF is a single step to 1.0 at {_fmt_ms(float(finite[0]))} ms; "
                f"a curve needs at least 2 samples (2 requests for TTFT, TPOT and E2E).")
    elif cap:
        title += " (x-axis capped at p99.9)"
        note = (f"{cap['beyond']} point{'s' if cap['beyond'] != 1 else ''} beyond {_fmt_ms(cap['x_max'])} ms "
                f"(p99.9) not drawn; the largest is {_fmt_ms(cap['largest'])} ms. The curve ends at the fraction "
                f"of samples drawn.")
    spec = chart_spec(title=title, x=x_axis, y=(f"fraction of {sample}", ""),
                      series=[{"label": label, "points": pts, "step": True}], note=note)
    if cap:
        spec["x"]["max"] = cap["x_max"]
    return spec


def _fmt_ms(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def record_arrays(records: RecordStore) -> dict[str, np.ndarray]:
    """Per-request latencies (ms, successful requests only; metrics.md formulas) from raw records:
    ``ttft``, ``e2e``, ``tpot`` (requests with ≥ 2 output tokens, less those whose output all came
    in one network read, whose TPOT is not measured: as the run summary's ``tpot_s``), ``itl``
    (per-event gaps of all successful requests)."""
    ok = records.column("ok").astype(bool)
    start, first, last = (records.column(c).astype(np.int64) for c in ("start", "first", "last"))
    out_tok = records.column("output_tokens").astype(np.int64)
    ttft = (first[ok] - start[ok]) / 1e6
    e2e = (last[ok] - start[ok]) / 1e6
    multi = (out_tok[ok] >= 2) & (last[ok] - first[ok] >= ZERO_GAP_NS)
    tpot = (e2e[multi] - ttft[multi]) / (out_tok[ok][multi] - 1)
    ev = records.column("ev_time").astype(np.int64)
    off, ln = records.column("ev_off"), records.column("ev_len")
    gaps = [np.diff(ev[int(off[i]):int(off[i]) + int(ln[i])]) for i in np.flatnonzero(ok) if ln[i] >= 2]
    itl = np.concatenate(gaps) / 1e6 if gaps else np.array([], dtype=float)
    return {"ttft": ttft, "e2e": e2e, "tpot": tpot, "itl": itl}


def timeline_points(records: RecordStore, *, bucket_s: float = TIMELINE_BUCKET_S) -> tuple[list[list[float]], bool]:
    """Output tok/s per ``bucket_s`` of run time, from the event times of successful requests.

    The run lasts from the first request's start to the last request's end (the summary's
    duration, metrics.md), cut into buckets of ``bucket_s`` from its start. Each bucket's tokens
    are divided by the part of the bucket the run covers, so the last, partial bucket (and a run
    shorter than one bucket) is a rate over the time it really lasted, not over a whole bucket; a
    last bucket covering less than :data:`TIMELINE_MIN_LAST_FRACTION` of ``bucket_s`` is merged
    into the one before it. So the buckets' rates weighted by their widths average to the
    summary's output tok/s (when every event's token count is known; a run of 3 tokens in 0.041 s
    is one point at 3 / 0.041 = 73 tok/s).

    Returns ``(points, estimated)``: ``points`` is ``[[seconds since the first request's start
    (the bucket's start), tok/s], ...]`` (one point per bucket, empty buckets as 0 because nothing
    streamed); ``estimated`` is True when some events carried no token count (the server sent no
    cumulative usage) and counted as one token each.
    """
    ok = records.column("ok").astype(bool)
    if not ok.any():
        return [], False
    start = records.column("start").astype(np.int64)
    end = records.column("end").astype(np.int64)
    ev = records.column("ev_time").astype(np.int64)
    tok = records.column("ev_tokens").astype(np.int64)
    off, ln = records.column("ev_off"), records.column("ev_len")
    picks = [np.arange(int(off[i]), int(off[i]) + int(ln[i])) for i in np.flatnonzero(ok) if ln[i] > 0]
    if not picks:
        return [], False
    idx = np.concatenate(picks)
    t0 = int(start.min())
    counts = tok[idx]
    estimated = bool((counts == 0).any())
    weights = np.where(counts > 0, counts, 1)
    at = (ev[idx] - t0) / 1e9
    # The run ends at the last request's end; an event cannot come later, but guard the clock anyway.
    span = max(float(int(end.max()) - t0) / 1e9, float(at.max()))
    if span <= 0:
        return [], estimated
    edges = list(np.arange(0.0, span, bucket_s)) + [span]
    if len(edges) > 2 and edges[-1] - edges[-2] < TIMELINE_MIN_LAST_FRACTION * bucket_s:
        del edges[-2]
    bounds = np.array(edges)
    bucket = np.clip(np.searchsorted(bounds, at, side="right") - 1, 0, len(bounds) - 2)
    sums = np.bincount(bucket, weights=weights, minlength=len(bounds) - 1)
    widths = np.diff(bounds)
    return [[round(float(bounds[i]), 3), float(sums[i]) / float(widths[i])] for i in range(len(widths))], estimated


def no_records_text(run: BenchmarkRun | None) -> str:
    """Why ``run`` has no per-request records to draw, for its charts' empty text: an imported run
    keeps the source's summary only; a measured one is still running (they are stored when it
    ends), has a records file that is missing or unreadable, stopped while it built its prompts or
    warmed up (its progress's ``ended_during``: nothing measured was sent), or was cancelled or
    failed before they were stored."""
    if run is None or run.source == RunSource.IMPORTED:
        return "no per-request records (imported runs keep the source's summary only)."
    if run.status == RunStatus.RUNNING and not run.records_path:
        return "no per-request records yet (they are stored when the point ends)."
    if run.records_path:
        return "no per-request records (this run's records file is missing or unreadable)."
    phase = run.progress.get("ended_during") if isinstance(run.progress, dict) else None
    if isinstance(phase, str) and phase:
        return f"no per-request records (the point stopped while {phase}, before its first measured request)."
    ended = {RunStatus.CANCELLED: "was cancelled", RunStatus.FAILED: "failed"}.get(run.status, "ended")
    return f"no per-request records (the point {ended} before they were stored)."


def run_charts(records: RecordStore | None, run: BenchmarkRun | None = None) -> dict[str, Any]:
    """The run page's charts: ``cdf_ttft``, ``cdf_tpot``, ``cdf_itl``, ``cdf_e2e`` (one series
    each) and ``timeline`` (tok/s per second). Empty series when there are no records, saying why
    (:func:`no_records_text` of ``run``)."""
    arrays = record_arrays(records) if records is not None else {}
    empty = no_records_text(run) if records is None else None
    charts: dict[str, Any] = {}
    for stem, label in LATENCIES:
        why = empty or ("no request produced 2 output events, so there is no gap to draw." if stem == "itl"
                        else "no request with 2 or more output tokens over more than one network read." if stem == "tpot"
                        else "no successful requests.")
        charts[f"cdf_{stem}"] = cdf_chart(arrays.get(stem), label=label, empty=why, sample=CDF_SAMPLES[stem])
    points, estimated = timeline_points(records) if records is not None else ([], False)
    note = None
    if len(points) == 1 and records is not None:
        # One bucket (a run under 1.5 buckets): a lone dot at x = 0 on an axis the chart library
        # makes up says nothing; draw the one rate across the run's own duration instead.
        ok = records.column("ok").astype(bool)
        span = float(records.column("end").astype(np.int64)[ok].max() - records.column("start").astype(np.int64)[ok].min()) / 1e9
        if span > 0:
            points = [points[0], [round(span, 3), points[0][1]]]
            note = (f"the run lasted {span:.3g} s, under {TIMELINE_MIN_LAST_FRACTION + 1:g} buckets of "
                    f"{TIMELINE_BUCKET_S:g} s: one rate over the whole run, drawn across it")
    charts["timeline"] = chart_spec(
        title="Output throughput during the run" + (" (some events counted as 1 token)" if estimated else ""),
        x=("time since first request", "s"), y=("output", "tok/s"),
        series=[{"label": "output tok/s", "points": points}], empty=empty or "no output events.", note=note,
    )
    return charts


def run_lengths_text(run: BenchmarkRun) -> str:
    """A run's lengths as chart labels show them: ``256/256``, ``variable lengths`` (drawn from a
    range) or ``lengths unknown`` (not recorded), as :attr:`BenchmarkRun.label` says them."""
    if run.input_len and run.output_len:
        return f"{run.input_len}/{run.output_len}"
    flags = run.flags or []
    return "variable lengths" if "variable_lengths" in flags and "lengths_unknown" not in flags else "lengths unknown"


# The two kinds of load a point can have, each with the x-axis it needs: a closed loop holds
# ``concurrency`` requests in flight, an open loop sends ``request_rate`` requests per second.
# Their x values are different quantities, so they are never drawn on one axis.
LOADS = (("closed", ("concurrency", "requests")), ("open", ("request rate", "req/s")))


def _load_kind(run: BenchmarkRun) -> str | None:
    """``open`` for a run sent at a request rate (capped at a concurrency or not: an imported
    file may give both), ``closed`` for one held at a concurrency alone, None for neither."""
    if _opt_float(run.request_rate) is not None:
        return "open"
    return "closed" if run.concurrency is not None else None


def _load_value(run: BenchmarkRun) -> float | None:
    rate = _opt_float(run.request_rate)
    if rate is not None:
        return rate
    return float(run.concurrency) if run.concurrency is not None else None


def _load_charts(rows: Sequence[dict[str, Any]], *, axis: tuple[str, str], prefix: str, gpus_known: bool,
                 title_tail: str, ended: bool = False, no_gpus: bool = False) -> dict[str, Any]:
    """The five charts of :func:`sweep_charts` for rows of one load kind, on ``axis``; ``no_gpus``:
    the GPU count is known to be zero (CPU-only), which the empty per-GPU chart says."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{prefix}{run_lengths_text(r['run'])}", []).append(r)

    def series(key: str, stat: str | None = None, tag: str = "") -> list[dict[str, Any]]:
        out = []
        for name, rs in groups.items():
            pts = []
            for r in rs:
                val = r[key] if stat is None else r[key][stat]
                pts.append([_load_value(r["run"]), val])
            out.append({"label": f"{name}{tag}", "points": pts})
        return out

    positive = all((_load_value(r["run"]) or 0) > 0 for r in rows)
    tok = chart_spec(title=f"Output throughput vs {title_tail}", x=axis, y=("output", "tok/s"),
                     series=series("output_tok_s"), x_log=positive)
    per_gpu = chart_spec(title=f"Output throughput per GPU vs {title_tail}", x=axis, y=("output per GPU", "tok/s"),
                         y_title="tok/s per GPU", series=series("tok_s_per_gpu"), x_log=positive,
                         empty=(("No point finished with output tok/s." if ended
                                 else "No finished point with output tok/s yet.") if gpus_known
                                else "No GPUs (CPU-only): no per-GPU figure." if no_gpus
                                else "GPU count unknown."))
    if not any(p[1] is not None for s in per_gpu["series"] for p in s["points"]):
        per_gpu["series"] = []
    lat = {}
    for stem, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
        lat[stem] = chart_spec(
            title=f"{label} percentiles vs {title_tail}", x=axis, y=(label, "ms"), x_log=positive,
            series=[s for stat in ("p50", "p90", "p99") for s in series(stem, stat, f" {stat}")],
        )
    return {"tok_s": tok, "tok_s_per_gpu": per_gpu, "ttft": lat["ttft"], "tpot": lat["tpot"], "e2e": lat["e2e"]}


def sweep_charts(rows: Sequence[dict[str, Any]], *, prefix: str = "", num_gpus: int | None = None,
                 ended: bool = False) -> dict[str, Any]:
    """Charts of a set of result rows (:func:`run_row`) against load: output tok/s (total and per
    GPU), TTFT, TPOT and E2E percentiles. One series per input/output length pair (and per
    ``prefix`` group on the comparison page). Load axis is logarithmic: grids double (1, 2, 4, ...).
    ``num_gpus`` is the sweep's GPU count: an empty per-GPU chart then says there is no finished
    point yet rather than that the count is unknown (the page's facts show the same count), and a
    count of 0 (a deployment on CPUs only, or rows that all say 0) that there are no GPUs, hence no
    per-GPU figure;
    ``ended`` (the sweep is done, failed or cancelled) says no point finished, without "yet".

    Closed-loop points are drawn against concurrency (requests) and open-loop points against
    request rate (req/s): ``tok_s``, ``tok_s_per_gpu``, ``ttft``, ``tpot``, ``e2e`` hold the
    closed-loop points (the open-loop ones when there are no others) and, when the rows hold both
    kinds, ``rate`` holds the same five charts of the open-loop points, and a note on each
    closed-loop chart says where the open-loop points are drawn. ``rate`` is None otherwise.
    Rows with neither a concurrency nor a rate (an imported run with unbounded load) are not
    drawn.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {"closed": [], "open": []}
    for r in rows:
        kind = _load_kind(r["run"])
        if kind is not None:
            by_kind[kind].append(r)
    gpus_known = bool(num_gpus) or any(r.get("num_gpus") for r in rows)
    no_gpus = not gpus_known and (num_gpus == 0 or (num_gpus is None and bool(rows)
                                                    and all(r.get("num_gpus") == 0 for r in rows)))
    both = bool(by_kind["closed"]) and bool(by_kind["open"])
    main_kind = "closed" if by_kind["closed"] or not by_kind["open"] else "open"
    axes = dict(LOADS)
    charts = _load_charts(by_kind[main_kind], axis=axes[main_kind], prefix=prefix, gpus_known=gpus_known,
                          title_tail="concurrency" if main_kind == "closed" else "request rate", ended=ended,
                          no_gpus=no_gpus)
    charts["rate"] = None
    if both:
        n = len(by_kind["open"])
        for chart in charts.values():
            if chart:
                chart["note"] = (f"{n} open-loop point{'s' if n != 1 else ''} (request rate) "
                                 f"{'are' if n != 1 else 'is'} drawn on the request-rate charts: a rate in req/s is "
                                 "not a concurrency, so the two are not drawn on one axis.")
        charts["rate"] = _load_charts(by_kind["open"], axis=axes["open"], prefix=prefix, gpus_known=gpus_known,
                                      title_tail="request rate", ended=ended, no_gpus=no_gpus)
    return charts
