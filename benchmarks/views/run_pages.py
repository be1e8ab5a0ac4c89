"""Run pages: one run (summary with units, CDFs and the tok/s timeline from the raw records, flags,
failures, snapshot, the imported original file), its exports, and the comparison of any runs or
sweeps side by side."""
from __future__ import annotations

import math

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from benchmarks import services
from benchmarks.analysis.model import MIN_COMPARED_REQUESTS
from benchmarks.choices import RunSource
from benchmarks.models import BenchmarkRun, gpus_are_modelled, snapshot_shown
from benchmarks.selectors import PK_MAX, runs_by_ids
from benchmarks.sweeps import DIGITS_RE
from benchmarks.loadgen.uncertainty import min_samples_for_interval
from benchmarks.services.runs import (COMPARE_FIELDS, PLAIN_FIGURES_MAX, plain_figures, run_ci95_ms, run_records_csv, run_result_date,
                                     run_slo, runs_compare_csv,
                                     slo_text, unquoted, workload_phrases)
from benchmarks.views.charts import (
    cdf_points, chart_spec, record_arrays, run_charts, run_lengths_text, sweep_charts,
)
from benchmarks.views.common import (
    COMPARE_MAX_CDF_RUNS, LATENCIES, ROW_DECIMALS, metric_text, run_row, _EXPORT_TYPES, _download, _export_body, _first, _ids_param, MalformedIds,
    _json_text, _load_records, _opt_float, _status_class,
)
from controlplane.drf_defaults import given_more_than_once
from controlplane.errors import BadQuery, Conflict, InvalidInput
from controlplane.jsonsafe import query_text
from controlplane.redaction import SecretsUnmaskable
from deployments.views import role_page


# --- run page ---------------------------------------------------------------------------------


def _get_run(pk: int) -> BenchmarkRun:
    return get_object_or_404(BenchmarkRun.objects.select_related("sweep", "sweep__deployment", "created_by"), pk=pk)


@role_page()
def run_list(request: HttpRequest) -> HttpResponse:
    """``/benchmarks/runs/``: the runs are listed on the benchmarks index (newest first, paged,
    each linking to its run page, units in the headers), so this redirects to that list, keeping
    the query (``?page=2``, judged there) and landing on the list (``#runs``)."""
    query = request.GET.urlencode()
    return redirect(f"{reverse('benchmarks:index')}{'?' + query if query else ''}#runs")


@role_page()
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: summary table with units, CDFs of TTFT/TPOT/ITL/E2E and the tok/s timeline from
    the raw records, flags with explanations, failures with reasons, snapshot, and for imported
    runs the source format, notes and the original file download. An imported run's start and end
    are "—" (its file does not record them); the page shows when it was imported and, where the
    file states one, the result's local date with its zone not recorded."""
    run = _get_run(pk)
    records = _load_records(run)
    row = run_row(run)
    imported = run.source == RunSource.IMPORTED
    # An imported file's fields (model_id, label, notes) with a stored secret's value masked.
    summary = services.imported_summary_shown(run.summary or {}) if imported else run.summary or {}
    result_date = run_result_date(run=run)
    return render(request, "benchmarks/run_detail.html", {
        "run": run, "row": row, "charts": run_charts(records, run), "has_records": records is not None,
        "no_records_line": _no_records_line(run) if imported and records is None else "",
        "records_missing": run.source == RunSource.MEASURED and bool(run.records_path) and records is None,
        "imported": imported, "notes": summary.get("notes") or [],
        "result_date": result_date, "result_date_text": (result_date or "").replace("T", " "),
        "length_note": summary.get("length_distribution_note"),
        "status_class": _status_class(run.status),
        "snapshot_text": _json_text(snapshot_shown(run.snapshot)) if run.snapshot else "",
        "summary_text": _json_text(summary),
        "extra": _extra_facts(summary), "ended_by": summary.get("ended_by"),
        "error_adjusted": _error_adjusted_rows(summary),
        "ci_rows": _ci_rows(run),
        "error_adjusted_failures": _error_adjusted_counts(summary)[0],
        "error_adjusted_aborted": _error_adjusted_counts(summary)[1],
        "stopped_early": summary.get("stopped_early") or "", "halted": summary.get("halted") or "",
        "cap_not_applied": summary.get("request_cap_applied") is False,
        "latencies": LATENCIES, "lengths_text": run_lengths_text(run), "slo": slo_text(run_slo(run=run)),
        "gpus_modelled": gpus_are_modelled(engine=(run.snapshot or {}).get("engine") or (run.sweep and run.sweep.engine),
                                           num_gpus=row["num_gpus"]),
    })


def _no_records_line(run: BenchmarkRun) -> str:
    """The one line the run page shows instead of its distributions and throughput over time for an
    imported run (its file holds no per-request records): that the file held only aggregate
    figures and which of them the summary shows, those the file gave (``output throughput, request
    throughput, TTFT p50, ITL p50 and E2E mean/p50 (ms)``)."""
    metrics = services.run_metrics(run=run)
    figures = [label for key, label, _ in COMPARE_FIELDS[:4] if metrics.get(key) is not None]
    latencies = []
    for stem, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        given = [stat for stat in ("mean", "p50", "p90", "p99") if (metrics.get(stem) or {}).get(stat) is not None]
        if given:
            latencies.append(f"{name} {'/'.join(given)}")
    if latencies:
        said = latencies[0] if len(latencies) == 1 else f"{', '.join(latencies[:-1])} and {latencies[-1]}"
        figures.append(f"{said} (ms)")
    shown = ", ".join(figures) if figures else "no throughput or latency figure"
    return (f"The imported file held only aggregate figures, not per-request records: {shown}, shown in the summary "
            "above. No distributions or throughput over time can be drawn from it.")


#: The statistics of the run page's confidence-interval rows, in the latency table's column order.
CI_STATS = ("mean", "p50", "p90", "p99")


def _ci_ms(value: float) -> str:
    """A bound in ms with the digits the latency table's neighbours make meaningful: whole ms from
    100 ms, one decimal from 10 ms, two below."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _ci_cell(bounds: Sequence[float | None] | None, stat: str) -> str:
    """One interval as the run page shows it, in ms: ``2336–4718``; ``≥ 4718 (needs 36)`` where the
    run's requests bound it from below only (36 requests would bound it on both sides);
    ``needs 6`` where they bound it on neither side; ``—`` where there is no sample at all."""
    if bounds is None:
        return "—"
    low, high = bounds
    need = min_samples_for_interval(stat)
    if low is None and high is None:
        return f"needs {need}"
    if high is None:
        return f"≥ {_ci_ms(low)} (needs {need})"
    if low is None:
        return f"≤ {_ci_ms(high)} (needs {need})"
    return f"{_ci_ms(low)}–{_ci_ms(high)}"


def _ci_rows(run: BenchmarkRun) -> dict[str, list[str]]:
    """``{"ttft": [cell per CI_STATS], "tpot": [...], "e2e": [...]}`` for the latency table's
    interval rows (:func:`run_ci95_ms`); empty for a run whose summary holds no intervals
    (imported)."""
    by_stem = run_ci95_ms(run=run)
    if not by_stem:
        return {}
    return {stem.removesuffix("_ms"): [_ci_cell(cis.get(stat), stat) for stat in CI_STATS]
            for stem, cis in by_stem.items()}


# What "client CPU per streamed event" measures, shown as the fact's tooltip and under the table.
CLIENT_CPU_HELP = ("CPU time the load generator's processes used during the measured phase, divided by the "
                   "server-sent events they parsed (every streamed chunk, output or not), in microseconds. "
                   "About 30-40 µs is normal for Ceiling's client; when it approaches the time between events "
                   "the client, not the server, sets the pace (then the run is flagged client_cpu_bound).")


def _extra_facts(s: Mapping[str, Any]) -> list[tuple[str, Any, str, str]]:
    """Further measured facts for the run page: ``(label, value, unit, explanation)``; value None
    = "—"; explanation "" when the label says it all."""
    ended_by = s.get("ended_by")
    facts = [
        ("Duration", _first(s, "duration_s"), "s", ""),
        ("Total token throughput", None if s.get("successes") == 0 else _first(s, "total_token_throughput_tok_s"),
         "tok/s", "" if _first(s, "total_token_throughput_tok_s") is not None or s.get("successes") == 0
         else "unknown: the server did not report the input tokens of every successful request"),
        ("Achieved concurrency (mean)", _first(s, "achieved_concurrency_mean"), "requests", ""),
        ("Achieved concurrency (max)", _count(_first(s, "achieved_concurrency_max")), "requests", ""),
        ("Achieved request rate", _first(s, "achieved_rate_req_s"), "req/s", ""),
        ("Output tokens (mean per request)", _first(s, "output_tokens_mean", "mean_output_tokens"), "tokens", ""),
        ("Input tokens (mean per request)", _first(s, "input_tokens_actual_mean", "mean_input_tokens"), "tokens", ""),
        ("Server output throughput", _first(s, "server_output_throughput_tok_s"), "tok/s",
         str(s.get("server_token_note") or "")),
        ("Client CPU per streamed event", _first(s, "client_cpu_us_per_event"), "µs per event",
         CLIENT_CPU_HELP if _first(s, "client_cpu_us_per_event") is not None or not s.get("client_cpu_note")
         else f"{s['client_cpu_note']}. {CLIENT_CPU_HELP}"),
    ]
    facts += _check_facts(s)
    peak = _count(_opt_float(s.get("max_concurrent_requests")))
    if peak is not None:
        # vLLM's count from an imported file (importers._max_concurrent_check): per second, not at one instant
        cap = _opt_float(s.get("concurrency"))
        facts.append(("Max concurrent requests (vLLM's count)", peak, "requests",
                      "the file's max_concurrent_requests: the most successful requests active at some time within "
                      "one second of the run (vLLM counts a request in every whole second it overlaps), so requests "
                      "that ended and started within one second all count; at least the most successful requests in "
                      "flight at one instant" + (f", and it may exceed the max_concurrency cap of {round(cap)}, which "
                                                 "held the requests in flight at any instant" if cap else "")))
    if ended_by and s.get("prompt_pool") is not None:  # only a time-limited point has a pool
        facts.append(("Distinct prompts of the time-limited point", _count(_first(s, "prompt_pool")), "prompts",
                      "made before the measured window; the point cycles through them when its time outlasts "
                      "them" + (", and it did: some prompts were sent twice (a prefix-cache hit on engines "
                                "that cache)" if s.get("prompts_reused") else "; none was sent twice")))
    return facts


def _rate_bound_text(rate: Mapping[str, Any]) -> str:
    """The sending rate's deviation against the bound on its side: ``; sent 12 % below the target,
    allowed down to -32 %`` (``bound_low`` for a negative deviation, ``bound_high`` for a positive
    one; ``bound`` for a check stored before both were kept, above only)."""
    dev = _opt_float(rate.get("deviation"))
    if dev is None:
        return ""
    below = dev < 0
    bound = _opt_float(rate.get("bound_low" if below else "bound_high"))
    if bound is None and not below:
        bound = _opt_float(rate.get("bound"))
    side = f"{abs(dev):.0%} {'below' if below else 'above'} the target"
    if bound is None:
        return f"; sent {side}"
    return f"; sent {side}, allowed {'down to' if below else 'up to'} {bound:+.0%}"


def _count(value: float | None) -> int | None:
    """A count as an int, which the run page prints without decimals (a float keeps two)."""
    return None if value is None or not math.isfinite(value) else round(value)


def _check_facts(s: Mapping[str, Any]) -> list[tuple[str, Any, str, str]]:
    """The load generator's checks of a measured run as run-page facts (``run_summary`` in
    :mod:`benchmarks.loadgen.metrics`): prompt length against the server's count, the open-loop
    sending rate against its target, zero gaps between output events, requests a TPOT SLO did
    not apply to, and the decode step seen from the client. Only the checks the summary holds."""
    facts: list[tuple[str, Any, str, str]] = []
    check = s.get("input_length_check")
    calibration = s.get("input_calibration") or {}
    if isinstance(check, Mapping):
        facts.append(("Prompt tokens counted by the server (mean)", _opt_float(check.get("actual_mean")), "tokens",
                      f"requested {check.get('requested_mean', 0):.1f} tokens; allowed difference "
                      f"±{check.get('tolerance', 0):.1f} tokens (2 % or 1 token); over {check.get('requests')} requests"
                      + (" (the stream carried no prompt tokens: their prompts sent again without streaming, "
                         "after the point, and counted)" if check.get("source") == "recount" else "")
                      + (f". Prompt calibration: {calibration['error']}" if calibration.get("error") else "")))
    elif isinstance(calibration, Mapping) and calibration.get("error"):
        facts.append(("Prompt tokens counted by the server (mean)", None, "tokens",
                      f"not checked: {calibration['error']}"))
    elif isinstance(s.get("input_length_recount"), Mapping) and s["input_length_recount"].get("error"):
        facts.append(("Prompt tokens counted by the server (mean)", None, "tokens",
                      f"not checked: {s['input_length_recount']['error']}"))
    rate = s.get("rate_target_check")
    if isinstance(rate, Mapping):
        facts.append(("Achieved sending rate", _opt_float(rate.get("sent_req_s")), "req/s",
                      f"target {rate.get('target_req_s')} req/s; {rate.get('sigmas', 0):.1f} standard deviations of a "
                      f"Poisson schedule of {rate.get('requests')} requests away (flagged above 3)"
                      + _rate_bound_text(rate)))
    zero = _opt_float(s.get("itl_zero_gap_fraction"))
    if zero is not None:
        facts.append(("Zero gaps between output events", 100.0 * zero, "% of gaps",
                      "gaps under 1 µs: events that reached the client in one network read; at 10 % or more ITL "
                      "shows how the server's writes were grouped, not the token cadence"))
    unmeasured = s.get("tpot_unmeasured")
    if isinstance(unmeasured, int) and unmeasured > 0:
        facts.append(("Requests left out of TPOT", unmeasured, "requests",
                      "all their output came in one network read, so E2E − TTFT is 0 from the client's side: "
                      "their TPOT was not measured"))
    not_applicable = s.get("slo_tpot_not_applicable")
    if isinstance(not_applicable, int) and not_applicable > 0:
        facts.append(("Requests the TPOT SLO did not apply to", not_applicable, "requests",
                      "one output token: TPOT is undefined, so they counted as meeting the TPOT SLO"))
    unjudged = s.get("slo_tpot_unmeasured")
    if isinstance(unjudged, int) and unjudged > 0:
        facts.append(("Requests the TPOT SLO could not judge", unjudged, "requests",
                      "output all in one network read, so their TPOT was not measured: not counted as meeting "
                      "the TPOT SLO, so goodput may leave out up to this many requests that met it"))
    steps = s.get("decode_steps")
    if isinstance(steps, Mapping):
        step_ms = _opt_float(steps.get("step_s"))
        facts.append(("Decode step seen from the client", None if step_ms is None else 1000.0 * step_ms, "ms",
                      f"mean gap between output events, pauses over 2× the median left out; running decode batch "
                      f"{steps.get('batch_mean', 0):.1f} requests; pauses (another request's prefill) "
                      f"{100.0 * float(steps.get('stall_share') or 0):.0f} % of decode time"))
    elif s.get("decode_steps_note"):
        facts.append(("Decode step seen from the client", None, "ms", f"not estimated: {s['decode_steps_note']}"))
    return facts


# Error-adjusted percentiles shown on the run page: (summary key, label).
ERROR_ADJUSTED = (("ttft_s", "TTFT"), ("e2e_s", "E2E"))
PERCENTILES = ("p50", "p90", "p99")


def _error_adjusted_counts(s: Mapping[str, Any]) -> tuple[int, int]:
    """``(failures, aborted)`` of the error-adjusted view: the requests the server failed (counted
    as +∞) and those a stop aborted in flight (left out: neither successes nor failures). A
    summary stored before the view left aborted requests out counted them among its
    ``failures``; they are taken out of that count here."""
    adjusted = s.get("error_adjusted")
    if not isinstance(adjusted, Mapping):
        return 0, 0
    failures = adjusted.get("failures")
    failures = failures if isinstance(failures, int) and not isinstance(failures, bool) else 0
    aborted = adjusted.get("aborted")
    if isinstance(aborted, int) and not isinstance(aborted, bool):
        return max(0, failures), max(0, aborted)
    aborted = s.get("aborted")
    aborted = aborted if isinstance(aborted, int) and not isinstance(aborted, bool) and aborted > 0 else 0
    return max(0, failures - aborted), min(aborted, max(0, failures))


def _error_adjusted_rows(s: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """TTFT and E2E percentiles with the server's failures counted as +∞ (nearest rank,
    metrics.md) for a run with such failures: ``[(label, [p50, p90, p99 as text in ms])]``; a
    percentile the failures made infinite reads "∞ (failures)" (listed in
    ``error_adjusted.infinite``; stored as null), one that is null and not listed "—". Requests a
    stop aborted in flight are no failures: empty when the run had no failure of the server
    (every unfinished request aborted, or none)."""
    adjusted = s.get("error_adjusted")
    if not isinstance(adjusted, Mapping) or not _error_adjusted_counts(s)[0]:
        return []
    infinite = set(adjusted.get("infinite") or [])
    rows = []
    for key, label in ERROR_ADJUSTED:
        values = adjusted.get(key) if isinstance(adjusted.get(key), Mapping) else {}
        cells = []
        for p in PERCENTILES:
            value = _opt_float(values.get(p))
            cells.append("∞ (failures)" if f"{key}.{p}" in infinite else "—" if value is None
                         else metric_text(1000.0 * value, key.removesuffix("_s") + "_ms"))
        rows.append((label, cells))
    return rows


@role_page()
def run_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """Download one run as :mod:`benchmarks.services` writes it: ``csv`` (the summary row, units
    in the column names), ``json`` (summary, point, snapshot and every request's record with its
    output-event times) or ``records.csv`` (one flat line per request, no event times: those are
    in the JSON). Another format is a 400 naming those offered, as the API's export answers it
    (before the run is looked up); ``records.csv`` of a run without records is a 404, of a run
    still running a 409 saying they are written when it ends. The format is read in any case
    (``export.CSV``), as the API reads it."""
    fmt = fmt.lower()
    if fmt not in (*_EXPORT_TYPES, "records.csv"):
        raise BadQuery(f"format must be one of csv, json, records.csv; got {query_text(fmt)}")
    run = _get_run(pk)
    if fmt == "records.csv":
        try:
            body = run_records_csv(run=run)
        except Conflict as exc:
            return render(request, "409.html", {"reason": str(exc)}, status=409)
        except (InvalidInput, OSError, ValueError, KeyError):
            raise Http404(f"run #{run.pk} has no per-request records") from None
        return _download(body, content_type=_EXPORT_TYPES["csv"], filename=f"run-{run.pk}-records.csv")
    body = services.run_export_csv(run=run) if fmt == "csv" else services.run_export_json(run=run)
    return _download(_export_body(body), content_type=_EXPORT_TYPES[fmt], filename=f"run-{run.pk}.{fmt}")


@role_page()
def run_original(request: HttpRequest, pk: int) -> HttpResponse:
    """Download what an imported run kept of its file, byte for byte as stored: the whole file,
    or the run's own line of a file of several runs; a stored secret's value in it masked and a
    credential shortened (a file imported before such files were refused)
    (:func:`benchmarks.services.run_original_download`)."""
    run = _get_run(pk)
    if run.source != RunSource.IMPORTED or not run.original_text:
        raise Http404("this run was not imported from a file")
    try:
        body, name = services.run_original_download(run=run, default_name=f"run-{run.pk}-original.txt")
    except SecretsUnmaskable as exc:
        return HttpResponse(f"The file is {exc}.\n", status=503, content_type="text/plain; charset=utf-8")
    return _download(body, content_type="text/plain; charset=utf-8", filename=name.replace('"', ""))


# --- comparison -------------------------------------------------------------------------------


@role_page()
def compare(request: HttpRequest) -> HttpResponse:
    """Side-by-side comparison of ``?runs=1,2`` and every run of ``?sweeps=3``: one column per
    run, differing config fields highlighted, refusal notes for length-mismatched runs (never
    ranked silently against fixed-length runs), each run's SLO, every metric's change against the
    baseline run in percent (``?baseline=ID``, one of the compared runs; default the first ranked
    run; none when the baseline is not ranked, with the reason), and
    overlay charts (tok/s and TTFT p99 vs load per sweep, TTFT CDFs per run where records exist).
    ``?ids=`` is accepted as an alias of ``?runs=`` (the API's name for it); both together name
    runs together. ``?format=csv`` downloads the comparison as CSV
    (:func:`benchmarks.services.runs.runs_compare_csv`). Malformed ids, a baseline that is not
    among the compared runs, ``runs``, ``ids``, ``sweeps``, ``baseline`` or ``format`` given
    more than once (``?ids=1&ids=2``: each takes one value, its list comma-separated), and what the
    API refuses in the same words (:func:`benchmarks.services.runs_compare_pick`: a run or sweep id
    given twice, ``?runs=1,1``; sweeps and runs that name fewer than two distinct runs, ``sweep 4
    has 1 run; ...``, ``run 1 is already in sweep 1; ...``;
    :func:`benchmarks.services.runs_compare_too_many`: more than 100 run ids or 20 sweep ids,
    ``at most 100 runs and 20 sweeps``) are a 400 showing the
    form with the reason and the values typed, as is one run named by id (``give at least two runs
    to compare``, the API's 400, when the form sent it), as are run ids and sweep ids that name no row (``no run with id
    999``, ``no sweeps with ids 4, 5``), and a format other than csv or none (``format must be csv, or
    absent for this page (json: /api/runs/compare/); got 'xml'``, as the API names the formats it
    serves). A run given by id that a given sweep also holds is compared once, with a note saying so
    (:func:`benchmarks.services.runs_compare_overlap_notes`). A page with no runs or
    sweeps asked for shows the form with a prompt to choose them; one given by a link (the form's
    ``compare`` key, ``?run=`` checkboxes and ``format`` absent) whose runs and sweeps name fewer
    than two distinct runs is a 200 showing the form with what was given filled in and a hint: to
    add another run to one run by id (``?runs=17`` from a run page), else the API's reason
    (``sweep 4 has 1 run; ...``)."""
    # One value a parameter: taking the last of a repeated one would compare other runs than asked
    # (the index page's checkboxes send ?run=1&run=2, which _ids_param reads as one list).
    repeated = {name: message for name in ("runs", "ids", "sweeps", "baseline", "format")
                if (message := given_more_than_once(request.GET.getlist(name)))}
    problems = [f"the parameter {name} {message}" for name, message in repeated.items()]

    def ids(name: str) -> list[int]:
        if name in repeated:
            return []
        try:
            return _ids_param(request, name)
        except MalformedIds as exc:
            problems.append(str(exc))
            return []

    # runs= and its alias ids= name runs together: a run under both is given twice, as in one list.
    run_ids = ids("runs") + ids("ids")
    sweep_ids = ids("sweeps")
    baseline_ids = [] if "baseline" in repeated else _baseline_param(request.GET.get("baseline", ""), problems)

    # The runs as typed or ticked: ?runs= or ?ids=, and the index page's checkboxes (?run=1&run=2).
    typed_runs = ",".join(part for part in (request.GET.get("runs", request.GET.get("ids", "")).strip(),
                                            *request.GET.getlist("run")) if part.strip())[:200]

    def form_again(problems: list[str]) -> HttpResponse:
        # The form again, with what to fix (as the API's 400), not a "page not found".
        return render(request, "benchmarks/compare.html", {
            "runs": [], "problems": problems, "run_ids": typed_runs,
            "sweep_ids": request.GET.get("sweeps", "")[:200]}, status=400)

    fmt = request.GET.get("format", "").lower()   # in any case, as the API reads it
    if "format" not in repeated and fmt not in ("", "csv"):
        # The API's refusal of an unknown format, naming what this page serves: the page itself
        # (no format) and csv; json is the API's (/api/runs/compare/).
        problems.append(f"format must be csv, or absent for this page (json: /api/runs/compare/); got {query_text(fmt)}")
    if problems:
        return form_again(problems)
    if not run_ids and not sweep_ids:
        # Nothing asked for yet (the page opened from the menu, or the form sent empty): the prompt.
        return render(request, "benchmarks/compare.html", {"runs": [], "run_ids": "", "sweep_ids": ""})
    if too_many := services.runs_compare_too_many(run_ids=run_ids, sweep_ids=sweep_ids):
        # The API's cap in its words, before a run or sweep is read.
        return form_again([too_many])
    # Given by a link (a run page's "Compare…", a sweep's link), not sent by the form, the index
    # page's checkboxes or as an export: too few runs is a hint, not a refusal.
    by_link = not fmt and "compare" not in request.GET and not request.GET.getlist("run")
    try:
        # The API's rules and words: a repeated id, sweeps that do not exist, or sweeps and runs
        # that name fewer than two distinct runs.
        picked = services.runs_compare_pick(run_ids=run_ids, sweep_ids=sweep_ids, run_field="runs")
        # Runs that do not exist: the API's 400 in its words, with the form kept.
        runs: list[BenchmarkRun] = runs_by_ids(ids=picked, field="runs")
    except services.CompareTooFew as exc:
        messages = [message for messages in exc.errors.values() for message in messages]
        if not by_link:
            return form_again(messages)
        # The form with what was given filled in, and the reason as a hint to add more.
        return render(request, "benchmarks/compare.html", {
            "runs": [], "run_ids": ",".join(map(str, run_ids)), "sweep_ids": ",".join(map(str, sweep_ids)),
            "hints": messages})
    except InvalidInput as exc:
        return form_again([message for messages in exc.errors.values() for message in messages])
    baseline = baseline_ids[0] if baseline_ids else None
    if baseline is not None and baseline not in {r.pk for r in runs}:
        return render(request, "benchmarks/compare.html", {
            "runs": [], "problems": [f"baseline run #{baseline} is not one of the compared runs"],
            "run_ids": ",".join(map(str, run_ids)), "sweep_ids": ",".join(map(str, sweep_ids))}, status=400)
    context: dict[str, Any] = {"runs": runs, "run_ids": ",".join(map(str, run_ids)),
                               "sweep_ids": ",".join(map(str, sweep_ids))}
    if len(runs) < 2:
        if len(runs) == 1 and not sweep_ids and by_link:
            # One run given by a link (a run page's "Compare…"): the form with it filled in and a hint.
            return render(request, "benchmarks/compare.html", {
                "runs": [], "run_ids": context["run_ids"], "sweep_ids": "", "one_run": runs[0]})
        # One run named by a submitted form: the API's 400 in its words, the form kept.
        return form_again([services.compare_too_few_text([r.pk for r in runs])])
    comparison = services.runs_compare(
        runs=runs, baseline_id=baseline,
        leading_notes=services.runs_compare_overlap_notes(run_ids=run_ids, sweep_ids=sweep_ids))
    if fmt == "csv":
        return _download(runs_compare_csv(comparison=comparison), content_type=_EXPORT_TYPES["csv"],
                         filename="compare-" + "-".join(str(r.pk) for r in runs[:20]) + ".csv")
    context.update(compare_context(runs, comparison))
    query = {"runs": context["run_ids"], "sweeps": context["sweep_ids"]}
    context["csv_query"] = urlencode({**{k: v for k, v in query.items() if v}, "baseline": comparison["baseline"],
                                      "format": "csv"})
    context["baseline_queries"] = {r.pk: urlencode({**{k: v for k, v in query.items() if v}, "baseline": r.pk})
                                   for r in runs}
    return render(request, "benchmarks/compare.html", context)


def _baseline_param(text: str, problems: list[str]) -> list[int]:
    """``?baseline=`` as ``[run id]`` (``[]`` when empty); anything but one id in digits appends a
    problem that quotes the value (``baseline takes one run id (e.g. 3), got 'abc'``) and gives
    ``[]``. An id above :data:`benchmarks.selectors.PK_MAX` is kept: no compared run has it, which
    the caller says. In quotes (``"3"``) it is the same id, as in the API."""
    text = unquoted(text)
    if not text:
        return []
    if not DIGITS_RE.fullmatch(text):
        problems.append(f"baseline takes one run id (e.g. 3), got {query_text(text)}")
        return []
    return [PK_MAX + 1 if len(text.lstrip("0")) > len(str(PK_MAX)) else int(text)]


# How the comparison service's note on a baseline that gives no delta reads (it ends the reason).
DELTA_REFUSED = "so no delta is given"


def compare_context(runs: Sequence[BenchmarkRun], comparison: Mapping[str, Any]) -> dict[str, Any]:
    """Shape :func:`benchmarks.services.runs_compare` output for the comparison template.

    Returns ``rows`` (:func:`run_row` per run), ``config_rows`` (``{"field", "values", "differs"}``
    for every config field, in the service's order; ``num_gpus`` values a sim profile models read
    ``8 modelled``, with a ``note`` saying so), ``metric_rows`` (``{"label", "unit",
    "values", "texts", "best"}``; ``texts`` are the values as the run, sweep and runs-list pages print
    them (:func:`_row_texts`: :func:`benchmarks.views.common.metric_text` with :data:`ROW_DECIMALS`
    places, the same for every value of a row, one more only where the best in bold would read as
    another value), other counts in three significant figures or as many more as tell them apart
    (:func:`benchmarks.services.runs.plain_figures`); ``best`` is the column index of the run the service ranked best, None
    when it ranked none), ``min_compared_requests`` (the fewest requests a run needs for a best to be
    named over it, said in the table's heading), ``refusals`` (the service's notes: runs that hold no measurement and
    length-mismatched runs, not ranked; mixed lengths), ``unranked_ids`` (run ids left out of
    ranking), ``unranked_reasons`` (run id -> why), ``no_deltas_why`` (the service's note on why no
    change against the baseline is given, ``""`` when changes are given) and the overlay ``charts``, which draw only runs
    that hold a measurement (a failed point's few numbers are not a point on a curve).
    """
    rows = [run_row(r) for r in runs]
    entries = list(comparison.get("runs") or [])
    differing = {d["field"] for d in comparison.get("config_differs") or []}
    config_keys = list(entries[0]["config"].keys()) if entries else []
    config_rows = [{"field": key, "values": [_config_text(e["config"].get(key), key=key) for e in entries],
                    "differs": key in differing} for key in config_keys]
    for c in config_rows:
        modelled = [c["field"] == "num_gpus" and gpus_are_modelled(engine=e["config"].get("engine"), num_gpus=v)
                    for e, v in zip(entries, c["values"])]
        if any(modelled):
            c["values"] = [f"{v} modelled" if m else v for v, m in zip(c["values"], modelled)]
            c["note"] = "modelled: by the sim profile, not GPUs it ran on; used for tok/s per GPU"
    index_of = {e["id"]: i for i, e in enumerate(entries)}
    best = comparison.get("best") or {}
    ties = comparison.get("ties") or {}
    metric_rows = []
    for f in comparison.get("fields") or []:
        winner = best.get(f["key"])
        best_index = index_of.get(winner) if winner is not None else None
        deltas = f.get("deltas_pct") or [None] * len(f["values"])
        metric_rows.append({"key": f["key"], "label": f["label"], "unit": f["unit"], "values": f["values"],
                            "texts": _row_texts(f["key"], f["values"], best_index),
                            "best": best_index,
                            "tied": {index_of[i] for i in ties.get(f["key"], []) if i in index_of},
                            "deltas": [_delta_text(d) for d in deltas]})
    unmeasured = {e["id"] for e in entries if e.get("measured") is False}
    baseline = comparison.get("baseline")
    baseline_engine = next((e["config"].get("engine") for e in entries if e["id"] == baseline), None)
    notes = [str(n) for n in comparison.get("notes") or []]
    return {
        "baseline_id": baseline, "baseline_index": index_of.get(baseline),
        "no_deltas_why": next((n for n in notes if n.endswith(DELTA_REFUSED) or DELTA_REFUSED + ";" in n), ""),
        "tie_threshold_pct": comparison.get("tie_threshold_pct"),
        "min_compared_requests": MIN_COMPARED_REQUESTS,
        # The workload parameters where a run is not the baseline's (its deltas compare unlike workloads).
        "workload_note": comparison.get("workload_note") or "",
        "workload_texts": [_workload_cell(e, baseline_engine) for e in entries],
        "slo_texts": [slo_text(e["config"].get("slo")) for e in entries],
        "rows": rows, "config_rows": config_rows, "metric_rows": metric_rows,
        "refusals": notes,
        "unranked_ids": {e["id"] for e in entries if not e.get("rankable", True)},
        "unranked_reasons": {e["id"]: str(e.get("refusal") or "") for e in entries if not e.get("rankable", True)},
        "charts": _compare_charts([r for r in runs if r.pk not in unmeasured],
                                  [r for r in rows if r["run"].pk not in unmeasured]),
    }


def _row_texts(key: str, values: Sequence[float | int | None], best: int | None = None) -> list[str | None]:
    """A compared metric's values as its row prints them: for a metric the other pages print, as
    they print it (:func:`benchmarks.views.common.metric_text`, :data:`ROW_DECIMALS` places,
    thousands separated), else (a count, or a value too large or not finite for fixed places)
    :func:`benchmarks.services.runs.plain_figures`. Only where the run in bold (``best``, a column
    index) would read the same as another run's value (possible only for values so small that
    the 2 % tie rule still names a best) does the row get one more place, for all its values,
    until the best reads apart. None stays None."""
    decimals = ROW_DECIMALS.get(key.split(".")[0])
    numbers = [float(v) for v in values if v is not None and not isinstance(v, bool)]
    if decimals is None or not all(math.isfinite(v) and abs(v) < PLAIN_FIGURES_MAX for v in numbers):
        return plain_figures(values)
    for places in range(decimals, 16):
        texts = [None if v is None else metric_text(v, key.split(".")[0], places=places) for v in values]
        if best is None or best >= len(texts) or texts[best] is None:
            break
        if not any(t == texts[best] and float(v) != float(values[best])
                   for i, (t, v) in enumerate(zip(texts, values)) if i != best and v is not None):
            break
    return texts


def _workload_cell(entry: Mapping[str, Any], baseline_engine: str | None) -> str:
    """A compared run's ``workload_differs`` as its cell in the change table: ``input length 1024
    tokens (baseline 256 tokens); concurrency 4 requests in flight (baseline 1 request in flight)``,
    ``GPUs 4 modelled (baseline 8 modelled)``; ``""`` for none."""
    return "; ".join(workload_phrases(entry.get("workload_differs") or [], engine=entry["config"].get("engine"),
                                      baseline_engine=baseline_engine))


def _delta_text(value: float | None) -> str | None:
    """A change against the baseline as the table shows it: ``+12.3 %``, ``−0.4 %``, ``0 %``
    (None when there is none)."""
    if value is None:
        return None
    if abs(value) < 0.05:
        return "0 %"
    return f"{'+' if value > 0 else '−'}{abs(value):.1f} %"


def _config_text(value: Any, *, key: str = "") -> Any:
    """A config value as the comparison table shows it: the SLO in words (``TTFT ≤ 0.05 s``,
    ``none``), ``roles`` one line per role (:func:`_roles_text`), other objects (``env``) as JSON
    text with sorted keys, anything else as it is."""
    if key == "slo":
        return slo_text(value)
    if key == "roles" and isinstance(value, Mapping):
        return _roles_text(value)
    if isinstance(value, (Mapping, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return value


def _roles_text(roles: Mapping[str, Any]) -> str:
    """A recipe's ``roles`` one line per role, by name, with every setting as ``key=value`` (a
    list or object as compact JSON), so four runs' roles fit side by side yet two that differ in
    any setting read differently::

        decode: gpus=[4,5,6,7] numa_node=1 port=30001 tp=4
        prefill: bootstrap_port=8998 gpus=[0,1,2,3] numa_node=0 port=30000 tp=4
    """
    lines = []
    for name in sorted(roles):
        role = roles[name]
        if not isinstance(role, Mapping):
            lines.append(f"{name}: {json.dumps(role, separators=(',', ':'))}")
            continue
        settings = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(',', ':'))}"
                            for k, v in sorted(role.items()))
        lines.append(f"{name}: {settings}".rstrip())
    return "\n".join(lines)


def _compare_charts(runs: Sequence[BenchmarkRun], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Overlay charts of the compared runs: ``tok_s`` and ``ttft_p99`` against load, one series
    per sweep and length pair, and ``ttft_cdf`` (one CDF per run with records, at most
    :data:`COMPARE_MAX_CDF_RUNS`). Closed-loop runs are drawn against concurrency; open-loop runs
    against request rate, on ``tok_s_rate`` and ``ttft_p99_rate`` when closed-loop runs are
    drawn too (None otherwise), with a note on the concurrency charts saying so."""
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        run = r["run"]
        key = f"sweep #{run.sweep_id} " if run.sweep_id else "imported "
        by_sweep.setdefault(key, []).append(r)
    closed = [r for r in rows if r["run"].concurrency is not None]
    opened = [r for r in rows if r["run"].concurrency is None and r["run"].request_rate is not None]
    # kind -> (tok/s series, TTFT p99 series), each kind on its own axis.
    series: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {"main": ([], []), "rate": ([], [])}
    for key, rs in by_sweep.items():
        c = sweep_charts(rs, prefix=key)
        kinds = [("main", c)] if not c["rate"] else [("main", c), ("rate", c["rate"])]
        if c["rate"] is None and closed and not any(r["run"].concurrency is not None for r in rs):
            kinds = [("rate", c)]  # an open-loop sweep among closed-loop ones: its own axis
        for kind, charts in kinds:
            series[kind][0].extend(charts["tok_s"]["series"])
            series[kind][1].extend(s for s in charts["ttft"]["series"] if s["label"].endswith(" p99"))
    axis = ("concurrency", "requests") if closed else ("request rate", "req/s")
    both = bool(closed) and bool(opened)
    note = (f"{len(opened)} open-loop run{'s' if len(opened) != 1 else ''} (request rate) "
            f"{'are' if len(opened) != 1 else 'is'} drawn on the request-rate charts: a rate in req/s is not a "
            "concurrency, so the two are not drawn on one axis.") if both else None
    tok_series, ttft_series = series["main"]
    cdf_series = []
    for run in list(runs)[:COMPARE_MAX_CDF_RUNS]:
        records = _load_records(run)
        if records is None:
            continue
        cdf_series.append({"label": f"run #{run.pk} {run.label}", "points": cdf_points(record_arrays(records)["ttft"]),
                           "step": True})
    rate_axis = ("request rate", "req/s")
    return {
        "tok_s": chart_spec(title="Output throughput vs load", x=axis, y=("output", "tok/s"), series=tok_series,
                            x_log=True, note=note),
        "ttft_p99": chart_spec(title="TTFT p99 vs load", x=axis, y=("TTFT p99", "ms"), series=ttft_series,
                               x_log=True, note=note),
        "tok_s_rate": chart_spec(title="Output throughput vs request rate (open-loop runs)", x=rate_axis,
                                 y=("output", "tok/s"), series=series["rate"][0], x_log=True) if both else None,
        "ttft_p99_rate": chart_spec(title="TTFT p99 vs request rate (open-loop runs)", x=rate_axis,
                                    y=("TTFT p99", "ms"), series=series["rate"][1], x_log=True) if both else None,
        "ttft_cdf": chart_spec(title="TTFT CDF per run", x=("TTFT", "ms"), y=("fraction of requests", ""),
                               series=cdf_series, empty="no per-request records among these runs."),
    }

