"""Recipe pages: list, detail (with Deploy), create/edit with an htmx validate-and-preview
partial, version history with diff and revert, and the dry-run of any version.

Views are thin: they authorise (:func:`deployments.views.common.role_page`), parse the form, call
one service and render. Validation, versioning and launch-plan rendering live in
:mod:`deployments.recipes`, :mod:`deployments.services` and :mod:`deployments.launch`; domain
errors are shown next to the fields they name, never as a 500.
"""
from __future__ import annotations

import json
import re
import shlex
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from rest_framework import serializers

from controlplane.api import IdField
from controlplane.drf_defaults import given_more_than_once
from controlplane.errors import BadQuery, CeilingError, Conflict, InvalidInput, NotFound
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import credential_mask_json, redact_text
from deployments import selectors, services
from deployments.api.serializers import version_number
from deployments.choices import DEPLOYMENT_ACTIVE
from deployments.forms import RecipeForm, spec_pretty
from deployments.launch import LaunchPlan, ProcessSpec, launch_plan_render, port_kind_words
from deployments.models import Deployment, Node, Recipe, recipe_name_shown
from deployments.topology import node_facts_from_row, parse_cpulist
from deployments.views.common import FORM_METHODS, _can_write, _is_htmx, post_or_redirect, role_page

# Form fields a domain error path can name directly; any other path (``spec.roles...``) is
# listed under the spec textarea.
FORM_FIELDS = ("name", "description", "engine", "topology", "node")


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


def _refused_form_errors(form: RecipeForm, recipe: Recipe | None = None) -> dict[str, list[str]]:
    """What else is wrong with a recipe form refused on its own (a bad name, a number in the spec
    that is not finite), so that every problem shows at once, as the API's 400 names them: a name
    another recipe has, and the spec's rules, judged whenever the spec was read as an object and
    the engine and topology are known (without a node, all but its hardware references). A path
    the spec box already refuses (a number that is not finite, a key given twice) keeps that
    message alone. Errors of form fields go on the form; the spec paths' are returned."""
    data = form.cleaned_data
    name = data.get("name")
    if name:
        taken = Recipe.objects.filter(name=name)
        if recipe is not None:
            taken = taken.exclude(pk=recipe.pk)
        if taken.exists():
            form.add_error("name", f"A recipe named {json_spelled(name)} already exists.")
    return _refused_spec_errors(form)


def _refused_spec_errors(form: RecipeForm) -> dict[str, list[str]]:
    """The spec rules' part of :func:`_refused_form_errors`."""
    data = form.cleaned_data
    errors: dict[str, list[str]] = {}
    spec = data.get("spec", form.spec_refused)
    if isinstance(spec, dict) and "engine" in data and "topology" in data:
        marked = form.spec_marked_paths
        stored: dict[str, list[str]] = {}
        services.check_json_tree(spec, "spec", stored)
        try:
            services.recipe_spec_validate(engine=data["engine"], topology=data["topology"], spec=spec,
                                          node=data.get("node"))
        except InvalidInput as exc:
            # what else is wrong where a text was refused for its characters is said beside it
            beside = services.spec_errors_beside_refused_text(
                engine=data["engine"], topology=data["topology"], spec=spec, node=data.get("node"), stored=stored)
            for path, msgs in {**exc.errors, **{p: [*m, *beside.get(p, [])] for p, m in stored.items()}}.items():
                if not any(path == p or path.startswith(p + ".") for p in marked):
                    errors.setdefault(path, []).extend(msgs)
        except CeilingError as exc:
            form.add_error(None, str(exc))
    return _apply_domain_errors(form, errors)


def _refused_form_masked(form: RecipeForm) -> RecipeForm:
    """``form``, refused, made to show its spec as typed except for what may not be stored in
    clear (:func:`deployments.recipes.secret_text_masked`: a well-known credential shortened, a
    stored secret's value masked), which its errors already refused naming the secret to
    reference: the page that names the secret never repeats its value, in the spec box or
    anywhere else. Its name, description and change reason are shown so too."""
    from deployments.recipes import secret_text_masked

    shown = [key for key in ("spec", "name", "description", "change_reason") if key in form.data]
    if form.is_bound and shown:
        data = form.data.copy()
        values = services.secret_values()
        for key in shown:
            data.setlist(key, [secret_text_masked(text, values) for text in form.data.getlist(key)])
        form.data = data
    return form


def _django_errors(exc: DjangoValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {k: list(v) for k, v in exc.message_dict.items()}
    return {"detail": list(exc.messages)}


def _process_view(process: ProcessSpec, plan: LaunchPlan) -> dict[str, Any]:
    """Flatten one launch-plan process for the template. ``argv`` is the plan's own list and
    ``argv_line`` its ``shlex.join``: the page shows exactly what would be executed, a stored
    secret's value in a plain flag masked. The health URL is as this host reaches it, with where
    the node agent probes it when that differs (:meth:`deployments.launch.LaunchPlan.health_url_from_here`):
    ``127.0.0.1`` of a process on another node is that node's loopback, not this host's."""
    health_url, health_note = plan.health_url_from_here(process)
    # The plan already redacts; this second pass only guards against a token pasted into an
    # env value the plan did not know was secret.
    env = {k: redact_text(v) for k, v in process.env_redacted.items()}
    ports = [(port_kind_words(kind), port) for kind, port in process.ports.items()]   # side channel, in words
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
        "argv": process.argv_shown(),
        "argv_line": shlex.join(process.argv_shown()),
        "env": sorted(env.items()),
        "secret_env": dict(process.secret_env),
        "wrapper": list(process.wrapper),
        "health_url": health_url,
        "health_note": health_note,
    }


def _plan_view(plan: LaunchPlan) -> list[dict[str, Any]]:
    return [_process_view(p, plan) for p in plan.processes]


def _plan_summary(plan: LaunchPlan) -> dict[str, Any]:
    """Plan-wide facts shown above the process cards: the URL clients use (or why there is none), the served model
    name (a stored secret's value in it, from a spec saved before such values were refused, masked
    as every read of a name masks it), timeouts in seconds, restart policy and renderer warnings."""
    return {
        "entry_url": plan.entry_url,
        # no URL from this host (another node without a recorded address): why, in its place
        "entry_url_problem": plan.entry_url_problem,
        "served_model_name": recipe_name_shown(plan.served_model_name),
        "startup_timeout_s": plan.startup_timeout_s,
        "stop_grace_s": plan.stop_grace_s,
        "restart_policy": (plan.restart or {}).get("policy", ""),
        # the entry URL's problem is said where the URL would be
        "warnings": [w for w in plan.warnings if w != plan.entry_url_problem],
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
    return json.dumps(credential_mask_json(value), ensure_ascii=False, sort_keys=True)


def _diff_rows(recipe: Recipe, a: int, b: int) -> list[dict[str, Any]]:
    """Rows of :func:`deployments.services.recipe_diff` with old/new as JSON text; an added
    key has no old text and a removed key no new text, and no description (stored as ``""``, null in
    the API's diff) has none either: the table shows each as ``—``."""
    out = []
    for row in services.recipe_diff(recipe=recipe, a=a, b=b):
        change = row.get("change", "changed")
        old, new = row.get("old"), row.get("new")
        absent_old = change == "added" or (row["path"] == "description" and not old)
        absent_new = change == "removed" or (row["path"] == "description" and not new)
        out.append(
            {
                "path": row["path"],
                "change": change,
                "old": "" if absent_old else _json_text(old),
                "new": "" if absent_new else _json_text(new),
            }
        )
    return out


def _versions(recipe: Recipe) -> list[int]:
    """Every version number in the recipe's history, oldest first."""
    versions = set(recipe.history.exclude(history_type="-").values_list("version", flat=True))
    versions.add(recipe.version)
    return sorted(versions)


def _version_param(request: HttpRequest, name: str, recipe: Recipe | None = None) -> int | None:
    """The version number ``name`` of the query (or, without it there, of the form), None when not
    given. A value that is not a version number (judged, and refused in the API's words, by
    :func:`deployments.api.serializers.version_number`: ``version must be a whole number between
    1 and 2147483647, got 'x'``), or a number given more than
    once (``?a=1&a=2``: taking the last would show versions nobody asked for), is the client's
    error: a 400 (:class:`controlplane.errors.BadQuery`) whose page says why (``a is given 2 times
    (1, 2): give it once``). With ``recipe``, a parameter given empty (``?b=``, which the API
    refuses too) is such a 400 naming the versions there are (``b is empty: give a version number
    1–3 or leave it out``) rather than taken as left out. A well-formed number the recipe has no
    version of is the caller's 404."""
    values = request.GET.getlist(name) or request.POST.getlist(name)
    if repeated := given_more_than_once(values):
        raise BadQuery(f"{name} {repeated}")
    raw = values[0] if values else None
    if raw == "" and recipe is not None:
        raise BadQuery(_empty_version(name, _versions(recipe)))
    if raw in (None, ""):
        return None
    try:
        return version_number(raw)
    except ValueError as exc:
        raise BadQuery(f"{name} {exc}") from None


def _empty_version(name: str, versions: list[int]) -> str:
    """The refusal of a version parameter given empty: ``b is empty: give a version number 1–3 or
    leave it out`` (``give version number 1`` for a recipe with one version)."""
    lo, hi = versions[0], versions[-1]
    allowed = f"version number {lo}" if lo == hi else f"a version number {lo}–{hi}"
    return f"{name} is empty: give {allowed} or leave it out"


def _existing_version(recipe: Recipe, version: int | None, versions: list[int]) -> int | None:
    """``version`` when the recipe has it (or None); a version it lacks is a 404 in the API's words
    (``Recipe 'x' has no version 44.``), never a picker set to a version that is not there."""
    if version is not None and version not in versions:
        try:
            services.recipe_version_get(recipe=recipe, version=version)
        except NotFound as exc:
            raise Http404(str(exc)) from None
    return version


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
    return _recipe_detail_response(request, recipe, version=_version_param(request, "version", recipe))


def _recipe_detail_response(
    request: HttpRequest,
    recipe: Recipe,
    *,
    version: int | None = None,
    status: int = 200,
) -> HttpResponse:
    """Render the recipe page (a refused deploy's reason comes as a message, above it)."""
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
    # a stored secret's value in a name saved before it was refused there shows masked
    shown["name"] = recipe_name_shown(shown["name"])
    deployments = selectors.deployment_list(recipe_id=recipe.pk)[:50]
    return render(
        request,
        "deployments/recipe_detail.html",
        {
            "recipe": recipe,
            "shown": shown,
            "spec_json": spec_pretty(shown["spec"]),
            "secret_values_held": services.recipe_secret_values_held(shown["spec"]),
            "is_current": shown["version"] == recipe.version,
            "deployments": deployments,
            "active_deployment": _active_deployment(recipe),
            "can_write": _can_write(request),
            "api_dry_run_url": _api_dry_run_url(recipe, None),
        },
        status=status,
    )


def _form_context(form: RecipeForm, spec_errors: dict[str, list[str]] | None, **extra: Any) -> dict[str, Any]:
    return {"form": form, "spec_errors": spec_errors or {}, **extra}


@role_page(read="operator", methods=FORM_METHODS)
def recipe_create(request: HttpRequest) -> HttpResponse:
    """Create a recipe. GET shows the form (optionally pre-filled from ``?from=<recipe id>``; a
    ``from`` given twice, empty or not an id is a 400, ``from is given 2 times (1, 2): give it
    once``, and an id no recipe has is a 404, ``no recipe #999 to copy from``);
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
        else:
            spec_errors = _refused_form_errors(form)
        return render(
            request,
            "deployments/recipe_form.html",
            _form_context(_refused_form_masked(form), spec_errors, creating=True),
            status=400,
        )
    initial: dict[str, Any] = {"spec": spec_pretty({})}
    # ?from=1&from=2: taking the last would copy a recipe the link did not name.
    if repeated := given_more_than_once(request.GET.getlist("from")):
        raise BadQuery(f"from {repeated}")
    source_id = request.GET.get("from")
    if source_id is not None:
        if source_id == "":
            raise BadQuery("from is empty: give the id of the recipe to copy or leave it out")
        try:
            source_pk = IdField().to_internal_value(source_id)
        except serializers.ValidationError as exc:
            raise BadQuery(f"from {exc.detail[0]}") from None
        source = Recipe.objects.filter(pk=source_pk).first()
        if source is None:
            raise Http404(f"no recipe #{source_pk} to copy from")
        initial = {
            "name": f"{source.name_shown}-copy"[:63],
            "description": services.free_text_shown(source.description),
            "engine": source.engine,
            "topology": source.topology,
            "node": source.node_id,
            "spec": spec_pretty(source.spec),
        }
    form = RecipeForm(initial=initial)
    return render(request, "deployments/recipe_form.html", _form_context(form, None, creating=True))


@role_page(read="operator", methods=FORM_METHODS)
def recipe_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Edit a recipe. POST calls :func:`deployments.services.recipe_update`, which records a
    new version; a form saved with nothing changed writes none and says so (``nothing was saved
    and no new version was made``); errors re-render the form (HTTP 400, or 409 when the recipe moved on since
    the form was loaded)."""
    recipe = get_object_or_404(Recipe.objects.select_related("node"), pk=pk)
    if request.method == "POST":
        form = RecipeForm(request.POST, editing=True)
        spec_errors: dict[str, list[str]] = {}
        status = 400
        stale_from = None
        if form.is_valid():
            data = form.cleaned_data
            version_before = recipe.version
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
                # The version this form was opened at: saving it again would be refused again, so
                # the page offers the diff to the current version and a fresh edit instead.
                stale_from = data.get("expected_version")
                recipe.refresh_from_db()
            except CeilingError as exc:
                form.add_error(None, str(exc))
            else:
                if recipe.version == version_before:
                    # recipe_update writes no version for content equal to the stored one
                    messages.info(request, f"Recipe {recipe.name} is unchanged: nothing was saved and no new "
                                           f"version was made (still version {recipe.version}).")
                else:
                    messages.success(request, f"Recipe {recipe.name} saved as version {recipe.version}.")
                return redirect("deployments:recipe-detail", pk=recipe.pk)
        else:
            spec_errors = _refused_form_errors(form, recipe)
        return render(
            request,
            "deployments/recipe_form.html",
            _form_context(_refused_form_masked(form), spec_errors, recipe=recipe, creating=False,
                          stale_from=stale_from),
            status=status,
        )
    form = RecipeForm(
        editing=True,
        initial={
            # a stored secret's value saved before it was refused here shows masked; saved
            # unchanged, the placeholder is refused (services.recipe_content_validate)
            "name": recipe.name_shown,
            "description": services.free_text_shown(recipe.description),
            "engine": recipe.engine,
            "topology": recipe.topology,
            "node": recipe.node_id,
            "spec": spec_pretty(recipe.spec),
            "expected_version": recipe.version,
        },
    )
    return render(request, "deployments/recipe_form.html", _form_context(form, None, recipe=recipe, creating=False))


@role_page(write="operator", methods=FORM_METHODS)
@post_or_redirect(lambda request: reverse("deployments:recipe-create"))
def recipe_validate_partial(request: HttpRequest) -> HttpResponse:
    """htmx partial behind the form's Validate button: field errors per dotted path, or, when
    the recipe is valid, the dry-run preview of every process with the warnings a saved recipe's
    dry-run shows (:func:`deployments.services.plan_warnings_now`: a port or GPU an active
    deployment holds, CPUs one pins, ...). Always HTTP 200 so htmx swaps
    the result in; ``valid`` in the context says which it was. The edit form names its recipe
    (``?recipe=<id>``): a ``***redacted***`` placeholder left where the stored spec holds a
    secret's value is then refused naming that secret, as Save refuses it, and that recipe's own
    deployments are not counted as holding its ports. The partial also carries, out of band, the
    form's error boxes (each field's and the form's own) with this validation's errors, so that an
    error an earlier Create, Save or Validate put under a field never stays beside a value that
    is now good."""
    form = RecipeForm(request.POST)
    spec_errors: dict[str, list[str]] = {}
    processes: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    field_errors: dict[str, list[str]] = {}
    form.is_valid()
    data = form.cleaned_data
    # The create form has no expected_version: a name taken by another recipe is what Create
    # would refuse, so Validate says it too (an edit keeps its own recipe's name).
    name = data.get("name")
    if name and not request.POST.get("expected_version") and Recipe.objects.filter(name=name).exists():
        form.add_error("name", f"A recipe named {json_spelled(name)} already exists.")
    # The spec is judged whenever the fields it depends on are good, so every problem shows at once,
    # by the same check Save applies (services.recipe_content_validate): what Validate calls valid
    # saves. A field the form already refused keeps the form's message alone.
    if all(key in data for key in ("engine", "topology", "node", "spec")):
        node = Node.objects.prefetch_related("gpus", "numa_nodes").get(pk=data["node"].pk)
        content = {
            "name": data.get("name") or request.POST.get("name", ""),
            "description": data.get("description", ""),
            "engine": data["engine"],
            "topology": data["topology"],
            "node": node,
            "spec": data["spec"],
        }
        raw_recipe = request.GET.get("recipe", "")
        edited = (Recipe.objects.filter(pk=int(raw_recipe)).only("spec").first()
                  if re.fullmatch(r"[0-9]{1,18}", raw_recipe) else None)
        try:
            spec = services.recipe_content_validate(
                content, stored_spec=edited.spec if edited is not None else None)["spec"]
            facts = node_facts_from_row(node)
            # Secret values are never resolved for a preview; the plan shows references only.
            plan = launch_plan_render(
                engine=data["engine"], topology=data["topology"], spec=spec, node=facts, secret_values=None
            )
            # What the saved recipe's dry-run warns of (ports and GPUs a deployment holds, which
            # Deploy would refuse with 409, shared CPUs, ...), by the same function: the edited
            # recipe's own deployments are not another's; a new one's every deployment is.
            plan.warnings.extend(services.plan_warnings_now(plan=plan, node=node, spec=spec, engine=data["engine"],
                                                            recipe=edited))
            processes = _plan_view(plan)
            summary = _plan_summary(plan)
        except InvalidInput as exc:
            refused = {path: msgs for path, msgs in exc.errors.items() if path not in form.errors}
            spec_errors = _apply_domain_errors(form, refused)
        except CeilingError as exc:
            form.add_error(None, str(exc))
    elif form.spec_refused is not None:
        spec_errors = _refused_spec_errors(form)
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
            # each field's error box on the form is replaced by this validation's (none when valid)
            "form": form,
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
    a = _existing_version(recipe, _version_param(request, "a", recipe), versions)
    b = _existing_version(recipe, _version_param(request, "b", recipe), versions)
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
    a = _version_param(request, "a", recipe)
    b = _version_param(request, "b", recipe)
    if a is None or b is None:
        raise Http404("pick two versions")
    if not _is_htmx(request):
        return redirect(f"{reverse('deployments:recipe-history', kwargs={'pk': recipe.pk})}?a={a}&b={b}")
    try:
        rows = _diff_rows(recipe, a, b)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    return render(request, "deployments/_recipe_diff.html", {"recipe": recipe, "a": a, "b": b, "diff_rows": rows})


@role_page(read="operator", methods=FORM_METHODS)
def recipe_revert(request: HttpRequest, pk: int, version: int) -> HttpResponse:
    """Revert a recipe to ``version``. GET asks for confirmation and shows what changes
    (current → target); POST calls :func:`deployments.services.recipe_revert`, which records
    the old content as a new version. A POST whose ``expected_version`` is given more than once
    restores nothing: the history page says why, as for any other refused revert. The checkbox
    ``keep_name`` (sent as ``on``; shown when the version's name is not the recipe's) restores
    the version under the recipe's current name, the way out when another recipe holds the
    version's name."""
    recipe = get_object_or_404(Recipe, pk=pk)
    if request.method == "POST":
        try:
            # The form sends it once; taking the last of several would check a version nobody confirmed.
            values = request.GET.getlist("expected_version") + request.POST.getlist("expected_version")
            if repeated := given_more_than_once(values):
                raise InvalidInput({"expected_version": [repeated]})
            try:
                expected = _version_param(request, "expected_version")
            except BadQuery as exc:
                raise InvalidInput({"expected_version": [str(exc).removeprefix("expected_version ")]}) from None
            keep_name = request.POST.getlist("keep_name")
            if keep_name not in ([], ["on"]):
                raise InvalidInput({"keep_name": [f"is {', '.join(map(repr, keep_name))[:80]}: tick the box (on) or leave it out"]})
            recipe = services.recipe_revert(recipe=recipe, user=request.user, version=version, expected_version=expected,
                                            keep_name=bool(keep_name))
        except NotFound as exc:
            raise Http404(str(exc)) from None
        except InvalidInput as exc:
            problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in exc.errors.items())
            messages.error(request, f"Version {version} cannot be restored: {problems}")
            return redirect("deployments:recipe-history", pk=pk)
        except CeilingError as exc:
            messages.error(request, f"Version {version} cannot be restored: {exc}")
            return redirect("deployments:recipe-history", pk=pk)
        messages.success(request, f"Recipe {recipe.name_shown} reverted to version {version} (now version {recipe.version}).")
        return redirect("deployments:recipe-history", pk=pk)
    try:
        rows = _diff_rows(recipe, recipe.version, version)
        content = services.recipe_version_get(recipe=recipe, version=version)
        version_name = recipe_name_shown(content["name"])
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except InvalidInput:   # version 0 (the URL takes any digits): no such version, as for 999
        raise Http404(f"{version} is not a version number: versions count from 1") from None
    return render(
        request,
        "deployments/recipe_revert.html",
        {"recipe": recipe, "version": version, "diff_rows": rows, "a": recipe.version, "b": version,
         "version_name": version_name, "version_node": content["node"] or "",
         "version_node_exists": bool(content["node"]) and Node.objects.filter(name=content["node"]).exists()},
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
    version = _version_param(request, "version", recipe)
    errors: dict[str, list[str]] = {}
    processes: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    version_name = recipe.name_shown
    try:
        version_name = recipe_name_shown(services.recipe_name_at(recipe=recipe, version=version))
        plan = services.recipe_plan(recipe=recipe, version=version, warn_ports=True)
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
            "version_name": version_name,
            "versions": _versions(recipe),
            "processes": processes,
            "summary": summary,
            "errors": errors,
            "api_dry_run_url": _api_dry_run_url(recipe, version),
        },
    )


def _active_deployment(recipe: Recipe) -> Deployment | None:
    """The newest not-yet-terminal deployment of ``recipe`` (what a second deploy conflicts
    with), or None."""
    return selectors.deployment_list(recipe_id=recipe.pk).filter(status__in=DEPLOYMENT_ACTIVE).first()


@role_page(write="operator", methods=FORM_METHODS)
@post_or_redirect(lambda request, pk: reverse("deployments:recipe-detail", args=[pk]))
def recipe_deploy(request: HttpRequest, pk: int) -> HttpResponse:
    """Deploy the recipe's current version: :func:`deployments.services.deployment_create`,
    then redirect to the new deployment's page. A refused deploy (the recipe has an active
    deployment, or is no longer valid for its node) redirects to the recipe page, which says why
    (and links the active deployment): a reload there repeats nothing (post/redirect/get)."""
    recipe = get_object_or_404(Recipe.objects.select_related("node", "created_by"), pk=pk)
    try:
        deployment = services.deployment_create(recipe=recipe, user=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from None
    except InvalidInput as exc:
        problems = "; ".join(f"{path}: {' '.join(map(str, msgs))}" for path, msgs in exc.errors.items())
        messages.error(request, f"Not deployed. The recipe cannot be deployed as it stands: {problems}")
        return redirect("deployments:recipe-detail", pk=recipe.pk)
    except CeilingError as exc:   # Conflict: an active deployment, a port or GPU another one holds
        messages.error(request, f"Not deployed. {exc}")
        return redirect("deployments:recipe-detail", pk=recipe.pk)
    messages.success(request, f"Deployment #{deployment.pk} of {deployment.deployed_recipe_label(version=True)} created.")
    return redirect("deployments:deployment-detail", pk=deployment.pk)
