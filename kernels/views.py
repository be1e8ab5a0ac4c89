"""Server-rendered pages of the kernels app: the index (packages, jobs, best variants), one
package (manifest, grid with constraints and prune counts, shapes with bytes and FLOPs, the
start-a-job form), one job (live progress, device calibration, the variant table filtered and
sorted on the server, time-vs-batch charts against the roofline, best variants, exports), and the
what-if projection of a sweep with a faster kernel.

Views are thin: they authorise (:func:`deployments.views.role_page`: viewers read, operators
start and cancel), parse the request, call one function of :mod:`kernels.services`,
:mod:`kernels.selectors` or :mod:`kernels.whatif`, and shape numbers for the templates. Charts
use the format of :file:`static/ceiling/charts.js` (``benchmarks.views.chart_spec``).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from benchmarks.choices import SWEEP_TERMINAL
from controlplane.api import attachment_header, json_spelled, query_text, unknown_field_errors
from controlplane.drf_defaults import (
    RepeatedKeys, empty_list_item, given_more_than_once, json_loads, repeated_key_errors,
)
from controlplane.forms import repeated_field_errors
from controlplane.numbers import number_shown, too_many_digits, whole_number
from controlplane.errors import BadQuery, Conflict, InvalidInput, NotFound
from controlplane.paging import page_of
from controlplane.permissions import has_role
from deployments.models import Node
from deployments.views import role_page
from deployments.views.common import FORM_METHODS, post_or_redirect
from kernels import selectors, services
from kernels.choices import JOB_ACTIVE, JOB_TERMINAL, KernelJobStatus
from kernels.models import KernelBest, KernelBuild, KernelJob, KernelPackage
from kernels.manifest import grid_summary_read
from kernels.runner.build import arch_name
from kernels.templatetags.kernel_numbers import speedup_text
from kernels.whatif import (
    DEFAULT_SHARE, MAX_SPEEDUP, MIN_SPEEDUP, WHATIF_KEYS, baseline_described, sweep_refusals, whatif_compute,
    whatif_input_errors,
)

# A whole number as the query string and forms take it: ASCII digits only (``str.isdigit`` also
# accepts "²" or "٣", which ``int`` then refuses or reads as another number).
DIGITS_RE = re.compile(r"[0-9]+")
# A grid value typed in the job form that is read as an integer (else it stays text).
INT_RE = re.compile(r"-?[0-9]+")

# Best rows on a package page.
PACKAGE_BEST = 200


def _can_write(request: HttpRequest) -> bool:
    return has_role(request.user, "operator")


def chart_spec(*, title: str, x: tuple[str, str], y: tuple[str, str], series: list[dict[str, Any]],
               x_log: bool = False, y_log: bool = False, empty: str | None = None) -> dict[str, Any]:
    """A chart for :file:`static/ceiling/charts.js`: ``x``/``y`` are ``(label, unit)``; each
    series ``{"label", "points": [[x, y], ...]}``."""
    spec: dict[str, Any] = {"title": title, "x": {"label": x[0], "unit": x[1], "log": x_log},
                            "y": {"label": y[0], "unit": y[1], "log": y_log}, "series": series}
    if empty:
        spec["empty"] = empty
    return spec


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


# --- index and packages -------------------------------------------------------------------------


@role_page()
def kernel_index(request: HttpRequest) -> HttpResponse:
    """Registered packages (grid size after constraints), jobs with status and progress (newest
    first, :data:`controlplane.paging.PER_PAGE` a page, ``?page=N``; a page number that names no
    page is a 404 saying why, :func:`controlplane.paging.page_of`), and the best variants per
    device, those of packages that share a device, shape and batch compared by time
    (:func:`kernels.selectors.best_time_comparison`)."""
    packages = []
    for pkg in selectors.package_list():
        try:
            grid = services.package_grid(package=pkg).as_dict()
        except InvalidInput:
            grid = None
        packages.append({"pkg": pkg, "grid": grid})
    page = page_of(selectors.job_list(), request.GET.getlist("page"), noun="job")
    jobs = _with_builds_kept(page.object_list)
    best = list(selectors.best_list()[:PACKAGE_BEST])
    # Several packages' best variants side by side: compared by time, their speedups being over
    # different baselines (kernels.selectors.best_time_comparison).
    best_notes = selectors.best_time_comparison(best)
    return render(request, "kernels/index.html", {"packages": packages, "jobs": jobs, "jobs_page": page,
                                                  "best": best, "best_notes": best_notes,
                                                  "can_write": _can_write(request)})


@role_page()
def job_list(request: HttpRequest) -> HttpResponse:
    """``/kernels/jobs/``: the jobs are listed on the kernels index (newest first, paged, each
    linking to its job page), so this redirects to that list, keeping the query (``?page=2``,
    judged there) and landing on the list (``#jobs``)."""
    query = request.GET.urlencode()
    return redirect(f"{reverse('kernels:index')}{'?' + query if query else ''}#jobs")


@role_page()
def package_list(request: HttpRequest) -> HttpResponse:
    """``/kernels/packages/``: the packages are listed on the kernels index (each linking to its
    package page), so this redirects to that list (``#packages``). The index's ``?page=`` pages
    its jobs, not its packages, so no query is carried over."""
    return redirect(f"{reverse('kernels:index')}#packages")


def _builds_kept(job: KernelJob) -> int:
    """The builds a job kept: ``builds_ok`` counts every variant that built, the discarded ones
    (never benchmarked) included."""
    return max(job.builds_ok - job.builds_discarded, 0)


def _with_builds_kept(jobs) -> list[KernelJob]:
    """``jobs`` as a list, each with ``builds_kept`` (:func:`_builds_kept`) for the jobs table."""
    jobs = list(jobs)
    for job in jobs:
        job.builds_kept = _builds_kept(job)
    return jobs


def _shape_costs(manifest) -> list[dict[str, Any]]:
    rows = []
    for shape in manifest.shapes:
        cells = []
        for b in shape.batches:
            nbytes, flops = manifest.cost(shape, b)
            cells.append({"batch": b, "mib": nbytes / 2**20, "gflop": flops / 1e9,
                          "intensity": flops / nbytes if nbytes else None})
        rows.append({"shape": shape, "cells": cells})
    return rows


def _package_context(request: HttpRequest, pkg: KernelPackage, *, form: dict | None = None,
                     errors: dict | None = None) -> dict[str, Any]:
    manifest = services.package_manifest(pkg)
    grid = services.package_grid(package=pkg)
    nodes = list(Node.objects.prefetch_related("gpus").order_by("name"))
    # the package's jobs, newest first, a page at a time as on the index; a re-rendered job form
    # (its POST carries no ``?page=``) shows the first page
    jobs_page = page_of(selectors.job_list(package=pkg.name), request.GET.getlist("page"), noun="job")
    node_ccs = {n.name: sorted({g.compute_capability for g in n.gpus.all() if g.compute_capability}) for n in nodes}
    return {
        "pkg": pkg, "manifest": manifest, "manifest_text": json.dumps(pkg.manifest, indent=2), "grid": grid,
        "baseline": baseline_described(pkg),
        "shape_costs": _shape_costs(manifest), "jobs": _with_builds_kept(jobs_page.object_list),
        "jobs_page": jobs_page,
        "best": list(selectors.best_list(package=pkg.name)[:PACKAGE_BEST]), "nodes": nodes, "node_ccs": node_ccs,
        "can_write": _can_write(request), "form": form or {}, "errors": errors or {},
        "history": list(pkg.history.order_by("-history_date")[:10]),
    }


@role_page()
def package_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One package: manifest, grid parameters and constraints with how many combinations each
    pruned, shapes with bytes (MiB) and FLOPs (GFLOP) per batch, the package's jobs (newest first,
    :data:`controlplane.paging.PER_PAGE` a page, ``?page=N``, a page that does not exist a 404
    saying why, as on the index), best variants and (for operators) the form that starts a job."""
    pkg = get_object_or_404(KernelPackage, name=name)
    return render(request, "kernels/package_detail.html", _package_context(request, pkg))


# The two forms the grid-subset field takes, named in its help and in every message about it.
SUBSET_FORMS = 'PARAM=v1,v2; PARAM2=v (e.g. impl=split_k; BLOCK_H=32,64) or the API\'s JSON (e.g. {"BLOCK_H": [64]})'
# Longest grid-subset text read (characters); a longer one is refused without being echoed back.
MAX_SUBSET_CHARS = 10_000


def _parse_subset(text: str, errors: dict[str, list[str]]) -> dict[str, list]:
    """The grid subset of the job form, in either accepted form (:data:`SUBSET_FORMS`):
    ``impl=split_k,head_tiled; BLOCK_H=32`` or JSON ``{"impl": ["split_k"], "BLOCK_H": [32]}`` (a
    bare value in the JSON form is refused, as the API refuses it), both giving ``{"impl": [...],
    "BLOCK_H": [32]}``. Problems go to ``errors["params"]``, echoing at
    most 80 characters of the input; a parameter named twice is one of them (its values are
    listed once, never merged or overwritten; in the JSON form, any key given twice is named at its
    path as the API names it, ``params.BLOCK_H is given 2 times ([32], [64]): give it once``), and
    so is an empty item of a parameter's values (``BLOCK_H=32,,64``: ``item 2 is empty: give
    BLOCK_H as 32,64``, :func:`controlplane.drf_defaults.empty_list_item`), never skipped."""
    out: dict[str, list] = {}
    if len(text) > MAX_SUBSET_CHARS:
        errors.setdefault("params", []).append(
            f"the grid subset is {len(text)} characters long; at most {MAX_SUBSET_CHARS} are read")
        return out
    if text.lstrip().startswith("{"):
        try:
            data = json_loads(text)
        except (ValueError, RecursionError) as exc:
            errors.setdefault("params", []).append(f"{json_spelled(_short(text))} is not valid JSON ({exc}); accepted: {SUBSET_FORMS}")
            return out
        if not isinstance(data, dict):
            errors.setdefault("params", []).append(f"the JSON must be an object of parameter lists; accepted: {SUBSET_FORMS}")
            return out
        # a key given twice, the API's rule (controlplane.drf_defaults.repeated_key_errors): neither value is taken
        twice = data.repeated if isinstance(data, RepeatedKeys) else {}
        hints = {f"params.{name}": f", with all its values in one list ({{\"{_short(name)}\": [v1, v2]}})"
                 for name in twice}
        for path, msgs in repeated_key_errors(data, "params").items():
            errors.setdefault("params", []).extend(f"{_short(path)} {m}{hints.get(path, '')}" for m in msgs)
        for name, values in data.items():
            if name in twice:
                continue
            if not isinstance(values, list):   # the API's rule (kernels.manifest.grid_subset_validate)
                errors.setdefault("params", []).append(
                    f"{json_spelled(_short(str(name)))} must be a list of grid values in the JSON form "
                    f"({{\"{_short(str(name))}\": [{_short(json.dumps(values))}]}}), or write {_short(str(name))}={_short(str(values))}")
                continue
            out[str(name)] = list(values)
        return out
    given: dict[str, list[str]] = {}   # each parameter's values as written, per time it is named
    for part in text.replace("\n", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        name, sep, values = part.partition("=")
        if not sep or not name.strip():
            errors.setdefault("params", []).append(f"{json_spelled(_short(part))} is neither of the accepted forms: {SUBSET_FORMS}")
            continue
        name = name.strip()
        given.setdefault(name, []).append(values.strip())
        if len(given[name]) == 1:
            items = [v.strip() for v in values.split(",")]
            if values.strip() and "" in items:
                # refused, as the API refuses an empty item of a comma-separated list, never skipped
                example = ",".join(v for v in items if v) or "v1,v2"
                errors.setdefault("params", []).append(
                    empty_list_item(items.index("") + 1, _short(name), _short(example)))
            # a number of more digits than any grid value has stays text, refused as one (int() would
            # refuse a text of more than 4300 digits)
            out[name] = [n if (n := whole_number(v, signed=True)) is not None else v for v in items if v]
    for name, times in given.items():
        if len(times) > 1:
            errors.setdefault("params", []).append(
                f"{json_spelled(_short(name))} is named {len(times)} times: name it once, with its values comma-separated "
                f"({_short(name + '=' + ','.join(v for v in times if v))})")
    return out


def _short_errors(errors: dict[str, list[str]], limit: int = 300) -> dict[str, list[str]]:
    """``errors`` with each message cut to ``limit`` characters (a message may quote the input)."""
    return {k: [_short(str(m), limit) for m in msgs] for k, msgs in errors.items()}


def _merge_errors(errors: dict[str, list[str]], checked: dict[str, list[str]], skip: set[str]) -> None:
    """Add the service's reasons (:func:`kernels.services.kernel_job_check`) to the form's own
    ``errors``, but for the fields in ``skip`` (those whose reason would only follow from a field
    the form could not read)."""
    for key, msgs in checked.items():
        if key in skip:
            continue
        have = errors.setdefault(key, [])
        have += [m for m in msgs if m not in have]


@role_page(methods=FORM_METHODS)
@post_or_redirect(lambda request, name: reverse("kernels:package-detail", args=[name]))
def job_create_view(request: HttpRequest, name: str) -> HttpResponse:
    """Start a job of the package (operator): node, target compute capability (default: the
    node's GPU), an optional grid subset (``PARAM=v1,v2; PARAM2=v`` or JSON, :func:`_parse_subset`),
    shapes and batches (comma-separated; an empty item, ``1,,8`` or ``1,8,``, is refused at the field
    as the API words it, ``item 2 is empty: give batches as 1,8,64``, never skipped). Redirects to
    the job page; errors re-render the package page with status 400, the typed values kept, a
    summary of them at the top and messages cut to 300 characters: every field's at once
    (what the form could read is checked by :func:`kernels.services.kernel_job_check` even when
    another field could not be read)."""
    pkg = get_object_or_404(KernelPackage, name=name)
    form = {k: request.POST.get(k, "").strip() for k in ("node", "cc", "params", "batches")}
    form["shapes"] = request.POST.getlist("shapes")
    # one value a field (a form sends each once; a hand-made request that repeats one would have
    # its last value taken silently), and each shape and batch once, as the API's body
    errors: dict[str, list[str]] = repeated_field_errors(request, ("node", "cc", "params", "batches"))
    for shape in {s for s in form["shapes"] if form["shapes"].count(s) > 1}:
        errors.setdefault("shapes", []).append(f"Shape {json_spelled(_short(shape))} is chosen twice: choose each once.")
    node = Node.objects.filter(name=form["node"]).first()
    if node is None:
        errors["node"] = ["Choose a registered node."]
    subset = _parse_subset(form["params"], errors)
    batches: list[int] = []
    parts = form["batches"].replace(" ", "").split(",") if form["batches"] else []
    if "" in parts:
        # refused, as the API refuses an empty item of a comma-separated list (1,,8 or 1,8,), never skipped
        errors.setdefault("batches", []).append(empty_list_item(parts.index("") + 1, "batches", "1,8,64"))
    too_long: list[str] = []
    for part in parts:
        if not part:
            continue
        if not DIGITS_RE.fullmatch(part):
            errors.setdefault("batches", []).append(f"{json_spelled(_short(part))} is not a positive whole number.")
        elif too_many_digits(part):
            # no batch has that many digits (and int() refuses more than 4300): refused as any other
            # number the manifest does not declare
            if part.lstrip("0") in too_long:
                errors.setdefault("batches", []).append(f"Batch {number_shown(part)} is given twice: give each once.")
            else:
                too_long.append(part.lstrip("0"))
        elif (number := whole_number(part)) in batches:
            errors.setdefault("batches", []).append(f"Batch {number} is given twice: give each once.")
        else:
            batches.append(number)
    if too_long:
        declared = sorted({b for s in services.package_manifest(pkg).shapes for b in s.batches})
        errors.setdefault("batches", []).extend(
            f"{number_shown(digits)} is not a batch size of the manifest ({declared})" for digits in too_long)
    if errors:
        # What could be read is checked too, so that every field's problems come in this response;
        # without a node there is no GPU to take the target from, and without a readable subset
        # the size of the whole grid says nothing.
        skip = {"node", *(() if form["cc"] else ("cc",))} if node is None else set()
        if "params" in errors:
            skip.add("variants")
        _merge_errors(errors, services.kernel_job_check(
            package=pkg, node=node, cc=form["cc"] or None, params_subset=subset or None,
            shapes=form["shapes"] or None, batches=batches or None), skip)
    else:
        try:
            job = services.kernel_job_create(package=pkg, node=node, cc=form["cc"] or None,
                                             params_subset=subset or None, shapes=form["shapes"] or None,
                                             batches=batches or None, user=request.user)
        except InvalidInput as exc:
            errors = exc.errors
        else:
            messages.success(request, f"Kernel job #{job.pk} queued on node {node.name}: "
                                      f"{job.variants_total} variants for compute capability {job.target_cc}.")
            return redirect("kernels:job-detail", pk=job.pk)
    for k in ("cc", "params", "batches"):
        if len(form[k]) > MAX_SUBSET_CHARS:
            form[k] = ""  # never written back into the page
    return render(request, "kernels/package_detail.html",
                  _package_context(request, pkg, form=form, errors=_short_errors(errors)), status=400)


# --- jobs ---------------------------------------------------------------------------------------


def _not_benchmarked(job: KernelJob) -> str:
    """Why a job holds no measurement, for the progress panel: not yet (active), no GPU of the
    target on its node (the job's "builds only" note), or the job ended before benchmarking."""
    if services.NO_GPU_PREFIX in (job.note or ""):
        # said from the start: a job created for a node without such a GPU builds only
        node = job.node.name if job.node else "its node"
        return f"none: not benchmarked, no GPU of compute capability {job.target_cc} on node {node} (builds only)"
    if job.status in JOB_ACTIVE:
        return "none yet"
    if job.status == "cancelled":
        return "none: the job was cancelled before any measurement was stored"
    if job.status == "failed":
        return "none: the job failed before any measurement was stored"
    return "none: no measurement was stored"


def _progress_context(job: KernelJob) -> dict[str, Any]:
    total = services.job_progress_total(job)
    done = min(job.progress_done, total) if total else 0
    # Full only for a job that finished: a cancelled or failed one shows how far it got (31 of 88).
    if job.status == KernelJobStatus.DONE:
        percent = 100
    else:
        percent = round(100 * done / total) if total else 0
    return {"job": job, "active": job.status in JOB_ACTIVE, "terminal": job.status in JOB_TERMINAL,
            "waiting_reason": services.kernel_job_waiting_reason(job=job),
            "done": done, "total": total, "percent": percent,
            "builds_kept": _builds_kept(job),
            "not_benchmarked": "" if job.benchmarks_total else _not_benchmarked(job),
            "status_class": {"done": "ok", "failed": "bad", "cancelled": "warn"}.get(job.status, "")}


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (messages never echo a whole input back)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _table_params(request: HttpRequest, problems: list[str]) -> tuple[int | None, str, dict[str, str], str, int,
                                                                   int | None]:
    """Batch, state, parameter filters, sort and offset from the query string; what cannot be read is
    appended to ``problems`` (shown above the table) and left at its default, and so is a key of
    :data:`kernels.selectors.SINGLE_KEYS` given more than once (``batch=1&batch=2``: the smallest
    batch, as for ``batch=abc``; never the last value, which the message says was not taken).
    The last item is the index in ``problems`` of a batch of more digits than any batch has (never
    read as a number), whose message the caller ends with the job's batches, as for any other
    batch that is not the job's; None when there is none."""
    twice = {key for key in selectors.SINGLE_KEYS if len(request.GET.getlist(key)) > 1}

    def one(key: str, default: str = "") -> str:
        return default if key in twice else request.GET.get(key, default)

    batch_raw = one("batch").strip()
    batch = whole_number(batch_raw) or None
    long_batch_at = None
    if too_many_digits(batch_raw):
        long_batch_at = len(problems)
        problems.append(f"batch: {number_shown(batch_raw)} is not a batch of this job")
    elif batch_raw and batch is None:
        problems.append(f"batch: {json_spelled(_short(batch_raw))} is not a positive whole number.")
    state = one("state", "all") or "all"
    if state not in selectors.STATES:
        problems.append(f"state: {json_spelled(_short(state))} is not one of {', '.join(selectors.STATES)}.")
        state = "all"
    # one value per parameter; one given twice is reported and not filtered on (selectors.variant_filters)
    params, repeated = selectors.variant_filters(request.GET)
    problems += repeated
    params = {k: v for k, v in params.items() if v}
    sort = one("sort", "ordinal") or "ordinal"
    offset_raw = one("offset").strip()
    offset = int(offset_raw) if DIGITS_RE.fullmatch(offset_raw) and len(offset_raw) <= 18 else 0
    if offset_raw and not DIGITS_RE.fullmatch(offset_raw):
        problems.append(f"offset: {json_spelled(_short(offset_raw))} is not a whole number >= 0.")
    elif offset > selectors.MAX_TABLE_OFFSET or len(offset_raw) > 18:
        # the API's bound (VariantTableQuerySerializer.offset): no job holds that many rows
        problems.append(f"offset: {json_spelled(_short(offset_raw))} is above {selectors.MAX_TABLE_OFFSET}; the first page is shown.")
        offset = 0
    return batch, state, params, sort, offset, long_batch_at


#: Rows of the variant table one page shows; ``?offset=`` pages through the rest.
PAGE_ROWS = 500


def _table_context(request: HttpRequest, job: KernelJob) -> dict[str, Any]:
    """The variant table's context; a query the table refuses (unknown sort key, parameter or
    batch) shows the reason above the table, which then falls back to its defaults for what it
    could not read (parameter filters it can read are kept). ``csv_url`` downloads the view shown
    (batch, state, filters and sort; every row) from the API as CSV."""
    problems: list[str] = []
    batch, state, params, sort, offset, long_batch_at = _table_params(request, problems)
    try:
        table = selectors.variant_table(job=job, batch=batch, state=state, params=params, sort=sort,
                                        limit=PAGE_ROWS, offset=offset)
    except InvalidInput as exc:
        for field_name, msgs in exc.errors.items():
            problems += [f"{field_name}: {m}" for m in msgs]
        if "batch" in exc.errors:
            batch = None
        if any(name.startswith("p.") for name in exc.errors):
            # keep the filters that can be read (p.impl=split_k next to p.BLOCK_H=999 still filters on impl)
            params = {k: v for k, v in params.items() if f"p.{k}" not in exc.errors}
        if "sort" in exc.errors:
            sort = "ordinal"
        table = selectors.variant_table(job=job, batch=batch, state=state, params=params, sort=sort,
                                        limit=PAGE_ROWS, offset=offset)
    if long_batch_at is not None:
        # worded as the table words any batch that is not the job's
        problems[long_batch_at] += f"; batches: {', '.join(str(b) for b in table.batches) or 'none'}"
    base_query = {"batch": table.batch or "", "state": state, **{f"p.{k}": v for k, v in params.items()}}
    shown_to = table.offset + len(table.rows)
    # An offset past the last row shows nothing: "previous" goes to the last page that has rows.
    previous = (max(0, table.offset - PAGE_ROWS) if table.offset < table.total
                else max(0, (table.total - 1) // PAGE_ROWS * PAGE_ROWS))
    pages = {
        "from": table.offset + 1 if table.rows else 0, "to": shown_to,
        "past_end": table.offset > 0 and not table.rows and table.total > 0,
        "previous": ("?" + urlencode({**base_query, "sort": table.sort, "offset": previous})
                     + "#variant-table") if table.offset > 0 else "",
        "next": ("?" + urlencode({**base_query, "sort": table.sort, "offset": shown_to}) + "#variant-table")
                if shown_to < table.total else "",
    }

    def sort_link(key: str) -> str:
        current = table.sort.lstrip("-")
        desc = table.sort.startswith("-")
        new = ("-" + key) if current == key and not desc else key
        return "?" + urlencode({**base_query, "sort": new}) + "#variant-table"

    # the variant id: the number the API, the CSV/JSON export and the best entries use
    columns = [{"key": "ordinal", "label": "variant", "unit": ""}]
    columns += [{"key": f"param:{p}", "label": p, "unit": ""} for p in table.params]
    columns += [{"key": "registers", "label": "registers", "unit": "/thread"},
                {"key": "spills_bytes", "label": "spills", "unit": "B"},
                {"key": "shared_bytes", "label": "shared", "unit": "KiB"},
                {"key": "tensor_core", "label": "tensor cores", "unit": ""},
                {"key": "build_s", "label": "build", "unit": "s"}]
    shape_cols = []
    for shape in table.shapes:
        shape_cols.append({"shape": shape, "us": f"us:{shape}", "roof": f"roof:{shape}"})
    for col in columns:
        col["link"] = sort_link(col["key"])
        col["sorted"] = table.sort.lstrip("-") == col["key"]
        col["desc"] = table.sort.startswith("-")
    for col in shape_cols:
        col["us_link"], col["roof_link"] = sort_link(col["us"]), sort_link(col["roof"])
        col["us_sorted"] = table.sort.lstrip("-") == col["us"]
        col["roof_sorted"] = table.sort.lstrip("-") == col["roof"]
    for row in table.rows:
        row["cells"] = [dict((row["shapes"].get(sh) or {}), shape=sh,
                             roof_pct=_pct((row["shapes"].get(sh) or {}).get("roofline_fraction")))
                        for sh in table.shapes]
        row["param_values"] = [row["params"].get(p) for p in table.params]
        if row["build"] and row["build"]["shared_bytes"] is not None:
            row["build"]["shared_kib"] = row["build"]["shared_bytes"] / 1024
    param_filters = [{"name": name, "options": [{"value": v, "selected": params.get(name) == str(v)} for v in values]}
                     for name, values in table.param_values.items()]
    # this view of the table (every row, not this page) as the API's CSV download
    csv_query = {k: v for k, v in {**base_query, "sort": table.sort, "format": "csv"}.items() if v not in ("", None)}
    csv_url = reverse("kernel-job-variants", args=[job.pk]) + "?" + urlencode(csv_query)
    return {"table": table, "columns": columns, "shape_cols": shape_cols, "param_filters": param_filters,
            "state": state, "sort": table.sort, "job": job, "table_problems": problems, "pages": pages,
            "csv_url": csv_url}


def _job_charts(job: KernelJob) -> list[dict[str, Any]]:
    charts = []
    for name in selectors.job_shapes(job):
        data = selectors.job_time_chart(job=job, shape=name)
        series = list(data["series"])
        if data["roofline"]:
            series.append({"label": "roofline (measured HBM GB/s, bf16 TFLOP/s)", "points": data["roofline"]})
        charts.append({"id": f"chart-time-{name}", "chart": chart_spec(
            title=f"{name}: time per call vs batch (fastest correct variant per implementation)",
            x=("batch", "requests"), y=("median time", "µs"), series=series, x_log=True, y_log=True,
            empty="no correct timed variant yet (timing needs a GPU of the target's compute capability).")})
    return charts


# The architecture an nvcc build was made for, from the command line its log starts with
# (``-gencode arch=compute_90a,code=sm_90a``).
GENCODE_RE = re.compile(r"-gencode\s+arch=compute_\w+,code=(sm_\w+)")


def _job_language(job: KernelJob) -> str:
    """``triton`` or ``cuda``: the language of the manifest the job was created with."""
    return (job.manifest or {}).get("language") or job.package.language


def _target_context(job: KernelJob) -> dict[str, Any]:
    """How the job page names what was built and with what.

    ``target_label``: ``"cc 9.0, sm_90a"``: the target compute capability and the GPU architecture
    of the binaries. For a CUDA package, the ``code=sm_XX`` of the nvcc command line its builds
    logged; where no build logged one (Triton builds, or nothing built yet), the runner's choice for
    the target (:func:`kernels.runner.build.arch_name`, what Triton's ptxas and nvcc are given).

    ``software``: the driver, CUDA (PyTorch's runtime) and torch versions of the device facts, and
    the toolchain of the package's language only: nvcc (the builds' compiler) for CUDA, Triton
    (the benchmark host's, else the builds' compiler version) for Triton. "—" for what is unknown.
    """
    logged = (KernelBuild.objects.filter(variant__job=job, log__contains="-gencode")
              .values_list("log", flat=True).first())
    match = GENCODE_RE.search(logged or "")
    if match:
        arch = match.group(1)
    else:
        major, _, minor = job.target_cc.partition(".")
        readable = DIGITS_RE.fullmatch(major) and DIGITS_RE.fullmatch(minor)
        arch = arch_name(int(major) * 10 + int(minor)) if readable else "?"
    language = _job_language(job)
    compiler = job.compiler or ""
    if language == "cuda":
        toolchain = f"nvcc {compiler.split(' ', 1)[1]}" if compiler.startswith("nvcc ") else "nvcc —"
    else:
        toolchain = f"Triton {job.known_triton_version or '—'}"
    software = [f"driver {job.driver_version or '—'}", f"CUDA {job.cuda_version or '—'}",
                f"torch {job.torch_version or '—'}", toolchain]
    return {"target_label": f"cc {job.target_cc}, {arch}", "language": language, "software": software}


@role_page()
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One job: status and live progress (htmx every 2 s, and the ``kernel-job-<id>`` websocket
    group where the live client is present), target (:func:`_target_context`), device calibration (GB/s, TFLOP/s measured on
    the device), the variant table, time-vs-batch charts against the roofline, the best variants
    and exported config files, CSV/JSON export, cancel (operator). The grid subset shows as JSON
    (``{"impl": ["split_k"], "BLOCK_H": [16, 32]}``), the form the API and the job form take."""
    job = get_object_or_404(KernelJob.objects.select_related("package", "node", "created_by"), pk=pk)
    ctx = {**_progress_context(job), **_table_context(request, job), **_target_context(job),
           "charts": _job_charts(job), "best": list(selectors.best_list(job=job.pk)), "can_write": _can_write(request),
           "grid": grid_summary_read(job.grid_summary), "group": f"kernel-job-{job.pk}",
           # the subset as the API and the job form write it (JSON), not as Python prints a dict
           "subset_json": json.dumps(job.params_subset, ensure_ascii=False) if job.params_subset else "",
           "config_paths": [Path(p).name for p in job.config_paths or []],
           # variants the target cannot build (the manifest's [cuda].requires), left out before building
           "target_left_out": next((p for p in grid_summary_read(job.grid_summary).get("pruned") or []
                                    if p.get("source") == "cuda.requires" and p.get("pruned")), None)}
    return render(request, "kernels/job_detail.html", ctx)


@role_page()
def job_progress_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """The progress panel alone (htmx polls it every 2 s while the job is active; a terminal
    job's panel carries no trigger, which ends the polling)."""
    job = get_object_or_404(KernelJob.objects.select_related("package", "node"), pk=pk)
    return render(request, "kernels/_job_progress.html", {**_progress_context(job), "can_write": _can_write(request)})


@role_page()
def job_variants_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """The variant table alone, for htmx swaps when a filter or sort changes. The response's
    ``HX-Push-Url`` puts the job page's URL with the same query in the address bar, so a
    filtered view can be reloaded, bookmarked or shared like a sorted one."""
    job = get_object_or_404(KernelJob.objects.select_related("package"), pk=pk)
    response = render(request, "kernels/_variant_table.html", _table_context(request, job))
    query = request.GET.urlencode()
    response["HX-Push-Url"] = reverse("kernels:job-detail", args=[job.pk]) + (f"?{query}" if query else "")
    return response


@role_page(methods=FORM_METHODS)
@post_or_redirect(lambda request, pk: reverse("kernels:job-detail", args=[pk]))
def job_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel the job (operator); redirect back to its page with what happened."""
    job = get_object_or_404(KernelJob, pk=pk)
    try:
        services.kernel_job_cancel(job=job, user=request.user)
        messages.success(request, f"Cancellation of kernel job #{job.pk} requested.")
    except Conflict as exc:
        messages.error(request, str(exc))
    return redirect("kernels:job-detail", pk=pk)


@role_page()
def job_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """Download every measurement of the job as ``csv`` or ``json``; another format is a 400 naming
    those offered, as the API's export answers it (before the job is looked up). The format is read
    in any case (``export.CSV``), as the API reads it."""
    fmt = fmt.lower()
    if fmt not in ("csv", "json"):
        raise BadQuery(f"format must be one of csv, json; got {query_text(fmt)}")
    job = get_object_or_404(KernelJob.objects.select_related("package", "node"), pk=pk)
    if fmt == "csv":
        body, ctype = services.kernel_job_export_csv(job=job), "text/csv"
    else:
        body, ctype = services.kernel_job_export_json(job=job), "application/json"
    response = HttpResponse(body, content_type=ctype)
    response["Content-Disposition"] = attachment_header(f"kernel-job-{job.pk}.{fmt}")
    return response


@role_page()
def best_config(request: HttpRequest, pk: int) -> HttpResponse:
    """Download the exported config file a best variant belongs to."""
    best = get_object_or_404(KernelBest, pk=pk)
    path = Path(best.config_path) if best.config_path else None
    if path is None or not path.is_file():
        raise Http404("no exported config file for this best variant")
    response = HttpResponse(path.read_text(encoding="utf-8"), content_type="application/json")
    response["Content-Disposition"] = attachment_header(path.name)
    return response


# --- what-if ------------------------------------------------------------------------------------


def _float_param(request: HttpRequest, name: str, errors: dict[str, list[str]]) -> float | None:
    raw = request.GET.get(name, "").strip()
    if not raw:
        return None
    from kernels.whatif import NUMBER_RE

    if not NUMBER_RE.fullmatch(raw):
        errors.setdefault(name, []).append(f"{query_text(raw)} is not a number.")
        return None
    value = float(raw)
    if not math.isfinite(value):
        errors.setdefault(name, []).append(f"{query_text(raw)} is not a finite number.")
        return None
    return value


#: The what-if page lists this many sweeps it can project (newest first)...
WHATIF_USABLE_SHOWN = 100
#: ...and, among them, at most this many it would refuse (greyed out, with why), the newest.
WHATIF_REFUSED_SHOWN = 20
#: Ended sweeps read at a time while looking for those, and in all at most (so a database of
#: thousands of refused sweeps does not make the page read them all).
WHATIF_SCAN_BATCH = 200
WHATIF_SCAN_MAX = 2000


def whatif_sweeps() -> list:
    """The ended sweeps the what-if page offers, newest first (``-created_at``, ties by id):
    up to :data:`WHATIF_USABLE_SHOWN` that the projection takes, and among them the newest
    :data:`WHATIF_REFUSED_SHOWN` it refuses (:func:`kernels.whatif.sweep_refusals`), each with
    ``whatif_refusal`` set to why. A refused sweep does not count against the limit, so usable
    older sweeps are not pushed off the list by newer refused ones. At most
    :data:`WHATIF_SCAN_MAX` sweeps are read, :data:`WHATIF_SCAN_BATCH` at a time."""
    from benchmarks.models import BenchmarkSweep

    rows = BenchmarkSweep.objects.filter(status__in=list(SWEEP_TERMINAL)).order_by("-created_at", "-id")
    shown: list = []
    usable = refused = 0
    for start in range(0, WHATIF_SCAN_MAX, WHATIF_SCAN_BATCH):
        batch = list(rows[start:start + WHATIF_SCAN_BATCH])
        refusals = sweep_refusals(batch)
        for sweep in batch:
            sweep.whatif_refusal = refusals.get(sweep.pk)
            if sweep.whatif_refusal is None:
                shown.append(sweep)
                usable += 1
                if usable >= WHATIF_USABLE_SHOWN:
                    return shown
            elif refused < WHATIF_REFUSED_SHOWN:
                shown.append(sweep)
                refused += 1
        if len(batch) < WHATIF_SCAN_BATCH:
            break
    return shown


@role_page()
def whatif_view(request: HttpRequest) -> HttpResponse:
    """``/kernels/whatif/?sweep=<id>&share=0.63&speedup=<x>`` (or ``&best=<id>``): the sweep's
    measured tok/s and TPOT per concurrency next to the projection with a faster kernel (table and
    charts); the form picks the sweep, the share and the speedup or a best variant. A query key
    the form does not have (``shares=0.5``) is refused as the API refuses it (status 400, the key
    and those taken shown above the form), never ignored for the default. On any error every field
    keeps what was typed (``speedup=abc`` stays ``abc``). A ``sweep`` the projection would refuse
    (:func:`kernels.whatif.sweep_refusals`: not finished, no finished closed-loop point with fixed
    lengths, no decode step model) is refused at once with that reason (status 400), before a
    speedup is given. A form sent without a sweep (``?sweep=&speedup=3``, or a speedup or best
    variant and no ``sweep``) is refused too (status 400, ``sweep is empty: choose a finished
    sweep to project.``), never shown back as if nothing had been asked."""
    from benchmarks.models import BenchmarkSweep

    errors: dict[str, list[str]] = unknown_field_errors(request.GET, WHATIF_KEYS)
    # one value a parameter, as the API's rule (controlplane.drf_defaults.SingleValuedQuery): the
    # page would otherwise show the last one as if it were the only one
    for name in WHATIF_KEYS:
        if repeated := given_more_than_once(request.GET.getlist(name)):
            errors.setdefault(name, []).append(f"{name} {repeated}.")
    sweeps = whatif_sweeps()
    bests = list(KernelBest.objects.filter(speedup__isnull=False).select_related("package")
                 .order_by("package__name", "device_name", "shape", "batch")[:300])
    # Each speedup is over its own package's baseline: the picker shows each one's time, and the
    # packages sharing a device, shape and batch are compared by time beside it.
    best_notes = selectors.best_time_comparison(bests)
    share = _float_param(request, "share", errors)
    speedup = _float_param(request, "speedup", errors)
    # Out of range: the same message as the API's, naming the value as given (kernels.whatif.range_refusal).
    errors.update(whatif_input_errors(
        shown={k: request.GET.get(k, "").strip() for k in ("share", "speedup")},
        **{k: v for k, v in (("share", share), ("speedup", speedup)) if v is not None}))
    sweep_raw, best_raw = request.GET.get("sweep", ""), request.GET.get("best", "")
    form = {"sweep": sweep_raw, "share": share if share is not None else DEFAULT_SHARE,
            "speedup": "" if speedup is None else speedup, "best": best_raw}
    result = None
    charts: list[dict[str, Any]] = []
    source = hint = ""
    sweep = None
    if not sweep_raw and "sweep" not in errors:
        # No sweep to project, yet the form was sent or a speedup given: say so rather than show
        # the bare form again as if nothing had been asked.
        if "sweep" in request.GET:
            errors["sweep"] = ["sweep is empty: choose a finished sweep to project."]
        elif request.GET.get("speedup", "").strip() or best_raw:
            errors["sweep"] = ["Choose a finished sweep to project."]
    if sweep_raw:
        sweep = (BenchmarkSweep.objects.filter(pk=int(sweep_raw)).first()
                 if DIGITS_RE.fullmatch(sweep_raw) and len(sweep_raw) <= 18 else None)
        if sweep is None and not DIGITS_RE.fullmatch(sweep_raw):
            errors["sweep"] = [f"{json_spelled(_short(sweep_raw))} is not a sweep id (a whole number)."]
        elif sweep is None:
            errors["sweep"] = [f"No sweep with id {json_spelled(_short(sweep_raw))}."]
        elif sweep not in sweeps and sweep.status in SWEEP_TERMINAL:
            sweep.whatif_refusal = sweep_refusals([sweep]).get(sweep.pk)
            sweeps.insert(0, sweep)   # not among those listed: still the one asked for
    # A sweep the projection would refuse for its status, its runs or its model (kernels.whatif.sweep_refusals,
    # the service's own rule and message) is listed disabled, with why, never offered as a choice.
    if sweep is not None:
        # The sweep asked for cannot be projected: say why at once, not only once a speedup is given.
        listed = next((s for s in sweeps if s.pk == sweep.pk), None)
        refusal = (getattr(listed, "whatif_refusal", None) if listed is not None
                   else sweep_refusals([sweep]).get(sweep.pk))
        if refusal:
            errors.setdefault("sweep", []).append(refusal)
    if sweep_raw:
        if best_raw and request.GET.get("speedup", "").strip():
            # The API's rule (WhatIfQuerySerializer): exactly one source of the speedup.
            errors.setdefault("speedup", []).append(
                "Give speedup (a number) or best (a best-variant id), exactly one: both were given.")
        elif best_raw and "speedup" not in errors:
            # An id no row has, or a row without a speedup, is named as the API names it
            # (kernels.services.kernel_best_for, KernelWhatIfView), not as a choice to make.
            try:
                best = (services.kernel_best_for(best_id=int(best_raw))
                        if DIGITS_RE.fullmatch(best_raw) and len(best_raw) <= 18 else None)
            except NotFound as exc:
                best = None
                errors["best"] = [str(exc)]   # no best kernel variant with id 999
            if best is None:
                errors.setdefault("best", ["Choose a best variant with a measured speedup over its baseline."])
            elif not best.speedup:
                errors["best"] = [f"best variant #{best.pk} has no measured speedup over a baseline"]
            else:
                speedup = best.speedup
                baseline = f" ({best.baseline_us:.2f} µs)" if best.baseline_us is not None else ""
                source = (f"best variant #{best.pk}: {best.package.name} {best.shape_bucket} on {best.device_name}, "
                          f"{best.median_us:.2f} µs, {speedup_text(best.speedup)} over the package's own baseline "
                          f"implementation on {best.device_name}{baseline}")
        elif speedup is None and "speedup" not in errors:
            if "speedup" in request.GET or "best" in request.GET:
                errors["speedup"] = ["Give a speedup (×) or choose a best variant."]
            elif "sweep" not in errors:   # arriving from a sweep's page: the sweep is chosen, the speedup not yet
                hint = "Give a speedup (×) or choose a best variant to project this sweep."
        if not errors and sweep is not None and speedup is not None:
            try:
                result = whatif_compute(sweep=sweep, share=share if share is not None else DEFAULT_SHARE,
                                        speedup=speedup, best=best if best_raw else None)
            except InvalidInput as exc:
                errors = exc.errors
            else:
                source = source or "given"   # as the API's speedup_source says it
                charts = _whatif_charts(result)
    if errors:
        # The form again as it was typed: a refused value stays in its field to be corrected.
        form.update({k: request.GET.get(k, "") for k in ("share", "speedup") if request.GET.get(k, "").strip()})
    # what each listed package's baseline is, as its manifest says: they are not one kernel
    packages = {best.package.name: best.package for best in bests}
    baselines = [(name, baseline_described(package) or "its variants with impl = 'baseline'")
                 for name, package in sorted(packages.items())]
    return render(request, "kernels/whatif.html", {"sweeps": sweeps, "bests": bests, "best_notes": best_notes,
                                                   "baselines": baselines, "form": form, "errors": errors,
                                                   "result": result, "charts": charts, "source": source,
                                                   "hint": hint, "speedup_range": f"{MIN_SPEEDUP:g}–{MAX_SPEEDUP:g}×"},
                  status=400 if errors else 200)  # the form again with what to fix, as the API's 400


def _whatif_charts(result: dict[str, Any]) -> list[dict[str, Any]]:
    charts = []
    for key, rows in result["lengths"].items():
        tok = [{"label": "measured", "points": [[r["concurrency"], r["measured_tok_s"]] for r in rows]},
               {"label": "projected", "points": [[r["concurrency"], r["projected_tok_s"]] for r in rows]}]
        tpot = [{"label": "measured", "points": [[r["concurrency"], r["measured_tpot_ms"]] for r in rows]},
                {"label": "projected", "points": [[r["concurrency"], r["projected_tpot_ms"]] for r in rows]}]
        safe = key.replace("/", "-")
        charts.append({"id": f"whatif-tok-{safe}", "chart": chart_spec(
            title=f"{key}: output throughput vs concurrency", x=("concurrency", "requests"), y=("output", "tok/s"),
            series=tok, x_log=True)})
        charts.append({"id": f"whatif-tpot-{safe}", "chart": chart_spec(
            title=f"{key}: TPOT vs concurrency", x=("concurrency", "requests"), y=("TPOT", "ms"), series=tpot,
            x_log=True)})
    return charts


def job_url(job: KernelJob) -> str:
    """The job page's URL."""
    return reverse("kernels:job-detail", args=[job.pk])
