"""Viewsets of the deployments API: nodes, recipes (with versions, diff, revert, dry-run),
secrets, deployments and server processes (with their log tail and full log download), and the
live-telemetry re-sync endpoints (``/api/nodes/<name or id>/telemetry/``,
``/api/deployments/<id>/telemetry/``).

Each view checks the input's shape with a serializer, calls one service or selector and
serialises the result. Roles come from :class:`controlplane.permissions.RolePermission`:
reads need ``viewer``, recipe writes ``operator``, node writes and anything about secrets
``admin``. Domain errors become HTTP responses in :func:`controlplane.api.exception_handler`.
"""
from __future__ import annotations

import re
import time

from django.http import FileResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.settings import api_settings
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import (
    API_FORMATS, ERROR_404, ERROR_409, ERRORS_400, PAGE_KEYS, SafeJSONParser, format_suffix_into_query, no_body,
    request_body,
)
from controlplane.errors import NotFound
from controlplane.jsonsafe import id_text, json_spelled, query_text
from controlplane.numbers import DIGITS_RE, whole_number
from controlplane.realtime import current_seq, deployment_group, latest_messages, node_group
from deployments import selectors, services
from deployments.api import serializers as s
from deployments.models import Node, Recipe, Secret, recipe_name_shown
from deployments.telemetry import selectors as telemetry_selectors

PARSERS = [SafeJSONParser, FormParser, MultiPartParser]
#: History window of the telemetry endpoints when ``since`` is not given, in seconds.
TELEMETRY_DEFAULT_WINDOW_S = 600.0
RECIPE_ERRORS_HELP = (
    "Every problem comes back in one 400: unknown top-level fields, field errors (name, engine, topology, "
    "node) and spec errors together. " + s.ERROR_SHAPE_HELP
)


def _telemetry_window_check(since: float, until: float) -> None:
    """A 400 on ``since`` when the window is longer than
    :data:`deployments.telemetry.selectors.MAX_WINDOW_S` (the read's cost grows with it)."""
    limit = telemetry_selectors.MAX_WINDOW_S
    if until - since > limit:
        raise ValidationError({"since": [
            f"the window from since to until is {until - since:.0f} s; at most {limit:.0f} s "
            f"({limit / 3600:.0f} h) a request: ask for consecutive windows, e.g. since={until - limit:.0f}"]})

NO_BODY_HELP = ("Takes no body: an empty one or `{}`; any key is a 400 under its own name (judged before the "
                "state, so also where the answer would be a 409).")

SECRET_VALUE_HELP = (
    "A value shorter than the masking minimum, or holding a NUL or a line break (a secret reaches its engine as an "
    "environment variable, which cannot carry them faithfully), is a 400 on `value` with the reason."
)
SECRET_UPDATE_HELP = (
    "`name` is refused: recipes reference a secret by name, so it cannot be renamed (store the value under the new "
    "name, point the recipes at it, delete this one); any other key but `value` and `description` is refused at its "
    "name. " + SECRET_VALUE_HELP
)


class NoBodyDestroyMixin:
    """``DELETE`` that takes no body, as stop and cancel: an empty one or ``{}``; a key
    (``{"force": true}``) is a 400 under its own name (:func:`controlplane.api.no_body`), judged
    after the 404 and before the 409 of a record still in use, and nothing is deleted."""

    def destroy(self, request: Request, *args, **kwargs) -> Response:
        instance = self.get_object()
        no_body(request)
        self.perform_destroy(instance)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _query(serializer_class, request: Request) -> dict:
    """Validate query parameters with ``serializer_class``; a bad value is a 400 naming it."""
    ser = serializer_class(data=request.query_params)
    ser.is_valid(raise_exception=True)
    return ser.validated_data


NODE_KEY = OpenApiParameter(
    "id", OpenApiTypes.STR, OpenApiParameter.PATH,
    description="the node's name (`local`, as the CLI and the queue `node.<name>` name it) or its numeric id; "
                "digits alone are the id (a node name is never digits alone)")


# What a node key in a path can be: a node name (deployments.models.slug_validator) or an id.
_NODE_KEY_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


@extend_schema_view(
    list=extend_schema(summary="List nodes with their GPUs and NUMA nodes"),
    retrieve=extend_schema(summary="One node, by name or id", parameters=[NODE_KEY],
                           responses={200: s.NodeSerializer, 404: ERROR_404}),
    destroy=extend_schema(
        summary="Remove a node (admin), by name or id",
        description="Refused with 409 while recipes or deployments reference the node. " + NO_BODY_HELP,
        parameters=[NODE_KEY],
        request=None,
        responses={204: None, 400: ERRORS_400, 404: ERROR_404, 409: ERROR_409},
    ),
)
class NodeViewSet(NoBodyDestroyMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Nodes are registered by their agents' discovery; through the API they are read by
    everyone with a role and removed only by an admin. A node is named in the path by its name
    (``/api/nodes/local/``) or its numeric id (digits alone, which no node name is).

    A node name may hold dots, so a key with a format suffix is read by one rule: a node whose
    name (or id) is the whole key wins (``/api/nodes/a.json/`` is
    node ``a.json`` when there is one); otherwise a trailing ``.json``, ``.csv`` or ``.api``, in any
    case, is the format, as on every other route:
    ``/api/nodes/local.json/`` is node ``local`` with ``?format=json``. Any other ending is part
    of the name (``/api/nodes/gpu.box/`` with no such node is the 404 naming ``gpu.box``). A 404
    for a key read with a suffix names both: ``no node with name 'nosuch.json' (nor 'nosuch')``."""

    # The rule: initial; the formats: controlplane.api.API_FORMATS.

    serializer_class = s.NodeSerializer
    write_role = "admin"
    parser_classes = PARSERS
    query_keys = {"telemetry": s.TelemetryQuerySerializer}
    # Any key up to a slash: a node name (deployments.models.slug_validator) or an id, dots part of
    # a name here; a key no node could be named (``löcal``, ``Local``) is the 404 naming it
    # (get_object), not "no API endpoint".
    lookup_value_regex = r"[^/]+"

    def get_queryset(self):
        return selectors.node_list()

    def initial(self, request, *args, **kwargs) -> None:
        """Split a format suffix off the node key by the class's rule before the format is
        negotiated: ``local.json`` names node ``local`` with ``?format=json`` unless a node is
        named ``local.json``."""
        kwarg = self.lookup_url_kwarg or self.lookup_field
        key = self.kwargs.get(kwarg)
        stem, dot, suffix = (key or "").rpartition(".")
        if (dot and stem and api_settings.FORMAT_SUFFIX_KWARG not in self.kwargs and suffix.lower() in API_FORMATS
                and not self._node_filter(key).exists()):
            self.kwargs[kwarg] = stem
            self.asked_key = key   # what the path said, for the 404 (get_object)
            format_suffix_into_query(request._request, suffix)
        super().initial(request, *args, **kwargs)

    def _node_filter(self, key: str):
        if not _NODE_KEY_RE.fullmatch(key):
            return self.get_queryset().none()   # no node is named so: not asked of the database
        return self.get_queryset().filter(**({"pk": int(key)} if key.isdigit() else {"name": key}))

    def get_object(self) -> Node:
        """The node the path names: by id when the key is digits alone, else by name; 404
        (``{"detail": ...}``) when none matches. A key whose format suffix was split off
        (:meth:`initial`) is named as it was asked and as it was read: ``/api/nodes/nosuch.json/``
        is ``no node with name 'nosuch.json' (nor 'nosuch')``."""
        key = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        # digits alone are an id; one of more digits than any id has is named as given, never read
        # (int() refuses more than 4300 digits)
        lookup = {"pk": key} if DIGITS_RE.fullmatch(key) else {"name": key}
        node = self._node_filter(key).first()
        if node is None:
            # an id as every id route names it (``no recipe with id 999``), a name quoted
            number = whole_number(key)
            read = (f"id {id_text(key if number is None else number)}" if "pk" in lookup
                    else f"name {json_spelled(key)}")
            asked = getattr(self, "asked_key", None)
            route = getattr(self.request._request.resolver_match, "kwargs", None) or {}
            suffix = route.get(api_settings.FORMAT_SUFFIX_KWARG)
            if asked is None and suffix and self.action in ("retrieve", "destroy"):
                # the suffixed route took the suffix off the key itself (``nosuch.JSON``, ``nosuch.json``
                # with no slash): the key the path gave ends with it
                asked = f"{key}.{suffix.strip('/')}"
            if asked and asked != key:
                raise NotFound(f"no node with name {json_spelled(asked)} (nor "
                               + (read if "pk" in lookup else json_spelled(key)) + ")")
            raise NotFound(f"no node with {read}")
        self.check_object_permissions(self.request, node)
        return node

    def perform_destroy(self, instance: Node) -> None:
        services.node_delete(node=instance, user=self.request.user)

    @extend_schema(
        summary="A node's live telemetry for re-sync, by name or id: last sample, sequence number, 1 s history",
        description="For a client that connects or sees a gap in `seq`: `latest` holds the last `node.sample` "
        "message of group `node-<name>` (null when none in the past hour) and `history` the stored 1 s "
        "rollups from `since` (default: 10 minutes ago) to `until` (default: now), at most 24 h a request "
        "(longer: 400 on `since`). `fields` picks series: "
        + ", ".join(telemetry_selectors.NODE_GPU_FIELDS + telemetry_selectors.NODE_HOST_FIELDS)
        + f" (default: {', '.join(telemetry_selectors.NODE_GPU_DEFAULT + telemetry_selectors.NODE_HOST_DEFAULT)}).",
        parameters=[
            NODE_KEY,
            OpenApiParameter("since", OpenApiTypes.NUMBER, description="unix seconds"),
            OpenApiParameter("until", OpenApiTypes.NUMBER, description="unix seconds"),
            OpenApiParameter("fields", OpenApiTypes.STR, description="comma-separated series names"),
        ],
        responses={200: s.NodeTelemetrySerializer, 400: ERRORS_400, 404: ERROR_404},
    )
    @action(detail=True, methods=["get"], url_path="telemetry", pagination_class=None, filter_backends=[])
    def telemetry(self, request: Request, pk: str = "") -> Response:
        node = self.get_object()  # by name or id, as the node's own route
        q = _query(s.TelemetryQuerySerializer, request)
        until = q.get("until")
        since = q.get("since", (until or time.time()) - TELEMETRY_DEFAULT_WINDOW_S)
        _telemetry_window_check(since, until or time.time())
        try:
            history = telemetry_selectors.telemetry_for_node(node_id=node.pk, since=since, until=until,
                                                             fields=q.get("fields"))
        except ValueError as exc:
            raise ValidationError({"fields": [str(exc)]}) from exc
        group = node_group(node.name)
        latest = latest_messages(group)
        return Response({"group": group, "seq": current_seq(group),
                         "latest": {"node.sample": latest.get("node.sample")}, "history": history})


@extend_schema_view(
    list=extend_schema(
        summary="List recipes",
        parameters=[
            OpenApiParameter("engine", OpenApiTypes.STR, description="only this engine"),
            OpenApiParameter("topology", OpenApiTypes.STR, description="only this topology (single, pd)"),
            OpenApiParameter("node", OpenApiTypes.STR, description="only recipes for this node name"),
        ],
        responses={200: s.RecipeSerializer(many=True), 400: ERRORS_400},
    ),
    retrieve=extend_schema(summary="One recipe (current version)"),
    create=extend_schema(
        summary="Create a recipe (operator)",
        description="Validates the spec against the node's GPUs, NUMA nodes and tools. " + RECIPE_ERRORS_HELP,
        request=s.RecipeWriteSerializer,
        responses={201: s.RecipeSerializer, 400: ERRORS_400},
    ),
    update=extend_schema(
        summary="Replace a recipe's content as a new version (operator)",
        description="Replaces the whole recipe: name, engine, topology, node and spec are all required (a "
        "PATCH changes only the fields it gives; a PUT missing one is a 400 saying so), and the spec given "
        "replaces the stored one whole. Every change bumps `version` and is kept in history; 409 when `expected_version` is "
        "not the current version. " + RECIPE_ERRORS_HELP,
        request=s.RecipeWriteSerializer,
        responses={200: s.RecipeSerializer, 400: ERRORS_400, 409: ERROR_409},
    ),
    partial_update=extend_schema(
        summary="Change some of a recipe's fields as a new version (operator)",
        description="Fields left out keep their stored values, and `spec` is a JSON Merge Patch (RFC 7396) of "
        "the stored spec: objects merge key by key, recursively, so `{\"spec\": {\"restart\": {\"policy\": "
        "\"never\"}}}` changes that key alone; `null` removes a key (its default then applies, or it is refused "
        "where required); arrays and other values replace. The merged spec is validated as a whole, and the "
        "version's diff shows only what changed. A PUT replaces the whole recipe: name, engine, topology, node "
        "and spec are all required there. "
        "Every change bumps `version` and is kept in history; 409 when `expected_version` is "
        "not the current version. " + RECIPE_ERRORS_HELP,
        request=s.RecipeWriteSerializer,
        responses={200: s.RecipeSerializer, 400: ERRORS_400, 409: ERROR_409},
    ),
    destroy=extend_schema(
        summary="Delete a recipe (admin)",
        description="Admin only: an operator creates, edits and reverts recipes but does not delete them (403). "
        "Deployments of it that never started (cancelled while pending, or failed before any process was "
        "spawned, with no benchmark sweep) are deleted with it. Any other deployment keeps it as the record of what "
        "ran: 409 naming those deployments (id and status, the first 10 then how many more) and what to do instead "
        "(stop or cancel an active one, edit the recipe, or create one under another name). The recipe's versions stay stored (with a deletion "
        "row naming who deleted it) but no API operation or page of Ceiling shows them any more; Django admin's "
        "History page of the recipe (`/admin/deployments/recipe/<id>/history/`) still lists them. " + NO_BODY_HELP,
        request=None,
        responses={204: None, 400: ERRORS_400, 404: ERROR_404, 409: ERROR_409},
    ),
)
class RecipeViewSet(NoBodyDestroyMixin, viewsets.ModelViewSet):
    """Deployment recipes, versioned: every change is a new version with who, when and why."""

    serializer_class = s.RecipeSerializer
    parser_classes = PARSERS
    # Deleting takes the recipe (admin's seed examples included) out of every page and API answer.
    action_roles = {"destroy": "admin"}
    query_keys = {"list": s.RecipeFilterSerializer, "versions": PAGE_KEYS, "diff": s.DiffQuerySerializer,
                  "dry_run": s.VersionQuerySerializer}

    def get_queryset(self):
        if self.action != "list":
            return selectors.recipe_list()
        q = _query(s.RecipeFilterSerializer, self.request)
        return selectors.recipe_list(engine=q.get("engine"), topology=q.get("topology"), node=q.get("node"))

    def get_serializer_class(self):
        if self.action in {"create", "update", "partial_update"}:
            return s.RecipeWriteSerializer
        return s.RecipeSerializer

    def create(self, request: Request, *args, **kwargs) -> Response:
        data, found = request_body(request)
        ser = s.RecipeWriteSerializer(data=data, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        data.pop("expected_version", None)
        recipe = services.recipe_create(user=request.user, **data)
        return Response(s.RecipeSerializer(recipe).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, **kwargs) -> Response:
        partial = kwargs.pop("partial", False)
        recipe = self.get_object()
        data, found = request_body(request)
        ser = s.RecipeWriteSerializer(recipe, data=data, partial=partial, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        if getattr(ser, "spec_patch", None) is not None:
            # merged again under the row lock, onto the spec stored then
            data.pop("spec")
            data["spec_patch"] = ser.spec_patch
        recipe = services.recipe_update(
            recipe=recipe,
            user=request.user,
            change_reason=data.pop("change_reason", None) or None,
            expected_version=data.pop("expected_version", None),
            **data,
        )
        return Response(s.RecipeSerializer(recipe).data)

    def perform_destroy(self, instance: Recipe) -> None:
        services.recipe_delete(recipe=instance, user=self.request.user)

    @extend_schema(
        summary="List a recipe's versions: who, when, why",
        responses={200: s.RecipeVersionSerializer(many=True)},
    )
    @action(detail=True, methods=["get"], url_path="versions")
    def versions(self, request: Request, pk=None) -> Response:
        recipe = self.get_object()
        rows = selectors.recipe_versions_list(recipe=recipe)
        page = self.paginate_queryset(rows)
        if page is not None:
            data = [selectors.recipe_version_meta(row) for row in page]
            return self.get_paginated_response(s.RecipeVersionSerializer(data, many=True).data)
        data = [selectors.recipe_version_meta(row) for row in rows]
        return Response(s.RecipeVersionSerializer(data, many=True).data)

    @extend_schema(
        summary="One version of a recipe, with its content",
        parameters=[OpenApiParameter("version", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses={200: s.RecipeVersionDetailSerializer, 404: ERROR_404},
    )
    @action(detail=True, methods=["get"], url_path=r"versions/(?P<version>[0-9]+)")
    def version_detail(self, request: Request, pk=None, version: str = "") -> Response:
        """One version by number. Any run of digits is judged as a version number, so a
        number out of range, 0 as ``99999999999999``, is the same 400 naming ``version`` that
        ``?version=`` of the dry-run gives, never a 404 for a path the route would not take."""
        # judged by controlplane.api.IdField, the field of VersionQuerySerializer
        recipe = self.get_object()
        number = s.VersionQuerySerializer(data={"version": version})
        number.is_valid(raise_exception=True)
        data = services.recipe_version_get(recipe=recipe, version=number.validated_data["version"])
        return Response(s.RecipeVersionDetailSerializer(data).data)

    @extend_schema(
        summary="Diff two versions of a recipe",
        description=(
            "Changes from version `a` to version `b`; spec paths are dotted, e.g. "
            "`spec.roles.decode.flags.mem-fraction-static`."
        ),
        parameters=[
            OpenApiParameter("a", OpenApiTypes.INT, required=True, description="old version"),
            OpenApiParameter("b", OpenApiTypes.INT, required=True, description="new version"),
        ],
        responses={200: s.RecipeDiffSerializer, 400: ERRORS_400, 404: ERROR_404},
    )
    @action(detail=True, methods=["get"], url_path="diff")
    def diff(self, request: Request, pk=None) -> Response:
        recipe = self.get_object()
        q = _query(s.DiffQuerySerializer, request)
        changes = services.recipe_diff(recipe=recipe, a=q["a"], b=q["b"])
        for change in changes:
            if change["path"] == "description":  # no description is null, as the recipe gives it
                change.update(old=change["old"] or None, new=change["new"] or None)
        return Response({"a": q["a"], "b": q["b"], "changes": changes})

    @extend_schema(
        summary="Revert a recipe to an earlier version (operator)",
        description="Writes a new version whose content equals the given one; history is kept. "
        "`keep_name: true` keeps the recipe's current name (for a version whose name another recipe "
        "now holds). " + s.ERROR_SHAPE_HELP,
        request=s.RevertSerializer,
        responses={200: s.RecipeSerializer, 400: ERRORS_400, 404: ERROR_404, 409: ERROR_409},
    )
    @action(detail=True, methods=["post"], url_path="revert")
    def revert(self, request: Request, pk=None) -> Response:
        recipe = self.get_object()
        body, found = request_body(request)
        ser = s.RevertSerializer(data=body, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        recipe = services.recipe_revert(
            recipe=recipe,
            user=request.user,
            version=ser.validated_data["version"],
            expected_version=ser.validated_data.get("expected_version"),
            keep_name=ser.validated_data.get("keep_name", False),
        )
        return Response(s.RecipeSerializer(recipe).data)

    @extend_schema(
        summary="Dry-run: render the launch plan without starting anything",
        description="Argv lists, env (secrets redacted), GPU ids, CPU lists, NUMA binding and ports "
        "of every process, for the current version or `?version=`.",
        parameters=[OpenApiParameter("version", OpenApiTypes.INT, description="default: current version")],
        responses={200: s.LaunchPlanSerializer, 400: ERRORS_400, 404: ERROR_404},
    )
    @action(detail=True, methods=["get"], url_path="dry-run")
    def dry_run(self, request: Request, pk=None) -> Response:
        recipe = self.get_object()
        version = _query(s.VersionQuerySerializer, request).get("version")
        plan = services.recipe_plan(recipe=recipe, version=version, warn_ports=True)
        name = recipe_name_shown(services.recipe_name_at(recipe=recipe, version=version))
        return Response({"recipe": recipe.pk, "recipe_name": name,
                         "version": version or recipe.version,
                         "plan": plan.to_dict()})


@extend_schema_view(
    list=extend_schema(summary="List secrets (admin; values are never returned)"),
    retrieve=extend_schema(summary="One secret (admin; value never returned)"),
    create=extend_schema(
        summary="Store a secret (admin)",
        description="Any key but `name`, `description` and `value` is refused at its name. " + SECRET_VALUE_HELP,
        responses={201: s.SecretSerializer, 400: ERRORS_400},
    ),
    update=extend_schema(
        summary="Replace a secret's value or description (admin)",
        description=SECRET_UPDATE_HELP,
        request=s.SecretUpdateSerializer,
        responses={200: s.SecretSerializer, 400: ERRORS_400},
    ),
    partial_update=extend_schema(
        summary="Change a secret's value or description (admin)",
        description=SECRET_UPDATE_HELP,
        request=s.SecretUpdateSerializer,
        responses={200: s.SecretSerializer, 400: ERRORS_400},
    ),
    destroy=extend_schema(
        summary="Delete a secret (admin)",
        description="Refused with 409 while a recipe references it. " + NO_BODY_HELP,
        request=None,
        responses={204: None, 400: ERRORS_400, 404: ERROR_404, 409: ERROR_409},
    ),
)
class SecretViewSet(NoBodyDestroyMixin, viewsets.ModelViewSet):
    """Named secrets, admin only; recipes reference them by name."""

    serializer_class = s.SecretSerializer
    queryset = Secret.objects.order_by("name")
    read_role = "admin"
    write_role = "admin"
    parser_classes = PARSERS

    def create(self, request: Request, *args, **kwargs) -> Response:
        data, found = request_body(request)
        ser = s.SecretSerializer(data=data, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        secret = services.secret_create(user=request.user, **ser.validated_data)
        return Response(s.SecretSerializer(secret).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args, **kwargs) -> Response:
        kwargs.pop("partial", None)
        secret = self.get_object()
        data, found = request_body(request)
        ser = s.SecretUpdateSerializer(data=data, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        secret = services.secret_update(secret=secret, user=request.user, **ser.validated_data)
        return Response(s.SecretSerializer(secret).data)

    def perform_destroy(self, instance: Secret) -> None:
        services.secret_delete(secret=instance, user=self.request.user)


@extend_schema_view(
    list=extend_schema(
        summary="List deployments, newest first",
        parameters=[
            OpenApiParameter("recipe", OpenApiTypes.INT, description="only this recipe id"),
            OpenApiParameter("recipe_name", OpenApiTypes.STR,
                             description="only deployments whose `recipe_name` is exactly this: the recipe's name at "
                             "the deployed version, so a deployment made before a rename is found by its old name "
                             "and not by the new one (case-sensitive, no partial match); given empty (`?recipe_name=`) it is "
                             "a 400 naming it, never read as left out, as every list filter is"),
            OpenApiParameter("status", OpenApiTypes.STR, description="only this status"),
        ],
        responses={200: s.DeploymentSerializer(many=True), 400: ERRORS_400},
    ),
    retrieve=extend_schema(summary="One deployment"),
    create=extend_schema(
        summary="Deploy a recipe's current version (operator)",
        description="Inserts a pending deployment and sends the start task to the node's queue. "
        "409 when the recipe already has an active deployment on its node. A node whose agent is "
        "down leaves the deployment pending (`waiting_reason` says so); it can be cancelled. Any key but `recipe` "
        "is refused at its name (`node`, `status`, ...: a deployment runs the recipe's current version on the "
        "recipe's node).",
        request=s.DeploymentCreateSerializer,
        responses={201: s.DeploymentSerializer, 400: ERRORS_400, 409: ERROR_409},
    ),
)
class DeploymentViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Deployments: list and read (viewer), deploy, stop and cancel (operator)."""

    serializer_class = s.DeploymentSerializer
    parser_classes = PARSERS
    # the telemetry's fields= picks a node's series: a deployment's history has no choice of them
    query_keys = {"list": s.DeploymentFilterSerializer, "telemetry": ("since", "until"), "events": PAGE_KEYS}
    query_serializers = {"telemetry": s.TelemetryQuerySerializer}   # judges since and until

    def get_queryset(self):
        if self.action != "list":
            return selectors.deployment_list()
        q = _query(s.DeploymentFilterSerializer, self.request)
        return selectors.deployment_list(recipe_id=q.get("recipe"), recipe_name=q.get("recipe_name"),
                                         status=q.get("status"))

    def get_serializer_class(self):
        return s.DeploymentCreateSerializer if self.action == "create" else s.DeploymentSerializer

    def create(self, request: Request, *args, **kwargs) -> Response:
        data, found = request_body(request)
        ser = s.DeploymentCreateSerializer(data=data, context={"body_errors": found})
        ser.is_valid(raise_exception=True)
        deployment = services.deployment_create(recipe=ser.validated_data["recipe"], user=request.user)
        deployment = selectors.deployment_list().get(pk=deployment.pk)
        return Response(s.DeploymentSerializer(deployment).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Stop a deployment (operator)",
        description="Pending: cancelled at once. Starting or ready: the node agent stops the processes "
        "(router, decode, prefill; SIGTERM, the recipe's grace period, SIGKILL); poll `status`. "
        "Idempotent: stopping, stopped or failed answers 202 and changes nothing. " + NO_BODY_HELP,
        request=None,
        responses={202: s.DeploymentSerializer, 400: ERRORS_400, 404: ERROR_404},
    )
    @action(detail=True, methods=["post"], url_path="stop")
    def stop(self, request: Request, pk=None) -> Response:
        """Stop the deployment (202 whatever its status) through
        :func:`deployments.services.deployment_stop`; a body with keys is a 400
        (:func:`controlplane.api.no_body`) and stops nothing. 404 for an unknown id."""
        deployment = self.get_object()
        no_body(request)
        deployment = services.deployment_stop(deployment=deployment, user=request.user)
        return Response(s.DeploymentSerializer(deployment).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Cancel a deployment that has not become ready (operator)",
        description="Only for a deployment that has not become ready yet: `pending` (cancelled at once, also "
        "while its node agent is down) or `starting` for the first time (the node agent stops what it started, "
        "as stop does). Anything else, a ready deployment or one restarting a process after being ready "
        "included, is refused with 409 and left as it is, so a cancel never takes down a live deployment (the row "
        "as stored decides, in one conditional update: one that becomes ready while the cancel is in flight is "
        "refused the same way): "
        '`{"detail": "Deployment #7 is ready; cancel only applies to a deployment that has not become ready '
        'yet (pending or starting). Use stop (POST /api/deployments/7/stop/) to stop it.", "code": "conflict"}`. '
        + NO_BODY_HELP,
        request=None,
        responses={
            202: s.DeploymentSerializer,
            400: ERRORS_400,
            404: ERROR_404,
            409: OpenApiResponse(s.DetailSerializer, description="The deployment has been ready (use stop), or "
                                 "is stopping, stopped or failed: nothing to cancel."),
        },
    )
    @action(detail=True, methods=["post"], url_path="cancel")
    def cancel(self, request: Request, pk=None) -> Response:
        """Cancel a deployment that has not become ready (202, as stop does) through
        :func:`deployments.services.deployment_cancel`, which judges the row as stored at the
        moment it changes it; otherwise 409 naming its status and, for a live one, pointing at
        stop. A body with keys is a 400 (:func:`controlplane.api.no_body`), judged before the
        state. 404 for an unknown id."""
        deployment = self.get_object()
        no_body(request)
        deployment = services.deployment_cancel(deployment=deployment, user=request.user)
        return Response(s.DeploymentSerializer(deployment).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="A deployment's live telemetry for re-sync: last messages, sequence number, 1 s history",
        description="`latest` holds the last `deployment.sample` and `deployment.status` messages of group "
        "`deployment-<id>` (null when none in the past hour); `history` the stored 1 s rollups from `since` to "
        "`until` (unix seconds; default: the 10 minutes before now, or before the deployment ended; at most 24 h a "
        "request, longer: 400 on `since`).",
        parameters=[
            OpenApiParameter("since", OpenApiTypes.NUMBER, description="unix seconds"),
            OpenApiParameter("until", OpenApiTypes.NUMBER, description="unix seconds"),
        ],
        responses={200: s.DeploymentTelemetrySerializer, 400: ERRORS_400, 404: ERROR_404},
    )
    @action(detail=True, methods=["get"], url_path="telemetry")
    def telemetry(self, request: Request, pk=None) -> Response:
        deployment = self.get_object()
        q = _query(s.TelemetryQuerySerializer, request)
        until = q.get("until")
        end = until or (deployment.ended_at.timestamp() if deployment.ended_at else time.time())
        since = q.get("since", end - TELEMETRY_DEFAULT_WINDOW_S)
        _telemetry_window_check(since, end if until is None and "since" not in q else (until or time.time()))
        history = telemetry_selectors.telemetry_for_deployment(deployment_id=deployment.pk, since=since, until=until)
        group = deployment_group(deployment.pk)
        latest = latest_messages(group)
        return Response({
            "group": group,
            "seq": current_seq(group),
            "latest": {"deployment.sample": latest.get("deployment.sample"),
                       "deployment.status": latest.get("deployment.status")},
            "history": history,
        })

    @extend_schema(summary="A deployment's timeline, oldest first", responses={200: s.ProcessEventSerializer(many=True)})
    @action(detail=True, methods=["get"], url_path="events")
    def events(self, request: Request, pk=None) -> Response:
        rows = selectors.deployment_events(deployment=self.get_object())
        page = self.paginate_queryset(rows)
        if page is not None:
            return self.get_paginated_response(s.ProcessEventSerializer(page, many=True).data)
        return Response(s.ProcessEventSerializer(rows, many=True).data)


@extend_schema_view(
    list=extend_schema(
        summary="List server processes",
        parameters=[
            OpenApiParameter("deployment", OpenApiTypes.INT, description="only this deployment id"),
            OpenApiParameter("role", OpenApiTypes.STR, description="prefill, decode, router or single"),
        ],
        responses={200: s.ServerProcessSerializer(many=True), 400: ERRORS_400},
    ),
    retrieve=extend_schema(summary="One server process"),
)
class ServerProcessViewSet(viewsets.ReadOnlyModelViewSet):
    """Engine processes of deployments: pid identity, pinning, GPUs, ports, argv (redacted)."""

    serializer_class = s.ServerProcessSerializer
    query_keys = {"list": s.ProcessFilterSerializer, "log": s.ProcessLogQuerySerializer}

    def get_queryset(self):
        if self.action != "list":
            return selectors.process_list()
        q = _query(s.ProcessFilterSerializer, self.request)
        return selectors.process_list(deployment_id=q.get("deployment"), role=q.get("role"))

    def judges_own_format(self) -> bool:
        """True for the log download, which refuses any ``?format=`` with its own message."""
        return self.action == "log_download"

    def perform_content_negotiation(self, request, force=False):
        # The download answers text/plain whatever the client accepts; its errors are JSON.
        return super().perform_content_negotiation(request, force=force or self.action == "log_download")

    @extend_schema(
        summary="The end of a process's log (secrets masked)",
        description="`text` is empty while the process has no log file (yet). 404 for an unknown process id.",
        parameters=[OpenApiParameter("lines", OpenApiTypes.INT, description="1-2000, default 100")],
        responses={200: s.ProcessLogSerializer, 400: ERRORS_400,
                   404: OpenApiResponse(s.DetailSerializer, description="No such process.")},
    )
    @action(detail=True, methods=["get"], url_path="log")
    def log(self, request: Request, pk=None) -> Response:
        process = self.get_object()
        lines = _query(s.ProcessLogQuerySerializer, request)["lines"]
        text = services.process_log_tail(process=process, lines=lines)
        return Response({"process": process.pk, "lines": lines, "text": text})

    @extend_schema(
        summary="Download a process's full log (secrets masked)",
        description="The whole log, the rotated part first, as a `text/plain` attachment named "
        "`deployment-<deployment id>-<role>-<ordinal>.log`, masked with every stored secret value exactly as "
        "the deployment page's download (the same code serves both). Bytes that are not UTF-8 pass unchanged. "
        "404 for an unknown process id, and for a process with no log file: none recorded yet, a recorded "
        "path outside the log directory, or a file that does not exist (any more).",
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="the log, as an attachment"),
            404: OpenApiResponse(s.DetailSerializer, description="No such process, or it has no log file."),
        },
    )
    @action(detail=True, methods=["get"], url_path="log/download", url_name="log-download")
    def log_download(self, request: Request, pk=None) -> HttpResponseBase:
        """Stream the log through :func:`deployments.services.process_log_download`, the
        service the page's download uses too: same file checks, same redaction, same file name.
        It answers in one format, so any ``?format=`` is a 400 naming it rather than ignored."""
        fmt = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE)
        if fmt is not None:
            raise ValidationError({api_settings.URL_FORMAT_OVERRIDE: [
                f"the log downloads as text/plain only: leave format out; got {query_text(fmt)}"]})
        process = self.get_object()
        filename, reader = services.process_log_download(process=process)
        return FileResponse(reader, as_attachment=True, filename=filename, content_type="text/plain; charset=utf-8")
