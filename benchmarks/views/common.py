"""What every benchmark page shares: the statistics and latencies shown, plain-words flag
explanations, one run's numbers in display units (:func:`run_row`), redacted JSON blocks, record
loading that never fails a page, and downloads. Units: summaries store seconds (``ttft_s``); pages
show latencies in ms and throughputs per second, with the unit in every column header. A value
that was not measured is ``None`` and renders as "—", never 0."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from benchmarks import services
from benchmarks.choices import RunSource, RunStatus
from benchmarks.loadgen.driver import ABORTED_PREFIX
from benchmarks.loadgen.metrics import OUTPUT_BASIS_WITH_ABORTED
from benchmarks.loadgen.records import RecordStore
from benchmarks.models import RUN_LIST_DEFERRED, BenchmarkRun, BenchmarkSweep
from benchmarks.selectors import aborted_by_stop
from benchmarks.services.runs import unquoted
from benchmarks.sweeps import DIGITS_RE  # noqa: F401 - the pages import it from here
from benchmarks.sweeps import lost_point, lost_point_text, sent_of_planned_text
from controlplane.api import attachment
from controlplane.drf_defaults import empty_list_item
from controlplane.errors import InvalidInput
from controlplane.permissions import has_role
from controlplane.redaction import redact_text
from deployments.views.common import post_or_redirect  # noqa: F401 - the benchmarks pages import it from here

# Percentiles shown everywhere: the load generator's (metrics.md: p50, p90, p99 plus mean).
STATS = ("mean", "p50", "p90", "p99")
# Latency metrics in table order: summary key stem -> label. ITL is the per-event gap
# (metrics.md); the per-token variant is named separately where it exists.
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
#: Decimal places of a metric (by its stem) wherever a page prints it: the sweep pages' results
#: table and the runs list (``benchmarks/_results_table.html``, ``benchmarks/index.html``, through
#: the ``metric_places`` filter of ``{% load benchmark_numbers %}``), the run page's summary and
#: latency tables, and the comparison's rows, runs or sweeps: all through :func:`metric_text`.
ROW_DECIMALS: dict[str, int] = {
    "output_throughput_tok_s": 1, "tok_s_per_gpu": 2, "request_throughput_req_s": 3, "goodput_req_s": 3,
    "ttft_ms": 1, "tpot_ms": 2, "itl_ms": 2, "e2e_ms": 0,
}


def metric_text(value: Any, stem: str | int, *, places: int | None = None) -> str:
    """The one way an HTML page prints a metric's value: the decimal places
    :data:`ROW_DECIMALS` gives its ``stem`` (``"ttft_ms"``; a bare count of places for a fact no
    table shares, ``2``), or ``places`` where given, and thousands separated: ``5,222.3``,
    ``3,596.8``, ``94.07``. ``""`` for None, a bool or a value that is no number (as
    ``floatformat`` gives it, so a template's ``|default:"—"`` shows "—"); ``inf``/``nan`` as
    Python writes them; never ``-0.0``. Exports (CSV, JSON) keep the full value and never pass
    through here."""
    if value is None or isinstance(value, bool):
        return ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number):
        return str(number)
    if places is None:
        places = stem if isinstance(stem, int) else ROW_DECIMALS[stem]
    text = f"{number:,.{places}f}"
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


# Runs whose records are drawn as overlaid CDFs on the comparison page: more lines than the
# palette has colours are unreadable.
COMPARE_MAX_CDF_RUNS = 8
# Runs a page of the index page's run list shows (newest first; ?page=N for older ones).
INDEX_RUNS_PER_PAGE = 20
# Import uploads: the service's own cap, checked before the file is read into memory.
IMPORT_MAX_BYTES = services.MAX_IMPORT_BYTES
# Failure reasons in a results table cell: the commonest this many, each cut to this many
# characters (the full reasons are on the run page and in the cell's tooltip).
TABLE_ERRORS = 3
TABLE_ERROR_CHARS = 60

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
    "variable_lengths": "request lengths differed (drawn from a range, or varied per request as the file "
                        "records them), so this is not a fixed-length run; a comparison ranks it only against "
                        "runs drawn from the same ranges whose lengths came out alike, never one whose lengths "
                        "varied without a recorded range.",
    "lengths_unknown": "the result file does not record the request lengths.",
    "range_ratio_unknown": "the result file records SGLang's requested lengths L (random_input_len, "
                           "random_output_len) but no usable random_range_ratio r, so the range [L*r, L] the "
                           "lengths were drawn from is unknown; it is not ranked against fixed-length runs.",
    "input_length_mismatch": "prompts were not the requested length: the server's mean prompt tokens differ "
                             "from the requested length by more than 2 % (or 1 token); it is not ranked "
                             "against exact-length runs.",
    "input_length_unchecked": "the requested input length was not checked: the server reported no prompt tokens "
                              "per request and the prompts could not be counted again after the point, so the "
                              "prompts may be much longer or shorter than the label says; it is not ranked "
                              "in a comparison.",
    "no_successful_requests": "no request of this run succeeded: every one failed at the server (or was aborted "
                              "by a stop): it measured nothing (its latencies and throughputs are unknown, not "
                              "zero); the failure reasons say why.",
    "all_requests_aborted": "no request of this run completed: a stop (the cancel, or the deployment going down) "
                            "aborted every one in flight; none failed at the server. Its latencies are unknown "
                            "(not zero); its output throughput counts the tokens the aborted requests had "
                            "streamed over the measured time (unknown when they streamed none), and its "
                            "completed requests per second are 0.",
    "itl_coalesced": "10 % or more of the gaps between output events are zero (events came in one network "
                     "read): ITL shows how the server's writes were grouped, not the token cadence.",
    "rate_off_target": "the open-loop sending rate differs from the target by more than 3 standard deviations "
                       "of a Poisson schedule of this many requests, measured on log(rate): the bounds are "
                       "asymmetric (-50 % / +99 % for 20 requests).",
    "tpot_slo_not_applicable": "some requests produced one output token; TPOT is undefined for them, so the "
                               "TPOT SLO counted them as met (as vLLM's bench does).",
    "tpot_slo_unmeasured": "some requests' output all came in one network read, so their TPOT was not measured; "
                           "goodput did not count them as meeting the TPOT SLO, so it may leave out up to that "
                           "many requests that met it.",
    "shared_load": "while this point ran, a sweep of another deployment sharing its CPUs or GPUs on the same node "
                   "ran too (the run's summary names it): its figures include that load; the point is not analysed "
                   "or ranked.",
    "cancelled_partial": "the sweep was cancelled while this point ran: its latencies cover only the requests "
                         "that completed, while its output throughput also counts the tokens the requests "
                         "the cancel aborted in flight had streamed; the point is not analysed or ranked.",
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


class MalformedIds(Http404):
    """A list-of-ids parameter that is not one (``?runs=1;drop``): a 404 where it names a page,
    a 400 with the form again where a page takes it as input (the comparison)."""


def _ids_param(request: HttpRequest, name: str) -> list[int]:
    """``?runs=1,2,3`` (or ``?run=1&run=2``) as a list of ints (order and repeats kept: the caller refuses a repeat
    by name, :func:`benchmarks.services.runs_compare_pick`); :class:`MalformedIds` naming the parameter in the
    compare endpoint's words (:func:`benchmarks.services.runs_compare_ids`: ``ids must be comma-separated integer
    ids, got '8;drop'``) for a part that is not an id or an empty item (``?runs=1,,2``: ``item 2 is empty``). An id
    however large is kept (as the endpoint keeps it): no row has it, which the caller says. A blank ``?runs=`` is
    none given."""
    # The index page's checkboxes send ``?run=1&run=2``; links send ``?runs=1,2``.
    # The whole list in quotes (``?runs="1,2"``) is the list, as runs_compare_ids reads it.
    text = unquoted(request.GET.get(name, ""))
    listed = text.split(",") if text.strip() else []
    for index, part in enumerate(listed, start=1):
        if not part.strip():
            raise MalformedIds(f"{name} {empty_list_item(index, name, '1,2,3')}")
    out: list[int] = []
    for part in listed + request.GET.getlist(name.removesuffix("s")):
        try:
            out += services.runs_compare_ids(part.strip(), field=name)
        except InvalidInput as exc:
            raise MalformedIds(f"{name} {exc.errors[name][0]}") from None
    return out


def _is_count(value: Any) -> bool:
    """True for a whole-number count (an int that is not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


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
    uses the run's GPU count, else its sweep's), ``output_basis`` (which tokens ``output_tok_s``
    counts, :func:`benchmarks.services.output_throughput_basis`), ``output_basis_note`` (what a
    table writes under the figure of a run with requests aborted in flight: ``incl. 476 tok
    streamed by the aborted requests``, or for one stored before those were counted ``completed
    requests only: below what was delivered``; ``""`` otherwise) and ``output_basis_title`` (the
    formula in words, :data:`benchmarks.services.OUTPUT_BASIS_TEXT`, where there is a note), ``request_s`` and ``goodput_req_s``
    (requests/s), ``slo_attainment`` (fraction 0-1), ``ttft``/``tpot``/``itl``/``e2e`` (dicts of
    mean/p50/p90/p99 in ms), ``requests``, ``successes``, ``failures`` (counts), ``errors``
    (``[(reason, count)]`` of the failures, most frequent first), ``aborted`` (requests a stop ended
    in flight, counted in neither ``successes`` nor ``failures``; None when none or unknown),
    ``aborted_by`` (what ended them: ``by the cancel``, ``by a stop``, ``when the deployment went
    down``, :func:`_aborted_by`),
    ``aborted_errors`` (their ``[(reason, count)]``, each ``aborted: <the stop>``), ``flags``
    (``[(flag, explanation)]``),
    ``length_mismatch`` (None, or ``{"requested", "measured_mean", "count"}`` in tokens and
    requests), ``num_gpus``, ``duration_s``, ``not_sent`` (planned requests never sent because the
    target stopped answering; None when none or unknown), ``failures_text`` (``"3,512 failed of
    4,000"``, ``""`` when no request failed or the count is unknown), ``aborted_text`` (``"1 of 1
    aborted in flight by the cancel"``, ``""`` when none was) and ``failures_live`` (True when
    the counts come from the load generator's live progress because the point stopped before its
    summary was stored: a cancelled point, or one stopped before it sent anything), ``lost`` (True
    for such a point whose worker was lost: its counts are its last progress report's, no live
    count) and ``lost_cell_note`` (what a results table says under such a point's requests:
    ``"sent, as last reported before its worker was lost"``; ``""`` for any other),
    ``planned`` (the point's planned request count; None for a time-limited point, whose count is
    what fitted in its time), ``requests_text`` (``"63 sent of 400 planned"`` for a failed or
    cancelled point that sent fewer than planned; for a point whose worker was lost what its last
    report counted, ``"32 requests sent: 16 finished, 16 in flight when the worker was lost (...)"``,
    :func:`benchmarks.sweeps.lost_point_text`, ``requests`` then being those it sent; else
    ``""``), ``error_lines`` (the
    commonest :data:`TABLE_ERRORS` failure reasons cut to :data:`TABLE_ERROR_CHARS` characters
    for a table cell, reasons that read the same once cut merged into one line: ``[{"text",
    "count", "title"}]``, ``title`` the full reasons) and ``aborted_lines`` (the same of
    ``aborted_errors``). Absent values are None; so are the rates
    (``output_tok_s``, ``tok_s_per_gpu``, ``request_s``, ``goodput_req_s``) of a run in which no
    request succeeded, which measured none, except a run whose every request a stop aborted after
    they had streamed tokens: ``output_tok_s`` counts those tokens, ``request_s`` (and
    ``goodput_req_s`` where an SLO was set) are 0. ``requests`` is ``successes + failures`` when the
    summary gives both but no total (an imported file), and ``failures_unknown`` is True when the
    source does not record failed requests (SGLang's ``bench_serving`` writes only completed ones).
    """
    s: Mapping[str, Any] = run.summary or {}
    m = services.run_metrics(run=run)
    failures, successes, requests = m.get("failures"), m.get("successes"), m.get("requests")
    aborted = m.get("aborted") if isinstance(m.get("aborted"), int) and m.get("aborted") else None
    live = False
    progress = run.progress if isinstance(run.progress, Mapping) else {}
    if (failures is None or lost_point(progress)) and not s and isinstance(progress.get("failed"), int):
        # No summary (the point was stopped): the load generator's last count is all there is.
        live = True
        failures = progress["failed"]
        done = progress.get("done")
        if isinstance(done, int):
            requests, successes = done, max(0, done - failures)
        # Counted apart since the load generator reports them (an older row has them among failed).
        live_aborted = progress.get("aborted")
        aborted = live_aborted if isinstance(live_aborted, int) and live_aborted > 0 else None
        if lost_point(progress) and _is_count(progress.get("requests_sent")):
            # Its worker was lost: what it sent, the requests in flight then among the aborted.
            requests = progress["requests_sent"]
    if requests is None and _is_count(successes) and _is_count(failures):
        requests = successes + failures
    failures_unknown = failures is None and _is_count(successes) and run.source == RunSource.IMPORTED
    not_sent = s.get("not_sent") if isinstance(s.get("not_sent"), int) and s.get("not_sent") else None
    planned = run.num_requests if run.num_requests is not None and not run.duration_s else None
    lost = live and lost_point(progress)
    requests_text = lost_point_text(progress) if not s else ""   # its worker was lost: its last report's counts
    lost_cell_note = ""
    if lost:
        lost_cell_note = ("sent, as last reported before its worker was lost" if _is_count(progress.get("requests_sent"))
                          else "finished as last reported; how many were sent is unknown: its worker was lost")
    if (not requests_text and not live and run.status in (RunStatus.FAILED, RunStatus.CANCELLED)
            and isinstance(requests, int) and not isinstance(requests, bool) and planned is not None
            and planned > requests):
        requests_text = sent_of_planned_text(requests, planned)
    num_gpus = run.num_gpus or (run.sweep.num_gpus if run.sweep_id and run.sweep else None)
    out_tok_s = _opt_float(m.get("output_throughput_tok_s"))
    if out_tok_s is None:
        out_tok_s = _opt_float(run.output_tok_s)
    request_s = _opt_float(m.get("request_throughput_req_s"))
    goodput = _first(s, "goodput_req_s", "request_goodput_req_s")
    if successes == 0 and not isinstance(successes, bool):
        # No request finished successfully: a rate over nothing measured is unknown, not 0; except
        # a point whose every request a stop aborted after they had streamed tokens (the cancel
        # came with every request in flight): the output throughput of those tokens, and 0 of
        # requests completed (run_metrics, benchmarks.sweeps.aborted_only_throughput).
        if m.get("output_throughput_tok_s") is None:
            out_tok_s = request_s = goodput = None
        elif goodput is not None:
            goodput = 0.0
    errors = m.get("errors") or {}
    error_rows = sorted(((str(k), int(v)) for k, v in errors.items()), key=lambda kv: (-kv[1], kv[0])) \
        if isinstance(errors, Mapping) else []
    # The reasons of requests a stop aborted in flight are no failures: listed apart (where the
    # run counts such requests; an imported file's reasons are all failures).
    aborted_rows = [(reason, count) for reason, count in error_rows if aborted and reason.startswith(ABORTED_PREFIX)]
    error_rows = [row for row in error_rows if row not in aborted_rows]
    flags = _flags(run)
    mismatch = None
    if "output_length_mismatch" in flags:
        mismatch = {
            "requested": s.get("output_length_requested", run.output_len),
            "measured_mean": _opt_float(m.get("output_tokens_mean")),
            "count": s.get("output_length_mismatch_count"),
        }
    basis = m.get("output_throughput_basis")
    basis_note = ""
    if out_tok_s is not None and basis == OUTPUT_BASIS_WITH_ABORTED:
        streamed = m.get("output_tokens_aborted")
        basis_note = (f"incl. {streamed:,} tok streamed by the aborted requests" if isinstance(streamed, int)
                      else "incl. the aborted requests' streamed tokens")
    elif out_tok_s is not None and basis == services.OUTPUT_BASIS_COMPLETED_ONLY:
        basis_note = "completed requests only: below what was delivered"
    return {
        "run": run,
        "label": run.label,
        "output_tok_s": out_tok_s,
        "output_basis": basis,
        "output_basis_note": basis_note,
        "output_basis_title": services.OUTPUT_BASIS_TEXT.get(basis, "") if basis_note else "",
        "tok_s_per_gpu": out_tok_s / num_gpus if out_tok_s is not None and num_gpus else None,
        "request_s": request_s,
        "goodput_req_s": goodput,
        "slo_attainment": _opt_float(m.get("slo_attainment")),
        **{stem: _latency(m.get(f"{stem}_ms")) for stem, _ in LATENCIES},
        "requests": requests if requests is not None else run.num_requests,
        "successes": successes,
        "failures": failures,
        "aborted": aborted,
        "failures_text": _failures_text(failures, requests, not_sent=not_sent, live=live),
        "aborted_by": _aborted_by(run).strip(),
        "aborted_text": _aborted_text(aborted, requests, not_sent=not_sent, live=live, aborted_by=_aborted_by(run),
                                      failures=failures),
        "failures_live": live,
        "lost": lost,
        "lost_cell_note": lost_cell_note,
        "failures_unknown": failures_unknown,
        "not_sent": not_sent,
        "planned": planned,
        "requests_text": requests_text,
        "errors": error_rows,
        "error_lines": _error_lines(error_rows),
        "aborted_errors": aborted_rows,
        "aborted_lines": _error_lines(aborted_rows),
        "flags": [(f, FLAG_TEXT.get(f, f.replace("_", " "))) for f in flags],
        "length_mismatch": mismatch,
        "num_gpus": num_gpus,
        "duration_s": _opt_float(m.get("duration_s")),
    }


def _error_lines(rows: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The commonest :data:`TABLE_ERRORS` of ``rows`` (``[(reason, count)]``) as table-cell lines
    ``{"text", "count", "title"}``: each reason cut to :data:`TABLE_ERROR_CHARS` characters
    (ending "…"), reasons that read the same once cut added up into one line (so no line repeats
    another), ``title`` the full reasons, one per line."""
    merged: dict[str, dict[str, Any]] = {}
    for reason, count in rows:
        text = reason if len(reason) <= TABLE_ERROR_CHARS else reason[:TABLE_ERROR_CHARS - 1].rstrip() + "…"
        line = merged.setdefault(text, {"text": text, "count": 0, "reasons": []})
        line["count"] += count
        line["reasons"].append(reason)
    lines = sorted(merged.values(), key=lambda d: (-d["count"], d["text"]))[:TABLE_ERRORS]
    return [{"text": d["text"], "count": d["count"], "title": "\n".join(d["reasons"])} for d in lines]


def _aborted_by(run: BenchmarkRun) -> str:
    """What aborted a run's requests in flight, in the words the sweep page's outcome and the API
    (``requests_cancelled``, ``requests_aborted``) use: ``" by the cancel"``, ``" by a stop"`` (a
    stop someone asked for of its deployment), ``" when the deployment went down"`` (a crash, the
    deployment leaving ready), ``" when the worker was lost"`` (the process running the sweep ended
    with the point's requests in flight), else ``" by a stop"`` (a stop the run does not name, as
    the sweep page's outcome says it)."""
    ended_by = run.summary.get("ended_by") if isinstance(run.summary, Mapping) else None
    if lost_point(run.progress):
        return " when the worker was lost"
    if ended_by == "cancelled" or run.status == RunStatus.CANCELLED:
        return " by the cancel"
    if ended_by == "deployment_down":
        return " by a stop" if aborted_by_stop(run.summary.get("errors")) else " when the deployment went down"
    return " by a stop"


def _failures_text(failures: Any, requests: Any, *, not_sent: int | None, live: bool) -> str:
    """``"3,512 failed of 4,000"`` (``requests`` sent; ``"of 3,600 finished"`` for a live count,
    ``", 3,904 not sent"`` when the load generator stopped early), ``""`` when nothing failed or
    the count is unknown. Requests a stop aborted in flight are no failures: see
    :func:`_aborted_text`."""
    if not (isinstance(failures, int) and not isinstance(failures, bool) and failures > 0):
        return ""
    text = f"{failures:,} failed"
    if isinstance(requests, int) and not isinstance(requests, bool):
        text += f" of {requests:,}" + (" finished" if live else "")
    return text + (f", {not_sent:,} not sent" if not_sent else "")


def _aborted_text(aborted: int | None, requests: Any, *, not_sent: int | None, live: bool, aborted_by: str = "",
                  failures: Any = None) -> str:
    """``"2 aborted in flight by the cancel"`` for requests a stop ended in flight (``aborted_by``
    names the stop, :func:`_aborted_by`), never counted as failed: ``"1 of 1 aborted in flight by
    the cancel"`` out of the stored requests sent (a live count's ``requests`` are those finished,
    which these are not among), ``", 3 not sent"`` when nothing failed (the failures' text says it
    otherwise); ``""`` when none was aborted or the count is unknown. Aborted is the API's word
    for these requests (``requests_aborted``; ``requests_cancelled`` those a cancel ended)."""
    if not aborted:
        return ""
    text = f"{aborted:,}"
    if isinstance(requests, int) and not isinstance(requests, bool) and not live:
        text += f" of {requests:,}"
    text += f" aborted in flight{aborted_by}"
    failed = isinstance(failures, int) and not isinstance(failures, bool) and failures > 0
    return text + (f", {not_sent:,} not sent" if not_sent and not failed else "")


def _json_text(value: Any) -> str:
    """Pretty JSON for a collapsed block. Snapshots store env already redacted; this second pass
    guards against a token pasted into a flag or an argv element the snapshot did not know was
    secret (the same rule as the deployment pages)."""
    return redact_text(json.dumps(value, indent=2, sort_keys=True, default=str))


def _load_records(run: BenchmarkRun) -> RecordStore | None:
    """The run's records (:func:`benchmarks.services.run_records`), or None for imported runs and
    for a missing or unreadable file (the page says so instead of failing)."""
    if run.source != RunSource.MEASURED or not run.records_path:
        return None
    try:
        return services.run_records(run=run)
    except (InvalidInput, OSError, ValueError, KeyError):
        return None


def _sweep_runs(sweep: BenchmarkSweep) -> list[BenchmarkRun]:
    return list(sweep.runs.select_related("sweep").defer(*RUN_LIST_DEFERRED).order_by("ordinal", "id"))


def _status_class(status: str) -> str:
    return {"done": "ok", "failed": "bad", "cancelled": "warn", "running": "", "waiting": "warn"}.get(status, "")


def _download(body: str | bytes, *, content_type: str, filename: str) -> HttpResponse:
    """A page's download of ``body`` as ``filename``: the API's :func:`controlplane.api.attachment`
    (one ``Content-Disposition`` for both: control characters replaced, a name that is not
    printable ASCII as RFC 5987 ``filename*``)."""
    return attachment(body, content_type=content_type, filename=filename)


_EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def _export_body(value: Any) -> str | bytes:
    return value if isinstance(value, (str, bytes)) else json.dumps(value, indent=2, default=str)


