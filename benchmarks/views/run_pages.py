"""Run pages: one run (summary with units, CDFs and the tok/s timeline from the raw records, flags,
failures, snapshot, the imported original file), its exports, and the comparison of any runs or
sweeps side by side."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from benchmarks import services
from benchmarks.choices import RunSource
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.views.charts import cdf_points, chart_spec, record_arrays, run_charts, sweep_charts
from benchmarks.views.common import (
    COMPARE_MAX_CDF_RUNS, LATENCIES, run_row, _EXPORT_TYPES, _download, _export_body, _first, _ids_param,
    _json_text, _load_records, _status_class, _sweep_runs,
)
from deployments.views import role_page


# --- run page ---------------------------------------------------------------------------------


def _get_run(pk: int) -> BenchmarkRun:
    return get_object_or_404(BenchmarkRun.objects.select_related("sweep", "sweep__deployment", "created_by"), pk=pk)


@role_page()
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: summary table with units, CDFs of TTFT/TPOT/ITL/E2E and the tok/s timeline from
    the raw records, flags with explanations, failures with reasons, snapshot, and for imported
    runs the source format, notes and the original file download."""
    run = _get_run(pk)
    records = _load_records(run)
    row = run_row(run)
    summary = run.summary or {}
    imported = run.source == RunSource.IMPORTED
    return render(request, "benchmarks/run_detail.html", {
        "run": run, "row": row, "charts": run_charts(records), "has_records": records is not None,
        "records_missing": run.source == RunSource.MEASURED and bool(run.records_path) and records is None,
        "imported": imported, "notes": summary.get("notes") or [],
        "length_note": summary.get("length_distribution_note"),
        "status_class": _status_class(run.status),
        "snapshot_text": _json_text(run.snapshot) if run.snapshot else "",
        "summary_text": _json_text(summary),
        "extra": _extra_facts(summary), "ended_by": summary.get("ended_by"),
        "stopped_early": summary.get("stopped_early") or "", "halted": summary.get("halted") or "",
        "cap_not_applied": summary.get("request_cap_applied") is False,
        "latencies": LATENCIES,
    })


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
        ("Total token throughput", _first(s, "total_token_throughput_tok_s"), "tok/s", ""),
        ("Achieved concurrency (mean)", _first(s, "achieved_concurrency_mean"), "requests", ""),
        ("Achieved concurrency (max)", _first(s, "achieved_concurrency_max"), "requests", ""),
        ("Achieved request rate", _first(s, "achieved_rate_req_s"), "req/s", ""),
        ("Output tokens (mean per request)", _first(s, "output_tokens_mean", "mean_output_tokens"), "tokens", ""),
        ("Input tokens (mean per request)", _first(s, "input_tokens_actual_mean", "mean_input_tokens"), "tokens", ""),
        ("Server output throughput", _first(s, "server_output_throughput_tok_s"), "tok/s",
         str(s.get("server_token_note") or "")),
        ("Client CPU per streamed event", _first(s, "client_cpu_us_per_event"), "µs per event",
         CLIENT_CPU_HELP if _first(s, "client_cpu_us_per_event") is not None or not s.get("client_cpu_note")
         else f"{s['client_cpu_note']}. {CLIENT_CPU_HELP}"),
    ]
    if ended_by and s.get("prompt_pool") is not None:  # only a time-limited point has a pool
        facts.append(("Distinct prompts of the time-limited point", _first(s, "prompt_pool"), "prompts",
                      "made before the measured window; the point cycles through them when its time outlasts "
                      "them" + (", and it did: some prompts were sent twice (a prefix-cache hit on engines "
                                "that cache)" if s.get("prompts_reused") else "; none was sent twice")))
    return facts


@role_page()
def run_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """Download one run as CSV (one row per request from the records, or the summary row for an
    imported run) or JSON (summary, point, snapshot), as :mod:`benchmarks.services` writes them."""
    if fmt not in _EXPORT_TYPES:
        raise Http404("export format is csv or json")
    run = _get_run(pk)
    body = services.run_export_csv(run=run) if fmt == "csv" else services.run_export_json(run=run)
    return _download(_export_body(body), content_type=_EXPORT_TYPES[fmt], filename=f"run-{run.pk}.{fmt}")


@role_page()
def run_original(request: HttpRequest, pk: int) -> HttpResponse:
    """Download the original file an imported run came from, byte for byte as stored."""
    run = _get_run(pk)
    if run.source != RunSource.IMPORTED or not run.original_text:
        raise Http404("this run was not imported from a file")
    name = (run.original_filename or f"run-{run.pk}-original.txt").replace('"', "").replace("\n", "")
    return _download(run.original_text, content_type="text/plain; charset=utf-8", filename=name)


# --- comparison -------------------------------------------------------------------------------


@role_page()
def compare(request: HttpRequest) -> HttpResponse:
    """Side-by-side comparison of ``?runs=1,2`` and every run of ``?sweeps=3``: one column per
    run, differing config fields highlighted, refusal notes for length-mismatched runs (never
    ranked silently against fixed-length runs), and overlay charts (tok/s and TTFT p99 vs load
    per sweep, TTFT CDFs per run where records exist). ``?ids=`` is accepted as an alias of
    ``?runs=`` (the API's name for it); both together are merged. Unknown ids are 404."""
    run_ids = list(dict.fromkeys(_ids_param(request, "runs") + _ids_param(request, "ids")))
    sweep_ids = _ids_param(request, "sweeps")
    runs_by_id = {r.pk: r for r in BenchmarkRun.objects.select_related("sweep").filter(pk__in=run_ids)}
    missing = [i for i in run_ids if i not in runs_by_id]
    sweeps = {s.pk: s for s in BenchmarkSweep.objects.filter(pk__in=sweep_ids)}
    missing += [i for i in sweep_ids if i not in sweeps]
    if missing:
        raise Http404(f"no such run or sweep: {', '.join(map(str, missing))}")
    runs: list[BenchmarkRun] = [runs_by_id[i] for i in run_ids]
    for sid in sweep_ids:
        runs.extend(r for r in _sweep_runs(sweeps[sid]) if r.pk not in {x.pk for x in runs})
    context: dict[str, Any] = {"runs": runs, "run_ids": ",".join(map(str, run_ids)),
                               "sweep_ids": ",".join(map(str, sweep_ids))}
    if len(runs) < 2:
        # The service compares two or more; one run is shown with a hint instead of an error.
        context.update({"rows": [run_row(r) for r in runs], "too_few": True})
        return render(request, "benchmarks/compare.html", context)
    comparison = services.runs_compare(runs=runs)
    context.update(compare_context(runs, comparison))
    return render(request, "benchmarks/compare.html", context)


def compare_context(runs: Sequence[BenchmarkRun], comparison: Mapping[str, Any]) -> dict[str, Any]:
    """Shape :func:`benchmarks.services.runs_compare` output for the comparison template.

    Returns ``rows`` (:func:`run_row` per run), ``config_rows`` (``{"field", "values", "differs"}``
    for every config field, in the service's order), ``metric_rows`` (``{"label", "unit",
    "values", "best"}``; ``best`` is the column index of the run the service ranked best, None
    when it ranked none), ``refusals`` (the service's notes: runs that hold no measurement and
    length-mismatched runs, not ranked; mixed lengths), ``unranked_ids`` (run ids left out of
    ranking), ``unranked_reasons`` (run id -> why) and the overlay ``charts``, which draw only runs
    that hold a measurement (a failed point's few numbers are not a point on a curve).
    """
    rows = [run_row(r) for r in runs]
    entries = list(comparison.get("runs") or [])
    differing = {d["field"] for d in comparison.get("config_differs") or []}
    config_keys = list(entries[0]["config"].keys()) if entries else []
    config_rows = [{"field": key, "values": [_config_text(e["config"].get(key)) for e in entries],
                    "differs": key in differing} for key in config_keys]
    index_of = {e["id"]: i for i, e in enumerate(entries)}
    best = comparison.get("best") or {}
    metric_rows = []
    for f in comparison.get("fields") or []:
        winner = best.get(f["key"])
        metric_rows.append({"key": f["key"], "label": f["label"], "unit": f["unit"], "values": f["values"],
                            "best": index_of.get(winner) if winner is not None else None})
    unmeasured = {e["id"] for e in entries if e.get("measured") is False}
    return {
        "rows": rows, "config_rows": config_rows, "metric_rows": metric_rows,
        "refusals": [str(n) for n in comparison.get("notes") or []],
        "unranked_ids": {e["id"] for e in entries if not e.get("rankable", True)},
        "unranked_reasons": {e["id"]: str(e.get("refusal") or "") for e in entries if not e.get("rankable", True)},
        "charts": _compare_charts([r for r in runs if r.pk not in unmeasured],
                                  [r for r in rows if r["run"].pk not in unmeasured]),
    }


def _config_text(value: Any) -> Any:
    """A config value as the comparison table shows it: objects (``roles``, ``env``) as JSON text
    with sorted keys, anything else as it is."""
    if isinstance(value, (Mapping, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return value


def _compare_charts(runs: Sequence[BenchmarkRun], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        run = r["run"]
        key = f"sweep #{run.sweep_id} " if run.sweep_id else "imported "
        by_sweep.setdefault(key, []).append(r)
    tok_series: list[dict[str, Any]] = []
    ttft_series: list[dict[str, Any]] = []
    for key, rs in by_sweep.items():
        c = sweep_charts(rs, prefix=key)
        tok_series.extend(c["tok_s"]["series"])
        ttft_series.extend(s for s in c["ttft"]["series"] if s["label"].endswith(" p99"))
    closed = any(r.concurrency is not None for r in runs)
    axis = ("concurrency", "requests") if closed else ("request rate", "req/s")
    cdf_series = []
    for run in list(runs)[:COMPARE_MAX_CDF_RUNS]:
        records = _load_records(run)
        if records is None:
            continue
        cdf_series.append({"label": f"run #{run.pk} {run.label}", "points": cdf_points(record_arrays(records)["ttft"]),
                           "step": True})
    return {
        "tok_s": chart_spec(title="Output throughput vs load", x=axis, y=("output", "tok/s"), series=tok_series,
                            x_log=True),
        "ttft_p99": chart_spec(title="TTFT p99 vs load", x=axis, y=("TTFT p99", "ms"), series=ttft_series,
                               x_log=True),
        "ttft_cdf": chart_spec(title="TTFT CDF per run", x=("TTFT", "ms"), y=("fraction of requests", ""),
                               series=cdf_series, empty="no per-request records among these runs."),
    }

