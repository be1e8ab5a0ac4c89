"""Sweep pages: the benchmarks index with the import form, the sweep form, one sweep (live
progress polled by htmx, results table, charts, ceiling findings, snapshot, cancel) and its export."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib import messages
from django.core.paginator import Page
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.dateparse import parse_datetime

from benchmarks import services
from benchmarks.choices import SWEEP_ACTIVE, SWEEP_TERMINAL, RunStatus, SweepStatus
from benchmarks.forms import grid_value, sweep_name_read
from controlplane.drf_defaults import NonFiniteNumber
from benchmarks.importers import empty_upload_message
from benchmarks.models import RUN_LIST_DEFERRED, BenchmarkRun, BenchmarkSweep, snapshot_shown
from benchmarks.selectors import (
    LOST_COUNTS_NOTE, sweep_aborted_by, sweep_load_notes, sweep_queue_note, sweep_requests_aborted_apart, sweep_requests_cancelled,
    sweep_requests_lost,
)
from benchmarks.services.sweeps import SHARED_RECHECK_S, TOK_S_WINDOW_S, WARMUP_PHASE
from benchmarks.sweeps import DEFAULT_LENGTHS, WORKER_LOST, failure_counts
from benchmarks.views.charts import sweep_charts
from benchmarks.views.common import (
    DIGITS_RE, IMPORT_MAX_BYTES, INDEX_RUNS_PER_PAGE, run_row, _EXPORT_TYPES, _can_write, _download, _export_body, _json_text,
    _opt_float, _status_class, _sweep_runs, post_or_redirect,
)
from controlplane.drf_defaults import empty_list_item
from controlplane.errors import BadQuery, Conflict, InvalidInput
from controlplane.forms import repeated_field_errors, repeated_message
from controlplane.jsonsafe import json_spelled, query_text
from controlplane.numbers import number_shown, whole_number
from controlplane.paging import page_of
from controlplane.permissions import has_role
from deployments.choices import DEPLOYMENT_TERMINAL, DeploymentStatus
from deployments.models import Deployment
from deployments.views import role_page
from deployments.views.common import FORM_METHODS


# --- index and import -------------------------------------------------------------------------


@role_page()
def benchmark_index(request: HttpRequest) -> HttpResponse:
    """Sweeps (newest first, with status and progress), the runs, newest first and
    :data:`INDEX_RUNS_PER_PAGE` a page (``?page=N``, 1-based; empty or absent: the first page),
    and the import form for SGLang ``bench_serving`` JSONL and vLLM ``bench serve`` JSON files.
    A page number that is not a whole number from 1 to the last page, or ``page`` given more than
    once, is a 404 saying why and how many pages there are (``no page 7 of the runs: there are 3
    pages (41 runs, 20 a page)``)."""
    return render(request, "benchmarks/index.html",
                  _index_context(request, import_errors={}, page=_runs_page(request.GET.getlist("page"))))


@role_page()
def sweep_list(request: HttpRequest) -> HttpResponse:
    """``/benchmarks/sweeps/``: the sweeps are listed on the benchmarks index (newest first, each
    linking to its sweep page), so this redirects to that list (``#sweeps``). The index's
    ``?page=`` pages its runs, not its sweeps, so no query is carried over."""
    return redirect(f"{reverse('benchmarks:index')}#sweeps")


def _runs_page(values: list[str]) -> Page:
    """The page of the run list that ``?page=`` (its values as given) asks for: every run, newest
    first, :data:`INDEX_RUNS_PER_PAGE` a page (:func:`controlplane.paging.page_of`). Raises
    :class:`Http404` naming the value and the number of pages for a value given more than once,
    not a whole number, or past the last page (page 1 of no runs is a page, with nothing on it)."""
    runs = BenchmarkRun.objects.select_related("sweep").defer(*RUN_LIST_DEFERRED).order_by("-created_at", "-id")
    return page_of(runs, values, noun="run", per_page=INDEX_RUNS_PER_PAGE)


def request_outcomes(sweep_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Requests of each sweep's stored runs that succeeded, failed at the server and were aborted
    in flight by a stop (a cancel, the deployment going down, or the loss of the worker running the
    sweep), from their summaries (a point whose worker was lost, which has none, from its last
    progress report, its requests in flight then among the aborted):
    ``{sweep_id: {"successes", "failures", "aborted", "requests"}}`` (``requests`` all three);
    a sweep whose runs record no counts is left out. The sweep list and page show ``0 of 2
    requests succeeded`` from it where any request failed or was aborted, so a sweep whose every
    request failed does not read as a success, and one whose requests a cancel cut does not read
    as failed by its server."""
    out: dict[int, dict[str, int]] = {}
    rows = BenchmarkRun.objects.filter(sweep_id__in=list(sweep_ids)).values_list(
        "sweep_id", "summary__successes", "summary__failures", "summary__aborted", "summary__requests",
        "progress__ended_by", "progress__done", "progress__failed", "progress__aborted")
    for sweep_id, ok, failures, aborted, requests, ended_by, done, failed, lost_aborted in rows:
        if ended_by == WORKER_LOST and not isinstance(ok, int) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in (done, failed, lost_aborted)):
            # A point whose worker was lost has no summary: its last report's counts, the requests
            # it had in flight among the aborted (benchmarks.services.sweeps.lost_point_progress).
            ok, failures, aborted, requests = max(0, done - failed), failed, lost_aborted, done + lost_aborted
        if not isinstance(ok, int) or not isinstance(failures, int):
            continue
        failed, aborted = failure_counts({"requests": requests, "successes": ok, "failures": failures,
                                          "aborted": aborted})
        tally = out.setdefault(sweep_id, {"successes": 0, "failures": 0, "aborted": 0, "requests": 0})
        tally["successes"] += ok
        tally["failures"] += failed or 0
        tally["aborted"] += aborted or 0
        tally["requests"] += ok + (failed or 0) + (aborted or 0)
    return out


def none_sent_texts(sweeps: Sequence[BenchmarkSweep]) -> dict[int, str]:
    """Why each of ``sweeps`` that ended failed or cancelled without sending a measured request
    reads "none sent", as the sweep page and the sweep list both say it, in the run page's words:
    ``the sweep was cancelled while warming up, before its first measured request`` (``failed``
    for a failed one; ``while preparing prompts`` where its point stopped building its prompts,
    the phase its run's progress keeps as ``ended_during``; no phase where no point had started).
    ``{sweep_id: text}``; any other sweep is left out."""
    ended = [s for s in sweeps if s.status in (SweepStatus.FAILED, SweepStatus.CANCELLED)
             and not s.requests_total_known and not s.requests_done]
    phases: dict[int, str] = {}
    rows = BenchmarkRun.objects.filter(sweep_id__in=[s.pk for s in ended]).order_by("ordinal").values_list(
        "sweep_id", "progress__ended_during")
    for sweep_id, phase in rows:
        if isinstance(phase, str) and phase:
            phases[sweep_id] = phase
    out = {}
    for sweep in ended:
        how = "was cancelled" if sweep.status == SweepStatus.CANCELLED else "failed"
        during = f" while {phases[sweep.pk]}," if sweep.pk in phases else ""
        out[sweep.pk] = f"the sweep {how}{during} before its first measured request"
    return out


def _index_context(request: HttpRequest, *, import_errors: dict[str, list[str]],
                   duplicate_of: Sequence[BenchmarkRun] = (), page: Page | None = None) -> dict[str, Any]:
    """The index page's context; ``page`` is the run list's page (default the first)."""
    sweeps = list(BenchmarkSweep.objects.select_related("deployment", "deployment__recipe", "created_by")[:100])
    outcomes = request_outcomes([s.pk for s in sweeps])
    none_sent = none_sent_texts(sweeps)
    for sweep in sweeps:
        sweep.outcome = outcomes.get(sweep.pk)
        sweep.none_sent_why = none_sent.get(sweep.pk, "")
    page = page if page is not None else _runs_page([])
    ready = Deployment.objects.filter(status=DeploymentStatus.READY, stop_requested=False).select_related("recipe")[:20]
    runs = [run_row(r) for r in page.object_list]
    return {"sweeps": sweeps, "runs": runs, "runs_aborted": any(r["aborted"] for r in runs), "runs_page": page,
            "ready_deployments": list(ready), "can_write": _can_write(request), "import_errors": import_errors,
            "duplicate_of": list(duplicate_of), "import_again_label": IMPORT_AGAIN_LABEL}


#: The import form's checkbox, by its label: what the form's refusal of a file with no new run
#: tells the user to tick (the API names its field instead).
IMPORT_AGAIN_LABEL = "Import again runs that were imported before"
IMPORT_AGAIN_HINT = f"tick “{IMPORT_AGAIN_LABEL}” below and import the file again to keep a second copy"


@role_page(methods=FORM_METHODS)
@post_or_redirect(lambda request: reverse("benchmarks:index") + "#import")
def run_import_view(request: HttpRequest) -> HttpResponse:
    """Import an uploaded result file (field ``file``) as runs that keep the original; redirect
    to the single run, or to the index listing them. Errors name the line and key and are shown
    on the index page with status 400. Runs of the file imported before (the same record, from
    this or another file: :func:`benchmarks.services.run_import`) are skipped, and a message
    names each with the run holding it; a file none of whose runs is new is refused with status
    409 and links to the runs holding them, telling the user to tick the checkbox
    (:data:`IMPORT_AGAIN_LABEL`). With ``allow_duplicate`` ticked every run is stored. A refused
    file's page shows the problems at the top of the import form, which the browser focuses and
    scrolls to (``autofocus``; the run list above it is long), with the checkbox as the user
    left it and the refused file named, to be chosen again. A GET (the
    address left in the browser after a failed import, reloaded) is redirected to the import form
    on the index page. A ``file`` or ``allow_duplicate`` given more than once imports nothing
    (status 400, ``file is given 2 times (a.jsonl, b.jsonl): give it once.``)."""
    upload = request.FILES.get("file")
    allow_duplicate = request.POST.get("allow_duplicate") in ("1", "on", "true")
    errors: dict[str, list[str]] = repeated_field_errors(request, ("file", "allow_duplicate"))
    duplicate_of: list[BenchmarkRun] = []
    if errors:
        pass   # a field given twice: no one file or choice was made, so nothing is read
    elif upload is None:
        errors = {"file": ["Choose a result file to import."]}
    elif upload.size > IMPORT_MAX_BYTES:
        errors = {"file": [f"The file is {upload.size} bytes; the limit is {IMPORT_MAX_BYTES} bytes."]}
    elif upload.size == 0:
        message = empty_upload_message(upload.name or "")
        errors = {"file": [f"{message[:1].upper()}{message[1:]}."]}
    else:
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            errors = {"file": ["The file is not UTF-8 text."]}
        else:
            try:
                runs = services.run_import(text=text, filename=upload.name or "", user=request.user,
                                           allow_duplicate=allow_duplicate)
            except InvalidInput as exc:
                errors = exc.errors
            except services.AlreadyImported as exc:
                said = exc.said(IMPORT_AGAIN_HINT)
                errors = {"file": [said[:1].upper() + said[1:] + "."]}
                duplicate_of = list(exc.runs)
            except Conflict as exc:
                errors = {"file": [str(exc)[:1].upper() + str(exc)[1:] + "."]}
            else:
                messages.success(request, f"Imported {len(runs)} {'new ' if runs.skipped else ''}"
                                          f"run{'s' if len(runs) != 1 else ''} from {upload.name}.")
                if runs.skipped:
                    said = runs.skipped_said
                    messages.warning(request, f"{said[:1].upper()}{said[1:]} (not stored again).")
                if len(runs) == 1:
                    return redirect("benchmarks:run-detail", pk=runs[0].pk)
                ids = ",".join(str(r.pk) for r in runs)
                return redirect(reverse("benchmarks:compare") + f"?runs={ids}")
    context = _index_context(request, import_errors=errors, duplicate_of=duplicate_of)
    # What the user chose, kept for the next try: the checkbox, and the file's name (a browser
    # keeps no chosen file across pages, so the form asks for it again by name).
    context.update(import_allow_duplicate=allow_duplicate,
                   import_filename=services.run_filename_shown(getattr(upload, "name", "") or ""))
    return render(request, "benchmarks/index.html", context, status=409 if duplicate_of else 400)


# --- sweep form -------------------------------------------------------------------------------


# The form's inputs are text, not type="number": a browser silently turns a number field it cannot
# represent (1e400, 1,5 in some locales) into an empty string, and an empty optional field means
# "not given", so a bad value would vanish instead of being refused. Text arrives as typed and is
# judged here, with a message that quotes it.


# List fields take items separated by commas, spaces or both ("1, 8, 16", "1 8 16"); each item is
# judged on its own, so every bad one is named. Spaces are separators, never dropped: "1 8" is two
# concurrencies, not 18.
_ITEM_SEP = re.compile(r"[\s,]+")
# Spaces around the colon of a length pair belong to the pair ("256 : 256").
_PAIR_COLON = re.compile(r"\s*:\s*")


# The example each list field's refusal of an empty item shows (controlplane.drf_defaults.empty_list_item).
_LIST_EXAMPLE = {"concurrency": "1,8,16", "lengths": "256:256,1024:128", "rates": "2,4.5"}


def _items(raw: str, field: str, errors: dict[str, list[str]]) -> list[str]:
    """The items of a list field, in order. An empty item between commas (``1,,2``, ``1,2,``,
    ``,1``) is refused in ``errors[field]`` with the API's message for one
    (:func:`controlplane.drf_defaults.empty_list_item`, ``item 2 is empty: give concurrency as
    1,8,16``), counted among the items before it, never skipped; a blank field has no items."""
    items: list[str] = []
    empty_named = False
    for chunk in raw.split(",") if raw.strip() else []:
        words = [part for part in _ITEM_SEP.split(chunk) if part]
        if not words and not empty_named:   # the first empty item is named, as the API names it
            errors.setdefault(field, []).append(empty_list_item(len(items) + 1, field, _LIST_EXAMPLE[field]))
            empty_named = True
        items.extend(words)
    return items


def _typed_items(raw: str, field: str, errors: dict[str, list[str]]) -> list[int | float | str]:
    """The items of a list field as the grid's JSON values (:func:`benchmarks.forms.grid_value`:
    ``8`` an integer, ``2.5`` a float, ``abc`` its text), unjudged: the grid's validation takes
    them or refuses each at its index in the API's words (``must be an integer 1..4096, got the
    string "abc"``). An empty item is refused here (:func:`_items`)."""
    return [grid_value(part) for part in _items(raw, field, errors)]


def sweep_grid_from_form(data: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The grid dict :func:`benchmarks.services.sweep_create` takes, from the form's text fields.

    Fields: ``concurrency`` ("1,8,16" or "1 8 16"), ``lengths`` ("256:256, 1024:128"; blank for the
    API's default, :data:`benchmarks.sweeps.DEFAULT_LENGTHS`, 256:256), ``requests`` (per point;
    blank leaves the service's default of a few requests per concurrency slot, or, with a
    duration, only the duration), ``duration`` (optional time limit per point, seconds, at most
    24 h; with requests, whichever ends first), ``rates`` (optional requests/s list, open loop),
    ``slo_ttft_ms`` / ``slo_tpot_ms`` / ``slo_e2e_ms`` (optional, ms in the form, seconds in the
    grid as the summary uses, moved three decimal places by :func:`benchmarks.sweeps.ms_to_s`
    so that no binary rounding is stored), ``warmup`` (requests per point before measuring) and
    ``seed`` (the dataset's; both blank for the API's default of 0), ``api`` (the endpoint the
    requests use; blank for the engine's default). Every field is text, and a blank one is not
    given, as a key left out of (or null in) the API's grid. Every field is passed on as typed
    (:func:`benchmarks.forms.grid_value`), for the grid's validation
    (:func:`benchmarks.sweeps.grid_validate`, the API's) to judge and to refuse in the API's words,
    each bad item of a list field on its own (``must be an integer 1..4096, got the string "abc"``),
    a duration as the API refuses its ``duration_s`` (``must be at least 1 s and at most 86400 s
    (24 h), got 0``) and an SLO as it refuses the same SLO in seconds (``abc`` is ``got the
    string "abc"``), every such refusal then said in the field's ms by the form
    (:func:`_slo_errors_in_ms`: ``-5`` is ``must be more than 0 ms, got -5 ms``, not the API's
    ``got -0.005``). Only an
    empty item of a list field is refused here, in the API's words too. Returns ``(grid,
    errors)``; the service validates the grid and its errors are shown by field.
    """
    from benchmarks.sweeps import ms_to_s

    errors: dict[str, list[str]] = {}
    grid: dict[str, Any] = {
        "concurrency": _typed_items(data.get("concurrency", ""), "concurrency", errors),
        # "in:out" texts, as the API takes them; a pair it cannot read is quoted as typed
        "lengths": _items(_PAIR_COLON.sub(":", data.get("lengths", DEFAULT_LENGTHS)), "lengths", errors),
    }
    rates = _typed_items(data.get("rates", ""), "rates", errors)
    if rates:
        grid["request_rates"] = rates
    requests = data.get("requests", "").strip()
    if requests:
        grid["requests"] = grid_value(requests)
    for key in ("warmup", "seed"):
        if text := data.get(key, "").strip():
            grid[key] = grid_value(text)
    if api := data.get("api", "").strip():
        grid["api"] = api
    if duration := data.get("duration", "").strip():
        grid["duration_s"] = grid_value(duration)
    slo: dict[str, Any] = {}
    for key in ("ttft", "tpot", "e2e"):
        if text := data.get(f"slo_{key}_ms", "").strip():
            value = grid_value(text)
            # ms in the form, seconds in the grid; a text that is no number goes on as typed
            try:
                # a number that is not finite stays as typed, for the grid's validation to name it so
                slo[f"{key}_s"] = value if isinstance(value, str) or not math.isfinite(value) else ms_to_s(value)
            except OverflowError:   # an integer of hundreds of digits: too large for a float, as 1e400 is
                slo[f"{key}_s"] = NonFiniteNumber(math.inf, text)
    if slo:
        grid["slo"] = slo
    if not grid["concurrency"] and not rates and "concurrency" not in errors:
        errors["concurrency"] = ["Give at least one concurrency (or a request rate)."]
    if not grid["lengths"] and "lengths" not in errors:
        # Blank: not given, as the API's grid leaves the key out, so the grid's default applies
        # (DEFAULT_LENGTHS, 256:256, one default for the API, the form and manage.py sweep).
        del grid["lengths"]
    return grid, errors


# Service error paths that name a grid key, mapped to the form field showing them.
_GRID_FIELD = {"concurrency": "concurrency", "concurrencies": "concurrency", "lengths": "lengths",
               "request_rates": "rates", "rates": "rates", "requests_per_concurrency": "requests",
               "requests": "requests", "duration_s": "duration", "warmup": "warmup", "seed": "seed", "api": "api",
               "slo.ttft_s": "slo_ttft_ms", "slo.tpot_s": "slo_tpot_ms", "slo.e2e_s": "slo_e2e_ms"}


# Grid list fields whose items the API names by index (``grid.concurrency.1``).
_LIST_KEYS = ("concurrency", "lengths", "request_rates")


def _field_errors(errors: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The grid's errors by form field. A message about one item of a list field names the item
    by its position as typed, 1-based, as the API names it by index (``grid.concurrency.1``): ``item
    2: must be an integer 1..4096, got -3``, so a field with several bad items says which is which."""
    out: dict[str, list[str]] = {}
    for path, msgs in errors.items():
        key = str(path).removeprefix("grid.")
        field = _GRID_FIELD.get(key) or _GRID_FIELD.get(key.split(".")[0]) or "detail"
        if field == "detail" and key not in ("detail", "__all__", "non_field_errors"):
            msgs = [f"{key}: {m}" for m in msgs]
        parts = key.split(".")
        if len(parts) > 1 and parts[0] in _LIST_KEYS and parts[1].isascii() and parts[1].isdigit():
            msgs = [f"item {int(parts[1]) + 1}: {m}" for m in msgs]
        out.setdefault(field, []).extend(str(m) for m in msgs)
    return out


# The SLO fields of the form, in ms; the grid holds them in seconds.
_SLO_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms")


def _slo_errors_in_ms(errors: dict[str, list[str]], values: Mapping[str, str]) -> None:
    """Say every refused SLO in the unit its form field takes, never the grid's seconds: a number
    at or below zero (the grid's ``must be seconds > 0, got -0.001`` for ``-1`` typed) is ``must be
    more than 0 ms, got -1 ms``, quoting the number as typed; a text that is no number (``1s``) or
    one that is not finite is ``must be a number of ms > 0, got the string "1s"``, quoted as the
    grid quotes it; one over the grid's bound (:data:`benchmarks.sweeps.MAX_SLO_S`) is ``must be
    at most 600000 ms (600 s), got 900000 ms``."""
    from benchmarks.sweeps import MAX_SLO_S

    for field in _SLO_FIELDS:
        if field not in errors:
            continue
        typed = values.get(field, "").strip()
        value = grid_value(typed) if typed else None
        number = value is not None and not isinstance(value, (str, NonFiniteNumber))
        bound = MAX_SLO_S[field.removeprefix("slo_").removesuffix("_ms") + "_s"]
        said = []
        for m in errors[field]:
            if m.startswith("must be seconds > 0, got "):
                m = (f"must be more than 0 ms, got {typed} ms" if number and value <= 0
                     else "must be a number of ms > 0, got " + m.removeprefix("must be seconds > 0, got "))
            elif m.startswith(f"must be at most {bound} s, got "):
                m = f"must be at most {bound * 1000} ms ({bound} s), got {typed} ms"
            said.append(m)
        errors[field] = said


def _sweep_name(text: str, errors: dict[str, list[str]]) -> str:
    """The sweep's name as typed, judged by the API's own ``name`` field
    (:func:`benchmarks.forms.sweep_name_read`); its refusal goes to ``errors["name"]`` in the
    API's words and the name is then ``""``."""
    name, refusals = sweep_name_read(text)
    if refusals:
        errors["name"] = refusals
    return name


def _refused_name_masked(values: dict[str, str], errors: Mapping[str, list[str]]) -> None:
    """Put into ``values`` the sweep's name as a refused form shows it again: a stored secret's
    value masked and a well-known credential shortened (:func:`deployments.recipes.secret_text_masked`),
    as its refusal names them, so the page that refuses the name never repeats the value."""
    if errors.get("name") and values.get("name"):
        from deployments.recipes import secret_text_masked
        from deployments.services import secret_values

        values["name"] = secret_text_masked(values["name"], secret_values())


def _api_choices(engine: str | None) -> list[tuple[str, str]]:
    """``(value, label)`` of each API the sweep form offers: those ``engine`` serves
    (:data:`benchmarks.sweeps.ENGINE_APIS`), every one when the engine is not known; the label
    names the route the requests go to."""
    from benchmarks.loadgen.protocol import Api, request_path
    from benchmarks.sweeps import ENGINE_APIS

    values = ENGINE_APIS.get(engine or "", tuple(a.value for a in Api))
    return [(v, f"{v} ({request_path(Api(v))})") for v in values]


def _api_context(engine: str | None) -> dict[str, Any]:
    """What the sweep form's API field and its bounds need: the choices, the engine's default API
    (:data:`benchmarks.sweeps.DEFAULT_API`; None when no engine is known) and the warm-up and
    seed limits the API applies."""
    from benchmarks.sweeps import DEFAULT_API, MAX_SEED, MAX_WARMUP

    return {"api_choices": _api_choices(engine), "api_default": DEFAULT_API.get(engine or ""),
            "engine": engine, "max_warmup": MAX_WARMUP, "max_seed": MAX_SEED}


def _grid_rule_errors(grid: Mapping[str, Any], *, engine: str | None,
                      spec: Mapping[str, Any] | None = None,
                      reported: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """:func:`benchmarks.sweeps.grid_validate`'s errors for ``grid`` by form field (``{}`` when
    none), judged for ``engine`` and against the capacity the deployment's engine ``reported``
    (its ``engine_limits``), else the context length of ``spec`` (the deployment's; None when no
    deployment was found)."""
    from benchmarks.sweeps import grid_validate

    try:
        grid_validate(grid, **({"engine": engine} if engine else {}), spec=spec, reported=reported)
    except InvalidInput as exc:
        return _field_errors(exc.errors)
    return {}


# Deployment statuses a sweep can be started on: ready, or on its way to ready (the sweep waits).
SWEEPABLE = (DeploymentStatus.READY, DeploymentStatus.STARTING, DeploymentStatus.PENDING)
# Deployments listed on the sweep form's picker.
PICKER_MAX = 100


@role_page(read="operator", methods=FORM_METHODS)
def sweep_create_view(request: HttpRequest) -> HttpResponse:
    """Operator form for a new sweep of one deployment (``?deployment=<id>``): an optional name,
    concurrency list, length pairs, requests and/or a duration per point, optional rates and SLOs,
    and under "Advanced" the API the requests use (those the deployment's engine serves, its
    default chosen), warm-up requests per point and the dataset seed (both 0 by default, as the
    API's). Every field is judged by the API's own rules and refused in its words. POST calls
    :func:`benchmarks.services.sweep_create` and redirects to the sweep page.

    Without ``?deployment=`` the page lists the deployments a sweep can run on (ready, starting or
    pending, with no stop requested, newest first; at most :data:`PICKER_MAX`), or says there is none and links to the
    deployments. A stopped or failed deployment's form says so up front and cannot be submitted
    (the service would refuse it). A ``?deployment=`` that is not a whole number (``abc``) is the
    picker again with status 400 naming the parameter and the value; a well-formed id of no
    deployment is a 404 naming it (``No deployment #999.``).

    A POST that gives a field more than once (``concurrency=1&concurrency=2``) starts nothing: the
    form comes back with status 400 and the field's ``is given 2 times (1, 2): give it once``,
    as the API answers; a repeated ``deployment``, in the body or the query
    (``?deployment=1&deployment=2``), gets the picker with that message and status 400, since no
    one deployment was chosen. A POST whose ``deployment`` names none (``999``, blank, not a
    number) is the form again, status 400, with the API's ``no deployment with id 999`` under
    the deployment field, the typed values kept and judged too. A grid the service refuses for the
    deployment's state (another sweep active on it, the deployment stopped, its node agent
    offline) is the form again with the reason and status 409, as the API answers it; a form
    with input errors gets the 400 first, as the API's body is judged first."""
    defaults = {"name": "", "concurrency": "1,8,16", "lengths": DEFAULT_LENGTHS, "requests": "", "duration": "",
                "rates": "", "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": "", "api": "", "warmup": "0",
                "seed": "0"}
    repeated = repeated_field_errors(request, ("deployment", *defaults)) if request.method == "POST" else {}
    # The link's ?deployment= given twice chose no one deployment either: the picker with the
    # message, never the form for the last one.
    if "deployment" not in repeated and (message := repeated_message("deployment", request.GET.getlist("deployment"))):
        repeated["deployment"] = [message]
    if "deployment" in repeated:
        candidates = list(Deployment.objects.filter(status__in=SWEEPABLE, stop_requested=False)
                          .select_related("recipe", "node")
                          .order_by("-created_at", "-id")[:PICKER_MAX])
        return render(request, "benchmarks/sweep_pick.html",
                      {"deployments": candidates, "errors": repeated["deployment"]}, status=400)
    raw_id = request.POST.get("deployment") or request.GET.get("deployment") or ""
    if not raw_id.strip() and request.method != "POST":
        candidates = list(Deployment.objects.filter(status__in=SWEEPABLE, stop_requested=False)
                          .select_related("recipe", "node")
                          .order_by("-created_at", "-id")[:PICKER_MAX])
        return render(request, "benchmarks/sweep_pick.html", {"deployments": candidates})
    if request.method == "POST":
        found = (Deployment.objects.select_related("recipe", "node").filter(pk=posted_id).first()
                 if (posted_id := whole_number(raw_id)) is not None else None)
        if found is None:
            return _sweep_form_without_deployment(request, raw_id, defaults)
    if not DIGITS_RE.fullmatch(raw_id.strip()):
        # A malformed id is the client's error: the picker, status 400, naming the parameter and value.
        candidates = list(Deployment.objects.filter(status__in=SWEEPABLE, stop_requested=False)
                          .select_related("recipe", "node")
                          .order_by("-created_at", "-id")[:PICKER_MAX])
        shown = raw_id if len(raw_id) <= 40 else raw_id[:39] + "…"
        return render(request, "benchmarks/sweep_pick.html", {"deployments": candidates, "errors": [
            f"deployment: {json_spelled(shown)} is not a deployment id (a whole number, e.g. 3); choose one below."]},
            status=400)
    raw_id = raw_id.strip()
    # an id of more digits than any row's is no deployment's (and int() refuses more than 4300)
    deployment_id = whole_number(raw_id)
    deployment = (Deployment.objects.select_related("recipe", "node").filter(pk=deployment_id).first()
                  if deployment_id is not None else None)
    if deployment is None:
        raise Http404(f"No deployment #{number_shown(raw_id)}")
    ended = deployment.status in DEPLOYMENT_TERMINAL
    errors: dict[str, list[str]] = {}
    values = dict(defaults)
    status = 200
    if request.method == "POST":
        values = {k: request.POST.get(k, "").strip() for k in defaults}
        grid, errors = sweep_grid_from_form(values)
        name = _sweep_name(values["name"], errors)
        for field, msgs in repeated.items():
            errors[field] = msgs   # no one value was chosen: whatever was read of it is moot
        if errors:
            # One answer lists everything to fix: what the form could read is judged by the
            # service's rules too (size bounds, open-loop needs), for the fields the form had no
            # complaint about.
            for field, msgs in _grid_rule_errors(grid, engine=deployment.recipe.engine,
                                                 spec=deployment.spec_snapshot or {},
                                                 reported=deployment.engine_limits).items():
                errors.setdefault(field, msgs)
        else:
            try:
                sweep = services.sweep_create(deployment=deployment, user=request.user, grid=grid, name=name)
            except InvalidInput as exc:
                errors = _field_errors(exc.errors)
            except Conflict as exc:
                # the state conflicts, not the input: 409 as the API answers it, the form kept
                errors = {"detail": [str(exc)]}
                status = 409
            else:
                # tagged so that the sweep page drops it once the sweep's live status leaves the queue
                messages.success(request, f"Sweep #{sweep.pk} queued.", extra_tags="queued-notice")
                return redirect("benchmarks:sweep-detail", pk=sweep.pk)
        _slo_errors_in_ms(errors, values)
        _refused_name_masked(values, errors)
        status = 409 if status == 409 else 400
    return render(request, "benchmarks/sweep_form.html", {
        "deployment": deployment, "values": values, "errors": errors,
        "ready": deployment.status == DeploymentStatus.READY, "ended": ended,
        **_api_context(deployment.recipe.engine),
    }, status=status)


def _sweep_form_without_deployment(request: HttpRequest, raw_id: str, defaults: Mapping[str, str]) -> HttpResponse:
    """The sweep form posted with a ``deployment`` that names none: status 400, the API's message
    under the deployment field (``no deployment with id 999``; ``choose a deployment`` when
    blank), and the typed values kept with their own errors (judged without an engine, as the API
    judges a grid whose deployment is not found)."""
    values = {k: request.POST.get(k, "").strip() for k in defaults}
    grid, errors = sweep_grid_from_form(values)
    _sweep_name(values["name"], errors)
    for field, msgs in _grid_rule_errors(grid, engine=None).items():
        errors.setdefault(field, msgs)
    _slo_errors_in_ms(errors, values)
    _refused_name_masked(values, errors)
    shown = raw_id.strip()
    errors["deployment"] = ([f"no deployment with id {shown if DIGITS_RE.fullmatch(shown) else query_text(shown)}"]
                            if shown else ["choose a deployment"])
    return render(request, "benchmarks/sweep_form.html", {
        "deployment": None, "deployment_value": shown, "values": values, "errors": errors,
        "ready": False, "ended": False, **_api_context(None),
    }, status=400)


# --- sweep page -------------------------------------------------------------------------------


def _get_sweep(pk: int) -> BenchmarkSweep:
    return get_object_or_404(
        BenchmarkSweep.objects.select_related("deployment", "deployment__recipe", "deployment__node", "created_by"),
        pk=pk,
    )


def sweep_progress(sweep: BenchmarkSweep) -> dict[str, Any]:
    """Progress of a sweep for the live partial: ``points_done``/``points_total``,
    ``requests_done``/``requests_total`` (counts; done are the requests that finished; the total
    None while points limited by time alone may still run (then, once ended, what the points sent),
    :attr:`benchmarks.models.BenchmarkSweep.requests_total_known`),
    ``requests_cancelled`` (requests a cancel ended in flight, 0 when none, None when not cancelled),
    ``requests_aborted`` (requests a stop ended in flight under a failed sweep, 0 when none, None
    when not failed; under a cancelled sweep those its lost worker had in flight, None when none,
    :func:`benchmarks.selectors.sweep_requests_aborted_apart`), ``requests_sent_unknown`` (a point's worker was lost before
    its progress counted the requests it sent: the total is None and the page says why,
    :attr:`benchmarks.models.BenchmarkSweep.requests_sent_unknown`), ``lost_counts_note``
    (:data:`LOST_COUNTS_NOTE` where a point's worker was lost, else ``""``), ``aborted_by`` (what ended them, :func:`benchmarks.selectors.sweep_aborted_by`:
    ``by a stop`` someone asked for, ``when the deployment went down`` or ``when the worker was
    lost``; ``""`` while active), ``percent`` (0-100), ``current_tok_s`` (output tok/s
    of the running point over the last report window, None when none), ``tok_s_window_s`` (that
    window's length, seconds: :data:`benchmarks.services.sweeps.TOK_S_WINDOW_S`), ``active`` (still
    moving), ``current_point`` (e.g. ``c=8 256/256``) and ``run`` (:func:`run_progress` of the
    running point, None when none runs), ``message`` (:func:`progress_message` of the running
    point, None when none runs or it has not reported yet) and ``as_of`` (its ``updated_at`` as a
    datetime: when the running point's counts, ``requests_done`` and ``current_tok_s`` were last
    stored; None when unknown), ``held_at`` (when its task last found the pending sweep
    held back by a sweep sharing a CPU or GPU with it, the API's ``held_at``; None when not pending
    or never held) and ``held_recheck_s`` (seconds between its looks, each renewing ``held_at``:
    :data:`benchmarks.services.sweeps.SHARED_RECHECK_S`), ``none_sent_why`` (why a failed or
    cancelled sweep sent no measured request, :func:`none_sent_texts`; ``""`` for any other).

    ``percent`` counts requests, or, when the grid limits points by time (``duration_s``, where the
    request total is only a budget), finished points plus the running point's share: the larger
    of its requests done / total and its elapsed / duration.
    """
    running = sweep.runs.filter(status=RunStatus.RUNNING).order_by("-ordinal").first() \
        if sweep.status == SweepStatus.RUNNING else None
    live = run_progress(running) if running is not None else None
    message = progress_message(sweep, running) if live is not None else None
    timed = bool((sweep.grid or {}).get("duration_s"))
    if timed and sweep.points_total:
        share = (live or {}).get("fraction") or 0.0
        percent = 100.0 * (sweep.points_done + share) / sweep.points_total
    elif sweep.requests_total_known:
        percent = 100.0 * sweep.requests_done / sweep.requests_total_known
    elif sweep.points_total:
        percent = 100.0 * sweep.points_done / sweep.points_total
    else:
        percent = 0.0
    active = sweep.status in SWEEP_ACTIVE
    return {
        "points_done": sweep.points_done, "points_total": sweep.points_total,
        "requests_done": sweep.requests_done, "requests_total": sweep.requests_total_known, "timed": timed,
        "open_ended": sweep.has_open_ended_points,
        "requests_cancelled": sweep_requests_cancelled(sweep=sweep) if sweep.status == SweepStatus.CANCELLED else None,
        "requests_aborted": sweep_requests_aborted_apart(sweep=sweep),
        "requests_sent_unknown": sweep.requests_sent_unknown,
        "lost_counts_note": (LOST_COUNTS_NOTE if sweep.status in SWEEP_TERMINAL and sweep_requests_lost(sweep=sweep) != 0
                             else ""),
        "aborted_by": sweep_aborted_by(sweep=sweep) if sweep.status in SWEEP_TERMINAL else "",
        "percent": round(min(percent, 100.0), 1),
        "current_tok_s": sweep.current_tok_s if sweep.status == SweepStatus.RUNNING else None,
        "tok_s_window_s": TOK_S_WINDOW_S,
        "current_point": sweep.current_point if sweep.status == SweepStatus.RUNNING else "",
        "active": active, "run": live, "queue_note": sweep_queue_note(sweep=sweep) if active else "",
        "held_at": sweep.held_at if sweep.status == SweepStatus.PENDING else None,
        "held_recheck_s": SHARED_RECHECK_S,
        "message": message, "as_of": parse_datetime((message or {}).get("updated_at") or ""),
        "none_sent_why": none_sent_texts([sweep]).get(sweep.pk, "") if sweep.status in SWEEP_TERMINAL else "",
    }


def progress_message(sweep: BenchmarkSweep, run: BenchmarkRun) -> dict[str, Any]:
    """The ``sweep.progress`` data of the running point ``run`` as its rows hold it: the same
    keys and values as the last message the sweep stored
    (:meth:`benchmarks.services.sweeps._PointProgress.message`), ``updated_at`` included (None for
    a row written before it was kept). The sweep page embeds it, and its live panel draws it the
    way it draws a message, so a reload and the live updates show one point and one count."""
    p = dict(run.progress or {})
    duration = p.pop("duration_s", _opt_float(run.duration_s))
    sent_so_far = p.pop("total_sent_so_far", bool(duration) and run.request_rate is None)
    updated_at = p.pop("updated_at", None)
    return {"sweep_id": sweep.pk, "run_id": run.pk, "point_index": run.ordinal, "points_total": sweep.points_total,
            **p, "point": sweep.current_point or run.label, "duration_s": duration, "total_sent_so_far": sent_so_far,
            "requests_done": sweep.requests_done, "updated_at": updated_at}


def run_progress(run: BenchmarkRun) -> dict[str, Any] | None:
    """The running point's live progress from its row (the load generator's reports, written at
    most once a second): ``run`` (the row), ``done``/``total``/``failed``/``aborted`` (requests: done
    those that finished, failed those of them that failed, aborted those a stop ended in flight), ``tok_s``
    (output tok/s over the last report window of :data:`benchmarks.services.sweeps.TOK_S_WINDOW_S`
    s, None before the first report), ``tok_s_mean`` (output tok/s since the point's first request,
    None before any token), ``elapsed_s`` and ``duration_s`` (seconds, None
    when unknown or not time-limited), ``fraction`` (0-1: the larger of done / total and elapsed /
    duration), ``source`` (``client`` or ``server_counters``), ``total_sent_so_far`` (True for a
    closed loop limited by time: its ``total`` is the requests sent so far, not a planned count,
    so the page says ``42 done of 44 sent so far`` and the fraction is elapsed / duration alone),
    ``phase`` (None; ``"preparing prompts"`` while the point's prompts are built before any
    request: then ``prepared`` / ``total`` are prompts, warmup ones included, and ``fraction`` 0;
    ``"warming up"`` while its warm-up requests run, before the measured ones: then
    ``warmup_done`` / ``warmup_total`` are those warm-up requests, ``warmup_elapsed_s`` the seconds
    since the warm-up began, the request counts None and ``fraction`` 0). ``warmup_done``,
    ``warmup_total`` and ``warmup_elapsed_s`` are None in any other phase. None when nothing was
    reported yet."""
    p = run.progress or {}
    if not p:
        return None
    no_warmup = {"warmup_done": None, "warmup_total": None, "warmup_elapsed_s": None}
    if p.get("phase") == WARMUP_PHASE:
        return {"run": run, "phase": p["phase"], "prepared": None, "total": None,
                "warmup_done": p.get("warmup_done"), "warmup_total": p.get("warmup_total"),
                "warmup_elapsed_s": _opt_float(p.get("warmup_elapsed_s")),
                "done": None, "failed": None, "aborted": None, "tok_s": None, "tok_s_mean": None, "elapsed_s": None,
                "duration_s": _opt_float(run.duration_s), "fraction": 0.0, "source": "client",
                "total_sent_so_far": False}
    if p.get("phase"):
        return {"run": run, "phase": p["phase"], "prepared": p.get("prepared"), "total": p.get("total"),
                "done": None, "failed": None, "aborted": None, "tok_s": None, "tok_s_mean": None, "elapsed_s": None,
                "duration_s": _opt_float(run.duration_s), "fraction": 0.0, "source": "client",
                "total_sent_so_far": False, **no_warmup}
    elapsed, duration = _opt_float(p.get("elapsed_s")), _opt_float(p.get("duration_s") or run.duration_s)
    sent_so_far = (bool(p["total_sent_so_far"]) if "total_sent_so_far" in p
                   else bool(duration) and run.request_rate is None)
    done, total = p.get("done"), (p.get("total") if sent_so_far else p.get("total") or run.num_requests)
    fractions = [0.0]
    if isinstance(done, (int, float)) and total and not sent_so_far:
        fractions.append(done / total)
    if elapsed is not None and duration:
        fractions.append(elapsed / duration)
    return {"run": run, "done": done, "total": total, "failed": p.get("failed"), "aborted": p.get("aborted"),
            "tok_s": _opt_float(p.get("tok_s")),
            "tok_s_mean": _opt_float(p.get("tok_s_mean")),
            "elapsed_s": elapsed, "duration_s": duration, "fraction": min(1.0, max(fractions)),
            "source": p.get("source", "client"), "total_sent_so_far": sent_so_far, "phase": None, "prepared": None,
            **no_warmup}


def _sweep_results_context(sweep: BenchmarkSweep) -> dict[str, Any]:
    runs = _sweep_runs(sweep)
    rows = [run_row(r) for r in runs]
    # as stored, computed again first when an older analysis made it
    analysis: Mapping[str, Any] = services.sweep_stored_analysis(sweep=sweep)
    provisional = False
    if not analysis and sweep.status in (SweepStatus.CANCELLED, SweepStatus.FAILED):
        # The same provisional analysis the API gives, led by its note on what it covers.
        analysis = services.sweep_analysis(sweep=sweep)
        provisional = bool(analysis.get("findings"))
    findings = analysis.get("findings") if isinstance(analysis, Mapping) else None
    errors = analysis.get("errors") if isinstance(analysis, Mapping) else None
    return {
        "sweep": sweep, "rows": rows, "rows_aborted": any(r["aborted"] for r in rows),
        "charts": sweep_charts([r for r in rows if r["run"].status == RunStatus.DONE],
                                                     num_gpus=sweep.num_gpus, ended=sweep.status in SWEEP_TERMINAL),
        "findings": [str(f) for f in findings or []],
        "analysis_errors": [f"{k}: {v}" for k, v in errors.items()] if isinstance(errors, Mapping) else [],
        "analysis_notes": [str(n) for n in (analysis.get("notes") or [])] if isinstance(analysis, Mapping) else [],
        "points_done": sweep.points_done, "analysis_provisional": provisional,
    }


@role_page()
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One sweep: status, live progress (polled every 1 s while active), results table,
    charts, ceiling findings, the snapshot (collapsed), export links, the cancel button and, once
    the sweep has ended (done, or failed or cancelled: projected from its finished points with a
    note), a link to the what-if projection of it (``/kernels/whatif/?sweep=<id>``, which needs
    the viewer role like this page), or, where the projection would refuse the ended sweep (no
    finished closed-loop point, no decode step model: :func:`kernels.whatif.sweep_refusals`),
    its reason in place of a link to that refusal; while the sweep runs the link is rendered
    hidden, the live progress reveals it when the sweep is done, and the progress partial sends
    the ended sweep's link or reason out of band."""
    sweep = _get_sweep(pk)
    context = _sweep_results_context(sweep)
    context.update({
        "progress": sweep_progress(sweep), "status_class": _status_class(sweep.status),
        "outcome": request_outcomes([sweep.pk]).get(sweep.pk),
        "can_write": _can_write(request), "terminal": sweep.status in SWEEP_TERMINAL,
        **_whatif_context(request, sweep),
        "snapshot_text": _json_text(snapshot_shown(sweep.snapshot)) if sweep.snapshot else "",
        "grid_text": _json_text(sweep.grid) if sweep.grid else "",
        "load_notes": sweep_load_notes(sweep=sweep),
    })
    return render(request, "benchmarks/sweep_detail.html", context)


def _whatif_context(request: HttpRequest, sweep: BenchmarkSweep) -> dict[str, Any]:
    """``whatif_url`` (the what-if page of ``sweep``, for a role that may open it; ``""`` else)
    and ``whatif_refusal``: why the projection cannot be made of the ended sweep
    (:func:`kernels.whatif.sweep_refusals`, the what-if page's own words), or None where it can,
    or while the sweep has not ended (its link is rendered hidden until then)."""
    if not has_role(request.user, "viewer"):
        return {"whatif_url": "", "whatif_refusal": None}
    refusal = None
    if sweep.status in SWEEP_TERMINAL:
        from kernels.whatif import sweep_refusals

        refusal = sweep_refusals([sweep]).get(sweep.pk)
    return {"whatif_url": f"{reverse('kernels:whatif')}?sweep={sweep.pk}", "whatif_refusal": refusal}


@role_page()
def sweep_progress_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: the status line and progress bar, and out of band the Started and Ended
    times at the top of the page (``_sweep_times.html``). The request carries ``points`` (points
    done when the page last drew its results); when that changed, the response fires
    ``sweep-points-changed`` so the results section reloads. A terminal sweep's partial has no
    poll trigger, which ends the polling."""
    sweep = _get_sweep(pk)
    context = {"sweep": sweep, "progress": sweep_progress(sweep), "status_class": _status_class(sweep.status),
               "can_write": _can_write(request), "terminal": sweep.status in SWEEP_TERMINAL,
               "outcome": request_outcomes([sweep.pk]).get(sweep.pk),
               **_whatif_context(request, sweep),
               "oob": True}  # Started and Ended, and the what-if link, at the top of the page follow (out of band)
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


@role_page(methods=FORM_METHODS)
@post_or_redirect(lambda request, pk: reverse("benchmarks:sweep-detail", args=[pk]))
def sweep_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Request cancellation (operator); the worker stops between points or at the next progress
    tick. A sweep that already ended answers with a message, not an error page. A GET is
    redirected to the sweep's page, whose button cancels."""
    sweep = _get_sweep(pk)
    try:
        services.sweep_cancel(sweep=sweep, user=request.user)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancellation of sweep #{sweep.pk} requested.")
    return redirect("benchmarks:sweep-detail", pk=sweep.pk)


@role_page()
def sweep_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """Download the sweep's runs as CSV (one row per run) or JSON (sweep, grid, runs, analysis).
    Another format is a 400 naming those offered, as the API's export answers it (before the sweep
    is looked up). The format is read in any case (``export.CSV``), as the API reads it."""
    fmt = fmt.lower()
    if fmt not in _EXPORT_TYPES:
        raise BadQuery(f"format must be one of csv, json; got {query_text(fmt)}")
    sweep = _get_sweep(pk)
    body = services.sweep_export_csv(sweep=sweep) if fmt == "csv" else services.sweep_export_json(sweep=sweep)
    return _download(_export_body(body), content_type=_EXPORT_TYPES[fmt], filename=f"sweep-{sweep.pk}.{fmt}")


