"""Runs: their per-request records, headline metrics, side-by-side comparison, CSV/JSON export,
and the import of other harnesses' result files.

Rules and where they come from:

* Per-request records are files (``VAR_DIR/benchmarks/run-<id>.npz``), never database rows.
* A run with ``output_length_mismatch`` (or variable or unknown lengths) is never ranked silently
  against fixed-length runs (:func:`runs_compare`, case C10). Runs whose lengths were drawn at
  random from the same ranges (:func:`run_length_setting`) are ranked against each other; a run
  whose lengths are not recorded is ranked against none.
* A run that is not a measurement (failed, cancelled, unfinished, or without one successful
  request) is never ranked at all: its numbers describe a deployment that went down or a point
  that did not run (:func:`runs_compare`).
* Goodput counts the requests that met the run's own SLO, so goodput of runs with different SLOs is
  not comparable: the SLO is part of the compared configuration and the comparison says so
  (:func:`runs_compare`).
* A run whose time overlapped a run of another sweep on a deployment sharing its CPUs or GPUs on
  the same node (flag ``shared_load``) measured that load too: it is shown but never ranked
  (:func:`runs_compare`), and the ceiling analysis leaves it out.
* No best run is named from a difference within run-to-run noise (:data:`COMPARE_TIE_PCT`).
* A run whose TTFT/TPOT/ITL the client could not time (output events that came in batches,
  ``itl_coalesced``; a load generator busy on CPU, ``client_cpu_bound``) is named in a note and left
  out of the best for those metrics (:data:`METRIC_CAVEAT_FLAGS`, :func:`runs_compare`).
* An imported file is kept byte for byte with its SHA-256. Each of its runs is recognised by its
  record read as JSON (:func:`benchmarks.importers.record_digest`): a run already imported, from
  this file or any other, is skipped and named, and a file with no new run is refused (409),
  unless asked for, because two copies of one result would count twice in every comparison; a
  partial unique index holds it when imports race (:func:`run_import`).
* An imported run has no start or end time: the import is not when the benchmark ran, and vLLM's
  ``date`` is a local time without a zone, kept as the file gives it (:func:`run_import`,
  :func:`benchmarks.importers.result_date`).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction

from benchmarks.analysis.model import MIN_COMPARED_REQUESTS, SHARED_LOAD_FLAG
from benchmarks.choices import RunSource, RunStatus
from benchmarks.importers import ImportedRun, ImportProblem, import_results, record_digest, result_date
from benchmarks.loadgen import RecordStore
from benchmarks.loadgen.driver import CPU_BOUND_FRACTION
from benchmarks.loadgen.metrics import COALESCED_GAP_FRACTION, OUTPUT_BASIS_COMPLETED, OUTPUT_BASIS_WITH_ABORTED
from benchmarks.loadgen.uncertainty import clip_low, contain_estimate, min_samples_for_interval
from benchmarks.models import (
    RUN_LIST_DEFERRED, BenchmarkRun, BenchmarkSweep, gpus_are_modelled, served_model_name_shown, snapshot_shown,
)
from benchmarks.sweeps import DIGITS_RE, failure_counts, lost_point, repeats_text, requests_sent, summary_point
from controlplane.csvsafe import csv_text
from controlplane.drf_defaults import empty_list_item
from controlplane.errors import Conflict, InvalidInput
from controlplane.jsonsafe import js_number, json_safe, json_spelled, query_text

# From this magnitude on a compared number is written with an exponent: every digit of a value
# such as 1e300 (an imported file's) would be a 301-digit cell that widens the page.
PLAIN_FIGURES_MAX = 1e15


def plain_figures(values: Iterable[float | int | None], *, digits: int = 3) -> list[str | None]:
    """``values`` as plain figures that tell them apart: each with at least ``digits`` significant
    figures and every digit before the decimal point (``24,688``, never ``2.469e+04``), thousands
    separators, trailing zeros after the point dropped (``0.098``, ``0.103``, ``100``). Where two
    different values would print the same, every value gets one more significant figure until
    they differ (``100.4`` and ``100``; ``0.1``, ``0.1001``), up to 15. None stays None; ``inf``,
    ``nan`` and values from :data:`PLAIN_FIGURES_MAX` on are written as ``:g`` does. For the
    comparison's table and notes, which rank these values and so must show them distinct."""
    items = list(values)
    numbers = {float(v) for v in items if v is not None and not isinstance(v, bool)}
    for sig in range(max(1, digits), 16):
        shown = {v: _plain(v, sig) for v in numbers}
        if len(set(shown.values())) == len(numbers):
            break
    return [None if v is None else shown[float(v)] for v in items]


def _plain(value: float, sig: int) -> str:
    """``value`` with ``sig`` significant figures (all its integer digits at least), thousands
    separators and no trailing zeros after the point; see :func:`plain_figures`."""
    if not np.isfinite(value) or abs(value) >= PLAIN_FIGURES_MAX:
        return f"{value:.{sig}g}"
    if value == 0:
        return "0"
    magnitude = int(np.floor(np.log10(abs(value))))
    decimals = max(0, sig - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# Flags that make a run's numbers not comparable with a fixed-length run (metrics.md).
LENGTH_FLAGS = ("output_length_mismatch", "input_length_mismatch", "variable_lengths", "lengths_unknown",
                "range_ratio_unknown")
# Summary keys compared side by side (key path, label, unit).
COMPARE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("output_throughput_tok_s", "output throughput", "tok/s"),
    ("tok_s_per_gpu", "output throughput per GPU", "tok/s"),
    ("request_throughput_req_s", "request throughput", "req/s"),
    ("goodput_req_s", "goodput", "req/s"),
    ("ttft_ms.mean", "TTFT mean", "ms"), ("ttft_ms.p50", "TTFT p50", "ms"), ("ttft_ms.p90", "TTFT p90", "ms"),
    ("ttft_ms.p99", "TTFT p99", "ms"),
    ("tpot_ms.mean", "TPOT mean", "ms"), ("tpot_ms.p50", "TPOT p50", "ms"), ("tpot_ms.p90", "TPOT p90", "ms"),
    ("tpot_ms.p99", "TPOT p99", "ms"),
    ("itl_ms.mean", "ITL mean", "ms"), ("itl_ms.p50", "ITL p50", "ms"), ("itl_ms.p90", "ITL p90", "ms"),
    ("itl_ms.p99", "ITL p99", "ms"),
    ("e2e_ms.mean", "E2E mean", "ms"), ("e2e_ms.p50", "E2E p50", "ms"), ("e2e_ms.p90", "E2E p90", "ms"),
    ("e2e_ms.p99", "E2E p99", "ms"),
    ("failures", "failures", "requests"),
)
# The metrics :func:`runs_compare` names a best run for (key path, whether higher is better):
# every compared field but the failure count, which counts requests rather than rating a run (it
# grows with the requests a run sent, and a ranked run has succeeded requests to be ranked on).
# Each has a best run or a note saying why it has none.
BEST_METRICS: tuple[tuple[str, bool], ...] = (
    ("output_throughput_tok_s", True), ("tok_s_per_gpu", True), ("request_throughput_req_s", True),
    ("goodput_req_s", True),
    ("ttft_ms.mean", False), ("ttft_ms.p50", False), ("ttft_ms.p90", False), ("ttft_ms.p99", False),
    ("tpot_ms.mean", False), ("tpot_ms.p50", False), ("tpot_ms.p90", False), ("tpot_ms.p99", False),
    ("itl_ms.mean", False), ("itl_ms.p50", False), ("itl_ms.p90", False), ("itl_ms.p99", False),
    ("e2e_ms.mean", False), ("e2e_ms.p50", False), ("e2e_ms.p90", False), ("e2e_ms.p99", False))
# A latency's name in notes, by the stem of its keys.
LATENCY_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
# Percent of the larger value within which the two best runs for a metric are a tie (no best run
# is named, and a note says so). Repeating one point on one deployment does not give the same
# numbers (which requests share a batch, scheduling, timer jitter), and a p99 over a few hundred
# requests is set by a handful of them; a difference this small is no evidence that one run is
# better. 2 % is also the tolerance the load generator allows between its own token count and the
# server's (``SERVER_TOKEN_TOLERANCE``). :func:`runs_compare` takes another threshold.
COMPARE_TIE_PCT = 2.0
# A ``limit`` of :func:`run_records_rows` larger than any run's request count: every record.
ALL_RECORDS = 2 ** 62
# The latency stems with 95 % confidence intervals (one sample per request; run_ci95_ms).
CI_STEMS = ("ttft_ms", "tpot_ms", "e2e_ms")
# The SLO keys of a run's summary (seconds), in the order they are shown.
SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")
# Load-generator flags that make some of a run's compared metrics unreliable while the others stand
# (flag -> the metrics of COMPARE_FIELDS it affects, by their stem; metrics.md, benchmarks.loadgen
# ``run_summary``):
# * ``itl_coalesced``: at least COALESCED_GAP_FRACTION of the gaps between output events are zero
#   (events came in one network read). The client times a read, not a token: the first token counts
#   from the read that brought it with the tokens after it (TTFT late), TPOT spreads the rest of the
#   stream over all the tokens (below the decode step: a sim PD run's mean TPOT was 3.98 ms against
#   its profile's 5 ms step, the first 9 of 32 tokens arriving together in 6 of its 8 requests), and
#   ITL measures the reads. Throughput and E2E stand.
# * ``client_cpu_bound``: a load-generator worker was busy on CPU for more than CPU_BOUND_FRACTION of
#   the run, so every latency may include the client's own time.
# Not here: ``tokens_estimated`` (no usage from the server: output tokens counted one per event). A
# ranked run is a fixed-length run without ``output_length_mismatch``, so every request's counted
# output was its requested length and the count, and the tok/s and TPOT computed from it, stand.
METRIC_CAVEAT_FLAGS: dict[str, tuple[str, ...]] = {
    "itl_coalesced": ("ttft_ms", "tpot_ms", "itl_ms"),
    "client_cpu_bound": ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"),
}



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
    kept original file) or a run whose file is missing, and :class:`Conflict` (HTTP 409) for a run
    still running: its file is written when it ends."""
    if not run.records_path and run.status == RunStatus.RUNNING:
        raise Conflict(f"run #{run.pk} is still running; its per-request records are written when it ends")
    if not run.records_path:
        raise InvalidInput({"records": [f"run #{run.pk} has no per-request records"
                                        + (" (imported: see its original file)" if run.source == RunSource.IMPORTED else "")]})
    path = Path(run.records_path)
    if not path.exists():
        raise InvalidInput({"records": [f"the record file of run #{run.pk} is missing ({path.name})"]})
    return RecordStore.load(path)


def _known(value: int) -> int | None:
    """A record's count, or None where the records store -1 for "not known" (metrics.md: an
    absent value stays null)."""
    return int(value) if value >= 0 else None


def run_records_rows(*, run: BenchmarkRun, offset: int = 0, limit: int = 1000,
                     events: bool = True) -> dict[str, Any]:
    """Per-request rows of ``run`` as JSON-ready dicts, ``limit`` at most from ``offset``, in the
    records' order (completion order).

    Each row: ``index`` (dataset position), ``ok``, ``http_status``, ``input_tokens`` (the
    server's ``usage.prompt_tokens``; null when it gave none), ``output_tokens`` (null when not
    known), ``tokens_estimated`` (true when ``output_tokens`` was counted from output events
    because the server sent no usage), ``requested_input``/``requested_output`` (null when not
    known), ``start_ms`` and ``end_ms`` (ms from the run's first request start to this request's
    send and to its response fully read or failed; ``duration_ms`` = end − start, for failures
    too), ``ttft_ms``, ``e2e_ms`` (null for a failed request: a failure contributes no latency),
    ``tpot_ms`` (null when undefined), ``events`` (output events), ``finish_reason``, ``error``
    and, when ``events``, ``event_ms`` (each output event's time in ms from this request's start)
    and ``event_tokens`` (the tokens each event carried, null where the server did not say).

    From these every headline number can be recomputed: duration = max ``end_ms`` (the first
    request starts at 0), output tok/s = Σ ``output_tokens`` of successes / duration, ITL = the
    differences of consecutive ``event_ms``. Times are exact to the nanosecond the records hold.
    Returns ``{"count", "offset", "limit", "rows"}``. Raises :class:`InvalidInput` and
    :class:`Conflict` as :func:`run_records`.
    """
    rec = run_records(run=run)
    n = len(rec)
    cols = {c: rec.column(c) for c in ("index", "start", "end", "first", "last", "output_tokens", "input_tokens",
                                       "requested_input", "requested_output", "http_status", "ok", "ev_len",
                                       "tokens_estimated")}
    t0 = int(cols["start"].min()) if n else 0
    ev_time, ev_tokens, ev_off = (rec.column(c).astype(np.int64) for c in ("ev_time", "ev_tokens", "ev_off"))
    rows = []
    for i in range(offset, min(n, offset + limit)):
        ok = bool(cols["ok"][i])
        start = int(cols["start"][i])
        end = int(cols["end"][i])
        ttft = (int(cols["first"][i]) - start) / 1e6 if ok else None
        e2e = (int(cols["last"][i]) - start) / 1e6 if ok else None
        out = _known(cols["output_tokens"][i])
        row = {
            "index": int(cols["index"][i]), "ok": ok, "http_status": int(cols["http_status"][i]),
            "input_tokens": _known(cols["input_tokens"][i]), "output_tokens": out,
            "tokens_estimated": bool(cols["tokens_estimated"][i]),
            "requested_input": _known(cols["requested_input"][i]),
            "requested_output": _known(cols["requested_output"][i]),
            "start_ms": (start - t0) / 1e6, "end_ms": (end - t0) / 1e6, "duration_ms": (end - start) / 1e6,
            "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": (e2e - ttft) / (out - 1) if ok and out is not None and out >= 2 else None,
            "events": int(cols["ev_len"][i]),
            "finish_reason": rec.finish_reason(i), "error": rec.errors.get(i),
        }
        if events:
            lo, hi = int(ev_off[i]), int(ev_off[i]) + int(cols["ev_len"][i])
            row["event_ms"] = ((ev_time[lo:hi] - start) / 1e6).tolist()
            row["event_tokens"] = [k if k > 0 else None for k in ev_tokens[lo:hi].tolist()]
        rows.append(row)
    return {"count": n, "offset": offset, "limit": limit, "rows": rows}


def _path(d: Mapping[str, Any], key: str) -> Any:
    cur: Any = d
    for part in key.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


#: ``output_throughput_basis`` of a measured run with requests aborted in flight whose summary was
#: stored before the output throughput counted their streamed tokens: its figure counts the
#: completed requests' tokens alone over a duration in which the aborted ones were decoding too,
#: so it falls short of what the server delivered; shown marked, never as a plain measurement.
OUTPUT_BASIS_COMPLETED_ONLY = "completed_only"

#: What each ``output_throughput_basis`` says, for the pages, the CSV note and the API's help.
OUTPUT_BASIS_TEXT = {
    OUTPUT_BASIS_COMPLETED: "the successful requests' output tokens over the measured duration",
    OUTPUT_BASIS_WITH_ABORTED: ("the successful requests' output tokens and those the requests a stop aborted in "
                                "flight had streamed, over the measured duration (which runs to the abort): what "
                                "the server delivered, in agreement with concurrency / TPOT"),
    OUTPUT_BASIS_COMPLETED_ONLY: ("the successful requests' output tokens only, although requests a stop aborted in "
                                  "flight were decoding during the measured duration (stored before their tokens "
                                  "were counted): below what the server delivered"),
}


def output_throughput_basis(summary: Mapping[str, Any], *, aborted: Any) -> str:
    """Which tokens a stored summary's ``output_throughput_tok_s`` counts: its own
    ``output_throughput_basis`` (:func:`benchmarks.loadgen.run_summary`), else, for a summary
    stored before it was kept, :data:`OUTPUT_BASIS_COMPLETED_ONLY` where requests were aborted in
    flight (``aborted`` > 0) and :data:`OUTPUT_BASIS_COMPLETED` otherwise (an imported file counts
    completed requests; a run nobody stopped has nothing else to count)."""
    basis = summary.get("output_throughput_basis")
    if basis in (OUTPUT_BASIS_COMPLETED, OUTPUT_BASIS_WITH_ABORTED):
        return basis
    if isinstance(aborted, int) and not isinstance(aborted, bool) and aborted > 0:
        return OUTPUT_BASIS_COMPLETED_ONLY
    return OUTPUT_BASIS_COMPLETED


def run_metrics(*, run: BenchmarkRun) -> dict[str, Any]:
    """The run's headline numbers in one vocabulary (latencies ms, throughputs per second) for
    tables, comparison and export, whether measured or imported: the keys of
    :data:`COMPARE_FIELDS` plus ``successes``, ``requests`` (the measured requests it sent,
    :func:`benchmarks.sweeps.requests_sent`: 0 for a point stopped while it built its prompts or
    warmed up, whose ``successes``, ``failures`` and ``aborted`` are 0 too; all None for a point that
    has not run; for a point whose worker was lost, its last progress report's counts, the requests
    it had in flight then among ``aborted``, ``requests`` None where that report did not count the
    requests sent), ``aborted`` (requests a stop ended
    in flight: neither successes nor ``failures``, which counts those the server failed; None
    where the source does not say), ``input_tokens_mean``,
    ``output_tokens_mean``, ``measured_duration_s`` (how long the run took, first request sent to
    last response, seconds; also under ``duration_s``, its name in the summary, kept for readers of
    it: not the point's time limit, the run's own ``duration_s``), ``slo_attainment``, ``errors`` (reason → count, the
    aborted requests' ``aborted: <the stop>`` among them),
    ``total_token_throughput_tok_s``. A throughput is None (unknown) for a run without a successful
    request, and the total also where the server did not report every success's input tokens;
    except that a run whose every request a stop aborted after they had streamed tokens
    (:func:`benchmarks.sweeps.aborted_only_throughput`) has the output throughput of those tokens,
    ``output_throughput_completed_tok_s`` and ``request_throughput_req_s`` 0.0.

    ``output_throughput_tok_s`` is the summary's (the page, the API's ``output_tok_s`` and
    ``metrics``, the CSV and the JSON export all give this one figure): for a run a stop cut
    short with requests in flight, the successful requests' output tokens plus those the aborted
    ones had streamed, over the measured duration (:func:`benchmarks.loadgen.run_summary` says
    why). ``output_throughput_completed_tok_s`` counts the successful requests' tokens alone
    (the same figure where nothing was aborted), ``output_tokens_aborted`` what the aborted ones
    streamed (None where the summary does not say), and ``output_throughput_basis``
    (:func:`output_throughput_basis`, :data:`OUTPUT_BASIS_TEXT`) which of them the headline
    counts."""
    s = run.summary or {}
    p = summary_point(summary=s, concurrency=run.concurrency, request_rate=run.request_rate, input_len=run.input_len,
                      output_len=run.output_len, num_gpus=run.num_gpus, flags=run.flags)
    tok = p["output_throughput_tok_s"]
    sent = requests_sent(s, run.progress)
    counts = {"successes": p["completed"], "failures": p["failed"], "aborted": p["aborted"]}
    if sent == 0:
        # A point that ended having sent nothing (stopped while it built its prompts or warmed up):
        # none succeeded, failed or was aborted, 0 each, not unknown.
        counts = {key: 0 if value is None else value for key, value in counts.items()}
    elif lost_point(run.progress) and not s:
        # Its worker was lost: its last report's counts, the requests in flight then among the
        # aborted (benchmarks.services.sweeps.lost_point_progress); ``requests`` None if unknown.
        done, failed, aborted = (run.progress.get(k) for k in ("done", "failed", "aborted"))
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (done, failed, aborted)):
            counts = {"successes": max(0, done - failed), "failures": failed, "aborted": aborted}
    basis = output_throughput_basis(s, aborted=counts["aborted"])
    completed_tok = s.get("output_throughput_completed_tok_s", tok) if tok is not None else None
    if tok is not None and p["completed"] == 0:
        # Every request aborted after streaming tokens (summary_point kept what they streamed):
        # the completed requests delivered nothing over the measured duration.
        completed_tok = 0.0
    aborted_tokens = s.get("output_tokens_aborted")
    return {
        "output_throughput_tok_s": tok,
        "output_throughput_completed_tok_s": completed_tok if isinstance(completed_tok, (int, float)) else tok,
        "output_tokens_aborted": aborted_tokens if isinstance(aborted_tokens, int) else None,
        "output_throughput_basis": basis,
        "tok_s_per_gpu": tok / run.num_gpus if tok is not None and run.num_gpus else None,
        "request_throughput_req_s": p["request_throughput"],
        "goodput_req_s": s.get("goodput_req_s"),
        "slo_attainment": s.get("slo_attainment"),
        "ttft_ms": p["ttft_ms"], "tpot_ms": p["tpot_ms"], "itl_ms": p["itl_ms"], "e2e_ms": p["e2e_ms"],
        "requests": sent, **counts,
        "input_tokens_mean": s.get("input_tokens_actual_mean", s.get("mean_input_tokens")),
        "output_tokens_mean": s.get("output_tokens_mean", s.get("mean_output_tokens")),
        # the measured time under its unambiguous name, and under the name readers already take
        "measured_duration_s": s.get("duration_s"), "duration_s": s.get("duration_s"), "errors": s.get("errors") or {},
        "total_token_throughput_tok_s": None if p["completed"] == 0 else s.get("total_token_throughput_tok_s"),
    }


INPUT_TOKENS_SOURCES = ("stream", "recount")


def run_input_tokens_source(*, run: BenchmarkRun) -> str | None:
    """Where ``run``'s ``input_tokens_actual_mean`` comes from: ``"stream"`` (the server's
    per-request ``usage``), ``"recount"`` (every successful request's prompt counted again after
    the point) or None (unknown, or no mean). A measured run stored before its summary carried
    ``input_tokens_source`` (points sent as token ids never set it) is read as ``"stream"`` where it
    has a mean: a recount always stored the key, so a mean without it was the stream's. An imported
    run's is None: the file does not say how its harness counted them."""
    s = run.summary or {}
    if "input_tokens_source" in s:
        return s["input_tokens_source"] if s["input_tokens_source"] in INPUT_TOKENS_SOURCES else None
    if run.source != RunSource.MEASURED:
        return None
    mean = s.get("input_tokens_actual_mean")
    return "stream" if isinstance(mean, (int, float)) and not isinstance(mean, bool) else None


def run_measured_duration_s(*, run: BenchmarkRun) -> float | None:
    """How long ``run`` took in seconds, first request sent to last response (its summary's
    ``duration_s``); None while it runs, when an imported file gave none, or when the stored value
    is not a finite number."""
    value = (run.summary or {}).get("duration_s") if isinstance(run.summary, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def imported_summary_shown(value: Any) -> Any:
    """An imported run's summary (or any JSON value of it) as every read shows it: each string,
    keys included, with a stored secret's value masked
    (:func:`controlplane.redaction.secret_values_mask`) and a well-known credential shortened
    (:func:`controlplane.redaction.credential_mask`, ``hf_…(37 chars)``). Its ``model_id``, ``tokenizer_id``,
    ``label`` and notes come from the file, which is refused at import when it holds such a value
    (:func:`_import_secret_values_refuse`); a run imported before that still holds it."""
    from controlplane.redaction import credential_mask, secret_values_mask

    if isinstance(value, str):
        return secret_values_mask(credential_mask(value))
    if isinstance(value, dict):
        return {secret_values_mask(credential_mask(k)) if isinstance(k, str) else k: imported_summary_shown(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [imported_summary_shown(v) for v in value]
    return value


def run_filename_shown(name: str) -> str:
    """An imported run's ``original_filename`` as every read shows it: a stored secret's value in
    it (a file imported before such names were refused) masked, and a well-known credential
    shortened."""
    from controlplane.redaction import credential_mask, secret_values_mask

    return secret_values_mask(credential_mask(name)) if isinstance(name, str) and name else name


def run_summary_read(*, run: BenchmarkRun) -> dict[str, Any] | None:
    """``run.summary`` as the API and the exports give it: a measured run's with
    ``input_tokens_source`` (:func:`run_input_tokens_source`) where it was stored without it, and
    with ``failures`` the requests the server failed where it was stored counting those a stop
    aborted in flight too (:func:`benchmarks.sweeps.failure_counts`), so it agrees with
    ``metrics.failures`` beside ``aborted``; and with ``measured_duration_s`` beside the stored
    ``duration_s`` (the same measured seconds, first request sent to last response, under the name
    the run, the metrics and the CSV export give them; the stored key stays for its readers)."""
    s = run.summary
    if run.source == RunSource.IMPORTED:
        return imported_summary_shown(s)
    if not isinstance(s, dict) or run.source != RunSource.MEASURED or not s:
        return s
    if "duration_s" in s and "measured_duration_s" not in s:
        s = {**s, "measured_duration_s": s["duration_s"]}
    failed = failure_counts(s)[0]
    if "input_tokens_source" not in s:
        s = {**s, "input_tokens_source": run_input_tokens_source(run=run)}
    if "failures" in s and failed != s["failures"]:
        s = {**s, "failures": failed}
    return s


def run_slo(*, run: BenchmarkRun) -> dict[str, float | None] | None:
    """The SLO goodput and SLO attainment of ``run`` were counted against: ``{"ttft_s", "tpot_s",
    "e2e_s"}`` in seconds (None for a limit not set), or None when the run had no SLO or it is not
    known (an imported file does not record the SLO its goodput used)."""
    slo = (run.summary or {}).get("slo")
    if not isinstance(slo, Mapping):
        return None
    out = {k: (float(slo[k]) if isinstance(slo.get(k), (int, float)) and not isinstance(slo.get(k), bool) else None)
           for k in SLO_KEYS}
    return out if any(v is not None for v in out.values()) else None


def slo_text(slo: Mapping[str, Any] | None) -> str:
    """An SLO in words: ``TTFT ≤ 0.05 s, TPOT ≤ 0.1 s`` (seconds, as stored); ``none`` for None."""
    if not slo:
        return "none"
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
    return ", ".join(f"{names[k]} ≤ {js_number(float(slo[k]))} s" for k in SLO_KEYS
                     if slo.get(k) is not None) or "none"


def _slo_groups(pairs: list[tuple[int, Mapping[str, Any] | None]], *, prefix: str = "run ") -> str:
    """Runs grouped by their SLO, each distinct SLO once with the runs measured against it, in the
    order first seen: ``runs #7 and #8: TTFT ≤ 0.02 s; run #10: no SLO recorded``."""
    groups: dict[str, tuple[Mapping[str, Any] | None, list[int]]] = {}
    for rid, slo in pairs:
        groups.setdefault(json.dumps(slo, sort_keys=True), (slo, []))[1].append(rid)
    return "; ".join(
        (prefix + "#" + str(ids[0]) if len(ids) == 1 else _runs_named(ids, prefix=prefix)) + ": "
        + (slo_text(slo) if slo else "no SLO recorded") for slo, ids in groups.values())


def _runs_named(ids: list[int], *, prefix: str = "run ") -> str:
    """``run #7``, ``runs #7 and #8`` (``#7 and #8`` with an empty ``prefix``)."""
    if len(ids) == 1:
        return f"{prefix}#{ids[0]}"
    return ("runs " if prefix else "") + _and([f"#{i}" for i in ids])


def _config_fields(run: BenchmarkRun) -> dict[str, Any]:
    # as every read shows the snapshot: a stored secret's value in the spec's env or roles masked
    snap = snapshot_shown(run.snapshot or {})
    if not isinstance(snap, dict):
        snap = {}
    spec = snap.get("spec") or {}
    return {
        "source": run.source, "import_format": run.import_format or None,
        "served_model_name": served_model_name_shown(run.served_model_name) or None, "engine": snap.get("engine"),
        "topology": snap.get("topology"), "deployment_id": snap.get("deployment_id"),
        "recipe": snap.get("recipe"),
        "recipe_id": snap.get("recipe_id"), "recipe_version": snap.get("recipe_version"),
        "node": (snap.get("node") or {}).get("name"), "num_gpus": run.num_gpus, "concurrency": run.concurrency,
        "request_rate": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "api": run.api or None, "slo": run_slo(run=run),
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
        if n == 1:
            return "its 1 request did not succeed"
        return f"none of its {n} requests succeeded" if isinstance(n, int) else "none of its requests succeeded"
    if m.get("output_throughput_tok_s") is None:
        return "it has no measured output throughput"
    return None


def _and(words: list[str]) -> str:
    """``TTFT``, ``TTFT and TPOT``, ``TTFT, TPOT and ITL``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _delta_pct(value: Any, base: Any) -> float | None:
    """``value`` against ``base`` in percent of ``base`` (``+12.5`` = 12.5 % higher); None when
    either is missing or ``base`` is 0 and ``value`` is not (no percentage of nothing); ``0.0`` for
    0 against 0 (no failures against none is no change). A change that rounds to zero is ``0.0``,
    never ``-0.0`` (a value a hair below the base)."""
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)):
        return None
    if base == 0:
        return 0.0 if value == 0 else None
    return round((value - base) / abs(base) * 100.0, 3) + 0.0   # -0.0 + 0.0 is 0.0


def _spread_pct(a: float, b: float) -> float:
    """How far apart ``a`` and ``b`` are, in percent of the larger magnitude (0 when both are 0)."""
    top = max(abs(a), abs(b))
    return abs(a - b) / top * 100.0 if top else 0.0


def _pct_text(fraction: Any, fallback: float) -> str:
    """A fraction 0-1 as the comparison notes write it (``22 %``); ``fallback`` as ``10 % or more``
    when the summary did not record the fraction (a flag without its figure)."""
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        return f"{100.0 * fraction:.0f} %"
    return f"{100.0 * fallback:.0f} % or more"


def run_shared_load_text(*, run: BenchmarkRun) -> str:
    """Why a run flagged :data:`SHARED_LOAD_FLAG` measured more than its own load, from its
    summary's ``shared_load`` entries: ``while it ran, run #12 of sweep #4 (deployment #3, which
    shares CPU 0 on node local) ran too, so its tok/s and latencies include that load``."""
    entries = [e for e in (run.summary or {}).get(SHARED_LOAD_FLAG) or [] if isinstance(e, Mapping)]
    named = [f"run #{e.get('run_id')} of sweep #{e.get('sweep_id')} (deployment #{e.get('deployment_id')}, which "
             f"shares {e.get('shares')})" for e in entries]
    who = (", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")) if named else (
        "a run of another sweep on a deployment sharing its CPUs or GPUs")
    return (f"while it ran, {who} ran too, so its tok/s and latencies include that load and cannot be compared "
            "with any other run's")


def run_metric_caveats(*, run: BenchmarkRun) -> list[tuple[str, tuple[str, ...], str]]:
    """Why some compared metrics of ``run`` are not reliable, from its flags
    (:data:`METRIC_CAVEAT_FLAGS`): ``[(flag, metric stems it affects, why in words), ...]``, e.g.
    ``("itl_coalesced", ("ttft_ms", "tpot_ms", "itl_ms"), "22 % of its gaps between output events
    are zero (...)")``; empty when none applies. The figures come from the run's summary
    (``itl_zero_gap_fraction`` and ``client_cpu_fraction_max``, fractions 0-1)."""
    s = run.summary or {}
    out = []
    if "itl_coalesced" in run.flags:
        zero = _pct_text(s.get("itl_zero_gap_fraction"), COALESCED_GAP_FRACTION)
        out.append(("itl_coalesced", METRIC_CAVEAT_FLAGS["itl_coalesced"],
                    f"{zero} of its gaps between output events are zero (tokens arrive in batches, several in one "
                    "network read): its TTFT is the arrival of the first batch, not of the first token, and its "
                    "TPOT and ITL are per-event averages, not per-step"))
    if "client_cpu_bound" in run.flags:
        busy = _pct_text(s.get("client_cpu_fraction_max"), CPU_BOUND_FRACTION)
        out.append(("client_cpu_bound", METRIC_CAVEAT_FLAGS["client_cpu_bound"],
                    f"a load-generator worker was busy on CPU for {busy} of the run: its latencies (TTFT, TPOT, "
                    "ITL, E2E) may include the client's own time"))
    return out


def _too_few_sweep_runs(sweep_ids: list[int], runs: int, run_field: str = "ids") -> str:
    """Why ``sweeps=`` alone gives no comparison: ``sweep 4 has 1 run; a comparison needs at least
    two: add runs with ids= or another sweep`` (``sweeps 4, 5 have no runs between them; ...``),
    naming ``run_field``, the parameter that takes run ids where it is asked (the page's ``runs``)."""
    count = "no runs" if runs == 0 else f"{runs} run"
    add = f"add runs with {run_field}= or another sweep"
    if len(sweep_ids) == 1:
        return f"sweep {sweep_ids[0]} has {count}; a comparison needs at least two: {add}"
    return f"sweeps {', '.join(map(str, sweep_ids))} have {count} between them; a comparison needs at least two: {add}"


def _too_few_with_sweeps(run_id: int, sweep_runs: Mapping[int, list[int]]) -> str:
    """Why run ``run_id`` and the sweeps of ``sweep_runs`` (sweep id -> its run ids; each holds
    no run or only ``run_id``) give no comparison: ``run 1 is already in sweep 1; give at least two
    runs to compare``, ``sweep 2 has no runs, leaving run 1 alone; ...`` or both, joined by
    ``and``."""
    held = [s for s, ids in sweep_runs.items() if ids]
    empty = [s for s, ids in sweep_runs.items() if not ids]
    parts = []
    if held:
        parts.append(f"run {run_id} is already in sweep{'s' if len(held) > 1 else ''} {', '.join(map(str, held))}")
    if empty:
        have = "has no runs" if len(empty) == 1 else "have no runs"
        parts.append(f"sweep{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))} {have}"
                     + ("" if held else f", leaving run {run_id} alone"))
    return f"{' and '.join(parts)}; {COMPARE_TOO_FEW}"


#: Why a comparison refuses fewer than two runs, under ``ids`` (:func:`runs_compare`; the
#: comparison page shows it too).
COMPARE_TOO_FEW = "give at least two runs to compare"


def compare_too_few_text(run_ids: Sequence[int]) -> str:
    """Why ``run_ids`` (fewer than two) give no comparison, naming the one run given: ``only run 1
    was given; give at least two runs to compare`` (:data:`COMPARE_TOO_FEW` alone for none)."""
    if len(run_ids) == 1:
        return f"only run {run_ids[0]} was given; {COMPARE_TOO_FEW}"
    return COMPARE_TOO_FEW


def compare_baseline_not_among(baseline_id: int, run_ids: Sequence[int]) -> str:
    """Why ``baseline_id`` cannot be the baseline of a comparison of ``run_ids``: ``run #5 is not
    one of the compared runs (#1, #2)``."""
    return f"run #{baseline_id} is not one of the compared runs ({', '.join(f'#{i}' for i in run_ids)})"


class CompareTooFew(InvalidInput):
    """:func:`runs_compare_pick`'s refusal of a query whose run ids and sweeps together name fewer
    than two distinct runs (a 400 like any :class:`InvalidInput`), told apart so that the
    comparison page can show the form with the reason as a hint to a link that named too few
    runs. ``run_ids`` are the distinct runs named (none, or one)."""

    def __init__(self, errors: dict[str, list[str]], *, run_ids: list[int]):
        super().__init__(errors)
        self.run_ids = run_ids

#: Most run ids and sweep ids one comparison names (the sweeps' runs are not counted against
#: :data:`COMPARE_MAX_RUNS`), and the refusal of more, under ``ids``: the compare endpoint and the
#: comparison page both refuse with it.
COMPARE_MAX_RUNS = 100
COMPARE_MAX_SWEEPS = 20
COMPARE_TOO_MANY = f"at most {COMPARE_MAX_RUNS} runs and {COMPARE_MAX_SWEEPS} sweeps"


def runs_compare_too_many(*, run_ids: list[int], sweep_ids: list[int]) -> str | None:
    """:data:`COMPARE_TOO_MANY` when ``run_ids`` has more than :data:`COMPARE_MAX_RUNS` ids or
    ``sweep_ids`` more than :data:`COMPARE_MAX_SWEEPS` (repeats counted as given); else None."""
    if len(run_ids) > COMPARE_MAX_RUNS or len(sweep_ids) > COMPARE_MAX_SWEEPS:
        return COMPARE_TOO_MANY
    return None


def unquoted(text: str) -> str:
    """``text`` stripped, without one pair of matching quotes around it (``"1"`` and ``'1'`` are
    ``1``; ``"1","2"`` is kept for its parts): a run id typed as a JSON string names the same run
    as the number."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" and text[0] not in text[1:-1]:
        return text[1:-1].strip()
    return text


def runs_compare_ids(text: str, *, field: str) -> list[int]:
    """The ids of ``text``, a comparison's comma-separated ``ids`` or ``sweeps`` as given (``"1, 2"``:
    ``[1, 2]``; a blank ``text`` is none given, ``[]``; order and repeats kept for
    :func:`runs_compare_pick` to judge). Shared by the compare endpoint and the comparison page, so
    both word a malformed list alike. Raises :class:`InvalidInput` under ``field`` for the first
    empty item (``1,,2`` or ``1,2,``: ``{"ids": ["item 2 is empty: give ids as 1,2,3"]}``, a typo or a
    list gone wrong, never skipped) and for the first part that is not ASCII digits, or is too long
    for ``int()`` (more than 4300 digits): ``{"ids": ["must be comma-separated integer ids, got
    'abc'"]}``, the part cut to 40 characters. Any other id however large is kept: no row has it,
    which the caller says. An id, or the whole list, in quotes is read as without them (``"1","2"``
    and ``"1,2"``: ``[1, 2]``), as a client sending ids as JSON strings writes them."""
    ids: list[int] = []
    text = unquoted(text)
    if not text:
        return ids
    for index, part in enumerate((unquoted(x) for x in text.split(",")), start=1):
        if not part:
            raise InvalidInput({field: [empty_list_item(index, field, "1,2,3")]})
        try:
            if not DIGITS_RE.fullmatch(part):
                raise ValueError(part)
            ids.append(int(part))
        except ValueError:
            raise InvalidInput({field: [f"must be comma-separated integer ids, got {query_text(part)}"]}) from None
    return ids


def runs_compare_pick(*, run_ids: list[int], sweep_ids: list[int], run_field: str = "ids") -> list[int]:
    """The ids of the runs a comparison of ``run_ids`` and of every run of ``sweep_ids`` covers:
    ``run_ids`` in the order given, then each sweep's runs in grid order that are not among them
    yet (the two pick runs together, each run once). Shared by the compare endpoint and the
    comparison page, so both refuse the same queries with the same words. Reads the sweeps' runs;
    writes nothing.

    Raises :class:`InvalidInput` for a run id or a sweep id given more than once, under ``ids`` and
    ``sweeps`` at once (``repeated run id: 1 (2 times); give each once``: a repeat is a typo or a
    pasted list gone wrong, and comparing each run once would answer another question than the one
    asked); :class:`InvalidInput` under ``sweeps`` naming every sweep that does not exist (``no
    sweep with id 4``, ``no sweeps with ids 4, 5``), with the run ids that name no run under
    ``run_field`` beside it (``ids``, or the parameter the caller takes run ids by); and
    :class:`CompareTooFew` (an :class:`InvalidInput`) under ``sweeps`` when ``sweeps`` alone bring
    fewer than two runs, saying how many they have (``add runs with ids=``, or ``run_field``=), and
    under ``run_field`` when one run id and sweeps that hold only that run or none are given,
    saying so (``run 1 is already in sweep 1; give at least two runs to compare``). Otherwise
    unknown run ids and fewer than two runs named by id alone are left to the caller
    (:func:`benchmarks.selectors.runs_by_ids`, :func:`runs_compare`)."""
    from benchmarks.selectors import PK_MAX, missing_ids_text

    repeats = {field: [message] for field, values, noun in (("ids", run_ids, "run id"),
                                                             ("sweeps", sweep_ids, "sweep id"))
               if (message := repeats_text(values, noun))}
    if repeats:
        raise InvalidInput(repeats)
    # An id outside 1..PK_MAX names no row and is never sent to the database.
    sweeps = BenchmarkSweep.objects.in_bulk([i for i in sweep_ids if 1 <= i <= PK_MAX])
    if missing := [i for i in sweep_ids if i not in sweeps]:
        errors = {"sweeps": [missing_ids_text("sweep", missing)]}
        found = set(BenchmarkRun.objects.filter(pk__in=[i for i in run_ids if 1 <= i <= PK_MAX])
                    .values_list("pk", flat=True))
        if missing_runs := [i for i in run_ids if i not in found]:
            errors = {run_field: [missing_ids_text("run", missing_runs)], **errors}
        raise InvalidInput(errors)
    ids = list(run_ids)
    sweep_runs: dict[int, list[int]] = {}
    for sweep_id in sweep_ids:
        sweep_runs[sweep_id] = list(sweeps[sweep_id].runs.order_by("ordinal", "id").values_list("pk", flat=True))
        ids += sweep_runs[sweep_id]
    ids = list(dict.fromkeys(ids))
    if len(ids) < 2 and not run_ids:
        # The runs came from sweeps alone: the refusal is about the sweeps that were given.
        raise CompareTooFew({"sweeps": [_too_few_sweep_runs(sweep_ids, len(ids), run_field)]}, run_ids=ids)
    if len(ids) < 2 and sweep_ids:
        # One run by id, and sweeps that hold it or nothing: say which (a run that does not exist is
        # left to the caller, which names it).
        (run_id,) = ids
        exists = 1 <= run_id <= PK_MAX and BenchmarkRun.objects.filter(pk=run_id).exists()
        if any(sweep_runs.values()) or exists:
            raise CompareTooFew({run_field: [_too_few_with_sweeps(run_id, sweep_runs)]}, run_ids=ids)
    return ids


def runs_compare_overlap_notes(*, run_ids: list[int], sweep_ids: list[int]) -> list[str]:
    """One note for each run of ``run_ids`` that one of ``sweep_ids`` also holds, in the order given
    (``run 2 is also in sweep 2; compared once``): :func:`runs_compare_pick` keeps each run once,
    and the note says the run given twice was not dropped silently. One query; none when either
    list is empty."""
    if not run_ids or not sweep_ids:
        return []
    held = dict(BenchmarkRun.objects.filter(pk__in=run_ids, sweep_id__in=sweep_ids).values_list("pk", "sweep_id"))
    return [f"run {run_id} is also in sweep {held[run_id]}; compared once" for run_id in run_ids if run_id in held]


def runs_compare(*, runs: list[BenchmarkRun], baseline_id: int | None = None,
                 tie_pct: float = COMPARE_TIE_PCT, leading_notes: Sequence[str] = ()) -> dict[str, Any]:
    """Side-by-side comparison of ``runs`` (any sweeps, measured or imported).

    Returns ``{"runs": [{"id", "label", "sweep_id", "status", "flags", "metrics", "ci95_ms",
    "config", "rankable", "refusal", "measured", "workload_differs"}], "fields": [{"key", "label", "unit", "values":
    [...], "deltas_pct": [...]}], "config_differs": [{"field", "values": [...]}], "best":
    {"output_throughput_tok_s": run id | None, ...}, "ties": {metric: [run ids]}, "uncertain":
    {metric: [best id, runner-up id]}, "baseline": run id, "baseline_note": str | None, "tie_threshold_pct": float,
    "workload_note": str | None, "excluded": [{"id", "reason"}], "notes": [...]}``; ``notes`` starts with
    ``leading_notes`` (:func:`runs_compare_overlap_notes`: a run given by id and through a sweep,
    compared once).

    Runs whose workload is not the baseline's (:data:`WORKLOAD_PARAMS`: lengths, concurrency,
    request rate, model, engine, topology, GPUs, deployment) are compared all the same, and
    labelled: each run's ``workload_differs`` lists where it differs, with its value and the
    baseline's (:func:`_workload_differs`), and ``workload_note``, also in ``notes``, names them
    with their units (:func:`_workload_note`).

    ``ci95_ms`` is each run's 95 % confidence intervals of TTFT, TPOT and E2E (:func:`run_ci95_ms`).
    Where a latency statistic's best run and the runner-up both have one and they overlap, the best
    is still named (the tie rule alone decides that) and ``uncertain`` lists the two, with a note
    giving both intervals: the difference may be sampling noise at those request counts. Where
    either run's requests give no interval at all for it, no best is named for it (null, not in
    ``uncertain``) and the note says the difference cannot be judged from so few requests.

    No best is named either, for any metric, where its best run or the runner-up completed fewer
    than :data:`benchmarks.analysis.model.MIN_COMPARED_REQUESTS` requests (10): the mean,
    percentiles and throughput of so few requests move with one request's luck, as the ceiling
    analysis says of such a point. One note names those runs with their counts and every metric
    left without a best for them (:func:`_too_few_note`). The tie rule is applied first: runs
    within ``tie_pct`` are a tie whatever their counts.

    Two kinds of run are shown but never ranked, each with ``rankable`` false and its
    ``refusal`` (also in ``notes``): a run that holds no measurement (:func:`run_not_measured`:
    failed, cancelled, unfinished, no successful request; ``measured`` false, listed in
    ``excluded`` with the reason, and its values in ``fields`` are null except ``failures``, so no
    partial number from a deployment that went down reads as a result; its own ``metrics`` keep
    what was recorded), and a run whose lengths are not comparable (case C10;
    :func:`run_length_setting`): one flagged ``output_length_mismatch`` or
    ``input_length_mismatch``, one whose lengths are unknown (``lengths unknown``, not a mismatch:
    the file does not say what was requested), and one whose lengths were drawn at random
    (``variable_lengths``) when the comparison holds a measured fixed-length run. Random-length
    runs among themselves are ranked: those with the same ranges had the same length distribution,
    and runs with different ranges are runs of different lengths (no best, as below); runs of the
    same ranges whose measured mean input or output tokens per request are more than ``tie_pct``
    percent apart (or not known) drew different lengths from it, so no best is named either, with
    a note giving the means (:func:`_random_lengths_apart`). A run whose per-request lengths
    varied without a recorded range (``varied``) is never ranked. An imported run holding the
    same result as an older run of the comparison (:func:`imported_copies`: a copy imported with
    ``allow_duplicate``, the same ``record_sha256``) is not ranked either: it is the same
    measurement, not a repeat, and its refusal names the run it copies and the SHA-256, so equal
    values are never read as run-to-run noise. A run flagged ``input_length_unchecked`` (the server reported no prompt
    tokens per request for its text prompts and they could not be counted again after it, so their
    real length is not known) is never ranked either, nor is one flagged ``shared_load``
    (a run of another sweep on a deployment sharing its CPUs or GPUs ran meanwhile:
    :func:`run_shared_load_text` names it). Every run that is not ranked, for whatever reason, is listed in ``excluded``
    with its reason (the refusal's words after ``is not ranked:``). Each entry's ``lengths`` is
    its setting in words (``1024/1024``, ``random [1, 1024]/[1, 1024]``, ``varied [4, 1024]/[128,
    128]``; null when unknown). ``best`` names, for each
    of :data:`BEST_METRICS` (every compared field but the failure count: throughputs, goodput and
    each latency statistic), the best of the rankable runs with a value for it (the only one, when
    one run is rankable, with a note saying so); null, with a note saying why, when no run is
    rankable or the rankable runs have different lengths or ran at different loads (concurrency or
    request rate: a best would set one operating point's latency against another's throughput; one
    note for every metric), when none
    has that metric (a goodput needs an SLO), for goodput when the rankable runs' SLOs differ or
    are not known or when the best goodput is 0 (no run met its SLO: no request within it), when
    the best or the runner-up completed too few requests (above), or when the two best are within ``tie_pct`` percent of the larger of
    their values (a tie: :data:`COMPARE_TIE_PCT` by default; ``ties`` lists the runs within it of
    the best, and the note gives the values and the spread). So every metric of ``best`` that is
    null has a note that names it, or a note on the whole comparison.

    A run whose flags make some of its metrics unreliable (:func:`run_metric_caveats`: output
    events that came in batches, ``itl_coalesced``, make its TTFT, TPOT and ITL per-event figures; a
    CPU-bound load generator, ``client_cpu_bound``, puts client time in every latency) is named in
    a note saying which figures and why (``run #1: 22 % of its gaps between output events are zero
    (...): its TTFT is ... not per-step; it is not ranked for TTFT, TPOT and ITL (any
    statistic)``), and it is left out of the best for those metrics while it stays ranked for the
    others (its throughput stands). Leaving it out rather than ranking it with a warning: such a
    figure is biased in one direction (a coalesced run's TPOT is below its decode step, so it
    would "win" TPOT for the artefact), so a best named from it would be wrong, not merely
    uncertain. When every rankable
    run with a value is affected, no best is named for that metric and a note says so. Its values
    and deltas stay in ``fields``.

    ``config`` holds ``roles`` and ``env`` (the recipe's ``spec.roles`` and ``spec.env``) as
    objects and ``slo`` (:func:`run_slo`, seconds; null when the run had none or it is not
    known), so runs measured against different SLOs are listed in ``config_differs``; when runs
    with a goodput have different or unknown SLOs a note says their goodput is not comparable
    (goodput counts the requests that met the run's own SLO). The note lists each distinct SLO once
    with the runs measured against it (``runs #7 and #8: TTFT ≤ 0.02 s; run #10: no SLO
    recorded``), and says what the numbers give: goodput deltas only between the runs that share
    the baseline's SLO (naming them), or none; and, where a best goodput is still named, that it
    is named among the ranked runs with a goodput, which share one SLO.

    ``deltas_pct`` gives each run's value against the baseline run's in percent of the
    baseline's (``(value − baseline) / baseline × 100``; the baseline's own is 0): null where a
    value is missing or the baseline's is 0, everywhere when the baseline is not rankable (it holds
    no measurement, or its lengths are not the requested fixed ones; a note says so, ending "so no
    delta is given"), and for goodput where the run's SLO is not the baseline's or the baseline's
    is not known. The baseline is ``baseline_id``, else the first rankable run (a note says so, naming
    why the first run is not, where that is not the first run), else (no run is
    rankable: no delta at all, with a note) the first run. Raises
    :class:`InvalidInput` for fewer than 2 runs (``ids``) and a ``baseline_id`` that is not one of
    ``runs`` (``baseline``), both in one when both are wrong.
    """
    problems: dict[str, list[str]] = {}
    if len(runs) < 2:
        problems["ids"] = [compare_too_few_text([r.pk for r in runs])]
    if baseline_id is not None and baseline_id not in {r.pk for r in runs}:
        problems["baseline"] = [compare_baseline_not_among(baseline_id, [r.pk for r in runs])]
    if problems:
        raise InvalidInput(problems)   # both at once
    entries = []
    notes: list[str] = list(leading_notes)
    excluded: list[dict[str, Any]] = []
    settings = [run_length_setting(run=run) for run in runs]
    all_metrics = [run_metrics(run=run) for run in runs]
    not_measured = [run_not_measured(run=run, metrics=m) for run, m in zip(runs, all_metrics)]
    # Random-length runs are ranked against each other, never against fixed-length ones (those
    # ranked: a run whose input length was not checked is not).
    with_fixed = any(kind == "fixed" and why is None
                     and not {"input_length_unchecked", SHARED_LOAD_FLAG} & set(run.flags or [])
                     for run, (kind, _), why in zip(runs, settings, not_measured))
    unranked_why: dict[int, str] = {}
    copies = imported_copies(runs=runs)
    for run, (kind, lengths), metrics, unmeasured in zip(runs, settings, all_metrics, not_measured):
        refusal = None
        if unmeasured:
            refusal = f"run #{run.pk} is not ranked: {unmeasured}"
            excluded.append({"id": run.pk, "reason": unmeasured})
            notes.append(refusal)
        elif run.pk in copies:
            refusal = f"run #{run.pk} is not ranked: {copies[run.pk]}"
            unranked_why[run.pk] = f"a copy of run #{copies[run.pk].held.pk}"
        elif kind == "mismatch":
            length_flags = [f for f in run.flags if f in LENGTH_FLAGS and f.endswith("_mismatch")]
            refusal = (f"run #{run.pk} is not ranked: {', '.join(length_flags)} — its requests did not all have the "
                       f"requested fixed lengths, so its tok/s and latencies are not comparable with fixed-length runs")
            unranked_why[run.pk] = "not comparable with fixed-length runs"
        elif kind == "unknown":
            refusal = (f"run #{run.pk} is not ranked: lengths unknown — "
                       + ("the result file records the requested lengths but not SGLang's random_range_ratio (the "
                          "range [L*r, L] they were drawn from is unknown)" if "range_ratio_unknown" in (run.flags or []) else
                          ("the result file does not record" if run.source == RunSource.IMPORTED else "the run has no")
                          + " requested input/output lengths")
                       + ", so its tok/s and latencies cannot be compared with any other run's")
            unranked_why[run.pk] = "its lengths are unknown"
        elif kind == "random" and with_fixed:
            refusal = (f"run #{run.pk} is not ranked: variable lengths — its request lengths were drawn at random "
                       f"({lengths}), so its tok/s and latencies are not comparable with fixed-length runs; compare "
                       "it with runs of the same random-length settings")
            unranked_why[run.pk] = "not comparable with fixed-length runs"
        elif kind == "varied":
            refusal = (f"run #{run.pk} is not ranked: variable lengths — its requests' lengths varied ({lengths}: the "
                       "shortest and longest the file records per request) and the file does not say how they were "
                       "drawn, so its tok/s and latencies cannot be compared with any other run's")
            unranked_why[run.pk] = "its lengths varied"
        elif SHARED_LOAD_FLAG in (run.flags or []):
            refusal = f"run #{run.pk} is not ranked: shared load — {run_shared_load_text(run=run)}"
            unranked_why[run.pk] = "it measured another sweep's load as well"
        elif "input_length_unchecked" in (run.flags or []):
            refusal = (f"run #{run.pk} is not ranked: input length unchecked — the server reported no prompt "
                       "tokens per request and its prompts could not be counted again after it, so "
                       "its prompts may be much longer or shorter than the requested "
                       f"{run.input_len or '—'} tokens and its tok/s and latencies cannot be compared with any "
                       "other run's")
            unranked_why[run.pk] = "its input length was not checked"
        if refusal is not None and not unmeasured:
            notes.append(refusal)
            # Every run that is not ranked is listed with its reason, not only those without a measurement.
            excluded.append({"id": run.pk, "reason": refusal.split(": ", 1)[1]})
        entries.append({"id": run.pk, "label": run.label, "sweep_id": run.sweep_id, "status": run.status,
                        "flags": list(run.flags), "metrics": metrics, "ci95_ms": run_ci95_ms(run=run),
                        "config": _config_fields(run), "lengths": lengths,
                        "rankable": refusal is None, "refusal": refusal, "measured": unmeasured is None})
    # Metrics each run is not ranked for: its flags say the client could not time them.
    unreliable: dict[int, set[str]] = {}
    for run, e in zip(runs, entries):
        if not e["measured"]:
            continue
        for _flag, stems, why in run_metric_caveats(run=run):
            affected = [key for key, _ in BEST_METRICS if key.split(".", 1)[0] in stems]
            unreliable.setdefault(run.pk, set()).update(affected)
            names = [LATENCY_NAMES.get(stem, stem) for stem in stems]
            ranked = (f"; it is not ranked for {_and(names)} (any statistic)" if e["rankable"] and affected else "")
            notes.append(f"run #{run.pk}: {why}{ranked}")
    baseline_note = None
    if baseline_id is None:
        # The first run that is ranked: a change against a run that is not comparable (no
        # measurement, or lengths other than the requested fixed ones) would read as a result.
        baseline_id = next((e["id"] for e in entries if e["rankable"]), runs[0].pk)
        if baseline_id != runs[0].pk:
            # Said where the deltas are read: the first id is not the baseline the docs promise.
            first = entries[0]
            why = unranked_why.get(first["id"]) or next((x["reason"] for x in excluded if x["id"] == first["id"]),
                                                           "not comparable")
            flags = f" (flags: {', '.join(first['flags'])})" if first["flags"] else ""
            baseline_note = (f"run #{first['id']} is not rankable: {why}{flags}; run #{baseline_id}, the first "
                             f"ranked run, is the baseline (baseline={first['id']} takes run #{first['id']} anyway, "
                             "without deltas)")
            notes.append(baseline_note)
    base = next(i for i, e in enumerate(entries) if e["id"] == baseline_id)
    with_deltas = entries[base]["rankable"]
    for e in entries:
        e["workload_differs"] = _workload_differs(e, entries[base])
    workload_note = _workload_note(entries, baseline_id, with_deltas=with_deltas)
    if workload_note:
        notes.append(workload_note)
    if not any(e["rankable"] for e in entries):
        notes.append("no run is comparable (none is ranked), so no delta is given")
    elif not entries[base]["measured"]:
        notes.append(f"the baseline run #{baseline_id} holds no measurement, so no delta is given")
    elif not with_deltas:
        why = unranked_why.get(baseline_id, "not comparable")
        notes.append(f"the baseline run #{baseline_id} is not ranked ({why}), so no delta is given; choose a ranked "
                     "run as the baseline")

    # Goodput is a count against the run's own SLO: different (or unknown) SLOs, different measures.
    def slo_key(e: dict[str, Any]) -> str:
        return json.dumps(e["config"]["slo"], sort_keys=True)

    # A run without an SLO (or whose SLO is not recorded) has no goodput to compare either: one
    # goodput among runs whose SLOs differ is as incomparable as two.
    measured = [e for e in entries if e["measured"]]
    with_goodput = [e for e in measured if e["metrics"].get("goodput_req_s") is not None]
    slo_differs = len({slo_key(e) for e in measured}) > 1 or any(e["config"]["slo"] is None for e in with_goodput)
    # Written once the deltas and the best are known, so that it says which were given.
    goodput_note_at = len(notes) if with_goodput and len(measured) > 1 and slo_differs else None

    fields = []
    for key, label, unit in COMPARE_FIELDS:
        values = [_path(e["metrics"], key) if e["measured"] or key == "failures" else None for e in entries]
        deltas = [_delta_pct(v, values[base]) if with_deltas else None for v in values]
        if key == "goodput_req_s":
            same_slo = [entries[base]["config"]["slo"] is not None and slo_key(e) == slo_key(entries[base])
                        for e in entries]
            deltas = [d if same else None for d, same in zip(deltas, same_slo)]
        fields.append({"key": key, "label": label, "unit": unit, "values": values, "deltas_pct": deltas})
    config_keys = list(entries[0]["config"].keys())
    differs = [{"field": k, "values": [e["config"][k] for e in entries]} for k in config_keys
               if len({json.dumps(e["config"][k], sort_keys=True) for e in entries}) > 1]
    rankable = [e for e in entries if e["rankable"]]
    lengths = {e["lengths"] for e in rankable}
    # A closed loop's concurrency or an open loop's request rate: a best across loads would set one
    # run's latency against another's throughput at a different operating point.
    loads = {(e["config"].get("concurrency"), e["config"].get("request_rate")) for e in rankable}
    # Random-length runs of one setting drew their own lengths: ranked only where they drew alike.
    drawn_apart = _random_lengths_apart(rankable, settings={r.pk: kind for r, (kind, _) in zip(runs, settings)},
                                        tie_pct=tie_pct) if len(lengths) == 1 and len(rankable) > 1 else None
    one_workload = len(lengths) == 1 and len(loads) == 1 and drawn_apart is None
    best: dict[str, int | None] = {}
    ties: dict[str, list[int]] = {}
    uncertain: dict[str, list[int]] = {}
    if not rankable:
        notes.append("no run is rankable; no best run is named")
    elif len(lengths) > 1:
        notes.append("the rankable runs have different input/output lengths "
                     f"({', '.join(sorted(lengths))}); no best run is named")
    elif drawn_apart is not None:
        notes.append(drawn_apart)
    elif len(loads) > 1:
        # closed loops by concurrency, then open loops by rate; an unknown load last
        order = sorted(loads, key=lambda cr: (cr[1] is not None, cr[0] is None and cr[1] is None,
                                               cr[1] if cr[1] is not None else (cr[0] or 0)))
        said = ", ".join(_load_said(c, r) for c, r in order)
        notes.append(f"the rankable runs ran at different loads ({said}): a best across loads would set one operating "
                     "point's latency against another's throughput; no best run is named (compare runs of one load, "
                     "or read a sweep's ceiling analysis across its loads)")
    elif len(rankable) == 1:
        notes.append(f"run #{rankable[0]['id']} is the only rankable run: it is named best with no other "
                     "run to rank it against")
    units = {key: unit for key, _, unit in COMPARE_FIELDS}
    by_id = {e["id"]: e for e in entries}
    # Metrics whose best or runner-up completed too few requests, by those runs (one note each).
    too_few: dict[tuple[int, ...], list[str]] = {}
    # Notes name a metric as the side-by-side table does (``TPOT mean``), not by its key.
    labels = {key: label for key, label, _ in COMPARE_FIELDS}
    for key, higher_better in BEST_METRICS:
        with_value = [e for e in rankable if _path(e["metrics"], key) is not None]
        vals = [(_path(e["metrics"], key), e["id"]) for e in with_value if key not in unreliable.get(e["id"], ())]
        if key == "goodput_req_s" and len(vals) > 1 and one_workload:
            slos = {e["id"]: e["config"]["slo"] for e in with_value}
            if any(slos[rid] is None for _, rid in vals) or len({slo_key(e) for e in with_value}) > 1:
                said = _slo_groups([(rid, slos[rid]) for _, rid in vals], prefix="")
                notes.append(f"no best run for goodput: it counts the requests that met each run's own SLO, and the "
                             f"rankable runs' SLOs differ or are not known ({said})")
                best[key] = None
                continue
        if not one_workload or not vals:
            if rankable and one_workload:
                if with_value:
                    shown = ", ".join("#" + str(e["id"]) for e in with_value)
                    notes.append(f"no best run for {labels.get(key, key)}: every rankable run with a value for it "
                                 f"({shown}) has one the client could not time (see the note on each)")
                elif key == "goodput_req_s":
                    notes.append("no rankable run has a goodput (a run has one only when it was measured against an "
                                 "SLO); no best run is named for it")
                else:
                    notes.append(f"no rankable run has a value for {labels.get(key, key)}; no best run is named "
                                 "for it")
            best[key] = None
            continue
        # Best first; on equal values the earlier run (lower id) first, as before.
        ranked = sorted(vals, key=lambda v: (-v[0] if higher_better else v[0], v[1]))
        top = ranked[0][0]
        if key == "goodput_req_s" and top <= 0:
            # a goodput of 0 is no request within the SLO: nothing to name best
            best[key] = None
            zero = [rid for _, rid in ranked]
            notes.append(f"no best run for goodput: no run met its SLO ({_runs_named(zero)} "
                         f"{'has' if len(zero) == 1 else 'have'} a goodput of 0 req/s, no request within the SLO)")
            continue
        close = [rid for value, rid in ranked if _spread_pct(value, top) < tie_pct]
        if len(close) > 1:
            best[key] = None
            ties[key] = close
            tied = [(value, rid) for value, rid in ranked if rid in close]
            shown = ", ".join(f"#{rid} {text}" for (_, rid), text in
                              zip(tied, plain_figures([value for value, _ in tied], digits=4)))
            spread = _spread_pct(ranked[len(close) - 1][0], top)
            how = ("are equal" if spread == 0
                   else f"are within {plain_figures([spread], digits=2)[0]} % of each other")
            notes.append(f"no best run for {labels.get(key, key)}: runs {shown} {units.get(key, '')} {how}, under the "
                         f"{tie_pct:g} % tie threshold (run-to-run noise)")
            continue
        if len(ranked) > 1 and (small := _too_few_compared(ranked[:2], by_id)):
            # The best or the runner-up completed too few requests to tell them apart: no best.
            best[key] = None
            too_few.setdefault(tuple(small), []).append(key)
            continue
        overlap = _ci_overlap(key, ranked, by_id, higher_better)
        if overlap and overlap[2]:
            best[key] = None
            notes.append(overlap[1])
            continue
        best[key] = ranked[0][1]
        if overlap:
            uncertain[key] = overlap[0]
            notes.append(overlap[1])
    for small, keys in too_few.items():
        notes.append(_too_few_note(small, [labels.get(k, k) for k in keys], by_id))
    if goodput_note_at is not None:
        goodput = next(f for f in fields if f["key"] == "goodput_req_s")
        given = [e["id"] for e, d in zip(entries, goodput["deltas_pct"]) if d is not None]
        said = _slo_groups([(e["id"], e["config"]["slo"]) for e in measured])
        note = ("goodput is not comparable across these runs: it counts the requests that met each run's own SLO, "
                f"and their SLOs differ ({said}); "
                + (f"goodput deltas are given only between {_runs_named(given)}, which share the baseline "
                   f"run #{baseline_id}'s SLO" if len(given) > 1 else "no goodput delta is given"))
        if best.get("goodput_req_s") is not None:
            among = [e["id"] for e in rankable if _path(e["metrics"], "goodput_req_s") is not None]
            note += (f"; the best goodput is named among {_runs_named(among)}, the ranked runs with a goodput, "
                     "which share one SLO" if len(among) > 1 else
                     f"; run #{among[0]} is named best for goodput as the only ranked run with one")
        notes.insert(goodput_note_at, note)
    return {"runs": entries, "fields": fields, "config_differs": differs, "best": best, "ties": ties,
            "uncertain": uncertain, "baseline": baseline_id, "baseline_note": baseline_note,
            "workload_note": workload_note, "tie_threshold_pct": tie_pct, "excluded": excluded,
            "notes": notes}


class CopyOf(str):
    """Why a run of a comparison is a copy of another (:func:`imported_copies`), in words, with
    ``held``, the run holding the result first."""

    held: BenchmarkRun

    def __new__(cls, text: str, held: BenchmarkRun) -> CopyOf:
        obj = super().__new__(cls, text)
        obj.held = held
        return obj


def imported_copies(*, runs: Sequence[BenchmarkRun]) -> dict[int, CopyOf]:
    """The runs of ``runs`` that hold the same result as an earlier one of them, by id: imported
    runs with one ``record_sha256`` (the same record read as JSON, a copy kept with
    ``allow_duplicate``), each but the oldest (lowest id). One measurement imported twice is not
    two runs: equal numbers between copies are the same numbers, not run-to-run noise, so a
    comparison ranks the oldest alone. Each copy's words name the run it copies and the SHA-256:
    the file's (``original_sha256``) where both came from one file, byte for byte (``the same
    result file as run #5, imported twice (SHA-256 …): one measurement, not an independent
    repeat``), else the result record's."""
    first: dict[str, BenchmarkRun] = {}
    for run in sorted(runs, key=lambda r: r.pk):
        if run.source == RunSource.IMPORTED and run.record_sha256:
            first.setdefault(run.record_sha256, run)
    out: dict[int, CopyOf] = {}
    for run in runs:
        held = first.get(run.record_sha256) if run.source == RunSource.IMPORTED and run.record_sha256 else None
        if held is None or held.pk == run.pk:
            continue
        if run.original_sha256 and run.original_sha256 == held.original_sha256:
            what = f"the same result file as run #{held.pk}, imported twice (SHA-256 {run.original_sha256})"
        else:
            what = (f"the same result as run #{held.pk}, imported twice (the result's record read as JSON has SHA-256 "
                    f"{run.record_sha256})")
        out[run.pk] = CopyOf(f"{what}: one measurement, not an independent repeat, so it is not ranked beside it and "
                             "their equal values are not run-to-run noise", held)
    return out


def _random_lengths_apart(rankable: Sequence[dict[str, Any]], *, settings: Mapping[int, str],
                          tie_pct: float) -> str | None:
    """Why no best is named among ``rankable`` comparison entries of one random-length setting
    (``settings``: each run's kind, :func:`run_length_setting`) whose requests drew different
    lengths: their measured mean input or output tokens per request (``metrics``
    ``input_tokens_mean``, ``output_tokens_mean``) more than ``tie_pct`` percent apart, or not
    known. The same ranges give the same distribution, not the same requests; a mean a few
    percent longer is a heavier workload, and a best would rank the draw. None when they drew
    alike, or the runs are not random-length ones."""
    if not rankable or any(settings.get(e["id"]) != "random" for e in rankable):
        return None
    apart: list[str] = []
    for key, words in (("input_tokens_mean", "input"), ("output_tokens_mean", "output")):
        values = [e["metrics"].get(key) for e in rankable]
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
            apart.append(f"mean {words} tokens per request not known for every run")
            continue
        if _spread_pct(min(values), max(values)) > tie_pct:
            shown = ", ".join(f"#{e['id']} {text}" for e, text in zip(rankable, plain_figures(values, digits=4)))
            apart.append(f"mean {words} tokens per request {shown}")
    if not apart:
        return None
    return (f"the rankable runs' lengths were drawn at random from the same ranges ({rankable[0]['lengths']}) but "
            f"came out differently ({'; '.join(apart)}: more than {tie_pct:g} % apart): a best would rank the "
            "draw of lengths, not the server; no best run is named")


def _load_said(concurrency: Any, request_rate: Any) -> str:
    """A run's load in a note: ``c=16`` (closed loop), ``2 req/s`` (open loop), ``2 req/s (at
    most 8 in flight)`` (an open loop capped at a concurrency), ``load unknown``."""
    if request_rate is not None:
        cap = f" (at most {concurrency} in flight)" if concurrency is not None else ""
        return f"{plain_figures([float(request_rate)])[0]} req/s{cap}"
    return f"c={concurrency}" if concurrency is not None else "load unknown"


#: What a run's workload is, as a comparison tells runs of unlike workloads apart: (CSV column,
#: key of the comparison's ``config``, words, unit). A run whose value differs from the baseline
#: run's is listed in its ``workload_differs``; a value not recorded (null) differs from none,
#: except the request rate, where null is a closed loop (a fixed concurrency) and a rate an open one.
WORKLOAD_PARAMS = (
    ("input_len", "input_len", "input length", "tokens"),
    ("output_len", "output_len", "output length", "tokens"),
    ("concurrency", "concurrency", "concurrency", "requests in flight"),
    ("request_rate_req_s", "request_rate", "request rate", "req/s"),
    ("served_model_name", "served_model_name", "model", ""),
    ("engine", "engine", "engine", ""),
    ("topology", "topology", "topology", ""),
    ("num_gpus", "num_gpus", "GPUs", "GPUs"),
    ("deployment_id", "deployment_id", "deployment", ""),
)


def _workload_text(value: Any, key: str, unit: str, *, engine: str | None = None) -> str:
    """A workload value in a note: ``1024 tokens``, ``2 req/s``, ``closed loop``, ``vllm``,
    ``#3`` (a deployment), ``8`` or ``8 modelled`` (GPUs, whose label names the unit; modelled when
    a run of ``engine`` ran on none, :func:`benchmarks.models.gpus_are_modelled`)."""
    if key == "request_rate" and value is None:
        return "closed loop"
    if key == "deployment_id":
        return f"#{value}"
    if key == "num_gpus":
        return f"{value}" + (" modelled" if gpus_are_modelled(engine=engine, num_gpus=value) else "")
    text = plain_figures([value])[0] if isinstance(value, float) else str(value)
    if unit and value == 1:
        unit = {"tokens": "token", "requests in flight": "request in flight"}.get(unit, unit)
    return f"{text} {unit}" if unit else text


def _workload_differs(entry: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """How the compared run ``entry`` measured another workload than the ``baseline`` run
    (:data:`WORKLOAD_PARAMS`): ``[{"field": "input_len", "label": "input length", "unit":
    "tokens", "value": 1024, "baseline_value": 256}, ...]``; none for the baseline itself."""
    out = []
    if entry["id"] == baseline["id"]:
        return out
    for field, key, label, unit in WORKLOAD_PARAMS:
        value, base = entry["config"].get(key), baseline["config"].get(key)
        if key != "request_rate" and (value is None or base is None):
            continue
        if value != base:
            out.append({"field": field, "label": label, "unit": unit, "value": value, "baseline_value": base})
    return out


def workload_phrases(differs: Sequence[Mapping[str, Any]], *, engine: str | None = None,
                     baseline_engine: str | None = None) -> list[str]:
    """A run's ``workload_differs`` in words, one phrase a parameter: ``input length 1024 tokens
    (baseline 256 tokens)``, ``request rate 2 req/s (baseline closed loop)``, ``deployment #4
    (baseline #3)``, ``GPUs 4 modelled (baseline 8)`` (``engine`` and ``baseline_engine``, the
    run's and the baseline's, tell a sim's modelled GPUs)."""
    def text(value: Any, d: Mapping[str, Any], engine: str | None) -> str:
        return _workload_text(value, _WORKLOAD_KEY[d["field"]], d["unit"], engine=engine)
    return [f"{d['label']} {text(d['value'], d, engine)} (baseline {text(d['baseline_value'], d, baseline_engine)})"
            for d in differs]


def _workload_note(entries: Sequence[Mapping[str, Any]], baseline_id: int, *, with_deltas: bool) -> str | None:
    """One note naming every run whose workload is not the baseline's, with the values and units
    (``deltas compare unlike workloads, ...: against the baseline run #1, run #2 has input length
    1024 tokens (baseline 256 tokens) and concurrency 4 requests in flight (baseline 1 requests in
    flight)``), or None when every run measured the baseline's workload."""
    baseline_engine = next(e["config"].get("engine") for e in entries if e["id"] == baseline_id)
    parts = [f"run #{e['id']} has " + _and(workload_phrases(e["workload_differs"], engine=e["config"].get("engine"),
                                                            baseline_engine=baseline_engine))
             for e in entries if e.get("workload_differs")]
    if not parts:
        return None
    lead = ("deltas compare unlike workloads, so they measure the workload change as well as any other"
            if with_deltas else "the runs measured unlike workloads")
    return f"{lead}: against the baseline run #{baseline_id}, {'; '.join(parts)}"


_WORKLOAD_KEY = {field: key for field, key, _, _ in WORKLOAD_PARAMS}


def run_length_setting(*, run: BenchmarkRun) -> tuple[str, str | None]:
    """The requested lengths of ``run`` as a comparison groups runs by them: ``("fixed",
    "1024/1024")`` (input/output tokens, every request that length), ``("random", "random [1,
    1024]/[1, 1024]")`` (each request's input and output lengths drawn uniformly from these
    inclusive ranges of tokens: an imported SGLang random-dataset run, flag ``variable_lengths``),
    ``("mismatch", "1024/1024")`` (fixed lengths that some requests did not have, flag
    ``output_length_mismatch`` or ``input_length_mismatch``), ``("varied", "varied [96, 1024]/[12,
    128]")`` (per-request lengths that differ, flag ``variable_lengths``: the shortest and longest
    input and output length the file records per request, as vLLM's ``input_lens`` and
    ``output_lens``; observed, not a range they were drawn from) or ``("unknown", None)`` (flag
    ``lengths_unknown`` or ``range_ratio_unknown``, or no lengths and no ranges recorded). Two runs with the same ``fixed`` or
    ``random`` words had the same length distribution; ``varied`` words say nothing of one."""
    flags = set(run.flags or [])
    if run.input_len and run.output_len:
        words = f"{run.input_len}/{run.output_len}"
        if flags & {"output_length_mismatch", "input_length_mismatch"}:
            return "mismatch", words
        if not flags & {"variable_lengths", "lengths_unknown"}:
            return "fixed", words
    summary = run.summary or {}
    spans = [summary.get("input_len_range"), summary.get("output_len_range")]
    if "variable_lengths" in flags and "lengths_unknown" not in flags and all(
            isinstance(s, list | tuple) and len(s) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 for v in s) for s in spans):
        return "random", "random " + "/".join(f"[{lo}, {hi}]" for lo, hi in spans)
    seen = [summary.get("input_lens_min_max"), summary.get("output_lens_min_max")]
    if "variable_lengths" in flags and "lengths_unknown" not in flags and all(
            isinstance(s, list | tuple) and len(s) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 for v in s) for s in seen):
        return "varied", "varied " + "/".join(f"[{lo}, {hi}]" for lo, hi in seen)
    if flags & {"output_length_mismatch", "input_length_mismatch"}:
        return "mismatch", None
    return "unknown", None


def run_ci95_ms(*, run: BenchmarkRun) -> dict[str, dict[str, list[float | None] | None]] | None:
    """The 95 % confidence intervals of ``run``'s per-request latency statistics in ms, by the
    stems of :data:`COMPARE_FIELDS` (``{"ttft_ms": {"mean": [low, high], "p50": [...], "p90": [...],
    "p99": [...]}, "tpot_ms": ..., "e2e_ms": ...}``; a bound the run's requests cannot give is null,
    see :mod:`benchmarks.loadgen.uncertainty`; each contains the summary's own statistic); null
    for a run whose summary has none (imported files and runs measured before intervals were
    kept). ITL has none: the gaps of one request are not independent samples. A low below 0 (a
    mean's t interval of a few spread-out requests, in a summary stored before it was clipped) is
    shown as 0: a latency is never negative, and the cut keeps the coverage at ≥ 95 %
    (:func:`benchmarks.loadgen.uncertainty.clip_low`)."""
    summary = run.summary or {}
    out: dict[str, dict[str, list[float | None] | None]] = {}
    for stem in CI_STEMS:
        stats = summary.get(f"{stem[:-3]}_s")
        ci = stats.get("ci95") if isinstance(stats, Mapping) else None
        if not isinstance(ci, Mapping):
            continue
        # Summaries stored before intervals were widened to contain their estimate get the same
        # treatment here (benchmarks.loadgen.uncertainty.contain_estimate).
        widened = {stat: clip_low(contain_estimate(bounds, _number(stats.get(stat)))) for stat, bounds in ci.items()}
        out[stem] = {stat: (None if bounds is None else [None if b is None else b * 1000.0 for b in bounds])
                     for stat, bounds in widened.items()}
    return out or None


def _ci_text(bounds: list[float | None] | None, stat: str, count: int | None) -> str:
    """One run's interval in a comparison note: ``24,000–25,100 ms``; ``at least 24,900 ms, not
    bounded above by its 100 requests (a p99 needs 368)``; ``no interval from its 1 request (a p50
    needs 6)``."""
    requests = "its requests" if count is None else f"its {count} request{'' if count == 1 else 's'}"
    need = f"a {stat} needs {min_samples_for_interval(stat)}"
    if bounds is None or all(b is None for b in bounds):
        return f"no interval from {requests} ({need})"
    low_text, high_text = plain_figures(bounds, digits=4)
    if low_text is not None and high_text is not None:
        return f"{low_text}–{high_text} ms"
    if high_text is None:
        return f"at least {low_text} ms, not bounded above by {requests} ({need})"
    return f"at most {high_text} ms, not bounded below by {requests} ({need})"


def _too_few_compared(pair: list[tuple[float, int]], entries: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """The ids of the runs of ``pair`` (a metric's best and runner-up, ``(value, run id)``) that
    completed fewer than :data:`benchmarks.analysis.model.MIN_COMPARED_REQUESTS` requests, in
    ``pair``'s order: the mean, percentiles and throughput of so few requests move with one
    request's luck, so the difference between the two cannot be judged. A run whose count is not
    known is not counted among them."""
    small = []
    for _, rid in pair:
        count = _number(entries[rid]["metrics"].get("successes"))
        if count is not None and count < MIN_COMPARED_REQUESTS:
            small.append(rid)
    return small


def _too_few_note(small: Sequence[int], labels: list[str], entries: Mapping[int, Mapping[str, Any]]) -> str:
    """The note for the metrics (``labels``, as the table names them) that name no best because
    the runs ``small`` completed too few requests: ``no best run for TTFT mean and TTFT p50: run
    #1 completed only 1 request and run #2 only 1 request, fewer than the 10 each run needs to be
    compared, so the difference cannot be judged from so few requests; measure at least 10
    requests per run to rank them``."""
    def count(rid: int) -> str:
        n = entries[rid]["metrics"].get("successes")
        return f"{n} request{'' if n == 1 else 's'}"
    said = " and ".join(f"run #{rid} completed only {count(rid)}" if i == 0 else f"run #{rid} only {count(rid)}"
                        for i, rid in enumerate(small))
    return (f"no best run for {_and(labels)}: {said}, fewer than the {MIN_COMPARED_REQUESTS} each run needs to be "
            "compared, so the difference cannot be judged from so few requests; measure at least "
            f"{MIN_COMPARED_REQUESTS} requests per run to rank them")


def _ci_overlap(key: str, ranked: list[tuple[float, int]], entries: Mapping[int, Mapping[str, Any]],
                higher_better: bool) -> tuple[list[int], str, bool] | None:
    """For a latency statistic whose best run is ``ranked[0]``: ``([best id, runner-up id],
    note, unjudged)`` when the two runs' 95 % confidence intervals overlap (the difference between
    them may be sampling noise at their request counts; ``unjudged`` false: the best is still
    named), else None (no overlap, no runner-up, or a run without intervals). Lower is better for
    every latency; an unbounded side overlaps. Where either run's requests bound the statistic on
    neither side (the mean of one request), ``unjudged`` is true and the note says no best is named:
    the difference cannot be judged from so few requests (nothing overlaps there)."""
    stem, _, stat = key.partition(".")
    if higher_better or stem not in CI_STEMS or len(ranked) < 2:
        return None
    (best_value, best_id), (next_value, next_id) = ranked[0], ranked[1]
    cis = []
    for rid in (best_id, next_id):
        by_stem = entries[rid].get("ci95_ms")
        if not by_stem or stem not in by_stem:
            return None   # a run without per-request samples (imported): nothing to say
        # A statistic its requests cannot bound (the mean of one request) is unbounded both ways.
        cis.append((by_stem.get(stem) or {}).get(stat) or [None, None])
    (_, best_high), (next_low, _) = cis
    if best_high is not None and next_low is not None and best_high < next_low:
        return None
    label = dict((k, lab) for k, lab, _ in COMPARE_FIELDS).get(key, key)
    counts = [entries[rid]["metrics"].get("successes") for rid in (best_id, next_id)]
    best_text, next_text = plain_figures([best_value, next_value], digits=4)
    both = f"(#{best_id}: {_ci_text(cis[0], stat, counts[0])}; #{next_id}: {_ci_text(cis[1], stat, counts[1])})"
    if any(all(b is None for b in ci) for ci in cis):
        # No interval on one side is no evidence of overlap: too few requests to say anything.
        return [best_id, next_id], (
            f"no best run for {label}: run #{best_id}'s {best_text} ms against #{next_id}'s {next_text} ms, but the "
            f"difference cannot be judged from so few requests {both}; measure more requests to separate them"), True
    named = f"{label}: run #{best_id} is named best ({best_text} ms against #{next_id}'s {next_text} ms), but "
    return [best_id, next_id], (
        f"{named}their 95 % confidence intervals overlap {both}: with these requests the difference may be "
        "sampling noise; measure more requests to separate them"), False


COMPARE_CSV_SLO = tuple(f"slo_{k}" for k in SLO_KEYS)
# What each run measured, named as the run export names it (:data:`EXPORT_COLUMNS`) where it has
# the column: (CSV column, key of the comparison's ``config``). ``deployment_id`` and
# ``recipe_id`` are those of the sweep's snapshot (empty for an imported run).
COMPARE_CSV_CONFIG = (
    ("sweep_id", None), ("source", "source"), ("import_format", "import_format"),
    ("served_model_name", "served_model_name"), ("deployment_id", "deployment_id"), ("recipe_id", "recipe_id"),
    ("recipe", "recipe"), ("recipe_version", "recipe_version"), ("engine", "engine"), ("topology", "topology"),
    ("node", "node"), ("num_gpus", "num_gpus"), ("concurrency", "concurrency"),
    ("request_rate_req_s", "request_rate"), ("input_len", "input_len"), ("output_len", "output_len"),
    ("num_requests", "num_requests"),
)


def _compare_column(key: str) -> str:
    """A comparison field's CSV column, the run export's name for it (:data:`EXPORT_COLUMNS`, the
    unit in the name): ``ttft_ms_p99``, ``itl_per_gap_ms_p99``, ``goodput_req_s``,
    ``tok_s_per_gpu``, ``failures``."""
    stem, _, stat = key.partition(".")
    if stat:
        return f"{dict((m + '_ms', s) for m, s in EXPORT_LATENCIES).get(stem, stem)}_{stat}"
    return key


def runs_compare_csv(*, comparison: Mapping[str, Any]) -> str:
    """A :func:`runs_compare` result as CSV, one row per run in the compared order: ``run_id``,
    ``label``, ``baseline`` (``true`` for the baseline run), ``baseline_note`` (on the baseline's row
    where the first run could not be it: why, as the API's ``baseline_note``), ``rankable``, ``not_ranked_reason``,
    what the run measured (:data:`COMPARE_CSV_CONFIG`: sweep, source, model, deployment and
    recipe ids, GPUs, ``concurrency``, ``request_rate_req_s`` (empty for a closed loop),
    ``input_len`` and ``output_len`` in tokens, ``num_requests``), the run's SLO in seconds
    (``slo_ttft_s``, ``slo_tpot_s``, ``slo_e2e_s``; empty when none or not known), then for every
    compared field its value under the run export's column name (:func:`_compare_column`; the
    unit in the name) and ``<column>_delta_pct`` (against the baseline, percent), and ``best_for``
    (the metrics this run is named best for, ``;``-separated, by this CSV's own column names:
    ``ttft_ms_p50;itl_per_gap_ms_p99``), ``workload_differs_from_baseline``
    (the columns of :data:`WORKLOAD_PARAMS` whose value is not the baseline run's, ``;``-separated,
    such as ``input_len;concurrency``: its deltas compare unlike workloads; empty for the baseline
    and a run of its workload) and ``notes``: every note of the comparison (the API's ``notes``,
    ``baseline_note`` and the workload note among them), one per line of the cell, the same on
    every row, so a row or a filtered table read alone keeps every caveat. A cell with line breaks
    is quoted, which ``csv`` and ``pandas.read_csv`` read without options
    (``df["notes"][0].splitlines()``)."""
    fields = list(comparison["fields"])
    columns = ["run_id", "label", "baseline", "baseline_note", "rankable", "not_ranked_reason",
               *(col for col, _ in COMPARE_CSV_CONFIG), *COMPARE_CSV_SLO]
    for f in fields:
        col = _compare_column(f["key"])
        columns += [col, f"{col}_delta_pct"]
    columns += ["best_for", "workload_differs_from_baseline", "notes"]
    notes = "\n".join(str(n) for n in comparison.get("notes") or [])
    rows = []
    for i, e in enumerate(comparison["runs"]):
        slo = e["config"].get("slo") or {}
        row: dict[str, Any] = {
            "run_id": e["id"], "label": e["label"],
            "baseline": "true" if e["id"] == comparison["baseline"] else "false",
            "baseline_note": comparison.get("baseline_note") if e["id"] == comparison["baseline"] else None,
            "rankable": "true" if e["rankable"] else "false", "not_ranked_reason": e["refusal"],
            **{col: e["sweep_id"] if key is None else e["config"].get(key) for col, key in COMPARE_CSV_CONFIG},
            **{f"slo_{k}": slo.get(k) for k in SLO_KEYS},
            "best_for": ";".join(_compare_column(k) for k, rid in comparison["best"].items() if rid == e["id"]),
            "workload_differs_from_baseline": ";".join(d["field"] for d in e.get("workload_differs") or []),
            "notes": notes,
        }
        for f in fields:
            col = _compare_column(f["key"])
            row[col] = f["values"][i]
            row[f"{col}_delta_pct"] = f["deltas_pct"][i]
        rows.append(row)
    return csv_text(rows, columns)


# ---------------------------------------------------------------------------------------- export

# Statistics of each latency in the CSV export (ms), and the latencies with their column stems:
# ITL is the gap between consecutive output events (metrics.md), so its columns say "per gap".
EXPORT_STATS = ("mean", "std", "p50", "p90", "p99")
EXPORT_LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_per_gap_ms"), ("e2e", "e2e_ms"))
EXPORT_COLUMNS = (
    "run_id", "sweep_id", "source", "status", "started_at", "ended_at", "imported_at", "result_date",
    "served_model_name", "concurrency", "request_rate_req_s", "input_len",
    "output_len", "num_requests", "num_gpus", "requests", "successes", "failures", "aborted",
    "measured_duration_s", "output_throughput_tok_s", "output_throughput_basis", "output_throughput_completed_tok_s",
    "output_tokens_aborted", "tok_s_per_gpu", "total_token_throughput_tok_s",
    "request_throughput_req_s", "goodput_req_s", "slo_ttft_s", "slo_tpot_s", "slo_e2e_s", "slo_attainment_fraction",
    "achieved_concurrency_mean_requests", "achieved_concurrency_max_requests",
    *(f"{stem}_{stat}" for _, stem in EXPORT_LATENCIES for stat in EXPORT_STATS),
    "input_tokens_mean", "input_tokens_source", "input_tokens_recount_sample_mean", "output_tokens_mean", "flags",
)


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _export_row(run: BenchmarkRun) -> dict[str, Any]:
    """One run's CSV row (:data:`EXPORT_COLUMNS`). Units are in the names: latencies ms, rates per
    second (the open-loop point's ``request_rate_req_s`` too), SLOs seconds, SLO attainment a
    fraction 0-1 of the requests sent, achieved concurrency requests in flight (time-weighted
    mean; max), ``input_tokens_source`` where ``input_tokens_mean`` comes from (``stream``: the
    server's per-request usage; ``recount``: every successful request's prompt counted again after
    the point) and ``input_tokens_recount_sample_mean`` the mean of a recount that covered only a
    sample of them (``input_tokens_mean`` then empty), ``failures`` the requests the server
    failed and ``aborted`` those a stop (a cancel, the deployment going down) ended in flight,
    neither counted in ``successes`` (empty for an imported run), ``measured_duration_s`` how long
    the run took, seconds (the summary's ``duration_s``; not the grid's time limit, which the API
    calls the run's ``duration_s``), ``output_throughput_tok_s`` the figure the page and the API
    show, with ``output_throughput_basis`` saying which tokens it counts (``completed``,
    ``completed_and_aborted`` for a run a stop cut short with requests in flight: their streamed
    tokens too; ``completed_only`` for such a run stored before those were counted, a figure below
    what the server delivered: :data:`OUTPUT_BASIS_TEXT`), ``output_throughput_completed_tok_s``
    the successful requests' tokens alone and ``output_tokens_aborted`` what the aborted ones
    streamed. Times: ``started_at`` and ``ended_at`` when a measured run started and ended, ISO
    8601 UTC (``2026-12-06T13:32:24.512301+00:00``; ``ended_at`` empty while it runs), empty for
    an imported run, whose harness did not record when it ran; ``imported_at`` when an imported run
    was imported, ISO 8601 UTC (:func:`run_imported_at`), and ``result_date`` the local time its
    file states, without an offset (:func:`run_result_date`), both empty for a measured run.
    Imported runs fill what their file
    gave (SGLang's ``concurrency`` is its mean in flight, vLLM's ``max_concurrent_requests`` its
    max); anything else is an empty cell."""
    m = run_metrics(run=run)
    s = run.summary or {}
    slo = run_slo(run=run) or {}
    row: dict[str, Any] = {
        "run_id": run.pk, "sweep_id": run.sweep_id, "source": run.source, "status": run.status,
        "started_at": _iso(run.started_at), "ended_at": _iso(run.ended_at),
        "imported_at": run_imported_at(run=run), "result_date": run_result_date(run=run),
        "served_model_name": served_model_name_shown(run.served_model_name) or None, "concurrency": run.concurrency,
        "request_rate_req_s": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests, "num_gpus": run.num_gpus, "flags": ";".join(run.flags),
        "total_token_throughput_tok_s": _number(m["total_token_throughput_tok_s"]),
        "input_tokens_source": run_input_tokens_source(run=run),
        "input_tokens_recount_sample_mean": _number(s.get("input_tokens_recount_sample_mean")),
        **{f"slo_{k}": slo.get(k) for k in SLO_KEYS},
        "slo_attainment_fraction": _number(m.get("slo_attainment")),
        "achieved_concurrency_mean_requests": _number(s.get("achieved_concurrency_mean", s.get("mean_concurrency"))),
        "achieved_concurrency_max_requests": _number(s.get("achieved_concurrency_max",
                                                           s.get("max_concurrent_requests"))),
    }
    for key in ("requests", "successes", "failures", "aborted", "output_throughput_tok_s", "output_throughput_basis",
                "output_throughput_completed_tok_s", "output_tokens_aborted", "tok_s_per_gpu", "request_throughput_req_s", "goodput_req_s", "input_tokens_mean", "output_tokens_mean"):
        row[key] = m[key]
    # The summary's duration_s is how long the run took; the API's run duration_s is the grid's
    # time limit. The column says which one it is.
    row["measured_duration_s"] = m["duration_s"]
    for metric, stem in EXPORT_LATENCIES:
        for stat in EXPORT_STATS:
            row[f"{stem}_{stat}"] = (m[f"{metric}_ms"] or {}).get(stat)
    return row


def _csv(runs: Iterable[BenchmarkRun]) -> str:
    """``runs`` as CSV (:data:`EXPORT_COLUMNS`) through :func:`controlplane.csvsafe.csv_text`: a
    text cell a spreadsheet would read as a formula (a model name starting with ``=``) is quoted."""
    return csv_text((_export_row(run) for run in runs), EXPORT_COLUMNS)


def run_export_dict(*, run: BenchmarkRun, records: bool = False) -> dict[str, Any]:
    """One run as a JSON-ready dict: point parameters (named as the CSV export names them, the
    unit in the name where there is one: ``request_rate_req_s``), the full summary, flags, metrics
    (:func:`run_metrics`), snapshot, source and timestamps, ISO 8601 UTC (``created_at``, when the
    run was made: a measured point as it started, an imported run when it was imported;
    ``started_at`` / ``ended_at`` of a measured run, null for an imported one; of an imported one
    ``imported_at``, :func:`run_imported_at`, and the ``result_date`` its file states,
    :func:`run_result_date`, a local time without an offset), ``record_sha256`` (not the original
    imported file).

    With ``records``, also ``records``: every request as :func:`run_records_rows` writes it, each
    output event's time included (``event_ms``, ms from the request's start), or null when the
    run has no per-request records (imported, never measured, still running, or its file is
    missing), with ``records_note`` saying which."""
    out = {
        "id": run.pk, "sweep_id": run.sweep_id, "ordinal": run.ordinal, "status": run.status,
        "reason": run.reason or None,
        "source": run.source, "import_format": run.import_format or None,
        "original_filename": run_filename_shown(run.original_filename) or None, "concurrency": run.concurrency,
        "request_rate_req_s": run.request_rate, "input_len": run.input_len, "output_len": run.output_len,
        "num_requests": run.num_requests,
        # two durations, as GET /api/runs/<id>/ gives them: the point's time limit and the time it took
        "duration_s": run.duration_s, "measured_duration_s": run_measured_duration_s(run=run),
        "api": run.api or None, "served_model_name": served_model_name_shown(run.served_model_name) or None,
        "num_gpus": run.num_gpus, "flags": list(run.flags), "metrics": run_metrics(run=run),
        "summary": run_summary_read(run=run),
        "snapshot": snapshot_shown(run.snapshot), "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at), "ended_at": _iso(run.ended_at),
        "imported_at": run_imported_at(run=run), "result_date": run_result_date(run=run),
        "record_sha256": run.record_sha256 or None,
    }
    if records:
        try:
            out["records"] = run_records_rows(run=run, offset=0, limit=ALL_RECORDS)["rows"]
            out["records_note"] = None
        except Conflict as exc:
            out["records"] = None
            out["records_note"] = str(exc)
        except (InvalidInput, OSError, ValueError, KeyError) as exc:
            out["records"] = None
            detail = exc.errors.get("records") if isinstance(exc, InvalidInput) else None
            out["records_note"] = detail[0] if detail else f"the record file of run #{run.pk} cannot be read"
    return out


def _iso(dt: datetime.datetime | None) -> str | None:
    """``dt`` as ISO 8601 in UTC (``2026-12-06T13:32:24.512301+00:00``); None for None."""
    return dt.astimezone(datetime.timezone.utc).isoformat() if dt else None


def run_imported_at(*, run: BenchmarkRun) -> str | None:
    """When an imported run was imported (its ``created_at``), ISO 8601 UTC; None for a measured
    run. Not when the benchmark ran: an imported run has no ``started_at`` or ``ended_at``."""
    return _iso(run.created_at) if run.source == RunSource.IMPORTED else None


def run_result_date(*, run: BenchmarkRun) -> str | None:
    """The time an imported run's file states for its result (vLLM's ``date``), as an ISO 8601
    local time without an offset, the zone not being recorded
    (:func:`benchmarks.importers.result_date`); None without one and for a measured run."""
    if run.source != RunSource.IMPORTED or not isinstance(run.summary, dict):
        return None
    return result_date(run.summary.get("date"))


def run_export_csv(*, run: BenchmarkRun) -> str:
    """The run as CSV: a header of :data:`EXPORT_COLUMNS` (latencies ms, throughputs per second)
    and one row; empty cells for absent values."""
    return _csv([run])


def run_export_json(*, run: BenchmarkRun) -> str:
    """The run as indented JSON (:func:`run_export_dict` with its per-request records, every
    output event's time included)."""
    return json.dumps(run_export_dict(run=run, records=True), indent=2, default=str)


RECORDS_CSV_COLUMNS = (
    "index", "ok", "http_status", "input_tokens", "output_tokens", "tokens_estimated", "requested_input",
    "requested_output", "start_ms", "end_ms", "duration_ms", "ttft_ms", "e2e_ms", "tpot_ms", "events",
    "finish_reason", "error",
)


def run_records_csv(*, run: BenchmarkRun) -> str:
    """The run's per-request records as flat CSV, one line per request (:data:`RECORDS_CSV_COLUMNS`,
    as :func:`run_records_rows` names them; times in ms from the run's first request start;
    empty cells for null). The per-event output times do not fit a flat row: they are in the JSON
    export (:func:`run_export_json`) and ``/api/runs/<id>/records/``. Raises :class:`InvalidInput`
    and :class:`Conflict` as :func:`run_records`."""
    rows = run_records_rows(run=run, offset=0, limit=ALL_RECORDS, events=False)["rows"]
    return csv_text(rows, RECORDS_CSV_COLUMNS)


def sweep_export_csv(*, sweep: BenchmarkSweep) -> str:
    """The sweep's runs as CSV, one row per run in grid order (columns: :data:`EXPORT_COLUMNS`)."""
    return _csv(sweep.runs.all())


def sweep_export_json(*, sweep: BenchmarkSweep) -> str:
    """The sweep as indented JSON: ``{"sweep": {...grid, status, progress, snapshot, num_gpus},
    "analysis": {...}, "runs": [run_export_dict, ...]}``; the sweep's request counts under the keys
    ``GET /api/sweeps/<id>/`` gives them (``requests_total``, null while not known,
    ``requests_done``, ``requests_cancelled``, ``requests_aborted``, and ``warmup_requests``, the
    warm-up requests each point sends before it is measured:
    :class:`benchmarks.api.serializers.SweepSerializer` says what each counts); the analysis is the object
    ``GET /api/sweeps/<id>/analysis/`` answers (:func:`benchmarks.services.sweep_analysis`): the
    stored one, computed again first when an older analysis made it, with ``provisional`` false,
    else the one computed from the runs so far with ``provisional`` true; a text
    the sweep does not have (``reason``, ``served_model_name``, ``topology``, ``engine``) is null,
    never ``""``."""
    from benchmarks.selectors import sweep_requests_aborted, sweep_requests_cancelled
    from benchmarks.services.sweeps import sweep_analysis

    from deployments.services import free_text_shown

    body = {
        "sweep": {"id": sweep.pk, "name": free_text_shown(sweep.name), "deployment_id": sweep.deployment_id,
                  "status": sweep.status, "reason": sweep.reason or None, "grid": sweep.grid, "num_gpus": sweep.num_gpus,
                  "served_model_name": served_model_name_shown(sweep.served_model_name) or None,
                  "topology": sweep.topology or None,
                  "engine": sweep.engine or None,
                  "points_total": sweep.points_total, "points_done": sweep.points_done,
                  "requests_total": sweep.requests_total_known, "requests_done": sweep.requests_done,
                  "requests_cancelled": sweep_requests_cancelled(sweep=sweep),
                  "requests_aborted": sweep_requests_aborted(sweep=sweep),
                  "warmup_requests": sweep.warmup_requests,
                  "snapshot": snapshot_shown(sweep.snapshot), "created_at": _iso(sweep.created_at),
                  "started_at": _iso(sweep.started_at),
                  "ended_at": _iso(sweep.ended_at)},
        "analysis": sweep_analysis(sweep=sweep),
        "runs": [run_export_dict(run=r) for r in sweep.runs.all()],
    }
    return json.dumps(body, indent=2, default=str)


# ---------------------------------------------------------------------------------------- import

MAX_IMPORT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class SkippedRecord:
    """A run of an imported file that was not stored because a run already holds its result (the
    same record, :func:`benchmarks.importers.record_digest`): ``line`` (1-based; None for a file
    that is one object) and ``item`` (its place in a JSON array, else None) as the file has it,
    ``where`` in words (``line 2``, ``item 2 (line 14)``, ``the file``), ``run`` the run holding the
    result, and ``in_this_file``: that run was created by this import, from an earlier record of
    the same file that holds the result twice."""

    line: int | None
    item: int | None
    where: str
    run: BenchmarkRun
    in_this_file: bool

    @property
    def said(self) -> str:
        """``line 1: already imported as run #5``; ``line 3: the same result as line 1 of this
        file (run #12)``."""
        if self.in_this_file:
            earlier = _where_words(self.run.source_line)
            return f"{self.where}: the same result as {earlier} of this file (run #{self.run.pk})"
        return f"{self.where}: already imported as run #{self.run.pk}"


class ImportOutcome(list):
    """What :func:`run_import` did: the runs it created, in file order (the list itself), and
    ``skipped``, the :class:`SkippedRecord` of each run of the file it did not store."""

    def __init__(self, created: Iterable[BenchmarkRun] = (), skipped: Iterable[SkippedRecord] = ()) -> None:
        super().__init__(created)
        self.skipped: list[SkippedRecord] = list(skipped)

    @property
    def skipped_said(self) -> str:
        """The skipped records in words, for a page's message or the command's output: ``skipped
        2 runs already imported: line 1: already imported as run #5; line 2: ...`` (the first
        :data:`SKIPPED_NAMED` named, then how many more); "" when none was skipped."""
        if not self.skipped:
            return ""
        n = len(self.skipped)
        named = "; ".join(s.said for s in self.skipped[:SKIPPED_NAMED])
        more = f"; and {n - SKIPPED_NAMED:,} more" if n > SKIPPED_NAMED else ""
        return f"skipped {n:,} run{'s' if n != 1 else ''} already imported: {named}{more}"


#: How many skipped or duplicate records a message names before it counts the rest.
SKIPPED_NAMED = 10


#: How the API's refusal of a file with no new run says to import it anyway: by its field.
API_DUPLICATE_HINT = "set allow_duplicate to true to import it again"


class AlreadyImported(Conflict):
    """Every run of a file was imported before (HTTP 409): ``skipped`` says, per record, which run
    holds its result; ``runs`` are those runs (distinct, by id); ``sha256`` is the SHA-256 (hex)
    of the refused file's UTF-8 bytes. ``reason`` is the refusal without a way out
    (:func:`import_duplicate_message`); ``str()`` adds the API's (:data:`API_DUPLICATE_HINT`,
    naming its ``allow_duplicate`` field), and :meth:`said` another's (the form's checkbox, the
    command's option)."""

    def __init__(self, reason: str, *, skipped: list[SkippedRecord], sha256: str = "") -> None:
        super().__init__(f"{reason}; {API_DUPLICATE_HINT}")
        self.reason = reason
        self.sha256 = sha256
        self.skipped = skipped
        self.runs = sorted({s.run.pk: s.run for s in skipped}.values(), key=lambda r: r.pk)

    def said(self, hint: str) -> str:
        """The refusal ending with ``hint``, how to import the file anyway where it is read:
        ``...; pass --allow-duplicate to import it again``."""
        return f"{self.reason}; {hint}"


# An import whose insert a concurrent import of the same records beat is read again this often.
IMPORT_ATTEMPTS = 3


def run_import(*, text: str, filename: str, user, allow_duplicate: bool = False) -> ImportOutcome:
    """Import a SGLang ``bench_serving`` JSONL or vLLM ``bench serve`` JSON file as runs.

    One :class:`BenchmarkRun` per run in the file (``source`` imported, status done), each keeping
    its own part of the file in ``original_text`` (:func:`run_original_text`: the whole file when
    it holds one run, else the run's own line), ``filename``, the SHA-256 of the whole file's
    UTF-8 bytes (``original_sha256``) and that of its own record as canonical JSON
    (``record_sha256``, :func:`benchmarks.importers.record_digest`); the summary holds the
    importer's fields (:class:`benchmarks.importers.ImportedRun`) plus the measured-run keys
    (``successes``, ``failures``, ``output_throughput_tok_s``, ``goodput_req_s``,
    ``input_tokens_actual_mean`` ...); values absent from the file stay null (``requests`` and
    ``failures`` too when the file gives no failure count, as SGLang's does not: only
    ``successes`` is known, and a note says so). Lengths are set only when every request had the
    same length. ``started_at`` and ``ended_at`` stay null: neither harness records when its run
    ran (vLLM's ``date`` is a local time without a zone; the summary keeps it), and the import is
    not when it ended; ``created_at`` says when it was imported.

    Duplicates, per run: a run whose record an imported run already holds (the same JSON, whatever
    its white space, line endings or key order, in whatever file) is not stored again, since two
    copies of one result would count twice in every comparison; nor is a second copy of one
    record within the file. SGLang appends each run to its output file, so importing the grown
    file stores its new runs and skips the rest, each named in the outcome's ``skipped``
    (:class:`SkippedRecord`). A file none of whose runs is new is refused with
    :class:`AlreadyImported` (HTTP 409) naming the runs holding them. ``allow_duplicate`` stores
    every run of the file anyway, marking each copy ``allowed_duplicate``. The database holds one
    imported run per record besides such copies
    (:data:`benchmarks.models.ONE_IMPORT_PER_RECORD_CONSTRAINT`): when two imports of one record
    race, the second insert fails and the import is read again, skipping that record.

    Raises :class:`InvalidInput` naming the line and key for a malformed file. Nothing is stored
    when it raises. Returns the :class:`ImportOutcome`: the created runs in file order (a list)
    and the skipped records.
    """
    if len(text.encode()) > MAX_IMPORT_BYTES:
        raise InvalidInput({"file": [f"larger than {MAX_IMPORT_BYTES} bytes"]})
    digest = import_digest(text=text)
    imported = import_results(text)
    records = [record_digest(item.original_record) for item in imported]
    if not allow_duplicate:
        # A file with nothing new is named as such first, as before its fields were judged: its
        # runs are stored already (the transaction below reads again before storing anything).
        held = imported_record_runs(digests=[d for d in records if d])
        if all(d and d in held for d in records):
            skipped = [_skipped(item, held[d], in_this_file=False) for item, d in zip(imported, records, strict=True)]
            raise AlreadyImported(import_duplicate_message(skipped=skipped, digest=digest), skipped=skipped,
                                  sha256=digest)
    _import_secret_values_refuse(imported, filename=filename, text=text)
    single = len(imported) == 1
    for attempt in range(IMPORT_ATTEMPTS):
        try:
            with transaction.atomic():
                outcome = _import_store(imported, records=records, single=single, digest=digest, filename=filename,
                                        user=user, allow_duplicate=allow_duplicate)
            break
        except IntegrityError:
            # A concurrent import stored one of these records first (the partial unique index):
            # read again, and it is skipped as found; a third loss is not that race.
            if attempt == IMPORT_ATTEMPTS - 1:
                raise
    if imported and not outcome:
        raise AlreadyImported(import_duplicate_message(skipped=outcome.skipped, digest=digest),
                              skipped=outcome.skipped, sha256=digest)
    return outcome


def _import_store(imported: list[ImportedRun], *, records: list[str], single: bool, digest: str, filename: str,
                  user, allow_duplicate: bool) -> ImportOutcome:
    """Store the runs of :func:`run_import` whose record no imported run holds (every run with
    ``allow_duplicate``), in one transaction the caller opens; the :class:`ImportOutcome`. Stores
    nothing when every record is held."""
    held = imported_record_runs(digests=[d for d in records if d])
    outcome = ImportOutcome()
    this_file: dict[str, BenchmarkRun] = {}
    for item, record in zip(imported, records, strict=True):
        earlier = (held.get(record) or this_file.get(record)) if record else None
        if earlier is not None and not allow_duplicate:
            outcome.skipped.append(_skipped(item, earlier, in_this_file=record not in held))
            continue
        run = _imported_run(item, single=single, digest=digest, filename=filename, user=user)
        run.record_sha256 = record
        run.allowed_duplicate = earlier is not None
        run.save()
        this_file.setdefault(record, run)
        outcome.append(run)
    return outcome


def _skipped(item: ImportedRun, run: BenchmarkRun, *, in_this_file: bool) -> SkippedRecord:
    line = item.source_line
    return SkippedRecord(line=None if line is None else int(line), item=getattr(line, "item", None),
                         where=_where_words(line), run=run, in_this_file=in_this_file)


def _imported_run(item: ImportedRun, *, single: bool, digest: str, filename: str, user) -> BenchmarkRun:
    """The (unsaved) run of one imported ``item``: its summary, point and original."""
    point = item.as_sweep_point()
    d = item.as_dict()
    # Requests sent = completed + failed, known only when the file gives both: SGLang's
    # bench_serving writes no failure count, so its runs say how many completed and leave
    # the failures and the total unknown rather than implying that none failed.
    known = item.completed is not None and item.failed is not None
    notes = list(d.get("notes") or [])
    if not known and item.completed is not None:
        notes.append(f"The file gives no failure count: {item.completed} requests completed; how many were "
                     "sent and how many failed is not recorded, so both are unknown (null), not 0.")
    summary = {
        **d, "notes": notes,
        "requests": item.completed + item.failed if known else None,
        "successes": item.completed, "failures": item.failed, "duration_s": item.duration_s,
        "request_throughput_req_s": item.request_throughput_req_s,
        "goodput_req_s": item.request_goodput_req_s,
        "input_tokens_actual_mean": item.mean_input_tokens, "output_tokens_mean": item.mean_output_tokens,
        "flags": {f: True for f in point.flags},
    }
    # No started_at or ended_at: the file does not say when the run ran (run_import).
    run = BenchmarkRun(
        status=RunStatus.DONE, source=RunSource.IMPORTED, import_format=item.source_format,
        original_filename=(filename or "")[:255], original_sha256=digest,
        original_text=run_original_text(item=item, single=single),
        source_line=item.source_line,
        concurrency=item.concurrency, request_rate=item.request_rate_req_s,
        input_len=point.input_len, output_len=point.output_len, num_requests=item.num_prompts,
        api=item.backend or "", served_model_name=item.model_id or "",
        created_by=user if getattr(user, "pk", None) else None,
    )
    _store_summary(run, summary)
    return run


#: The text fields of an imported run that pages, exports and the API show in clear.
IMPORT_SHOWN_FIELDS = ("model_id", "tokenizer_id", "label")


def _import_secret_values_refuse(imported: list[ImportedRun], *, filename: str, text: str = "") -> None:
    """Refuse a result file whose name or whose runs' ``model_id``, ``tokenizer_id`` or ``label``
    holds a stored secret's value in any spelling a page masks it in
    (:func:`controlplane.redaction.secret_value_found`): each is stored and shown in clear (the
    run list, its page, exports). The problem names the field (``filename``, or the line and key:
    ``line 2.model_id``) and the secret, never the value; every such field of the file at once.
    A well-known credential (:func:`deployments.services.credential_in_text`, a Hugging Face token
    ...) in the file name or one of those fields is refused the same way, named by its kind.
    Either anywhere else in ``text`` (the file's text) is refused too, by its place
    (:func:`_import_text_secret_values`): the file is kept and served by the run's download."""
    from controlplane.redaction import MIN_VALUE_LENGTH, secret_value_found
    from deployments.services import credential_in_text, secret_values

    values = {v: n for v, n in secret_values().items() if len(v.strip()) >= MIN_VALUE_LENGTH}

    def holder(text: Any) -> str | None:
        if not isinstance(text, str) or len(text) < MIN_VALUE_LENGTH:
            return None
        return next((name for value, name in values.items() if secret_value_found(text, value)), None)

    def message(field: str, name: str) -> str:
        return (f"{field} holds the value of secret {json_spelled(name)}; it would be stored and shown in clear: "
                f"remove the value from the {'file name' if field == 'filename' else 'file'} and import again")

    def problem(field: str, text: Any) -> str | None:
        name = holder(text)
        return message(field, name) if name else credential_in_text(field, text)

    errors: dict[str, list[str]] = {}
    if said := problem("filename", filename):
        errors["filename"] = [said]
    for item in imported:
        for key in IMPORT_SHOWN_FIELDS:
            if said := problem(key, getattr(item, key, None)):
                path = ImportProblem(message="", line=item.source_line, key=key).path
                errors.setdefault(path, []).append(said)
    _import_text_secret_values(imported, text=text, values=values, errors=errors)
    if errors:
        raise InvalidInput(errors)


def _import_text_secret_values(imported: list[ImportedRun], *, text: str, values: dict[str, str],
                               errors: dict[str, list[str]]) -> None:
    """Add to ``errors`` a problem for each place of the result file ``text`` that holds a stored
    secret's value (``values``: value to secret name) or a well-known credential
    (:func:`controlplane.redaction.credential_find`: a Hugging Face token, a GitHub token, ...)
    outside the fields :func:`_import_secret_values_refuse` names: the file is kept whole (or each
    run's own line) as the run's original and served by its download, so either anywhere in it
    would be stored and served in clear. Each is named by its run's line and key
    (``line 2.server_info.api_key``; in a file that is one object, ``file.server_info.api_key``
    and the line it is on), by the object whose key name holds it, or, where no run's record holds
    it, by ``file``; at most :data:`benchmarks.importers.MAX_REPORTED_PROBLEMS` places, then how
    many more. Never the value: a secret by its name, a credential by its kind and prefix."""
    from benchmarks.importers import MAX_REPORTED_PROBLEMS, _dotted, _key_lines
    from controlplane.redaction import MIN_VALUE_LENGTH, credential_find, credential_kind_said, secret_value_found

    in_text = {value: name for value, name in values.items() if secret_value_found(text, value)}
    if not in_text and credential_find(text) is None:
        return

    def held(piece: str) -> str | None:
        """What ``piece`` holds, in words (``the value of secret 'hub-token'``, ``what looks like a
        Hugging Face token (hf_…)``), or None."""
        if len(piece) >= MIN_VALUE_LENGTH:
            name = next((name for value, name in in_text.items() if secret_value_found(piece, value)), None)
            if name:
                return f"the value of secret {json_spelled(name)}"
        found = credential_find(piece)
        if found:
            kind, shortened = found
            return f"what looks like {credential_kind_said(kind)} ({shortened.split('(', 1)[0]})"
        return None

    def message(what: str, holds: str) -> str:
        return (f"{what} holds {holds}; the file is kept as the run's original "
                "and its download would serve it in clear: remove the value from the file and import again")

    places: list[tuple[str, str]] = []
    for item in imported:
        record = item.original_record or ""
        record_holds = held(record)
        if not record_holds:
            continue
        found_here = False
        try:
            obj = json.loads(record)
        except ValueError:
            obj = None
        stack: list[tuple[tuple, Any]] = [((), obj)]
        while stack:
            path, value = stack.pop()
            if isinstance(value, dict):
                for key, child in reversed(list(value.items())):
                    holds = held(key)
                    if holds:
                        found_here = True
                        where = f"a key name of {_dotted(path)}" if path else "a key name"
                        places.append((ImportProblem(message="", line=item.source_line,
                                                     key=_dotted(path) if path else None).path, message(where, holds)))
                    else:
                        stack.append((path + (key,), child))
                continue
            if isinstance(value, list):
                stack.extend(reversed([(path + (i,), v) for i, v in enumerate(value)]))
                continue
            if path == () or value is None:
                continue
            holds = held(value if isinstance(value, str) else json.dumps(value))
            if not holds:
                continue
            found_here = True
            if len(path) == 1 and path[0] in IMPORT_SHOWN_FIELDS:
                continue   # named with its own message
            key = _dotted(path)
            where = key
            if item.source_line is None:
                lines = _key_lines(text, path)
                where += f" (line {lines[0]})" if lines else ""
            places.append((ImportProblem(message="", line=item.source_line, key=key).path, message(where, holds)))
        if not found_here:
            places.append((ImportProblem(message="", line=item.source_line).path,
                           message(_where_words(item.source_line), record_holds)))
    if not places and not any(p != "filename" for p in errors):
        places.append(("file", message("the file", held(text) or "a stored secret's value")))
    for path, words in places[:MAX_REPORTED_PROBLEMS]:
        errors.setdefault(path, []).append(words)
    if len(places) > MAX_REPORTED_PROBLEMS:
        more = len(places) - MAX_REPORTED_PROBLEMS
        errors.setdefault("file", []).append(
            f"… and {more:,} more place{'s' if more != 1 else ''} in this file holding a stored secret's value "
            "or a credential")


def _where_words(line) -> str:
    """A run's record in words, as a problem's message begins: ``line 3``, ``the file``."""
    where = ImportProblem(message="", line=line).path
    return "the file" if where == "file" else where


def run_original_download(*, run: BenchmarkRun, default_name: str) -> tuple[str, str]:
    """What the download of an imported run's original serves: ``(text, file name)``, the text
    as stored with a stored secret's value in it masked as every read masks one
    (:func:`controlplane.redaction.secret_values_mask`) and a well-known credential shortened
    (:func:`controlplane.redaction.credential_mask`, ``hf_…(37 chars)``), and the file name
    (``default_name`` when none was kept) likewise. Files holding either are refused at import
    (:func:`_import_secret_values_refuse`); one stored before that still holds it, and its
    download never serves it. Anything else is served byte for byte. The stored values are read
    from the database first, so a secret stored since this process last read them is masked too.

    Raises:
        django.db.DatabaseError: the stored secrets could not be read (nothing is served then).
        controlplane.redaction.SecretsUnmaskable: a stored secret cannot be decrypted with this
            process's key, so the file could not be masked (nothing is served then).
    """
    from controlplane.redaction import credential_mask, secret_values_mask, stored_secret_values_load

    stored_secret_values_load(strict=True)
    return (secret_values_mask(credential_mask(run.original_text)),
            secret_values_mask(credential_mask(run.original_filename or default_name)))


def run_original_text(*, item: ImportedRun, single: bool) -> str:
    """What an imported run keeps of its file: the whole file, verbatim, when the file holds this
    one run (``single``), else the run's own record: its line of a JSON-lines file exactly as the
    file has it, line ending included (``"\\n"`` or ``"\\r\\n"``; none on a last line without
    one), so the run's download gives back that line's bytes. Lines end at ``"\\n"`` only
    (:func:`benchmarks.importers.import_results`), never inside a JSON string. A run kept the
    whole file once, and a file of 3,000 lines then stored 3,000 copies of itself: 2 MB became
    6 GB of rows. Runs imported before line endings were kept (and those cut down by migration
    0006) hold their line without its line break."""
    return item.original_text if single else item.original_record


def import_digest(*, text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: for an uploaded UTF-8 file, the hash of the file
    itself (decoding and re-encoding valid UTF-8 gives back the same bytes)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def imported_record_runs(*, digests: Sequence[str]) -> dict[str, BenchmarkRun]:
    """The imported run holding each record of ``digests`` (``record_sha256``), the oldest where
    several do (copies imported with ``allow_duplicate``); a digest no run holds is left out.
    Read in chunks of 500, as a file may hold thousands of runs."""
    out: dict[str, BenchmarkRun] = {}
    wanted = sorted(set(digests))
    for start in range(0, len(wanted), 500):
        rows = (BenchmarkRun.objects.filter(source=RunSource.IMPORTED, record_sha256__in=wanted[start:start + 500])
                .defer(*RUN_LIST_DEFERRED).order_by("-id"))
        for run in rows:
            out[run.record_sha256] = run   # oldest last, so it wins
    return out


def import_duplicate_message(*, skipped: list[SkippedRecord], digest: str) -> str:
    """Why a file none of whose runs is new is refused (:class:`AlreadyImported`), without the
    way out (each reader adds its own: the API's field, the form's checkbox, the command's
    option). A file with the same bytes as the one the runs came from (``digest``, the SHA-256 of
    the file's UTF-8 bytes, their ``original_sha256``) is named as such, with that SHA-256 in
    full: ``this file was already imported as runs #4, #5 (bench.jsonl) on 2026-12-07 19:56 UTC
    (same content, SHA-256 0123…cdef)``. Else each run by its place: ``every run of this file
    was already imported: line 1 as run #4 (bench.jsonl, 2026-12-07 19:56 UTC); line 2 as run #5
    (...)``, the first :data:`SKIPPED_NAMED`, then how many more. File names as every read shows
    them (:func:`run_filename_shown`)."""
    runs = sorted({s.run.pk: s.run for s in skipped}.values(), key=lambda r: r.pk)
    if all(r.original_sha256 == digest for r in runs):
        first = runs[0]
        ids = ", ".join(f"#{r.pk}" for r in runs[:SKIPPED_NAMED]) + (
            f" and {len(runs) - SKIPPED_NAMED} more" if len(runs) > SKIPPED_NAMED else "")
        name = f" ({run_filename_shown(first.original_filename)})" if first.original_filename else ""
        return (f"this file was already imported as run{'s' if len(runs) > 1 else ''} {ids}{name} on {_when(first)} "
                f"(same content, SHA-256 {digest})")

    def origin(run: BenchmarkRun) -> str:
        name = f"{run_filename_shown(run.original_filename)}, " if run.original_filename else ""
        return f"{name}{_when(run)}"

    if len(skipped) == 1:
        run = skipped[0].run
        return f"the result in this file was already imported as run #{run.pk} ({origin(run)})"
    named = "; ".join(f"{s.where} as run #{s.run.pk} ({origin(s.run)})" for s in skipped[:SKIPPED_NAMED])
    more = f"; and {len(skipped) - SKIPPED_NAMED:,} more" if len(skipped) > SKIPPED_NAMED else ""
    return f"every run of this file was already imported: {named}{more}"


def _when(run: BenchmarkRun) -> str:
    """When ``run`` was imported, as a refusal names it: ``2026-12-07 19:56 UTC``."""
    return run.created_at.strftime("%Y-%m-%d %H:%M UTC") if run.created_at else "earlier"
