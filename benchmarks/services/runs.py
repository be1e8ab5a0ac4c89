"""Runs: their per-request records, headline metrics, side-by-side comparison, CSV/JSON export,
and the import of other harnesses' result files.

Rules and where they come from:

* Per-request records are files (``VAR_DIR/benchmarks/run-<id>.npz``), never database rows.
* A run with ``output_length_mismatch`` (or variable or unknown lengths) is never ranked silently
  against fixed-length runs (:func:`runs_compare`, case C10).
* A run that is not a measurement (failed, cancelled, unfinished, or without one successful
  request) is never ranked at all: its numbers describe a deployment that went down or a point
  that did not run (:func:`runs_compare`).
* An imported file is kept byte for byte with its SHA-256; importing the same content again is
  refused (409) unless asked for, because two copies of one result would count twice in every
  comparison (:func:`run_import`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from benchmarks.choices import RunSource, RunStatus
from benchmarks.importers import import_results
from benchmarks.loadgen import RecordStore
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import summary_point
from controlplane.csvsafe import csv_text
from controlplane.errors import Conflict, InvalidInput
from controlplane.jsonsafe import json_safe

# Flags that make a run's numbers not comparable with a fixed-length run (metrics.md).
LENGTH_FLAGS = ("output_length_mismatch", "variable_lengths", "lengths_unknown")
# Summary keys compared side by side (key path, label, unit).
COMPARE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("output_throughput_tok_s", "output throughput", "tok/s"),
    ("tok_s_per_gpu", "output throughput per GPU", "tok/s"),
    ("request_throughput_req_s", "request throughput", "req/s"),
    ("goodput_req_s", "goodput", "req/s"),
    ("ttft_ms.mean", "TTFT mean", "ms"), ("ttft_ms.p50", "TTFT p50", "ms"), ("ttft_ms.p99", "TTFT p99", "ms"),
    ("tpot_ms.mean", "TPOT mean", "ms"), ("tpot_ms.p99", "TPOT p99", "ms"),
    ("itl_ms.mean", "ITL mean", "ms"), ("itl_ms.p99", "ITL p99", "ms"),
    ("e2e_ms.mean", "E2E mean", "ms"), ("e2e_ms.p50", "E2E p50", "ms"), ("e2e_ms.p99", "E2E p99", "ms"),
    ("failures", "failures", "requests"),
)
# The metrics :func:`runs_compare` names a best run for (key path, whether higher is better).
BEST_METRICS: tuple[tuple[str, bool], ...] = (
    ("output_throughput_tok_s", True), ("tok_s_per_gpu", True), ("ttft_ms.p99", False), ("tpot_ms.mean", False))




def records_dir() -> Path:
    """``VAR_DIR/benchmarks/`` (created): where per-request record files live."""
    path = Path(settings.VAR_DIR) / "benchmarks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _store_summary(run: BenchmarkRun, summary: dict[str, Any]) -> None:
    """Copy the summary and its sortable scalars onto ``run`` (not saved)."""
    summary = json_safe(summary)
    run.summary = summary
    flags = summary.get("flags") or {}
    run.flags = sorted(k for k, v in flags.items() if v) if isinstance(flags, dict) else list(flags)
    p = summary_point(summary=summary, concurrency=run.concurrency, request_rate=run.request_rate,
                      input_len=run.input_len, output_len=run.output_len, num_gpus=run.num_gpus, flags=run.flags)
    run.output_tok_s = p["output_throughput_tok_s"]
    run.request_rate_achieved = p["request_throughput"]
    run.ttft_p99_ms = (p["ttft_ms"] or {}).get("p99")
    run.tpot_mean_ms = (p["tpot_ms"] or {}).get("mean")


# ---------------------------------------------------------------------------------------- read


def run_records(*, run: BenchmarkRun) -> RecordStore:
    """The per-request records of a measured run, loaded from its ``.npz`` file.

    Raises :class:`InvalidInput` for an imported run (its per-request data, if any, is only in the
    kept original file) or a run whose file is missing."""
    if not run.records_path:
        raise InvalidInput({"records": [f"run #{run.pk} has no per-request records"
                                        + (" (imported: see its original file)" if run.source == RunSource.IMPORTED else "")]})
    path = Path(run.records_path)
    if not path.exists():
        raise InvalidInput({"records": [f"the record file of run #{run.pk} is missing ({path.name})"]})
    return RecordStore.load(path)


def run_records_rows(*, run: BenchmarkRun, offset: int = 0, limit: int = 1000) -> dict[str, Any]:
    """Per-request rows of ``run`` as JSON-ready dicts, ``limit`` at most from ``offset``.

    Each row: ``index`` (dataset position), ``ok``, ``http_status``, ``input_tokens``,
    ``output_tokens``, ``requested_input``/``requested_output``, ``ttft_ms``, ``e2e_ms``,
    ``tpot_ms`` (None when undefined), ``events``, ``finish_reason``, ``error``, ``start_ms``
    (relative to the first request). Returns ``{"count", "offset", "limit", "rows"}``.
    """
    rec = run_records(run=run)
    n = len(rec)
    cols = {c: rec.column(c) for c in ("index", "start", "first", "last", "output_tokens", "input_tokens",
                                       "requested_input", "requested_output", "http_status", "ok", "ev_len")}
    t0 = int(cols["start"].min()) if n else 0
    rows = []
    for i in range(offset, min(n, offset + limit)):
        ok = bool(cols["ok"][i])
        start = int(cols["start"][i])
        ttft = (int(cols["first"][i]) - start) / 1e6 if ok else None
        e2e = (int(cols["last"][i]) - start) / 1e6 if ok else None
        out = int(cols["output_tokens"][i])
        rows.append({
            "index": int(cols["index"][i]), "ok": ok, "http_status": int(cols["http_status"][i]),
            "input_tokens": int(cols["input_tokens"][i]), "output_tokens": out,
            "requested_input": int(cols["requested_input"][i]), "requested_output": int(cols["requested_output"][i]),
            "start_ms": (start - t0) / 1e6, "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": (e2e - ttft) / (out - 1) if ok and out >= 2 else None, "events": int(cols["ev_len"][i]),
            "finish_reason": rec.finish_reason(i), "error": rec.errors.get(i),
        })
    return {"count": n, "offset": offset, "limit": limit, "rows": rows}


def _path(d: Mapping[str, Any], key: str) -> Any:
    cur: Any = d
    for part in key.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def run_metrics(*, run: BenchmarkRun) -> dict[str, Any]:
    """The run's headline numbers in one vocabulary (latencies ms, throughputs per second) for
    tables, comparison and export, whether measured or imported: the keys of
    :data:`COMPARE_FIELDS` plus ``successes``, ``requests``, ``input_tokens_mean``,
    ``output_tokens_mean``, ``duration_s``, ``slo_attainment``, ``errors`` (reason → count)."""
    s = run.summary or {}
    p = summary_point(summary=s, concurrency=run.concurrency, request_rate=run.request_rate, input_len=run.input_len,
                      output_len=run.output_len, num_gpus=run.num_gpus, flags=run.flags)
    tok = p["output_throughput_tok_s"]
    return {
        "output_throughput_tok_s": tok,
        "tok_s_per_gpu": tok / run.num_gpus if tok is not None and run.num_gpus else None,
        "request_throughput_req_s": p["request_throughput"],
        "goodput_req_s": s.get("goodput_req_s"),
        "slo_attainment": s.get("slo_attainment"),
        "ttft_ms": p["ttft_ms"], "tpot_ms": p["tpot_ms"], "itl_ms": p["itl_ms"], "e2e_ms": p["e2e_ms"],
        "requests": s.get("requests"), "successes": p["completed"], "failures": p["failed"],
        "input_tokens_mean": s.get("input_tokens_actual_mean", s.get("mean_input_tokens")),
        "output_tokens_mean": s.get("output_tokens_mean", s.get("mean_output_tokens")),
        "duration_s": s.get("duration_s"), "errors": s.get("errors") or {},
    }


def _config_fields(run: BenchmarkRun) -> dict[str, Any]:
    snap = run.snapshot or {}
    spec = snap.get("spec") or {}
    return {
        "source": run.source, "import_format": run.import_format or None,
        "served_model_name": run.served_model_name or None, "engine": snap.get("engine"),
        "topology": snap.get("topology"), "recipe": snap.get("recipe"), "recipe_version": snap.get("recipe_version"),
        "node": (snap.get("node") or {}).get("name"), "num_gpus": run.num_gpus, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "api": run.api or None,
        "sim_profile": (spec.get("sim") or {}).get("profile"),
        "engine_version": (snap.get("engine_version")
                           or ((snap.get("server_info") or {}).get("entry") or {}).get("version")),
        "router_version": snap.get("router_version"),
        "ceiling_version": snap.get("ceiling_version"),
        "roles": spec.get("roles") or None,
        "env": spec.get("env") or None,
    }


def run_not_measured(*, run: BenchmarkRun, metrics: Mapping[str, Any] | None = None) -> str | None:
    """Why ``run`` holds no measurement to rank, or None when it does: not done (``it failed
    (<its reason>)``, ``it was cancelled``, ``it has not finished``), no successful request
    (``none of its 96 requests succeeded``), or no output throughput at all. ``metrics``:
    :func:`run_metrics` of the run when the caller has it."""
    if run.status != RunStatus.DONE:
        why = {RunStatus.FAILED: "it failed", RunStatus.CANCELLED: "it was cancelled"}.get(
            run.status, f"it has not finished (status {run.status})")
        reason = (run.reason or "").strip()
        return why + (f" ({reason[:300]}{'…' if len(reason) > 300 else ''})" if reason else "")
    m = metrics if metrics is not None else run_metrics(run=run)
    if m.get("successes") == 0:
        n = m.get("requests")
        return f"none of its {n} requests succeeded" if isinstance(n, int) else "none of its requests succeeded"
    if m.get("output_throughput_tok_s") is None:
        return "it has no measured output throughput"
    return None


def runs_compare(*, runs: list[BenchmarkRun]) -> dict[str, Any]:
    """Side-by-side comparison of ``runs`` (any sweeps, measured or imported).

    Returns ``{"runs": [{"id", "label", "sweep_id", "status", "flags", "metrics", "config",
    "rankable", "refusal", "measured"}], "fields": [{"key", "label", "unit", "values": [...]}],
    "config_differs": [{"field", "values": [...]}], "best": {"output_throughput_tok_s": run id | None, ...},
    "excluded": [{"id", "reason"}], "notes": [...]}``.

    Two kinds of run are shown but never ranked, each with ``rankable`` false and its
    ``refusal`` (also in ``notes``): a run that holds no measurement (:func:`run_not_measured`:
    failed, cancelled, unfinished, no successful request; ``measured`` false, listed in
    ``excluded`` with the reason, and its values in ``fields`` are null except ``failures``, so no
    partial number from a deployment that went down reads as a result; its own ``metrics`` keep
    what was recorded), and a run flagged ``output_length_mismatch`` (or with variable or unknown
    lengths), which is not ranked against fixed-length runs (case C10). ``best`` names, for each
    of :data:`BEST_METRICS`, the best of the rankable runs with a value for it (the only one, when
    one run is rankable, with a note saying so); null, with a note saying why, when no run is
    rankable, when the rankable runs have different lengths, or when none has that metric.
    ``config`` holds ``roles`` and ``env`` (the recipe's ``spec.roles`` and ``spec.env``) as
    objects. Raises :class:`InvalidInput` for fewer than 2 runs.
    """
    if len(runs) < 2:
        raise InvalidInput({"ids": ["give at least two runs to compare"]})
    entries = []
    notes: list[str] = []
    excluded: list[dict[str, Any]] = []
    for run in runs:
        metrics = run_metrics(run=run)
        length_flags = [f for f in run.flags if f in LENGTH_FLAGS]
        if run.input_len is None or run.output_len is None:
            length_flags = length_flags or ["lengths_unknown"]
        unmeasured = run_not_measured(run=run, metrics=metrics)
        refusal = None
        if unmeasured:
            refusal = f"run #{run.pk} is not ranked: {unmeasured}"
            excluded.append({"id": run.pk, "reason": unmeasured})
            notes.append(refusal)
        elif length_flags:
            refusal = (f"run #{run.pk} is not ranked: {', '.join(length_flags)} — its requests did not all have the "
                       f"requested fixed lengths, so its tok/s and latencies are not comparable with fixed-length runs")
            notes.append(refusal)
        entries.append({"id": run.pk, "label": run.label, "sweep_id": run.sweep_id, "status": run.status,
                        "flags": list(run.flags), "metrics": metrics, "config": _config_fields(run),
                        "rankable": refusal is None, "refusal": refusal, "measured": unmeasured is None})
    fields = [{"key": key, "label": label, "unit": unit,
               "values": [_path(e["metrics"], key) if e["measured"] or key == "failures" else None for e in entries]}
              for key, label, unit in COMPARE_FIELDS]
    config_keys = list(entries[0]["config"].keys())
    differs = [{"field": k, "values": [e["config"][k] for e in entries]} for k in config_keys
               if len({json.dumps(e["config"][k], sort_keys=True) for e in entries}) > 1]
    rankable = [e for e in entries if e["rankable"]]
    lengths = {(e["config"]["input_len"], e["config"]["output_len"]) for e in rankable}
    best: dict[str, int | None] = {}
    if not rankable:
        notes.append("no run is rankable; no best run is named")
    elif len(lengths) > 1:
        notes.append("the rankable runs have different input/output lengths "
                     f"({', '.join(f'{a}/{b}' for a, b in sorted(lengths))}); no best run is named")
    elif len(rankable) == 1:
        notes.append(f"run #{rankable[0]['id']} is the only rankable run: it is named best with no other "
                     "run to rank it against")
    for key, higher_better in BEST_METRICS:
        vals = [(_path(e["metrics"], key), e["id"]) for e in rankable if _path(e["metrics"], key) is not None]
        if len(lengths) > 1 or not vals:
            if rankable and len(lengths) == 1:
                notes.append(f"no rankable run has a value for {key}; no best run is named for it")
            best[key] = None
            continue
        best[key] = (max(vals) if higher_better else min(vals))[1]
    return {"runs": entries, "fields": fields, "config_differs": differs, "best": best, "excluded": excluded,
            "notes": notes}


# ---------------------------------------------------------------------------------------- export

EXPORT_COLUMNS = (
    "run_id", "sweep_id", "source", "status", "served_model_name", "concurrency", "request_rate", "input_len",
    "output_len", "num_requests", "num_gpus", "requests", "successes", "failures", "duration_s",
    "output_throughput_tok_s", "tok_s_per_gpu", "request_throughput_req_s", "goodput_req_s",
    "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90",
    "tpot_ms_p99", "itl_ms_mean", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "e2e_ms_mean", "e2e_ms_p50",
    "e2e_ms_p90", "e2e_ms_p99", "input_tokens_mean", "output_tokens_mean", "flags",
)


def _export_row(run: BenchmarkRun) -> dict[str, Any]:
    m = run_metrics(run=run)
    row: dict[str, Any] = {
        "run_id": run.pk, "sweep_id": run.sweep_id, "source": run.source, "status": run.status,
        "served_model_name": run.served_model_name, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "num_gpus": run.num_gpus, "flags": ";".join(run.flags),
    }
    for key in ("requests", "successes", "failures", "duration_s", "output_throughput_tok_s", "tok_s_per_gpu",
                "request_throughput_req_s", "goodput_req_s", "input_tokens_mean", "output_tokens_mean"):
        row[key] = m[key]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for stat in ("mean", "p50", "p90", "p99"):
            row[f"{metric}_ms_{stat}"] = (m[f"{metric}_ms"] or {}).get(stat)
    return row


def _csv(runs: Iterable[BenchmarkRun]) -> str:
    """``runs`` as CSV (:data:`EXPORT_COLUMNS`) through :func:`controlplane.csvsafe.csv_text`: a
    text cell a spreadsheet would read as a formula (a model name starting with ``=``) is quoted."""
    return csv_text((_export_row(run) for run in runs), EXPORT_COLUMNS)


def run_export_dict(*, run: BenchmarkRun) -> dict[str, Any]:
    """One run as a JSON-ready dict: point parameters, the full summary, flags, metrics
    (:func:`run_metrics`), snapshot, source and timestamps (not the original imported file)."""
    return {
        "id": run.pk, "sweep_id": run.sweep_id, "ordinal": run.ordinal, "status": run.status, "reason": run.reason,
        "source": run.source, "import_format": run.import_format or None,
        "original_filename": run.original_filename or None, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "api": run.api or None, "served_model_name": run.served_model_name,
        "num_gpus": run.num_gpus, "flags": list(run.flags), "metrics": run_metrics(run=run), "summary": run.summary,
        "snapshot": run.snapshot, "started_at": _iso(run.started_at), "ended_at": _iso(run.ended_at),
    }


def _iso(dt) -> str | None:
    return dt.isoformat() if dt else None


def run_export_csv(*, run: BenchmarkRun) -> str:
    """The run as CSV: a header of :data:`EXPORT_COLUMNS` (latencies ms, throughputs per second)
    and one row; empty cells for absent values."""
    return _csv([run])


def run_export_json(*, run: BenchmarkRun) -> str:
    """The run as indented JSON (:func:`run_export_dict`)."""
    return json.dumps(run_export_dict(run=run), indent=2, default=str)


def sweep_export_csv(*, sweep: BenchmarkSweep) -> str:
    """The sweep's runs as CSV, one row per run in grid order (columns: :data:`EXPORT_COLUMNS`)."""
    return _csv(sweep.runs.all())


def sweep_export_json(*, sweep: BenchmarkSweep) -> str:
    """The sweep as indented JSON: ``{"sweep": {...grid, status, progress, snapshot, num_gpus},
    "analysis": {...}, "runs": [run_export_dict, ...]}``."""
    body = {
        "sweep": {"id": sweep.pk, "name": sweep.name, "deployment_id": sweep.deployment_id, "status": sweep.status,
                  "reason": sweep.reason, "grid": sweep.grid, "num_gpus": sweep.num_gpus,
                  "served_model_name": sweep.served_model_name, "topology": sweep.topology, "engine": sweep.engine,
                  "points_total": sweep.points_total, "points_done": sweep.points_done,
                  "snapshot": sweep.snapshot, "started_at": _iso(sweep.started_at), "ended_at": _iso(sweep.ended_at)},
        "analysis": sweep.analysis or None,
        "runs": [run_export_dict(run=r) for r in sweep.runs.all()],
    }
    return json.dumps(body, indent=2, default=str)


# ---------------------------------------------------------------------------------------- import

MAX_IMPORT_BYTES = 16 * 1024 * 1024


def run_import(*, text: str, filename: str, user, allow_duplicate: bool = False) -> list[BenchmarkRun]:
    """Import a SGLang ``bench_serving`` JSONL or vLLM ``bench serve`` JSON file as runs.

    One :class:`BenchmarkRun` per run in the file (``source`` imported, status done), each keeping
    the whole original file (``original_text``), ``filename`` and the SHA-256 of the file's UTF-8
    bytes (``original_sha256``); the summary holds the importer's fields
    (:class:`benchmarks.importers.ImportedRun`) plus the measured-run keys (``successes``,
    ``failures``, ``output_throughput_tok_s``, ``goodput_req_s``, ``input_tokens_actual_mean`` ...);
    values absent from the file stay null. Lengths are set only when every request had the same
    length. Raises :class:`InvalidInput` naming the line and key for a malformed file, and
    :class:`Conflict` (HTTP 409) naming the runs already imported from a file with the same
    content (:func:`run_import_duplicates`) unless ``allow_duplicate``: two copies of one result
    would count twice in every comparison. Nothing is stored when it raises.
    """
    if len(text.encode()) > MAX_IMPORT_BYTES:
        raise InvalidInput({"file": [f"larger than {MAX_IMPORT_BYTES} bytes"]})
    digest = import_digest(text=text)
    if not allow_duplicate:
        existing = run_import_duplicates(digest=digest)
        if existing:
            raise Conflict(import_duplicate_message(runs=existing, digest=digest))
    imported = import_results(text)
    created = []
    with transaction.atomic():
        for item in imported:
            point = item.as_sweep_point()
            d = item.as_dict()
            summary = {
                **d,
                "requests": (item.completed or 0) + (item.failed or 0) if item.completed is not None else None,
                "successes": item.completed, "failures": item.failed, "duration_s": item.duration_s,
                "request_throughput_req_s": item.request_throughput_req_s,
                "goodput_req_s": item.request_goodput_req_s,
                "input_tokens_actual_mean": item.mean_input_tokens, "output_tokens_mean": item.mean_output_tokens,
                "flags": {f: True for f in point.flags},
            }
            run = BenchmarkRun(
                status=RunStatus.DONE, source=RunSource.IMPORTED, import_format=item.source_format,
                original_filename=(filename or "")[:255], original_text=text, original_sha256=digest,
                source_line=item.source_line,
                concurrency=item.concurrency, request_rate=item.request_rate_req_s,
                input_len=point.input_len, output_len=point.output_len, num_requests=item.num_prompts,
                api=item.backend or "", served_model_name=item.model_id or "",
                created_by=user if getattr(user, "pk", None) else None, ended_at=timezone.now(),
            )
            _store_summary(run, summary)
            run.save()
            created.append(run)
    return created


def import_digest(*, text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: for an uploaded UTF-8 file, the hash of the file
    itself (decoding and re-encoding valid UTF-8 gives back the same bytes)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_import_duplicates(*, digest: str) -> list[BenchmarkRun]:
    """Imported runs whose original file has SHA-256 ``digest``, oldest first (empty if none)."""
    return list(BenchmarkRun.objects.filter(source=RunSource.IMPORTED, original_sha256=digest).order_by("id"))


def import_duplicate_message(*, runs: list[BenchmarkRun], digest: str) -> str:
    """The refusal of a duplicate import, naming the runs the file became (ids, file name, when),
    the hash, and how to import it anyway."""
    first = runs[0]
    ids = ", ".join(f"#{r.pk}" for r in runs[:10]) + (f" and {len(runs) - 10} more" if len(runs) > 10 else "")
    when = first.created_at.strftime("%Y-%m-%d %H:%M UTC") if first.created_at else "earlier"
    name = f" ({first.original_filename})" if first.original_filename else ""
    return (f"this file was already imported as run{'s' if len(runs) > 1 else ''} {ids}{name} on {when} "
            f"(same content, SHA-256 {digest[:12]}…); set allow_duplicate to import it again")


