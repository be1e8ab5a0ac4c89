"""Django admin of the deployments app: every model, for admins who need to look under the
hood. Changes that carry domain rules go through :mod:`deployments.services` here as well:

* Recipe: :class:`simple_history.admin.SimpleHistoryAdmin`, so the admin shows every version
  (who, when, change reason). Saving calls ``recipe_create`` / ``recipe_update``, so the spec
  is validated and a new version is recorded exactly as from the recipe pages; "Revert" from a
  history entry shows that version read-only and calls ``recipe_revert``. A form opened before
  the recipe moved on is refused, naming the current version, and so is one whose
  ``expected_version`` is missing, blank or not a version number. Deleting goes through
  ``recipe_delete``: deployments that never started go with the recipe, any other keeps it
  (listed as protected, with why and what to do instead).
* Secret: the value is write-only; no admin page ever renders it (see
  :class:`deployments.forms.SecretAdminForm`), and saving goes through ``secret_create`` /
  ``secret_update`` so the redactor learns the value.
* Recipe and Secret forms judge every rule their save applies, so a refusal comes back on the form
  with every problem at once and what was typed kept; a save the services still refuse (a change
  that landed after the form's checks) says "Not saved" and reopens the page, never beside
  Django's "... changed successfully" (:class:`SavedThroughServices`).
* Gpu / NumaNode: rows the node agent discovers on its host; shown read-only, no Add.
* Deployment / ServerProcess / ProcessEvent: rows written by the node agent; shown read-only,
  each text or JSON field that can hold a secret's value (a deployment's spec snapshot and
  reason, a process's argv, env, reason and probe detail, an event's message) masked as the API
  shows it, in place of the raw field (:class:`ShownInPlace`).
"""
from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import display_for_value
from django.contrib.admin.widgets import RelatedFieldWidgetWrapper
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from controlplane.errors import CeilingError, InvalidInput
from controlplane.permissions import refusal_message
from controlplane.redaction import credential_mask_json, redact_text
from deployments import services
from deployments.choices import DEPLOYMENT_TERMINAL
from deployments.forms import RecipeAdminForm, RecipeRevertAdminForm, SecretAdminForm, spec_pretty
from deployments.models import Deployment, Gpu, Node, NumaNode, ProcessEvent, Recipe, Secret, ServerProcess, recipe_name_shown

GIB = 1024**3

#: Shown on a version page of a deleted recipe, and the error of a revert sent from one.
DELETED_RECIPE_REVERT = ("This recipe was deleted: a deleted recipe cannot be brought back from its versions; "
                         "create it anew.")


def _gib(value: int | None) -> str:
    return f"{value / GIB:.1f}" if value else "—"


def _history_content(record, node_names: dict[int, str]) -> dict[str, Any]:
    """A historical recipe row's content in :data:`deployments.services.RECIPE_CONTENT_FIELDS`
    form (``node`` by name; ``None`` for a node row that is gone)."""
    return {"name": recipe_name_shown(record.name), "description": services.free_text_shown(record.description),
            "engine": record.engine,
            "topology": record.topology, "node": node_names.get(record.node_id),
            # a credential or stored secret's value saved before such values were refused shows masked
            "spec": credential_mask_json(record.spec)}


def json_shown(value: Any) -> str:
    """JSON ``value`` (already masked) as a read-only admin field shows it: indented, in ``<pre>``."""
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))


def _json_text(value: Any, absent: bool) -> str:
    """A diff value as JSON text, or ``—`` for a key the version did not have."""
    return "—" if absent else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _diff_side_absent(row: dict[str, Any], side: str) -> bool:
    """Whether ``side`` (``"old"`` or ``"new"``) of a :func:`deployments.services.content_diff` row
    has no value: a key added has no old one and a key removed no new one, and no description
    (stored as ``""``) has none either, as the recipe pages' diff shows it (``—``) and the API's
    gives it (null); never ``""``."""
    gone = "added" if side == "old" else "removed"
    return row["change"] == gone or (row["path"] == "description" and not row[side])


class SavedThroughServices:
    """A model admin whose ``save_model`` saves through :mod:`deployments.services`. Its form
    judges everything the service does, so a refusal is shown on the form with every problem at
    once and what was typed kept (Django's admin re-renders an invalid form and saves nothing).
    The service's own checks stay the last line: one that refuses only at save time (a change
    that landed between the form's checks and the save) is reported by :meth:`save_refused` as
    ``Not saved: ...`` and the page the form was sent from opens again, showing what is stored
    now; Django's "... was changed successfully" and its log entry, which would say the opposite
    beside it, are left out."""

    def save_refused(self, request: HttpRequest, obj: Any, problem: Exception) -> None:
        """Report that ``obj`` was not saved, and why, and mark it so for :meth:`response_change`."""
        self.message_user(request, f"Not saved: {problem}", level=messages.ERROR)
        obj._save_refused = True

    @staticmethod
    def _refused(obj: Any) -> bool:
        return bool(getattr(obj, "_save_refused", False))

    def log_addition(self, request: HttpRequest, obj: Any, message: Any):
        return None if self._refused(obj) else super().log_addition(request, obj, message)

    def log_change(self, request: HttpRequest, obj: Any, message: Any):
        return None if self._refused(obj) else super().log_change(request, obj, message)

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None):
        if self._refused(obj):
            return HttpResponseRedirect(request.get_full_path())
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: Any):
        if self._refused(obj):
            return HttpResponseRedirect(request.get_full_path())
        return super().response_change(request, obj)


# --- nodes ----------------------------------------------------------------------------------


class DiscoveredInline(admin.TabularInline):
    """A node's discovered rows on its page, shown read-only: :func:`deployments.nodes.node_register`
    writes them from what the node agent found on the host, matched by index, and replaces them at
    the next registration, so a row added or edited here would describe hardware that is not there
    (and the telemetry reads its CPU lists) until then."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(self.fields)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class GpuInline(DiscoveredInline):
    model = Gpu
    fields = ["index", "name", "memory_total_bytes", "pci_bus_id", "numa_node", "compute_capability", "cpu_affinity", "uuid"]


class NumaNodeInline(DiscoveredInline):
    model = NumaNode
    fields = ["index", "cpus", "memory_total_bytes"]


class DiscoveredAdmin(admin.ModelAdmin):
    """GPU and NUMA-node rows: discovered by the node agent (:func:`deployments.nodes.node_register`),
    never entered by hand, so there is no Add and no edit, for the reason of
    :class:`DiscoveredInline`. Deleting stays, because deleting a node in admin deletes its rows
    with it (Django asks for the delete permission on each); a row deleted alone comes back at
    the node's next registration if the hardware is still there."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict:
        """No "Delete selected": the list offers no bulk delete of hardware facts (a row goes with
        its node, or alone from its own page)."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Nodes with their GPUs and NUMA nodes inline, read-only (discovery writes those rows).
    ``tools`` is what the node's agent reported at registration: shown, never edited (the agent
    runs only the executables of its own host configuration)."""

    list_display = ["name", "hostname", "gpu_count", "cpu_count", "memory_gib", "queue_name", "agent_online", "agent_heartbeat_at"]
    search_fields = ["name", "hostname"]
    readonly_fields = ["tools", "queue_name", "agent_online", "created_at", "updated_at"]
    inlines = [GpuInline, NumaNodeInline]

    @admin.display(description="GPUs")
    def gpu_count(self, obj: Node) -> int:
        return obj.gpus.count()

    @admin.display(description="Memory (GiB)")
    def memory_gib(self, obj: Node) -> str:
        return _gib(obj.memory_total_bytes)

    @admin.display(boolean=True, description="Agent online")
    def agent_online(self, obj: Node) -> bool:
        return obj.agent_online


@admin.register(Gpu)
class GpuAdmin(DiscoveredAdmin):
    list_display = ["__str__", "node", "index", "name", "memory_gib", "pci_bus_id", "numa_node", "compute_capability"]
    list_filter = ["node"]
    list_select_related = ["node"]

    @admin.display(description="Memory (GiB)")
    def memory_gib(self, obj: Gpu) -> str:
        return _gib(obj.memory_total_bytes)


@admin.register(NumaNode)
class NumaNodeAdmin(DiscoveredAdmin):
    list_display = ["__str__", "node", "index", "cpus", "memory_gib"]
    list_filter = ["node"]
    list_select_related = ["node"]

    @admin.display(description="Memory (GiB)")
    def memory_gib(self, obj: NumaNode) -> str:
        return _gib(obj.memory_total_bytes)


# --- secrets --------------------------------------------------------------------------------


@admin.register(Secret)
class SecretAdmin(SavedThroughServices, admin.ModelAdmin):
    """Secrets by name. The value column is never listed, searched or rendered."""

    form = SecretAdminForm
    list_display = ["name", "description_shown", "updated_at"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at", "updated_at"]

    @admin.display(description="description", ordering="description")
    def description_shown(self, obj: Secret) -> str:
        """The description, a secret's value or a credential in it (saved before such text was
        refused there) masked."""
        return services.free_text_shown(obj.description)

    def get_readonly_fields(self, request: HttpRequest, obj: Secret | None = None) -> list[str]:
        # Recipes reference secrets by name, so a stored secret keeps its name.
        fields = list(super().get_readonly_fields(request, obj))
        return fields + ["name"] if obj is not None else fields

    def save_model(self, request: HttpRequest, obj: Secret, form: SecretAdminForm, change: bool) -> None:
        value = form.cleaned_data.get("value") or None
        try:
            saved = self._save_secret(request, obj, form, change, value)
        except InvalidInput as exc:
            self.save_refused(request, obj, exc)
            return
        obj.pk = saved.pk
        obj.refresh_from_db()

    def _save_secret(self, request: HttpRequest, obj: Secret, form: SecretAdminForm, change: bool, value: str | None) -> Secret:
        if change:
            return services.secret_update(
                secret=obj, user=request.user, value=value, description=form.cleaned_data.get("description", "")
            )
        return services.secret_create(
            user=request.user, name=obj.name, value=value or "", description=form.cleaned_data.get("description", "")
        )

    def get_deleted_objects(self, objs, request):
        """The delete page by :func:`deployments.services.secret_delete`'s rule: a secret a recipe
        references is listed as protected, with the recipes and what to do, so Django refuses the
        delete before anything is sent (rather than reporting the refusal beside its "deleted
        successfully")."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refusals = [r for r in (services.secret_delete_refusal(secret=s) for s in objs) if r]
        return deleted, counts, perms_needed, list(protected) + refusals

    def delete_model(self, request: HttpRequest, obj: Secret) -> None:
        try:
            services.secret_delete(secret=obj, user=request.user)
        except CeilingError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Secret]) -> None:
        for secret in queryset:
            self.delete_model(request, secret)


# --- recipes --------------------------------------------------------------------------------


@admin.register(Recipe)
class RecipeAdmin(SavedThroughServices, SimpleHistoryAdmin):
    """Recipes with their version history (simple-history's History page lists every
    version with user and change reason)."""

    form = RecipeAdminForm
    list_display = ["name_shown", "engine", "topology", "node", "version", "updated_at"]
    list_filter = ["engine", "topology", "node"]
    search_fields = ["name", "description"]
    list_select_related = ["node"]
    readonly_fields = ["version", "created_by", "created_at", "updated_at"]
    history_list_display = ["version", "engine", "topology"]
    object_history_form_template = "admin/deployments/recipe/object_history_form.html"

    @admin.display(description="name", ordering="name")
    def name_shown(self, obj: Recipe) -> str:
        """The name, a stored secret's value in it (saved before it was refused there) masked."""
        return obj.name_shown

    @admin.display(description="description")
    def description_shown(self, obj: Recipe) -> str:
        """The description as the edit form shows it (:func:`deployments.services.free_text_shown`)."""
        return services.free_text_shown(obj.description)

    @admin.display(description="spec")
    def spec_shown(self, obj: Recipe) -> str:
        """The spec as the edit form shows it: pretty JSON, a credential or stored secret's value in it
        masked (:func:`deployments.forms.spec_pretty`)."""
        return format_html("<pre>{}</pre>", spec_pretty(obj.spec))

    def get_fields(self, request: HttpRequest, obj: Recipe | None = None) -> list[str]:
        """For a user who may view recipes but not change them (the viewer role), the change page
        shows every field read-only: the name, description and spec as the edit form shows them
        (masked where a stored secret's value or a credential was saved before such text was
        refused), and without the edit's hidden ``expected_version``, which is no field of the
        recipe. A version's page keeps simple-history's own form (its fields shown disabled)."""
        fields = list(super().get_fields(request, obj))
        if obj is None or self._reverting(request) or self.has_change_permission(request, obj):
            return fields
        shown = {"name": "name_shown", "description": "description_shown", "spec": "spec_shown"}
        return [shown.get(f, f) for f in fields if f != "expected_version"]

    def get_deleted_objects(self, objs, request):
        """The delete page by :func:`deployments.services.recipe_delete`'s rule: deployments that never
        started are listed as deleted with their recipe; any other deployment is protected, named
        with why it keeps the recipe (Django's own list names only the rows)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        rows = list(Deployment.objects.filter(recipe__in=list(objs)).select_related("recipe")
                    .order_by("recipe__name", "-created_at", "-pk"))
        kept = [d for d in rows if not services.deployment_never_started(d)]
        if not rows:
            return deleted, counts, perms_needed, protected
        if kept:
            by_recipe: dict[Recipe, list[Deployment]] = {}
            for d in kept:
                by_recipe.setdefault(d.recipe, []).append(d)
            return deleted, counts, perms_needed, [services.recipe_delete_refusal(recipe=r, kept=ds)
                                                   for r, ds in by_recipe.items()]
        deleted = list(deleted) + [f"Deployment: {d} ({d.status}, never started: deleted with its recipe)"
                                   for d in rows]
        counts = dict(counts, **{str(Deployment._meta.verbose_name_plural): len(rows)})
        return deleted, counts, perms_needed, []

    def delete_model(self, request: HttpRequest, obj: Recipe) -> None:
        try:
            services.recipe_delete(recipe=obj, user=request.user)
        except CeilingError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Recipe]) -> None:
        for recipe in queryset:
            self.delete_model(request, recipe)

    @staticmethod
    def _reverting(request: HttpRequest) -> bool:
        """Whether ``request`` is for simple-history's page of one history entry (its "Revert")."""
        return (getattr(request.resolver_match, "url_name", "") or "").endswith("_simple_history")

    def get_readonly_fields(self, request: HttpRequest, obj: Recipe | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if self._reverting(request):
            # A version's page: when that version was saved, not the recipe's latest change (the
            # history does not store updated_at; simple-history would show the current row's).
            fields = ["version_saved_at" if f == "updated_at" else f for f in fields]
        return fields

    @admin.display(description="Version saved at")
    def version_saved_at(self, obj: Recipe) -> str:
        """The time the version shown was saved (its history row's date), formatted as the page's
        other times are ("Dec. 8, 2026, 12:24 a.m.", in ``TIME_ZONE``), not as Python prints it."""
        row = Recipe.history.filter(id=obj.pk, version=obj.version).order_by("-history_date").first()
        return display_for_value(row.history_date if row is not None else None, self.get_empty_value_display())

    def formfield_for_dbfield(self, db_field, request: HttpRequest, **kwargs):
        """The node's select without its add, change and delete links on a version's page: its
        fields are shown disabled (:class:`RecipeRevertAdminForm`), and a version of a deleted
        recipe has nothing to act for. Only the link that views the node stays."""
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if formfield is not None and self._reverting(request) and isinstance(formfield.widget, RelatedFieldWidgetWrapper):
            formfield.widget.can_add_related = False
            formfield.widget.can_change_related = False
            formfield.widget.can_delete_related = False
        return formfield

    def get_form(self, request: HttpRequest, obj: Recipe | None = None, change: bool = False, **kwargs):
        # A history entry's page shows that version read-only: a revert restores it as it was.
        if self._reverting(request):
            kwargs["form"] = RecipeRevertAdminForm
        return super().get_form(request, obj, change=change, **kwargs)

    def save_form(self, request: HttpRequest, form: RecipeAdminForm, change: bool) -> Recipe:
        # The service writes the row; here only the in-memory instance is prepared.
        return form.save(commit=False)

    def _content(self, form: RecipeAdminForm) -> dict[str, Any]:
        data = form.cleaned_data
        return {
            "name": data["name"],
            "description": data.get("description", ""),
            "engine": data["engine"],
            "topology": data["topology"],
            "node": data["node"],
            "spec": data["spec"],
        }

    def save_model(self, request: HttpRequest, obj: Recipe, form: RecipeAdminForm, change: bool) -> None:
        """Save through the services so the spec is validated and a version recorded.
        :class:`RecipeAdminForm` already showed domain errors and a stale ``expected_version``
        on the form; one that appears only now (an edit saved between the form's check and this
        save) is reported as a message, nothing is saved and the page opens again showing the
        recipe as stored (:class:`SavedThroughServices`).

        Saving from a history entry (simple-history's "Revert", a read-only
        :class:`RecipeRevertAdminForm`) calls ``recipe_revert`` with the entry's version
        (``obj.version``), so exactly that version's content is restored, with the reason
        ``"Reverted to version N in admin"``."""
        content = self._content(form)
        expected = form.cleaned_data.get("expected_version")
        try:
            if change and obj.pk and self._reverting(request):
                saved = services.recipe_revert(recipe=Recipe.objects.get(pk=obj.pk), user=request.user,
                                               version=obj.version, expected_version=expected,
                                               change_reason=f"Reverted to version {obj.version} in admin")
            elif change and obj.pk:
                current = Recipe.objects.get(pk=obj.pk)
                saved = services.recipe_update(recipe=current, user=request.user, change_reason="Edited in admin",
                                               expected_version=expected, **content)
            else:
                saved = services.recipe_create(user=request.user, change_reason="Created in admin", **content)
        except (CeilingError, DjangoValidationError) as exc:
            self.save_refused(request, obj, exc)
            if obj.pk:
                obj.refresh_from_db()
            return
        obj.pk = saved.pk
        obj.refresh_from_db()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("spec", "{}")
        return initial

    def set_history_delta_changes(self, request: HttpRequest, historical_records, foreign_keys_are_objs=True) -> None:
        """The History page's "Changes" column: what each version changed from the one before, as
        the recipe pages and ``GET /api/recipes/ID/diff/`` show it (one line per dotted path such
        as ``spec.roles.decode.port``, values in JSON, ``—`` for an absent key or no description),
        instead of the whole spec before and after as Python text."""
        records = list(historical_records)
        for record in records:
            # a change reason saved before a stored secret's value was refused in it shows masked
            record.history_change_reason = services.free_text_shown(record.history_change_reason)
        node_names = dict(Node.objects.filter(pk__in={r.node_id for r in records}).values_list("pk", "name"))
        for newer, older in zip(records, records[1:]):
            newer.history_delta_changes = [
                {"field": row["path"], "old": _json_text(row["old"], _diff_side_absent(row, "old")),
                 "new": _json_text(row["new"], _diff_side_absent(row, "new"))}
                for row in services.content_diff(_history_content(older, node_names), _history_content(newer, node_names))
            ]

    def revert_disabled(self, request: HttpRequest, obj: Recipe | None = None) -> bool:
        """No "Revert" button on a version of a deleted recipe (nothing is left to revert)."""
        if obj is not None and obj.pk and not Recipe.objects.filter(pk=obj.pk).exists():
            return True
        return super().revert_disabled(request, obj)

    def history_form_view(self, request: HttpRequest, object_id: str, version_id: str, extra_context=None):
        """simple-history's page of one version: anyone who may view recipes may read it, only
        who may change them may send it (its form is a revert; simple-history asks only for the
        view permission before saving it). A version of a deleted recipe is shown read-only
        with :data:`DELETED_RECIPE_REVERT`; sending it redirects to the History page with that
        message as an error and saves nothing."""
        if not Recipe.objects.filter(pk=object_id).exists() and Recipe.history.filter(
                id=object_id, history_id=version_id).exists():
            if request.method == "POST":
                self.message_user(request, f"Not reverted: {DELETED_RECIPE_REVERT}", level=messages.ERROR)
                return HttpResponseRedirect(reverse("admin:deployments_recipe_history", args=[object_id]))
            self.message_user(request, DELETED_RECIPE_REVERT, level=messages.WARNING)
            return super().history_form_view(request, object_id, version_id, extra_context=extra_context)
        if request.method == "POST" and not self.has_change_permission(request, self.get_object(request, object_id)):
            raise PermissionDenied(refusal_message(request.user, "operator"))
        return super().history_form_view(request, object_id, version_id, extra_context=extra_context)


# --- deployments ----------------------------------------------------------------------------


class ServerProcessInline(admin.TabularInline):
    model = ServerProcess
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ["role", "ordinal", "status", "pid", "gpu_ids", "cpus", "numa_node", "pin_method", "pinning_verified", "restart_count", "exit_code"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the node agent owns: viewable, never edited by hand (their state machines would
    no longer match reality). Deleting stays possible for clean-up of what is over: a row of a
    deployment that is not stopped or failed is listed as protected and the delete refused
    (:meth:`deletion_blockers`), since the engines it describes would run on with no row to stop
    them by."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def deletion_blockers(self, objs: Any) -> list[str]:
        """One line per row of ``objs`` whose deletion would orphan running engines."""
        return []

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, perms_needed, list(protected) + self.deletion_blockers(objs)


class ShownInPlace(ReadOnlyAdmin):
    """A read-only admin whose change page shows each field of :attr:`shown_fields` through the
    admin's method of that name, in the field's place: the raw field (which may hold a secret's
    value: a spec snapshot, an argv, an engine's log lines in a reason) is neither shown nor in
    the form."""

    #: model field -> the admin method that shows it masked, as the API shows it.
    shown_fields: dict[str, str] = {}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), *self.shown_fields.values()]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*(super().get_exclude(request, obj) or ()), *self.shown_fields]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [f for f in super().get_fields(request, obj) if f not in self.shown_fields.values()]
        order = [f.name for f in self.model._meta.fields]
        # each method where its raw field stands among the model's fields: before the next field shown
        for raw in sorted(self.shown_fields, key=order.index):
            after = [f for f in fields if f in order and order.index(f) > order.index(raw)]
            fields.insert(fields.index(after[0]) if after else len(fields), self.shown_fields[raw])
        return fields


def _active_deployment_blockers(deployments: Any) -> list[str]:
    return [f"deployment #{d.pk} ({d.deployed_recipe_label()}) is {d.status}: stop it first (its page's Stop, or "
            f"POST /api/deployments/{d.pk}/stop/), then delete it once it is stopped"
            for d in deployments if d.status not in DEPLOYMENT_TERMINAL]


@admin.register(Deployment)
class DeploymentAdmin(ShownInPlace):
    list_display = ["__str__", "recipe", "recipe_version", "node", "status", "created_at", "ready_at", "ended_at"]
    list_filter = ["status", "node"]
    list_select_related = ["recipe", "node"]
    search_fields = ["recipe__name", "reason"]
    inlines = [ServerProcessInline]
    # The recipe's name as deployed, the spec snapshot and the reason as every other read shows them (masked).
    shown_fields = {"recipe_name": "recipe_name_shown", "spec_snapshot": "spec_snapshot_shown",
                    "reason": "reason_shown"}

    @admin.display(description="recipe name")
    def recipe_name_shown(self, obj: Deployment) -> str:
        """The recipe's name as deployed, a stored secret's value in it (saved before it was
        refused there) masked."""
        return obj.deployed_recipe_name

    @admin.display(description="spec snapshot")
    def spec_snapshot_shown(self, obj: Deployment) -> str:
        """The recipe spec at deploy time as ``GET /api/deployments/<id>/`` shows it: a stored
        secret's value (a value stored as a secret after the deploy, or saved before such values
        were refused) masked and a credential shortened
        (:func:`controlplane.redaction.credential_mask_json`)."""
        return json_shown(credential_mask_json(obj.spec_snapshot))

    @admin.display(description="reason")
    def reason_shown(self, obj: Deployment) -> str:
        """Why it failed or stopped, secrets masked (:func:`controlplane.redaction.redact_text`)."""
        return redact_text(obj.reason)

    def deletion_blockers(self, objs: Any) -> list[str]:
        return _active_deployment_blockers(objs)


@admin.register(ServerProcess)
class ServerProcessAdmin(ShownInPlace):
    list_display = ["__str__", "deployment", "role", "ordinal", "status", "pid", "numa_node", "cpus", "pin_method", "restart_count"]
    list_filter = ["role", "status"]
    list_select_related = ["deployment", "deployment__recipe"]
    # argv, env and the texts that carry engine output, as GET /api/processes/<id>/ shows them (masked)
    shown_fields = {"reason": "reason_shown", "argv": "argv_shown", "env_redacted": "env_shown",
                    "probe_detail": "probe_detail_shown", "end_reason": "end_reason_shown"}

    @admin.display(description="argv")
    def argv_shown(self, obj: ServerProcess) -> str:
        """The argv, each item through :func:`controlplane.redaction.redact_text`."""
        return json_shown([redact_text(str(a)) for a in (obj.argv or [])])

    @admin.display(description="env (redacted)")
    def env_shown(self, obj: ServerProcess) -> str:
        """The environment as recorded (secrets already masked), each value through
        :func:`controlplane.redaction.redact_text` once more: a value stored as a secret only
        later is masked too."""
        env = obj.env_redacted if isinstance(obj.env_redacted, dict) else {}
        return json_shown({str(k): redact_text(str(v)) for k, v in env.items()})

    @admin.display(description="reason")
    def reason_shown(self, obj: ServerProcess) -> str:
        """Why it is not running (with its last log lines when it failed), secrets masked."""
        return redact_text(obj.reason)

    @admin.display(description="probe detail")
    def probe_detail_shown(self, obj: ServerProcess) -> str:
        """What the last probe saw, secrets masked."""
        return redact_text(obj.probe_detail)

    @admin.display(description="end reason")
    def end_reason_shown(self, obj: ServerProcess) -> str:
        """How it ended, secrets masked."""
        return redact_text(obj.end_reason)

    def deletion_blockers(self, objs: Any) -> list[str]:
        return _active_deployment_blockers({p.deployment for p in objs})


@admin.register(ProcessEvent)
class ProcessEventAdmin(ShownInPlace):
    list_display = ["at", "deployment", "process", "kind", "message_shown"]
    list_filter = ["kind"]
    list_select_related = ["deployment", "deployment__recipe", "process"]
    search_fields = ["message"]
    shown_fields = {"message": "message_shown"}

    @admin.display(description="message")
    def message_shown(self, obj: ProcessEvent) -> str:
        """The message, secrets masked, as the deployment's timeline in the API shows it."""
        return redact_text(obj.message)
