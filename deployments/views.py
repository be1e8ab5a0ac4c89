"""Server-rendered pages of the deployments app: recipes (list, detail, create/edit with an
htmx validate-and-preview partial, version history with diff and revert, dry-run, deploy),
deployments (list; one deployment's header, processes, timeline and live log tail, polled by
htmx; stop/cancel; log download) and the node pages.

Views are thin: they authorise (:func:`role_page`), parse the form, call one service and
render. Validation, versioning and launch-plan rendering live in :mod:`deployments.recipes`,
:mod:`deployments.services` and :mod:`deployments.launch`; domain errors are shown next to the
fields they name, never as a 500.
"""
from __future__ import annotations

import functools
import json
import os
import shlex
from collections.abc import Callable
from datetime import datetime
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Prefetch
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.errors import CeilingError, Conflict, InvalidInput, NotFound
from controlplane.permissions import has_role
from controlplane.redaction import redact_text
from deployments import selectors, services
from deployments.choices import (
    DEPLOYMENT_ACTIVE,
    DEPLOYMENT_TERMINAL,
    PROCESS_TERMINAL,
    DeploymentStatus,
    ProcessStatus,
    Role,
)
from deployments.forms import RecipeForm, spec_pretty
from deployments.launch import LaunchPlan, ProcessSpec, launch_plan_render
from deployments.models import Deployment, Gpu, Node, NumaNode, Recipe, ServerProcess
from deployments.recipes import recipe_validate
from deployments.topology import node_facts_from_row, parse_cpulist

GIB = 1024**3

# Form fields a domain error path can name directly; any other path (``spec.roles...``) is
# listed under the spec textarea.
FORM_FIELDS = ("name", "description", "engine", "topology", "node")


# --- authorisation --------------------------------------------------------------------------


def role_page(read: str = "viewer", write: str = "operator") -> Callable:
    """Decorate a page view: anonymous users go to the login page; a signed-in user needs
    role ``read`` for GET/HEAD and ``write`` for any other method, else 403 (the same rule as
    :class:`controlplane.permissions.RolePermission`)."""

    def decorator(view: Callable) -> Callable:
        @functools.wraps(view)
        @login_required
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            needed = read if request.method in ("GET", "HEAD", "OPTIONS") else write
            if not has_role(request.user, needed):
                raise PermissionDenied("Your role does not allow this.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _can_write(request: HttpRequest) -> bool:
    return has_role(request.user, "operator")


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


# --- helpers shared by the recipe pages -----------------------------------------------------


def _apply_domain_errors(form: RecipeForm, errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """Attach errors whose path is a form field to that field; return the rest (dotted spec
    paths such as ``spec.roles.prefill.gpus``) for display under the spec textarea."""
    rest: dict[str, list[str]] = {}
    for path, msgs in errors.items():
        msgs = [str(m) for m in (msgs if isinstance(msgs, (list, tuple)) else [msgs])]
        if path in FORM_FIELDS and path in form.fields:
            for m in msgs:
                form.add_error(path, m)
        elif path in ("detail", "non_field_errors", "__all__"):
            for m in msgs:
                form.add_error(None, m)
        else:
            rest.setdefault(path, []).extend(msgs)
    return rest


def _django_errors(exc: DjangoValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: list(v) for k, v in exc.message_dict.items()}
    return {"detail": list(exc.messages)}


def _process_view(process: ProcessSpec) -> dict[str, Any]:
    """Flatten one launch-plan process for the template. ``argv`` is the plan's own list and
    ``argv_line`` its ``shlex.join``: the page shows exactly what would be executed."""
    # The plan already redacts; this second pass only guards against a token pasted into an
    # env value the plan did not know was secret.
    env = {k: redact_text(v) for k, v in process.env_redacted.items()}
    ports = list(process.ports.items())
    try:
        cpu_count: int | None = len(parse_cpulist(process.cpus))
    except ValueError:
        cpu_count = None
    return {
        "role": process.role,
        "ordinal": process.ordinal,
        "host": process.host,
        "ports": ports,
        "endpoints": [f"{process.host}:{port}" for _, port in ports],
        "gpu_ids": list(process.gpu_ids),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "cpus": process.cpus,
        "cpu_count": cpu_count,
        "numa_node": process.numa_node,
        "mem_nodes": process.mem_nodes,
        "pin_method": process.pin_method,
        "argv": list(process.argv),
        "argv_line": shlex.join(process.argv),
        "env": sorted(env.items()),
        "secret_env": dict(process.secret_env),
        "wrapper": list(process.wrapper),
        "health_url": process.health_url,
    }


def _plan_view(plan: LaunchPlan) -> list[dict[str, Any]]:
    return [_process_view(p) for p in plan.processes]


def _plan_summary(plan: LaunchPlan) -> dict[str, Any]:
    """Plan-wide facts shown above the process cards: the URL clients use, the served model
    name, timeouts in seconds, restart policy and renderer warnings."""
    return {
        "entry_url": plan.entry_url,
        "served_model_name": plan.served_model_name,
        "startup_timeout_s": plan.startup_timeout_s,
        "stop_grace_s": plan.stop_grace_s,
        "restart_policy": (plan.restart or {}).get("policy", ""),
        "warnings": list(plan.warnings),
    }


def _api_dry_run_url(recipe: Recipe, version: int | None) -> str | None:
    """URL of the API's dry-run of ``recipe`` (JSON), or None while the API lacks the route."""
    try:
        url = reverse("recipe-dry-run", kwargs={"pk": recipe.pk})
    except NoReverseMatch:
        return None
    return f"{url}?version={version}" if version else url


def _json_text(value: Any) -> str:
    """Compact JSON for one value in a diff cell (``—`` stands for an absent key)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _diff_rows(recipe: Recipe, a: int, b: int) -> list[dict[str, Any]]:
    """Rows of :func:`deployments.services.recipe_diff` with old/new as JSON text; an added
    key has no old text and a removed key no new text."""
    out = []
    for row in services.recipe_diff(recipe=recipe, a=a, b=b):
        change = row.get("change", "changed")
        out.append(
            {
                "path": row["path"],
                "change": change,
                "old": "" if change == "added" else _json_text(row.get("old")),
                "new": "" if change == "removed" else _json_text(row.get("new")),
            }
        )
    return out


def _versions(recipe: Recipe) -> list[int]:
    """Every version number in the recipe's history, oldest first."""
    versions = set(recipe.history.exclude(history_type="-").values_list("version", flat=True))
    versions.add(recipe.version)
    return sorted(versions)


def _version_param(request: HttpRequest, name: str) -> int | None:
    raw = request.GET.get(name) or request.POST.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise Http404(f"{name} must be a version number") from None
    if value < 1:
        raise Http404(f"{name} must be a version number")
    return value


# --- recipes ----------------------------------------------------------------------------------


@role_page()
def recipe_list(request: HttpRequest) -> HttpResponse:
    """All recipes with engine, topology, node and current version."""
    recipes = selectors.recipe_list().annotate(deployment_count=Count("deployments"))
    return render(request, "deployments/recipe_list.html", {"recipes": recipes, "can_write": _can_write(request)})


@role_page()
def recipe_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Summary, pretty spec and deployments of one recipe, with the Deploy button for
    operators. ``?version=N`` shows version N's stored fields (from
    :func:`deployments.services.recipe_version_get`)."""
    recipe = get_object_or_404(Recipe.objects.select_related("node", "created_by"), pk=pk)
    return _recipe_detail_response(request, recipe, version=_version_param(request, "version"))


def _recipe_detail_response(
    request: HttpRequest,
    recipe: Recipe,
    *,
    version: int | None = None,
    status: int = 200,
    deploy_error: dict[str, Any] | None = None,
) -> HttpResponse:
    """Render the recipe page; ``deploy_error`` (``{"message", "errors", "active"}``) explains
    a refused deploy next to the button, with ``status`` 409 or 400."""
    shown: dict[str, Any] = {
        "name": recipe.name,
        "description": recipe.description,
        "engine": recipe.engine,
        "topology": recipe.topology,
        "node": recipe.node.name,
        "spec": recipe.spec,
        "version": recipe.version,
    }
    if version is not None and version != recipe.version:
        try:
            data = services.recipe_version_get(recipe=recipe, version=version)
        except NotFound as exc:
            raise Http404(str(exc)) from None
        shown.update({k: data[k] for k in ("name", "description", "engine", "topology", "spec")})
        shown["node"] = data["node"] or "(node deleted)"
        shown["version"] = version
    deployments = selectors.deployment_list(recipe_id=recipe.pk)[:50]
    return render(
        request,
        "deployments/recipe_detail.html",
        {
            "recipe": recipe,
            "shown": shown,
            "spec_json": spec_pretty(shown["spec"]),
            "is_current": shown["version"] == recipe.version,
            "deployments": deployments,
            "active_deployment": _active_deployment(recipe),
            "deploy_error": deploy_error,
            "can_write": _can_write(request),
            "api_dry_run_url": _api_dry_run_url(recipe, None),
        },
        status=status,
    )


def _form_context(form: RecipeForm, spec_errors: dict[str, list[str]] | None, **extra: Any) -> dict[str, Any]:
    return {"form": form, "spec_errors": spec_errors or {}, **extra}


@role_page(read="operator")
def recipe_create(request: HttpRequest) -> HttpResponse:
    """Create a recipe. GET shows the form (optionally pre-filled from ``?from=<recipe id>``);
    POST calls :func:`deployments.services.recipe_create` and redirects to the new recipe, or
    re-renders the form with errors (HTTP 400)."""
    if request.method == "POST":
        form = RecipeForm(request.POST)
        spec_errors: dict[str, list[str]] = {}
        if form.is_valid():
            data = form.cleaned_data
            try:
                recipe = services.recipe_create(
                    user=request.user,
                    name=data["name"],
                    description=data["description"],
                    engine=data["engine"],
                    topology=data["topology"],
                    node=data["node"],
                    spec=data["spec"],
                )
            except InvalidInput as exc:
                spec_errors = _apply_domain_errors(form, exc.errors)
            except DjangoValidationError as exc:
                spec_errors = _apply_domain_errors(form, _django_errors(exc))
            except CeilingError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Recipe {recipe.name} created (version {recipe.version}).")
                return redirect("deployments:recipe-detail", pk=recipe.pk)
        return render(
            request,
            "deployments/recipe_form.html",
            _form_context(form, spec_errors, creating=True),
            status=400,
        )
    initial: dict[str, Any] = {"spec": spec_pretty({})}
    source_id = request.GET.get("from")
    if source_id and source_id.isdigit():
        source = Recipe.objects.filter(pk=int(source_id)).first()
        if source is not None:
            initial = {
                "name": f"{source.name}-copy"[:63],
                "description": source.description,
                "engine": source.engine,
                "topology": source.topology,
                "node": source.node_id,
                "spec": spec_pretty(source.spec),
            }
    form = RecipeForm(initial=initial)
    return render(request, "deployments/recipe_form.html", _form_context(form, None, creating=True))


@role_page(read="operator")
def recipe_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edit a recipe. POST calls :func:`deployments.services.recipe_update`, which records a
    new version; errors re-render the form (HTTP 400, or 409 when the recipe moved on since
    the form was loaded)."""
    recipe = get_object_or_404(Recipe.objects.select_related("node"), pk=pk)
    if request.method == "POST":
        form = RecipeForm(request.POST, editing=True)
        spec_errors: dict[str, list[str]] = {}
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                recipe = services.recipe_update(
                    recipe=recipe,
                    user=request.user,
                    change_reason=data.get("change_reason") or None,
                    expected_version=data.get("expected_version"),
                    name=data["name"],
                    description=data["description"],
                    engine=data["engine"],
                    topology=data["topology"],
                    node=data["node"],
                    spec=data["spec"],
                )
            except InvalidInput as exc:
                spec_errors = _apply_domain_errors(form, exc.errors)
            except DjangoValidationError as exc:
                spec_errors = _apply_domain_errors(form, _django_errors(exc))
            except Conflict as exc:
                form.add_error(None, str(exc))
                status = 409
            except CeilingError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Recipe {recipe.name} saved as version {recipe.version}.")
                return redirect("deployments:recipe-detail", pk=recipe.pk)
        return render(
            request,
            "deployments/recipe_form.html",
            _form_context(form, spec_errors, recipe=recipe, creating=False),
            status=status,
        )
    form = RecipeForm(
        editing=True,
        initial={
            "name": recipe.name,
            "description": recipe.description,
            "engine": recipe.engine,
            "topology": recipe.topology,
            "node": recipe.node_id,
            "spec": spec_pretty(recipe.spec),
            "expected_version": recipe.version,
        },
    )
    return render(request, "deployments/recipe_form.html", _form_context(form, None, recipe=recipe, creating=False))


@require_POST
@role_page(write="operator")
def recipe_validate_partial(request: HttpRequest) -> HttpResponse:
    """htmx partial behind the form's Validate button: field errors per dotted path, or, when
    the recipe is valid, the dry-run preview of every process. Always HTTP 200 so htmx swaps
    the result in; ``valid`` in the context says which it was."""
    form = RecipeForm(request.POST)
    spec_errors: dict[str, list[str]] = {}
    processes: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    field_errors: dict[str, list[str]] = {}
    if form.is_valid():
        data = form.cleaned_data
        node = Node.objects.prefetch_related("gpus", "numa_nodes").get(pk=data["node"].pk)
        facts = node_facts_from_row(node)
        try:
            spec = recipe_validate(
                engine=data["engine"],
                topology=data["topology"],
                spec=data["spec"],
                node=facts,
                secret_names=services.secret_names(),
            )
            # Secret values are never resolved for a preview; the plan shows references only.
            plan = launch_plan_render(
                engine=data["engine"], topology=data["topology"], spec=spec, node=facts, secret_values=None
            )
            processes = _plan_view(plan)
            summary = _plan_summary(plan)
        except InvalidInput as exc:
            spec_errors = _apply_domain_errors(form, exc.errors)
        except CeilingError as exc:
            form.add_error(None, str(exc))
    for name, errs in form.errors.items():
        field_errors[name if name != "__all__" else "form"] = [str(e) for e in errs]
    valid = not field_errors and not spec_errors
    return render(
        request,
        "deployments/_recipe_validate.html",
        {
            "valid": valid,
            "field_errors": field_errors,
            "spec_errors": spec_errors,
            "processes": processes,
            "summary": summary,
        },
    )


@role_page()
def recipe_history(request: HttpRequest, pk: int) -> HttpResponse:
    """Version history of a recipe (version, when, who, change reason) with a two-version
    diff picker. ``?a=&b=`` renders the diff inline (the htmx picker loads the same table
    from :func:`recipe_diff_partial`)."""
    recipe = get_object_or_404(Recipe, pk=pk)
    records = selectors.recipe_versions_list(recipe=recipe)
    versions = _versions(recipe)
    a = _version_param(request, "a")
    b = _version_param(request, "b")
    diff_rows = None
    if a is not None and b is not None:
        try:
            diff_rows = _diff_rows(recipe, a, b)
        except NotFound as exc:
            raise Http404(str(exc)) from None
    if a is None:
        a = versions[-2] if len(versions) > 1 else versions[0]
    if b is None:
        b = versions[-1]
    return render(
        request,
        "deployments/recipe_history.html",
        {
            "recipe": recipe,
            "records": records,
            "versions": versions,
            "a": a,
            "b": b,
            "diff_rows": diff_rows,
            "can_write": _can_write(request),
        },
    )


@role_page()
def recipe_diff_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """The diff table between versions ``?a=`` and ``?b=`` (rows of path, old, new from
    :func:`deployments.services.recipe_diff`). A full page when not requested by htmx."""
    recipe = get_object_or_404(Recipe, pk=pk)
    a = _version_param(request, "a")
    b = _version_param(request, "b")
    if a is None or b is None:
        raise Http404("pick two versions")
    if not _is_htmx(request):
        return redirect(f"{reverse('deployments:recipe-history', kwargs={'pk': recipe.pk})}?a={a}&b={b}")
    try:
        rows = _diff_rows(recipe, a, b)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    return render(request, "deployments/_recipe_diff.html", {"recipe": recipe, "a": a, "b": b, "diff_rows": rows})


@require_http_methods(["GET", "POST"])
@role_page(read="operator")
def recipe_revert(request: HttpRequest, pk: int, version: int) -> HttpResponse:
    """Revert a recipe to ``version``. GET asks for confirmation and shows what changes
    (current → target); POST calls :func:`deployments.services.recipe_revert`, which records
    the old content as a new version."""
    recipe = get_object_or_404(Recipe, pk=pk)
    if request.method == "POST":
        try:
            expected = _version_param(request, "expected_version")
            recipe = services.recipe_revert(recipe=recipe, user=request.user, version=version, expected_version=expected)
        except NotFound as exc:
            raise Http404(str(exc)) from None
        except InvalidInput as exc:
            problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in exc.errors.items())
            messages.error(request, f"Version {version} cannot be restored: {problems}")
            return redirect("deployments:recipe-history", pk=pk)
        except CeilingError as exc:
            messages.error(request, f"Version {version} cannot be restored: {exc}")
            return redirect("deployments:recipe-history", pk=pk)
        messages.success(request, f"Recipe {recipe.name} reverted to version {version} (now version {recipe.version}).")
        return redirect("deployments:recipe-history", pk=pk)
    try:
        rows = _diff_rows(recipe, recipe.version, version)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    return render(
        request,
        "deployments/recipe_revert.html",
        {"recipe": recipe, "version": version, "diff_rows": rows, "a": recipe.version, "b": version},
    )


@role_page()
def recipe_dry_run(request: HttpRequest, pk: int) -> HttpResponse:
    """Every process the recipe would start: role, host:ports, GPUs and
    ``CUDA_VISIBLE_DEVICES``, CPU list / NUMA node / memory binding / pin method, argv (one
    ``shlex.join`` line and the list), redacted env and health URL, all taken from
    :func:`deployments.services.recipe_plan` (the same plan the node agent executes).
    ``?version=N`` renders version N. A recipe no longer valid for its node shows its errors
    (HTTP 200)."""
    recipe = get_object_or_404(Recipe.objects.select_related("node"), pk=pk)
    version = _version_param(request, "version")
    errors: dict[str, list[str]] = {}
    processes: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    try:
        plan = services.recipe_plan(recipe=recipe, version=version)
        processes = _plan_view(plan)
        summary = _plan_summary(plan)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except InvalidInput as exc:
        errors = {k: [str(m) for m in v] for k, v in exc.errors.items()}
    except CeilingError as exc:
        errors = {"detail": [str(exc)]}
    return render(
        request,
        "deployments/recipe_dry_run.html",
        {
            "recipe": recipe,
            "version": version or recipe.version,
            "versions": _versions(recipe),
            "processes": processes,
            "summary": summary,
            "errors": errors,
            "api_dry_run_url": _api_dry_run_url(recipe, version),
        },
    )


# --- deployments ------------------------------------------------------------------------------

# How many log lines the page shows per process; the full file is one click away (download).
LOG_TAIL_LINES = 200
# Timeline rows shown on the page; a process that restarts in a loop can write thousands.
TIMELINE_MAX_EVENTS = 500
# A download is redacted in pieces of about 64 KiB, each extended to the end of its line; a
# line longer than 1 MiB is cut there (only such a pathological line could split a secret).
DOWNLOAD_CHUNK_BYTES = 64 * 1024
DOWNLOAD_LINE_MAX_BYTES = 1024 * 1024
POLL_TRIGGER = "every 2s"
# A running process's health is "stale" once its last probe is older than this many liveness
# periods: the agent probes every period, so missing two in a row means it is not probing.
STALE_PROBE_FACTOR = 3


def _active_deployment(recipe: Recipe) -> Deployment | None:
    """The newest not-yet-terminal deployment of ``recipe`` (what a second deploy conflicts
    with), or None."""
    return selectors.deployment_list(recipe_id=recipe.pk).filter(status__in=DEPLOYMENT_ACTIVE).first()


def _utc_iso(value: datetime) -> str:
    """``2025-06-01T12:00:05Z``: second precision, always UTC."""
    return value.astimezone(dt_timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration_text(seconds: float) -> str:
    """A human duration with units, two parts at most: ``42 s``, ``3 min 05 s``,
    ``2 h 07 min``, ``3 d 04 h``. Negative input (clock skew) counts as 0 s."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours:02d} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _when(value: datetime | None, now: datetime) -> dict[str, str] | None:
    """``{"iso": UTC ISO 8601, "ago": "3 min 05 s ago"}`` for a timestamp (``"in 20 s"`` for
    one in the future, such as a scheduled restart), None when unset."""
    if value is None:
        return None
    age = (now - value).total_seconds()
    if abs(age) < 1:
        relative = "just now"
    elif age > 0:
        relative = f"{_duration_text(age)} ago"
    else:
        relative = f"in {_duration_text(-age)}"
    return {"iso": _utc_iso(value), "ago": relative}


def _status_class(status: str) -> str:
    """CSS modifier of a status badge: ``ok`` for ready, ``bad`` for failed/killed, ``warn``
    for the transient states, none for a clean end (stopped, exited)."""
    if status == "ready":
        return "ok"
    if status in ("failed", "killed"):
        return "bad"
    if status in ("pending", "starting", "stopping", "spawned"):
        return "warn"
    return ""


def _agent_view(node: Node, now: datetime) -> dict[str, Any]:
    """Whether the node agent answers (heartbeat within ``CEILING_HEARTBEAT_TIMEOUT_S``) and
    when it last did."""
    return {"online": node.agent_online, "heartbeat": _when(node.agent_heartbeat_at, now)}


def _log_file(process: ServerProcess) -> Path | None:
    """The process's log file if its recorded path lies inside ``settings.CEILING_LOG_DIR``
    (after resolving ``..`` and symlinks), else None.

    ``log_path`` is a database value: pages read or serve a file only when it is one of the
    supervisor's own logs, never an arbitrary path written into the row.
    """
    if not process.log_path or not os.path.isabs(process.log_path):
        return None
    try:
        root = Path(settings.CEILING_LOG_DIR).resolve()
        path = Path(process.log_path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if path == root or not path.is_relative_to(root):
        return None
    return path


def _log_parts(path: Path) -> list[Path]:
    """The files making up one log, oldest first: the rotated ``<log>.1`` (the shim keeps one)
    then ``<log>``; only regular files that exist."""
    return [p for p in (Path(f"{path}.1"), path) if p.is_file()]


def _pinning_view(process: ServerProcess) -> dict[str, Any]:
    """Effective CPU list / memory NUMA nodes (as read back from ``/proc/<pid>/status``, or the
    intended ones until then) and the verification verdict: ``state`` is ``verified``,
    ``failed`` (``reason`` says what differs) or ``unchecked``."""
    cpus = process.effective_cpus or process.cpus
    try:
        cpu_count: int | None = len(parse_cpulist(cpus)) if cpus else None
    except ValueError:
        cpu_count = None
    reason = ""
    if process.pinning_verified is True:
        state = "verified"
    elif process.pinning_verified is False:
        state = "failed"
        problems = []
        if process.cpus and process.effective_cpus and not _same_cpulist(process.cpus, process.effective_cpus):
            problems.append(f"CPUs {process.effective_cpus} ≠ intended {process.cpus}")
        if process.mem_nodes and process.effective_mems and not _same_cpulist(process.mem_nodes, process.effective_mems):
            problems.append(f"memory nodes {process.effective_mems} ≠ intended {process.mem_nodes}")
        reason = "; ".join(problems) or redact_text(process.reason) or "pinning could not be verified"
    elif not process.cpus:
        # Nothing to verify: a role without a CPU list (a router, usually) runs wherever the
        # scheduler puts it, and "not checked yet" would never change.
        state = "unpinned"
    else:
        state = "unchecked"
    return {
        "cpus": cpus,
        "cpu_count": cpu_count,
        "cpus_effective": bool(process.effective_cpus),
        "mems": process.effective_mems or process.mem_nodes,
        "mems_effective": bool(process.effective_mems),
        "numa_node": process.numa_node,
        "method": process.pin_method,
        "state": state,
        "reason": reason,
    }


def _same_cpulist(a: str, b: str) -> bool:
    try:
        return set(parse_cpulist(a)) == set(parse_cpulist(b))
    except ValueError:
        return a.strip() == b.strip()


def _health_view(process: ServerProcess, now: datetime) -> dict[str, Any]:
    """What the supervisor's probes last concluded: a badge (``class``, ``text``) from the
    process status (a process is ``ready`` only after every readiness check of its launch plan
    passed), the last probe's outcome and time, consecutive liveness failures and, for a
    crashed process waiting to be restarted, when the restart is due. A running process whose
    last probe is older than :data:`STALE_PROBE_FACTOR` liveness periods
    (``CEILING_LIVENESS_PERIOD_S``) is shown as ``stale (agent offline?)``: only the node agent
    probes, so an old answer means nobody is watching. An ended process shows its terminal
    state alone."""
    status = process.status
    stale = False
    if status in (ProcessStatus.READY, ProcessStatus.SPAWNED) and process.last_probe_at is not None:
        stale = (now - process.last_probe_at).total_seconds() > STALE_PROBE_FACTOR * settings.CEILING_LIVENESS_PERIOD_S
    if stale:
        badge = ("warn", "stale (agent offline?)")
    elif status == ProcessStatus.READY:
        badge = ("warn", "degraded") if process.probe_failures else ("ok", "healthy")
    elif status == ProcessStatus.SPAWNED:
        badge = ("warn", "starting: not yet healthy")
    elif status == ProcessStatus.PENDING:
        badge = ("warn", "restart pending") if process.next_restart_at else ("", "not started")
    else:
        detail = f"exit code {process.exit_code}" if process.exit_code is not None else status
        badge = ("" if status == ProcessStatus.EXITED else "bad", f"down ({detail})")
        # A process that ended shows only how it ended: its last probe answer ("answered 200,
        # probed 9 s ago") describes a process that no longer exists.
        return {"class": badge[0], "text": badge[1], "detail": "", "probed": None, "failures": 0,
                "restart_at": None, "stale": False}
    return {
        "class": badge[0],
        "text": badge[1],
        "detail": redact_text(process.probe_detail),
        "probed": _when(process.last_probe_at, now),
        "failures": process.probe_failures,
        "restart_at": _when(process.next_restart_at, now) if status == ProcessStatus.PENDING else None,
        "stale": stale,
    }


def _server_process_view(process: ServerProcess, now: datetime) -> dict[str, Any]:
    """One row of the process table: role, status, pid, uptime (from ``started_at`` to now,
    or to ``ended_at`` once it ended), restarts, pinning, GPU ids, ports and health."""
    uptime = None
    if process.started_at is not None:
        until = process.ended_at if process.status in PROCESS_TERMINAL and process.ended_at else now
        uptime = _duration_text((until - process.started_at).total_seconds())
    ports = sorted(process.ports.items()) if isinstance(process.ports, dict) else []
    env = process.env_redacted if isinstance(process.env_redacted, dict) else {}
    return {
        "row": process,
        "label": f"{process.role} #{process.ordinal}",
        "status_class": _status_class(process.status),
        "uptime": uptime,
        "ended": process.status in PROCESS_TERMINAL,
        "started": _when(process.started_at, now),
        "ready": _when(process.ready_at, now),
        "pinning": _pinning_view(process),
        "gpu_ids": list(process.gpu_ids or []),
        "cuda_visible_devices": redact_text(str(env["CUDA_VISIBLE_DEVICES"])) if "CUDA_VISIBLE_DEVICES" in env else None,
        "ports": ports,
        "gpu_verified": process.gpu_verified,
        "health": _health_view(process, now),
        "has_log": _log_file(process) is not None,
    }


def _entry_url(deployment: Deployment, processes: list[ServerProcess]) -> str:
    """Where clients connect: the URL recorded at deploy time (the router for PD, the single
    server otherwise); for a row without one, the scheme and host:port of that process's
    health URL; "" when neither is known."""
    if deployment.entry_url:
        return deployment.entry_url
    for role in (Role.ROUTER, Role.SINGLE):
        for p in processes:
            if p.role == role and p.health_url:
                parts = urlsplit(p.health_url)
                if parts.scheme and parts.netloc:
                    return f"{parts.scheme}://{parts.netloc}"
    return ""


def _deployment_context(deployment: Deployment, now: datetime) -> dict[str, Any]:
    """Everything the deployment page's live part shows: header facts, the process table and
    the timeline (oldest first, at most :data:`TIMELINE_MAX_EVENTS` of the newest)."""
    processes = list(selectors.deployment_processes(deployment=deployment))
    terminal = deployment.status in DEPLOYMENT_TERMINAL
    agent = _agent_view(deployment.node, now)
    events_qs = selectors.deployment_events(deployment=deployment)
    event_total = events_qs.count()
    events = list(events_qs.order_by("-at", "-id")[:TIMELINE_MAX_EVENTS])[::-1]
    began = deployment.started_at or deployment.created_at
    until = deployment.ended_at if terminal and deployment.ended_at else now
    return {
        "deployment": deployment,
        "status_class": _status_class(deployment.status),
        "terminal": terminal,
        "live": not terminal,
        "poll_trigger": POLL_TRIGGER,
        "agent": agent,
        "waiting_reason": redact_text(services.deployment_waiting_reason(deployment=deployment)),
        "reason": redact_text(deployment.reason),
        "entry_url": _entry_url(deployment, processes),
        "created": _when(deployment.created_at, now),
        "started": _when(deployment.started_at, now),
        "ready": _when(deployment.ready_at, now),
        "ended": _when(deployment.ended_at, now),
        "duration": _duration_text((until - began).total_seconds()),
        "processes": [_server_process_view(p, now) for p in processes],
        "process_ids": ",".join(str(p.pk) for p in processes),
        "events": [{"row": e, "at": _when(e.at, now), "message": redact_text(e.message)} for e in events],
        "events_hidden": max(0, event_total - len(events)),
    }


def _get_deployment(pk: int) -> Deployment:
    return get_object_or_404(Deployment.objects.select_related("recipe", "node", "created_by"), pk=pk)


def _get_process(deployment_pk: int, process_pk: int) -> ServerProcess:
    return get_object_or_404(
        ServerProcess.objects.select_related("deployment"), pk=process_pk, deployment_id=deployment_pk
    )


@role_page()
def deployment_list(request: HttpRequest) -> HttpResponse:
    """Deployment rows, newest first: status badge, recipe and version, node with agent
    state, created/ready times (UTC ISO and relative) and duration."""
    now = timezone.now()
    rows = []
    for d in selectors.deployment_list().annotate(process_count=Count("processes"))[:200]:
        terminal = d.status in DEPLOYMENT_TERMINAL
        # The row is only rendered, never saved: a reason can quote engine log lines.
        d.reason = redact_text(d.reason)
        began = d.started_at or d.created_at
        until = d.ended_at if terminal and d.ended_at else now
        rows.append(
            {
                "d": d,
                "status_class": _status_class(d.status),
                "agent": _agent_view(d.node, now),
                "created": _when(d.created_at, now),
                "ready": _when(d.ready_at, now),
                "duration": _duration_text((until - began).total_seconds()),
                "running": not terminal,
            }
        )
    return render(request, "deployments/deployment_list.html", {"deployments": rows, "can_write": _can_write(request)})


@require_POST
@role_page(write="operator")
def recipe_deploy(request: HttpRequest, pk: int) -> HttpResponse:
    """Deploy the recipe's current version: :func:`deployments.services.deployment_create`,
    then redirect to the new deployment's page. A recipe with an active deployment gets the
    recipe page back with HTTP 409 and a link to that deployment; a recipe no longer valid for
    its node gets HTTP 400 with the errors."""
    recipe = get_object_or_404(Recipe.objects.select_related("node", "created_by"), pk=pk)
    try:
        deployment = services.deployment_create(recipe=recipe, user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except Conflict as exc:
        error = {"message": str(exc), "errors": {}, "active": _active_deployment(recipe)}
        return _recipe_detail_response(request, recipe, status=409, deploy_error=error)
    except InvalidInput as exc:
        errors = {k: [str(m) for m in v] for k, v in exc.errors.items()}
        error = {"message": "The recipe cannot be deployed as it stands.", "errors": errors, "active": None}
        return _recipe_detail_response(request, recipe, status=400, deploy_error=error)
    except CeilingError as exc:
        error = {"message": str(exc), "errors": {}, "active": None}
        return _recipe_detail_response(request, recipe, status=400, deploy_error=error)
    messages.success(request, f"Deployment #{deployment.pk} of {recipe.name} v{deployment.recipe_version} created.")
    return redirect("deployments:deployment-detail", pk=deployment.pk)


@role_page()
def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One deployment: header (status, reason, node and agent state, recipe version, entry
    URL), the process table, the timeline and a live log tail per process. The live parts
    poll every 2 s (htmx) until the deployment is stopped or failed."""
    deployment = _get_deployment(pk)
    context = _deployment_context(deployment, timezone.now())
    context["can_write"] = _can_write(request)
    context["logs"] = [_process_log_context(p["row"], deployment) for p in context["processes"]]
    return render(request, "deployments/deployment_detail.html", context)


@role_page()
def deployment_live_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: header, process table and timeline of one deployment. The request
    carries ``known`` (process ids the page already shows log panels for); when the set
    changed, the response fires the ``processes-changed`` event so the log section reloads."""
    deployment = _get_deployment(pk)
    context = _deployment_context(deployment, timezone.now())
    context["can_write"] = _can_write(request)
    response = render(request, "deployments/_deployment_live.html", context)
    if request.GET.get("known", "") != context["process_ids"]:
        response["HX-Trigger"] = "processes-changed"
    return response


@role_page()
def deployment_logs_partial(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx partial: the log panel of every process of the deployment (re-fetched when the
    set of processes changes)."""
    deployment = _get_deployment(pk)
    processes = list(selectors.deployment_processes(deployment=deployment))
    context = {
        "deployment": deployment,
        "process_ids": ",".join(str(p.pk) for p in processes),
        "logs": [_process_log_context(p, deployment) for p in processes],
    }
    return render(request, "deployments/_deployment_logs.html", context)


def _process_log_context(process: ServerProcess, deployment: Deployment) -> dict[str, Any]:
    """The last :data:`LOG_TAIL_LINES` lines of one process's log with secret values
    redacted, plus whether the panel keeps polling (until the deployment is terminal)."""
    path = _log_file(process)
    text = ""
    note = ""
    if path is None:
        note = "No log file recorded yet." if not process.log_path else "The log path lies outside the log directory; not shown."
    elif not _log_parts(path):
        note = "The log file does not exist (yet)."
    else:
        # Redacted here as well: the tail may include lines written before a secret value
        # was registered with the redactor in this process.
        text = redact_text(services.process_log_tail(process=process, lines=LOG_TAIL_LINES))
    return {
        "process": process,
        "label": f"{process.role} #{process.ordinal}",
        "text": text,
        "note": note,
        "downloadable": path is not None and bool(_log_parts(path)),
        "live": deployment.status not in DEPLOYMENT_TERMINAL,
        "poll_trigger": POLL_TRIGGER,
        "lines": LOG_TAIL_LINES,
    }


@role_page()
def process_log_partial(request: HttpRequest, pk: int, process_pk: int) -> HttpResponse:
    """htmx partial: one process's log tail in a ``<pre>``, polled every 2 s while the
    deployment is not terminal (the terminal response drops the trigger, ending the poll)."""
    process = _get_process(pk, process_pk)
    return render(
        request, "deployments/_process_log.html", {"log": _process_log_context(process, process.deployment)}
    )


class _RedactedLogReader:
    """A read-only file-like view of a log's parts (rotated then current) that passes the text
    through :func:`controlplane.redaction.redact_text` before it leaves the server.

    Each read returns about :data:`DOWNLOAD_CHUNK_BYTES`, extended to the end of the line so a
    secret (one token, never spanning a newline) is always redacted whole; ``size`` is only a
    hint, which suits :class:`~django.http.FileResponse`'s read loop. Bytes round-trip through
    ``surrogateescape`` so non-UTF-8 output reaches the download unchanged except where a
    secret was masked. There is no ``seek``/``tell``, so no Content-Length is sent (redaction
    changes the length).
    """

    def __init__(self, parts: list[Path]):
        self._parts = list(parts)
        self._fh: Any = None

    def read(self, size: int = -1) -> bytes:
        while self._fh is not None or self._parts:
            if self._fh is None:
                try:
                    self._fh = open(self._parts.pop(0), "rb")  # noqa: SIM115 - closed at EOF or in close()
                except OSError:
                    continue
            chunk = self._fh.read(DOWNLOAD_CHUNK_BYTES)
            if not chunk:
                self._fh.close()
                self._fh = None
                continue
            if not chunk.endswith(b"\n"):
                chunk += self._fh.readline(DOWNLOAD_LINE_MAX_BYTES)
            text = chunk.decode("utf-8", errors="surrogateescape")
            return redact_text(text).encode("utf-8", errors="surrogateescape")
        return b""

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._parts = []


@role_page()
def process_log_download(request: HttpRequest, pk: int, process_pk: int) -> FileResponse:
    """The full log of one process (rotated part first) as a text attachment, streamed with
    secret values redacted. 404 unless the recorded path lies inside
    ``settings.CEILING_LOG_DIR`` and the file exists."""
    process = _get_process(pk, process_pk)
    path = _log_file(process)
    parts = _log_parts(path) if path is not None else []
    if not parts:
        raise Http404("No log file for this process.")
    filename = f"deployment-{process.deployment_id}-{process.role}-{process.ordinal}.log"
    return FileResponse(
        _RedactedLogReader(parts),
        as_attachment=True,
        filename=filename,
        content_type="text/plain; charset=utf-8",
    )


@require_POST
@role_page(write="operator")
def deployment_stop(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop (or, while it still waits for its node agent, cancel) a deployment through
    :func:`deployments.services.deployment_stop`, then back to its page. A deployment that
    already ended is reported, not an error page."""
    deployment = _get_deployment(pk)
    was_pending = deployment.status == DeploymentStatus.PENDING
    try:
        deployment = services.deployment_stop(deployment=deployment, user=request.user)
    except Conflict as exc:
        messages.error(request, f"Deployment #{pk} cannot be stopped: {exc}")
    except NotFound as exc:
        raise Http404(str(exc)) from None
    else:
        verb = "Cancelled" if was_pending else "Stop requested for"
        messages.success(request, f"{verb} deployment #{pk} ({deployment.status}).")
    return redirect("deployments:deployment-detail", pk=pk)


# --- nodes ------------------------------------------------------------------------------------


def _gib(value: int | None) -> str:
    """Bytes → GiB with one decimal (``150754820096`` → ``"140.4"``), ``"—"`` when unknown."""
    if not value:
        return "—"
    return f"{value / GIB:.1f}"


@role_page()
def node_list(request: HttpRequest) -> HttpResponse:
    """Registered nodes with GPU and NUMA counts, queue name and agent status."""
    rows = [
        {
            "node": n,
            "gpu_count": len(n.gpus.all()),
            "numa_count": len(n.numa_nodes.all()),
            "gpu_names": sorted({g.name for g in n.gpus.all() if g.name}),
            "memory_gib": _gib(n.memory_total_bytes),
        }
        for n in selectors.node_list()
    ]
    return render(request, "deployments/node_list.html", {"rows": rows})


@role_page()
def node_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One node: GPUs (index, name, memory in GiB, PCI bus id, NUMA node, compute capability),
    NUMA nodes with CPU lists, tools, queue name and agent status."""
    node = get_object_or_404(
        Node.objects.prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.order_by("index")),
            Prefetch("numa_nodes", queryset=NumaNode.objects.order_by("index")),
        ),
        name=name,
    )
    gpus = [{"gpu": g, "memory_gib": _gib(g.memory_total_bytes)} for g in node.gpus.all()]
    numa = []
    for n in node.numa_nodes.all():
        try:
            cpu_count: int | None = len(parse_cpulist(n.cpus))
        except ValueError:
            cpu_count = None
        numa.append(
            {
                "numa": n,
                "cpu_count": cpu_count,
                "memory_gib": _gib(n.memory_total_bytes),
                "gpu_indices": [g.index for g in node.gpus.all() if g.numa_node == n.index],
            }
        )
    tools = sorted((node.tools or {}).items())
    return render(
        request,
        "deployments/node_detail.html",
        {
            "node": node,
            "gpus": gpus,
            "numa": numa,
            "tools": tools,
            "memory_gib": _gib(node.memory_total_bytes),
            "recipes": node.recipes.order_by("name"),
        },
    )
