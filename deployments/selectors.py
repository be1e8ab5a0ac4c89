"""Non-trivial reads of the deployments app, shared by the API, pages and admin.

Each selector returns a queryset (lazy, further filterable) with the joins its callers need,
so a list page or API list costs a fixed number of queries however many rows it shows.
"""
from __future__ import annotations

from django.db.models import Case, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When

from deployments.models import Deployment, Node, ProcessEvent, Recipe, ServerProcess

HISTORY_TYPE_NAMES = {"+": "created", "~": "changed", "-": "deleted"}


def node_list() -> QuerySet[Node]:
    """All nodes by name, with their GPU and NUMA rows prefetched."""
    return Node.objects.prefetch_related("gpus", "numa_nodes").order_by("name")


def recipe_list(*, engine: str | None = None, topology: str | None = None, node: str | None = None) -> QuerySet[Recipe]:
    """Recipes by name, optionally filtered by ``engine``, ``topology`` or node name, with
    node and author joined."""
    qs = Recipe.objects.select_related("node", "created_by").order_by("name")
    if engine:
        qs = qs.filter(engine=engine)
    if topology:
        qs = qs.filter(topology=topology)
    if node:
        qs = qs.filter(node__name=node)
    return qs


def recipe_versions_list(*, recipe: Recipe) -> QuerySet:
    """One history row per version of ``recipe``, newest version first.

    Each row (a simple-history ``HistoricalRecipe``) has ``version``, ``history_date`` (when),
    ``history_user`` (who; joined), ``history_change_reason`` and ``history_type`` (``+``
    created, ``~`` changed; see :data:`HISTORY_TYPE_NAMES`) plus the recipe's content at that
    version. Should a version have several rows (a save that did not bump the version), the
    latest one stands for it, matching :func:`deployments.services.recipe_version_get`.
    """
    history = recipe.history.model.objects
    latest_of_version = (
        history.filter(id=OuterRef("id"), version=OuterRef("version"))
        .exclude(history_type="-")
        .order_by("-history_date", "-history_id")
        .values("history_id")[:1]
    )
    return (
        recipe.history.exclude(history_type="-")
        .filter(history_id=Subquery(latest_of_version))
        .select_related("history_user")
        .order_by("-version", "-history_date")
    )


def recipe_version_meta(row) -> dict:
    """Who/when/why of one history row from :func:`recipe_versions_list`:
    ``{"version", "at", "user", "change_reason", "change"}`` (``user`` is a username or None)."""
    return {
        "version": row.version,
        "at": row.history_date,
        "user": row.history_user.username if row.history_user_id else None,
        "change_reason": row.history_change_reason,
        "change": HISTORY_TYPE_NAMES.get(row.history_type, row.history_type),
    }


def deployment_list(*, recipe_id: int | None = None, recipe_name: str | None = None,
                    status: str | None = None) -> QuerySet[Deployment]:
    """Deployments, newest first, optionally of one recipe, of one recipe name as deployed
    (:attr:`Deployment.deployed_recipe_name`: the kept name, else the current one for a row
    that never kept it) or in one status."""
    qs = Deployment.objects.select_related("recipe", "node", "created_by").order_by("-created_at", "-id")
    if recipe_id is not None:
        qs = qs.filter(recipe_id=recipe_id)
    if recipe_name is not None:
        qs = qs.filter(Q(recipe_name=recipe_name) | Q(recipe_name="", recipe__name=recipe_name))
    if status:
        qs = qs.filter(status=status)
    return qs


def process_list(*, deployment_id: int | None = None, role: str | None = None) -> QuerySet[ServerProcess]:
    """Server processes (prefill, decode, router, single) grouped by deployment, then role
    and ordinal; optionally of one deployment or one role."""
    qs = ServerProcess.objects.select_related("deployment").order_by("deployment_id", "role", "ordinal")
    if deployment_id is not None:
        qs = qs.filter(deployment_id=deployment_id)
    if role:
        qs = qs.filter(role=role)
    return qs


def deployment_processes(*, deployment: Deployment) -> QuerySet[ServerProcess]:
    """The server processes of ``deployment`` in start order (prefill, decode, router or
    single; then ordinal)."""
    order = Case(
        *(When(role=role, then=Value(i)) for i, role in enumerate(("prefill", "decode", "router", "single"))),
        default=Value(9),
        output_field=IntegerField(),
    )
    return ServerProcess.objects.filter(deployment=deployment).annotate(_start_order=order).order_by(
        "_start_order", "ordinal"
    )


def deployment_events(*, deployment: Deployment, process: ServerProcess | None = None) -> QuerySet[ProcessEvent]:
    """The timeline of ``deployment`` (or only ``process``'s entries), oldest first, each with
    ``at`` (UTC), ``kind``, ``message`` and the process joined."""
    qs = ProcessEvent.objects.filter(deployment=deployment).select_related("process").order_by("at", "id")
    if process is not None:
        qs = qs.filter(process=process)
    return qs


def recipe_renamed_text(name: str) -> str | None:
    """Where ``name`` is no recipe's current name but was an earlier name of recipes that still
    exist (their history, which also holds every deployment's name as deployed), the line a
    command answers instead of "no such recipe": ``recipe 't1b' was renamed 't1b-renamed' (at v3);
    use that name``, every such recipe named where several were (``recipe 'a' was renamed: 'b' (at
    v2), 'c' (at v5); use one of those names``). None when ``name`` is a current name or never was
    one. Commands take current names only: an old name may be taken by another recipe later, so it
    is told, never followed."""
    from controlplane.jsonsafe import json_spelled

    if Recipe.objects.filter(name=name).exists():
        return None
    ids = list(Recipe.history.filter(name=name).exclude(history_type="-")
               .values_list("id", flat=True).distinct())
    renamed = []
    for recipe in Recipe.objects.filter(pk__in=ids).order_by("name"):
        last_old = (recipe.history.filter(name=name).exclude(history_type="-")
                    .order_by("-version").values_list("version", flat=True).first())
        at = (recipe.history.filter(version__gt=last_old).exclude(name=name).exclude(history_type="-")
              .order_by("version").values_list("version", flat=True).first())
        renamed.append(f"{json_spelled(recipe.name_shown)}" + (f" (at v{at})" if at else ""))
    if not renamed:
        return None
    if len(renamed) == 1:
        return f"recipe {json_spelled(name)} was renamed {renamed[0]}; use that name"
    return f"recipe {json_spelled(name)} was renamed: {', '.join(renamed)}; use one of those names"
