"""Server-rendered pages of the benchmarks app: the index (sweeps, recent runs, import form),
the sweep form, one sweep (live progress polled by htmx, results table, charts, ceiling findings,
snapshot, export, cancel), one run (summary table, CDFs and a tok/s timeline from the raw
per-request records, flags, failures, snapshot, the imported original file) and the comparison
of any runs or sweeps side by side.

Views are thin: they authorise (:func:`deployments.views.role_page`), parse the request, call
one function of :mod:`benchmarks.services` and shape
numbers for the templates. Units: summaries store seconds (``ttft_s``); pages show latencies in
ms and throughputs per second, with the unit in every column header. A value that was not
measured is ``None`` and renders as "—", never 0.

Chart data is built here as plain dicts (the format :file:`static/ceiling/charts.js` documents)
and embedded with ``json_script``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from benchmarks import services
from benchmarks.choices import SWEEP_ACTIVE, SWEEP_TERMINAL, RunSource, RunStatus, SweepStatus
from benchmarks.loadgen.records import RecordStore
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from controlplane.errors import Conflict, InvalidInput
from controlplane.permissions import has_role
from controlplane.redaction import redact_text
from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.views import role_page

# Percentiles shown everywhere: the load generator's (metrics.md: p50, p90, p99 plus mean).
STATS = ("mean", "p50", "p90", "p99")
# Latency metrics in table order: summary key stem -> label. ITL is the per-event gap
# (metrics.md); the per-token variant is named separately where it exists.
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
# A CDF drawn with more points than a chart is wide adds nothing but page weight; quantiles
# at this many evenly spaced levels keep the curve's shape exactly at the ends (min and max kept).
CDF_MAX_POINTS = 400
# The tok/s timeline buckets output events per second of run time (the "per 1 s").
TIMELINE_BUCKET_S = 1.0
# Runs whose records are drawn as overlaid CDFs on the comparison page: more lines than the
# palette has colours are unreadable.
COMPARE_MAX_CDF_RUNS = 8
# Recent runs listed on the index page.
INDEX_RECENT_RUNS = 20
# Import uploads: the service's own cap, checked before the file is read into memory.
IMPORT_MAX_BYTES = services.MAX_IMPORT_BYTES

# Plain-words explanations of the load generator's and the importers' flags (metrics.md).
FLAG_TEXT: dict[str, str] = {
    "output_length_mismatch": "output length mismatch: a fixed-length run where some requests produced a "
                              "different number of tokens than requested; it is not ranked against "
                              "fixed-length runs.",
    "concurrency_shortfall": "the client never had the target number of requests in flight at once "
                             "(connection-pool cap or client CPU), so the point measured less load than its label.",
    "rate_shortfall": "the achieved request rate stayed more than 5 % below the scheduled rate.",
    "tokens_estimated": "the server sent no usage for some requests; their output tokens were counted from "
                        "streamed events and are an estimate.",
    "server_token_mismatch": "the client's output token count and the server's generation_tokens_total delta "
                             "differ by more than 2 %.",
    "client_cpu_bound": "a load-generator worker was busy on CPU most of the run; latencies may include "
                        "client time.",
    "variable_lengths": "request lengths were drawn from a range, so this is not a fixed-length run.",
    "lengths_unknown": "the result file does not record the request lengths.",
}


# --- small helpers ----------------------------------------------------------------------------


def _can_write(request: HttpRequest) -> bool:
    return has_role(request.user, "operator")


def _opt_float(value: Any) -> float | None:
    """A finite float, or None for absent, null, NaN, infinite or non-numeric values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _ids_param(request: HttpRequest, name: str) -> list[int]:
    """``?runs=1,2,3`` (or ``?run=1&run=2``) as a list of ints (order kept, duplicates dropped); 404 on anything else,
    because an id that cannot exist names no page."""
    # The index page's checkboxes send ``?run=1&run=2``; links send ``?runs=1,2``.
    parts = request.GET.get(name, "").split(",") + request.GET.getlist(name.removesuffix("s"))
    out: list[int] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise Http404(f"{name} must be a comma-separated list of ids")
        if int(part) not in out:
            out.append(int(part))
    return out


def _first(summary: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = _opt_float(summary.get(key))
        if value is not None:
            return value
    return None


def _flags(run: BenchmarkRun) -> list[str]:
    """Raised flags of a run: the ``flags`` column, else the summary's ``{"flag": bool}`` map."""
    if run.flags:
        return [str(f) for f in run.flags]
    raw = (run.summary or {}).get("flags") or {}
    if isinstance(raw, Mapping):
        return [k for k, v in raw.items() if v]
    return [str(f) for f in raw]


def _latency(dist: Any) -> dict[str, float | None]:
    return {k: _opt_float(dist.get(k)) if isinstance(dist, Mapping) else None for k in STATS}


def run_row(run: BenchmarkRun) -> dict[str, Any]:
    """One run's numbers for a results table, in display units, from
    :func:`benchmarks.services.run_metrics` (one vocabulary for measured and imported runs).

    Keys: ``run`` (the row), ``label``, ``output_tok_s`` and ``tok_s_per_gpu`` (tok/s; per GPU
    uses the run's GPU count, else its sweep's), ``request_s`` and ``goodput_req_s``
    (requests/s), ``slo_attainment`` (fraction 0-1), ``ttft``/``tpot``/``itl``/``e2e`` (dicts of
    mean/p50/p90/p99 in ms), ``requests``, ``successes``, ``failures`` (counts), ``errors``
    (``[(reason, count)]``, most frequent first), ``flags`` (``[(flag, explanation)]``),
    ``length_mismatch`` (None, or ``{"requested", "measured_mean", "count"}`` in tokens and
    requests), ``num_gpus``, ``duration_s``. Absent values are None.
    """
    s: Mapping[str, Any] = run.summary or {}
    m = services.run_metrics(run=run)
    num_gpus = run.num_gpus or (run.sweep.num_gpus if run.sweep_id and run.sweep else None)
    out_tok_s = _opt_float(m.get("output_throughput_tok_s"))
    if out_tok_s is None:
        out_tok_s = _opt_float(run.output_tok_s)
    errors = m.get("errors") or {}
    error_rows = sorted(((str(k), int(v)) for k, v in errors.items()), key=lambda kv: (-kv[1], kv[0])) \
        if isinstance(errors, Mapping) else []
    flags = _flags(run)
    mismatch = None
    if "output_length_mismatch" in flags:
        mismatch = {
            "requested": s.get("output_length_requested", run.output_len),
            "measured_mean": _opt_float(m.get("output_tokens_mean")),
            "count": s.get("output_length_mismatch_count"),
        }
    return {
        "run": run,
        "label": run.label,
        "output_tok_s": out_tok_s,
        "tok_s_per_gpu": out_tok_s / num_gpus if out_tok_s is not None and num_gpus else None,
        "request_s": _opt_float(m.get("request_throughput_req_s")),
        "goodput_req_s": _first(s, "goodput_req_s", "request_goodput_req_s"),
        "slo_attainment": _opt_float(m.get("slo_attainment")),
        **{stem: _latency(m.get(f"{stem}_ms")) for stem, _ in LATENCIES},
        "requests": m.get("requests") if m.get("requests") is not None else run.num_requests,
        "successes": m.get("successes"),
        "failures": m.get("failures"),
        "errors": error_rows,
        "flags": [(f, FLAG_TEXT.get(f, f.replace("_", " "))) for f in flags],
        "length_mismatch": mismatch,
        "num_gpus": num_gpus,
        "duration_s": _opt_float(m.get("duration_s")),
    }


def _json_text(value: Any) -> str:
    """Pretty JSON for a collapsed block. Snapshots store env already redacted; this second pass
    guards against a token pasted into a flag or an argv element the snapshot did not know was
    secret (the same rule as the deployment pages)."""
    return redact_text(json.dumps(value, indent=2, sort_keys=True, default=str))


# --- charts -----------------------------------------------------------------------------------


def chart_spec(*, title: str, x: tuple[str, str], y: tuple[str, str], series: list[dict[str, Any]],
               x_log: bool = False, empty: str | None = None) -> dict[str, Any]:
    """A chart for :file:`static/ceiling/charts.js`: ``x``/``y`` are ``(label, unit)``; each
    series is ``{"label": str, "points": [[x, y], ...]}`` (``"step": True`` for a CDF)."""
    spec: dict[str, Any] = {
        "title": title,
        "x": {"label": x[0], "unit": x[1], "log": x_log},
        "y": {"label": y[0], "unit": y[1], "log": False},
        "series": series,
    }
    if empty:
        spec["empty"] = empty
    return spec


def cdf_points(values: np.ndarray, *, max_points: int = CDF_MAX_POINTS) -> list[list[float]]:
    """Empirical CDF of ``values`` as ``[[value, fraction ≤ value], ...]`` (fraction in 0-1).

    With n ≤ ``max_points`` every sorted sample is a point (fraction i/n). Past that, the curve is
    sampled at ``max_points`` evenly spaced ranks, always keeping the first and last sample, so
    the tails (p99, max) stay exact. Values are rounded to 4 significant digits of ms, finer than
    any clock this measures.
    """
    finite = np.sort(values[np.isfinite(values)])
    n = int(finite.size)
    if n == 0:
        return []
    ranks = np.arange(n) if n <= max_points else np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
    return [[float(f"{finite[i]:.4g}"), round((int(i) + 1) / n, 6)] for i in ranks]


def record_arrays(records: RecordStore) -> dict[str, np.ndarray]:
    """Per-request latencies (ms, successful requests only; metrics.md formulas) from raw records:
    ``ttft``, ``e2e``, ``tpot`` (requests with ≥ 2 output tokens), ``itl`` (per-event gaps of all
    successful requests)."""
    ok = records.column("ok").astype(bool)
    start, first, last = (records.column(c).astype(np.int64) for c in ("start", "first", "last"))
    out_tok = records.column("output_tokens").astype(np.int64)
    ttft = (first[ok] - start[ok]) / 1e6
    e2e = (last[ok] - start[ok]) / 1e6
    multi = out_tok[ok] >= 2
    tpot = (e2e[multi] - ttft[multi]) / (out_tok[ok][multi] - 1)
    ev = records.column("ev_time").astype(np.int64)
    off, ln = records.column("ev_off"), records.column("ev_len")
    gaps = [np.diff(ev[int(off[i]):int(off[i]) + int(ln[i])]) for i in np.flatnonzero(ok) if ln[i] >= 2]
    itl = np.concatenate(gaps) / 1e6 if gaps else np.array([], dtype=float)
    return {"ttft": ttft, "e2e": e2e, "tpot": tpot, "itl": itl}


def timeline_points(records: RecordStore, *, bucket_s: float = TIMELINE_BUCKET_S) -> tuple[list[list[float]], bool]:
    """Output tok/s per ``bucket_s`` of run time, from the event times of successful requests.

    Returns ``(points, estimated)``: ``points`` is ``[[seconds since the first request's start,
    tok/s], ...]`` (one point per bucket, empty buckets as 0 because nothing streamed);
    ``estimated`` is True when some events carried no token count (the server sent no cumulative
    usage) and counted as one token each.
    """
    ok = records.column("ok").astype(bool)
    if not ok.any():
        return [], False
    start = records.column("start")
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
    bucket = ((ev[idx] - t0) / 1e9 // bucket_s).astype(np.int64)
    sums = np.bincount(bucket, weights=weights)
    return [[round(float(i * bucket_s), 3), float(v) / bucket_s] for i, v in enumerate(sums)], estimated


def _load_records(run: BenchmarkRun) -> RecordStore | None:
    """The run's records (:func:`benchmarks.services.run_records`), or None for imported runs and
    for a missing or unreadable file (the page says so instead of failing)."""
    if run.source != RunSource.MEASURED or not run.records_path:
        return None
    try:
        return services.run_records(run=run)
    except (InvalidInput, OSError, ValueError, KeyError):
        return None


def run_charts(records: RecordStore | None) -> dict[str, Any]:
    """The run page's charts: ``cdf_ttft``, ``cdf_tpot``, ``cdf_itl``, ``cdf_e2e`` (one series
    each) and ``timeline`` (tok/s per second). Empty series when there are no records."""
    arrays = record_arrays(records) if records is not None else {}
    empty = "no per-request records (imported runs keep the source's summary only)." if records is None else None
    charts: dict[str, Any] = {}
    for stem, label in LATENCIES:
        pts = cdf_points(arrays[stem]) if stem in arrays else []
        charts[f"cdf_{stem}"] = chart_spec(
            title=f"{label} CDF", x=(label, "ms"), y=("fraction of requests", ""),
            series=[{"label": label, "points": pts, "step": True}], empty=empty or "no successful requests.",
        )
    points, estimated = timeline_points(records) if records is not None else ([], False)
    charts["timeline"] = chart_spec(
        title="Output throughput during the run" + (" (some events counted as 1 token)" if estimated else ""),
        x=("time since first request", "s"), y=("output", "tok/s"),
        series=[{"label": "output tok/s", "points": points}], empty=empty or "no output events.",
    )
    return charts


def _load_x(run: BenchmarkRun) -> float | None:
    return float(run.concurrency) if run.concurrency is not None else _opt_float(run.request_rate)


def _lengths(run: BenchmarkRun) -> str:
    return f"{run.input_len}/{run.output_len}" if run.input_len and run.output_len else "variable"


def sweep_charts(rows: Sequence[dict[str, Any]], *, prefix: str = "") -> dict[str, Any]:
    """Charts of a set of result rows (:func:`run_row`) against load: output tok/s, TTFT and
    TPOT percentiles vs concurrency (or request rate for open-loop points). One series per
    input/output length pair (and per ``prefix`` group on the comparison page). Load axis is
    logarithmic: grids double (1, 2, 4, ...)."""
    closed = [r for r in rows if r["run"].concurrency is not None]
    use = closed if closed else rows
    axis = ("concurrency", "requests") if closed else ("request rate", "req/s")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in use:
        if _load_x(r["run"]) is None:
            continue
        groups.setdefault(f"{prefix}{_lengths(r['run'])}", []).append(r)

    def series(key: str, stat: str | None = None, tag: str = "") -> list[dict[str, Any]]:
        out = []
        for name, rs in groups.items():
            pts = []
            for r in rs:
                val = r[key] if stat is None else r[key][stat]
                pts.append([_load_x(r["run"]), val])
            out.append({"label": f"{name}{tag}", "points": pts})
        return out

    positive = all((_load_x(r["run"]) or 0) > 0 for rs in groups.values() for r in rs)
    tok = chart_spec(title="Output throughput vs load", x=axis, y=("output", "tok/s"),
                     series=series("output_tok_s"), x_log=positive)
    per_gpu = chart_spec(title="Output throughput per GPU vs load", x=axis, y=("output per GPU", "tok/s"),
                         series=series("tok_s_per_gpu"), x_log=positive,
                         empty="GPU count unknown.")
    if not any(p[1] is not None for s in per_gpu["series"] for p in s["points"]):
        per_gpu["series"] = []
    lat = {}
    for stem, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
        lat[stem] = chart_spec(
            title=f"{label} percentiles vs load", x=axis, y=(label, "ms"), x_log=positive,
            series=[s for stat in ("p50", "p90", "p99") for s in series(stem, stat, f" {stat}")],
        )
    return {"tok_s": tok, "tok_s_per_gpu": per_gpu, "ttft": lat["ttft"], "tpot": lat["tpot"], "e2e": lat["e2e"]}


# --- index and import -------------------------------------------------------------------------


@role_page()
def benchmark_index(request: HttpRequest) -> HttpResponse:
    """Sweeps (newest first, with status and progress), the most recent runs, and the import
    form for SGLang ``bench_serving`` JSONL and vLLM ``bench serve`` JSON files."""
    return render(request, "benchmarks/index.html", _index_context(request, import_errors={}))


def _index_context(request: HttpRequest, *, import_errors: dict[str, list[str]]) -> dict[str, Any]:
    sweeps = list(BenchmarkSweep.objects.select_related("deployment", "deployment__recipe", "created_by")[:100])
    recent = BenchmarkRun.objects.select_related("sweep").order_by("-created_at", "-id")[:INDEX_RECENT_RUNS]
    ready = Deployment.objects.filter(status=DeploymentStatus.READY).select_related("recipe")[:20]
    return {"sweeps": sweeps, "runs": [run_row(r) for r in recent], "ready_deployments": list(ready),
            "can_write": _can_write(request), "import_errors": import_errors}


@role_page()
@require_POST
def run_import_view(request: HttpRequest) -> HttpResponse:
    """Import an uploaded result file (field ``file``) as runs that keep the original; redirect
    to the single run, or to the index listing them. Errors name the line and key and are shown
    on the index page with status 400."""
    upload = request.FILES.get("file")
    errors: dict[str, list[str]] = {}
    if upload is None:
        errors = {"file": ["Choose a result file to import."]}
    elif upload.size > IMPORT_MAX_BYTES:
        errors = {"file": [f"The file is {upload.size} bytes; the limit is {IMPORT_MAX_BYTES} bytes."]}
    else:
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            errors = {"file": ["The file is not UTF-8 text."]}
        else:
            try:
                runs = services.run_import(text=text, filename=upload.name or "", user=request.user)
            except InvalidInput as exc:
                errors = exc.errors
            else:
                messages.success(request, f"Imported {len(runs)} run{'s' if len(runs) != 1 else ''} "
                                          f"from {upload.name}.")
                if len(runs) == 1:
                    return redirect("benchmarks:run-detail", pk=runs[0].pk)
                ids = ",".join(str(r.pk) for r in runs)
                return redirect(reverse("benchmarks:compare") + f"?runs={ids}")
    return render(request, "benchmarks/index.html", _index_context(request, import_errors=errors), status=400)


# --- sweep form -------------------------------------------------------------------------------


def _int_list(raw: str, field: str, errors: dict[str, list[str]], *, positive: bool = True) -> list[int]:
    out: list[int] = []
    for part in raw.replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or (positive and int(part) <= 0):
            errors.setdefault(field, []).append(f"'{part}' is not a positive whole number.")
            continue
        out.append(int(part))
    return out


def _float_list(raw: str, field: str, errors: dict[str, list[str]]) -> list[float]:
    out: list[float] = []
    for part in raw.replace(" ", "").split(","):
        if not part:
            continue
        value = _opt_float(part)
        if value is None or value <= 0:
            errors.setdefault(field, []).append(f"'{part}' is not a positive number.")
            continue
        out.append(value)
    return out


def _length_pairs(raw: str, errors: dict[str, list[str]]) -> list[list[int]]:
    pairs: list[list[int]] = []
    for part in raw.replace(" ", "").split(","):
        if not part:
            continue
        a, sep, b = part.partition(":")
        if not sep or not a.isdigit() or not b.isdigit() or int(a) <= 0 or int(b) <= 0:
            errors.setdefault("lengths", []).append(f"'{part}' is not input:output, e.g. 256:256.")
            continue
        pairs.append([int(a), int(b)])
    return pairs


def _ms_to_s(raw: str, field: str, errors: dict[str, list[str]]) -> float | None:
    raw = raw.strip()
    if not raw:
        return None
    value = _opt_float(raw)
    if value is None or value <= 0:
        errors.setdefault(field, []).append("must be a positive number of milliseconds.")
        return None
    return value / 1e3


def sweep_grid_from_form(data: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The grid dict :func:`benchmarks.services.sweep_create` takes, from the form's text fields.

    Fields: ``concurrency`` ("1,8,16"), ``lengths`` ("256:256, 1024:128"), ``requests`` (per point;
    blank leaves the service's default of a few requests per concurrency slot),
    ``rates`` (optional requests/s list, open loop), ``slo_ttft_ms`` / ``slo_tpot_ms`` /
    ``slo_e2e_ms`` (optional, ms in the form, seconds in the grid as the summary uses). Returns
    ``(grid, errors)``; the service validates the grid again and its errors win.
    """
    errors: dict[str, list[str]] = {}
    grid: dict[str, Any] = {
        "concurrency": _int_list(data.get("concurrency", ""), "concurrency", errors),
        "lengths": _length_pairs(data.get("lengths", ""), errors),
    }
    rates = _float_list(data.get("rates", ""), "rates", errors)
    if rates:
        grid["request_rates"] = rates
    requests = data.get("requests", "").strip()
    if requests:
        if requests.isdigit() and int(requests) > 0:
            grid["requests"] = int(requests)
        else:
            errors.setdefault("requests", []).append("must be a positive whole number.")
    slo = {k: _ms_to_s(data.get(f"slo_{k}_ms", ""), f"slo_{k}_ms", errors) for k in ("ttft", "tpot", "e2e")}
    if any(v is not None for v in slo.values()):
        grid["slo"] = {f"{k}_s": v for k, v in slo.items() if v is not None}
    if not grid["concurrency"] and not rates and "concurrency" not in errors:
        errors["concurrency"] = ["Give at least one concurrency (or a request rate)."]
    if not grid["lengths"] and "lengths" not in errors:
        errors["lengths"] = ["Give at least one input:output length pair."]
    return grid, errors


# Service error paths that name a grid key, mapped to the form field showing them.
_GRID_FIELD = {"concurrency": "concurrency", "concurrencies": "concurrency", "lengths": "lengths",
               "request_rates": "rates", "rates": "rates", "requests_per_concurrency": "requests",
               "requests": "requests",
               "slo.ttft_s": "slo_ttft_ms", "slo.tpot_s": "slo_tpot_ms", "slo.e2e_s": "slo_e2e_ms"}


def _field_errors(errors: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, msgs in errors.items():
        key = str(path).removeprefix("grid.")
        field = _GRID_FIELD.get(key) or _GRID_FIELD.get(key.split(".")[0]) or "detail"
        if field == "detail" and key not in ("detail", "__all__", "non_field_errors"):
            msgs = [f"{key}: {m}" for m in msgs]
        out.setdefault(field, []).extend(str(m) for m in msgs)
    return out


@role_page(read="operator")
def sweep_create_view(request: HttpRequest) -> HttpResponse:
    """Operator form for a new sweep of one ready deployment (``?deployment=<id>``): concurrency
    list, length pairs, requests per point, optional rates and SLOs. POST calls
    :func:`benchmarks.services.sweep_create` and redirects to the sweep page."""
    raw_id = request.POST.get("deployment") or request.GET.get("deployment") or ""
    if not raw_id.isdigit():
        raise Http404("Choose a deployment to sweep.")
    deployment = get_object_or_404(Deployment.objects.select_related("recipe", "node"), pk=int(raw_id))
    defaults = {"concurrency": "1,8,16", "lengths": "256:256", "requests": "", "rates": "",
                "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": ""}
    errors: dict[str, list[str]] = {}
    values = dict(defaults)
    status = 200
    if request.method == "POST":
        values = {k: request.POST.get(k, "").strip() for k in defaults}
        grid, errors = sweep_grid_from_form(values)
        if not errors:
            try:
                sweep = services.sweep_create(deployment=deployment, user=request.user, grid=grid)
            except InvalidInput as exc:
                errors = _field_errors(exc.errors)
            except Conflict as exc:
                errors = {"detail": [str(exc)]}
            else:
                messages.success(request, f"Sweep #{sweep.pk} queued.")
                return redirect("benchmarks:sweep-detail", pk=sweep.pk)
        status = 400
    return render(request, "benchmarks/sweep_form.html", {
        "deployment": deployment, "values": values, "errors": errors,
        "ready": deployment.status == DeploymentStatus.READY,
    }, status=status)


# --- sweep page -------------------------------------------------------------------------------


def _get_sweep(pk: int) -> BenchmarkSweep:
    return get_object_or_404(
        BenchmarkSweep.objects.select_related("deployment", "deployment__recipe", "deployment__node", "created_by"),
        pk=pk,
    )


def _sweep_runs(sweep: BenchmarkSweep) -> list[BenchmarkRun]:
    return list(sweep.runs.select_related("sweep").order_by("ordinal", "id"))


def sweep_progress(sweep: BenchmarkSweep) -> dict[str, Any]:
    """Progress of a sweep for the live partial: ``points_done``/``points_total``,
    ``requests_done``/``requests_total`` (counts), ``percent`` (0-100 of requests, or of points
    when the request total is unknown), ``current_tok_s`` (tok/s of the running point, None when
    none), ``active`` (still moving), ``current_point`` (e.g. ``c=8 256/256``)."""
    if sweep.requests_total:
        percent = 100.0 * sweep.requests_done / sweep.requests_total
    elif sweep.points_total:
        percent = 100.0 * sweep.points_done / sweep.points_total
    else:
        percent = 0.0
    active = sweep.status in SWEEP_ACTIVE
    return {
        "points_done": sweep.points_done, "points_total": sweep.points_total,
        "requests_done": sweep.requests_done, "requests_total": sweep.requests_total,
        "percent": round(min(percent, 100.0), 1),
        "current_tok_s": sweep.current_tok_s if sweep.status == SweepStatus.RUNNING else None,
        "current_point": sweep.current_point if sweep.status == SweepStatus.RUNNING else "",
        "active": active,
    }


def _status_class(status: str) -> str:
    return {"done": "ok", "failed": "bad", "cancelled": "warn", "running": "", "waiting": "warn"}.get(status, "")


def _sweep_results_context(sweep: BenchmarkSweep) -> dict[str, Any]:
    runs = _sweep_runs(sweep)
    rows = [run_row(r) for r in runs]
    analysis: Mapping[str, Any] = sweep.analysis or {}
    findings = analysis.get("findings") if isinstance(analysis, Mapping) else None
    errors = analysis.get("errors") if isinstance(analysis, Mapping) else None
    return {
        "sweep": sweep, "rows": rows, "charts": sweep_charts([r for r in rows if r["run"].status == RunStatus.DONE]),
        "findings": [str(f) for f in findings or []],
        "analysis_errors": [f"{k}: {v}" for k, v in errors.items()] if isinstance(errors, Mapping) else [],
        "analysis_notes": [str(n) for n in (analysis.get("notes") or [])] if isinstance(analysis, Mapping) else [],
        "points_done": sweep.points_done,
    }


@role_page()
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One sweep: status, live progress (polled every 1 s while active), results table,
    charts, ceiling findings, the snapshot (collapsed), export links and the cancel button."""
    sweep = _get_sweep(pk)
    context = _sweep_results_context(sweep)
    context.update({
        "progress": sweep_progress(sweep), "status_class": _status_class(sweep.status),
        "can_write": _can_write(request), "terminal": sweep.status in SWEEP_TERMINAL,
        "snapshot_text": _json_text(sweep.snapshot) if sweep.snapshot else "",
        "grid_text": _json_text(sweep.grid) if sweep.grid else "",
    })
    return render(request, "benchmarks/sweep_detail.html", context)


@role_page()
def sweep_progress_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: the status line and progress bar. The request carries ``points`` (points
    done when the page last drew its results); when that changed, the response fires
    ``sweep-points-changed`` so the results section reloads. A terminal sweep's partial has no
    poll trigger, which ends the polling."""
    sweep = _get_sweep(pk)
    context = {"sweep": sweep, "progress": sweep_progress(sweep), "status_class": _status_class(sweep.status),
               "can_write": _can_write(request), "terminal": sweep.status in SWEEP_TERMINAL}
    response = render(request, "benchmarks/_sweep_progress.html", context)
    known = request.GET.get("points", "")
    if known != str(sweep.points_done) or sweep.status in SWEEP_TERMINAL:
        response["HX-Trigger"] = "sweep-points-changed"
    return response


@role_page()
def sweep_results_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: results table, charts and findings, reloaded when a point finishes."""
    sweep = _get_sweep(pk)
    return render(request, "benchmarks/_sweep_results.html", _sweep_results_context(sweep))


@role_page()
@require_POST
def sweep_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Request cancellation (operator); the worker stops between points or at the next progress
    tick. A sweep that already ended answers with a message, not an error page."""
    sweep = _get_sweep(pk)
    try:
        services.sweep_cancel(sweep=sweep, user=request.user)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancellation of sweep #{sweep.pk} requested.")
    return redirect("benchmarks:sweep-detail", pk=sweep.pk)


def _download(body: str | bytes, *, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


_EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def _export_body(value: Any) -> str | bytes:
    return value if isinstance(value, (str, bytes)) else json.dumps(value, indent=2, default=str)


@role_page()
def sweep_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """Download the sweep's runs as CSV (one row per run) or JSON (sweep, grid, runs, analysis)."""
    if fmt not in _EXPORT_TYPES:
        raise Http404("export format is csv or json")
    sweep = _get_sweep(pk)
    body = services.sweep_export_csv(sweep=sweep) if fmt == "csv" else services.sweep_export_json(sweep=sweep)
    return _download(_export_body(body), content_type=_EXPORT_TYPES[fmt], filename=f"sweep-{sweep.pk}.{fmt}")


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
        "extra": _extra_facts(summary),
        "latencies": LATENCIES,
    })


def _extra_facts(s: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """Further measured facts for the run page: ``(label, value, unit)``; value None = "—"."""
    facts = [
        ("Duration", _first(s, "duration_s"), "s"),
        ("Total token throughput", _first(s, "total_token_throughput_tok_s"), "tok/s"),
        ("Achieved concurrency (mean)", _first(s, "achieved_concurrency_mean"), "requests"),
        ("Achieved concurrency (max)", _first(s, "achieved_concurrency_max"), "requests"),
        ("Achieved request rate", _first(s, "achieved_rate_req_s"), "req/s"),
        ("Output tokens (mean per request)", _first(s, "output_tokens_mean", "mean_output_tokens"), "tokens"),
        ("Input tokens (mean per request)", _first(s, "input_tokens_actual_mean", "mean_input_tokens"), "tokens"),
        ("Server output throughput", _first(s, "server_output_throughput_tok_s"), "tok/s"),
        ("Client CPU per event", _first(s, "client_cpu_us_per_event"), "µs"),
    ]
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
    per sweep, TTFT CDFs per run where records exist). Unknown ids are 404."""
    run_ids = _ids_param(request, "runs")
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
    when it ranked none), ``refusals`` (the service's notes: length-mismatched runs not ranked,
    mixed lengths), ``unranked_ids`` (run ids left out of ranking) and the overlay ``charts``.
    """
    rows = [run_row(r) for r in runs]
    entries = list(comparison.get("runs") or [])
    differing = {d["field"] for d in comparison.get("config_differs") or []}
    config_keys = list(entries[0]["config"].keys()) if entries else []
    config_rows = [{"field": key, "values": [e["config"].get(key) for e in entries], "differs": key in differing}
                   for key in config_keys]
    index_of = {e["id"]: i for i, e in enumerate(entries)}
    best = comparison.get("best") or {}
    metric_rows = []
    for f in comparison.get("fields") or []:
        winner = best.get(f["key"])
        metric_rows.append({"key": f["key"], "label": f["label"], "unit": f["unit"], "values": f["values"],
                            "best": index_of.get(winner) if winner is not None else None})
    return {
        "rows": rows, "config_rows": config_rows, "metric_rows": metric_rows,
        "refusals": [str(n) for n in comparison.get("notes") or []],
        "unranked_ids": {e["id"] for e in entries if not e.get("rankable", True)},
        "charts": _compare_charts(runs, rows),
    }


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

