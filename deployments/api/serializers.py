"""Serializers of the deployments API.

Input serializers check shapes and types (a JSON object where one is expected, an integer in
range, a known node name); every domain rule is enforced by the service the view calls,
through :func:`deployments.recipes.recipe_validate`. The recipe input serializer also runs
those recipe rules, so that field errors and spec errors come back together in one 400.
Errors come back in one shape: ``{"<dotted.field.path>": ["message", ...]}``, e.g.
``{"spec.roles.prefill.gpus": [...]}``.
"""
from __future__ import annotations

import math
import re

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxLengthValidator
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField, get_error_detail

# The API's shared error bodies (schema components ValidationError and Detail), importable from here too.
from controlplane.api import ERROR_SHAPE_HELP, DetailSerializer, ValidationErrorSerializer  # noqa: F401
from controlplane.api import (
    MAX_INT, FilterChoiceField, IdField, QueryProblemsTogetherSerializer, StrictCharField, StrictInputMixin, StrictIntegerField,
    StrictIntegerMixin, StrictSlugRelatedField, merge_body_errors, query_text, unknown_field_errors,
)
from controlplane.api import AnyJSONField, BlankAsNullCharField, created_by_field, LimitedTextField, OptionalTextField, StrictBooleanField
from controlplane.drf_defaults import empty_list_item
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import credential_mask_json, redact_text
from deployments.choices import DeploymentStatus, Engine, Role, Topology
from deployments.models import (
    CHANGE_REASON_MAX_LENGTH, NAME_MAX_LENGTH, Deployment, Gpu, Node, NumaNode, ProcessEvent, Recipe, Secret,
    ServerProcess, recipe_name_shown,
)
from deployments.nodes import GPU_STATUSES, node_gpu_status
from deployments.recipes import engine_topology_errors
from deployments.services import (
    DESCRIPTION_MAX_LENGTH, LOG_TAIL_MAX_LINES, check_json_tree, deployment_as_last_seen, deployment_live,
    deployment_state_note, deployment_waiting_reason, text_control_validator, secret_value_validator, recipe_name_validator, free_text_shown, json_merge_patch, recipe_spec_validate, spec_patch_errors_noted, secret_name_errors, secret_value_problem, secret_description_problem, secret_description_validator, recipe_description_validator,
    recipe_secret_values_held, secret_values, spec_errors_beside_refused_text,
)


# --- nodes ---------------------------------------------------------------------------------


class GpuSerializer(serializers.ModelSerializer):
    """One GPU as the node agent reported it; a text it did not report is null."""

    uuid = BlankAsNullCharField(allow_null=True, read_only=True)
    name = BlankAsNullCharField(allow_null=True, read_only=True)
    pci_bus_id = BlankAsNullCharField(allow_null=True, read_only=True)
    compute_capability = BlankAsNullCharField(allow_null=True, read_only=True, help_text="e.g. 9.0")
    cpu_affinity = BlankAsNullCharField(allow_null=True, read_only=True, help_text="cpulist from nvidia-smi topo -m")

    class Meta:
        model = Gpu
        fields = [
            "index",
            "uuid",
            "name",
            "memory_total_bytes",
            "pci_bus_id",
            "numa_node",
            "compute_capability",
            "cpu_affinity",
        ]


class NumaNodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = NumaNode
        fields = ["index", "cpus", "memory_total_bytes"]


class NodeSerializer(serializers.ModelSerializer):
    """A GPU (or CPU-only) host: its GPUs (NVML index, NUMA affinity), NUMA nodes (CPU lists
    in kernel cpulist syntax), tools and agent liveness. Memory in bytes. A text the node agent did
    not report (``hostname``, ``driver_version``, ``cuda_version``) is null, and so are
    ``cpu_count`` and ``memory_total_bytes`` until the node agent reports them (a node added by
    hand before its agent's first discovery is stored with 0)."""

    hostname = BlankAsNullCharField(allow_null=True, read_only=True)
    cpu_count = serializers.SerializerMethodField(
        help_text="online CPUs of the host; null while the node agent has not reported them (a node added by "
                  "hand before its agent's first discovery), never 0")
    memory_total_bytes = serializers.SerializerMethodField(
        help_text="the sum of the NUMA nodes' MemTotal at discovery, in bytes; null while the node agent has "
                  "not reported it (a node added by hand before its agent's first discovery), never 0")

    @extend_schema_field(serializers.IntegerField(allow_null=True, min_value=1))
    def get_cpu_count(self, obj: Node) -> int | None:
        return obj.cpu_count or None

    @extend_schema_field(serializers.IntegerField(allow_null=True, min_value=1))
    def get_memory_total_bytes(self, obj: Node) -> int | None:
        return obj.memory_total_bytes or None
    driver_version = BlankAsNullCharField(allow_null=True, read_only=True)
    cuda_version = BlankAsNullCharField(allow_null=True, read_only=True)

    gpus = GpuSerializer(many=True, read_only=True)
    numa_nodes = NumaNodeSerializer(many=True, read_only=True)
    agent_online = serializers.BooleanField(read_only=True)
    agent_pid = serializers.IntegerField(
        read_only=True, allow_null=True,
        help_text="process id of the node agent that sent the last heartbeat, on the node's host (a restarted "
                  "agent has a new one); null when no agent ever heartbeated")
    queue_name = serializers.CharField(read_only=True)
    local_port_range = serializers.ListField(
        child=serializers.IntegerField(), read_only=True, allow_null=True, min_length=2, max_length=2,
        help_text="net.ipv4.ip_local_port_range [low, high] (inclusive); null when the node did not report it")
    reserved_ports = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2), read_only=True,
        help_text="net.ipv4.ip_local_reserved_ports as inclusive [low, high] ranges")
    gpu_count = serializers.SerializerMethodField(
        help_text="How many GPUs the node has, as measured: the length of gpus when NVML or nvidia-smi counted "
                  "them; when NVML gave no count, the NVIDIA GPUs sysfs lists on the PCI bus (gpu_status "
                  "nvml_unavailable: they are not in gpus and cannot be used; none_on_pci: 0); null when "
                  "nothing measured it (gpu_status not_reported or count_unknown)")
    gpu_status = serializers.SerializerMethodField(
        help_text="not_reported: never discovered (gpu_count null); found: gpu_count > 0 GPUs in gpus; "
                  "none_found: NVML answered and counted none; nvml_unavailable: NVML gave no count "
                  "(gpu_status_reason says why: no library, no driver, a failed nvmlDeviceGetCount) and the "
                  "PCI bus lists gpu_count > 0 NVIDIA GPUs, none usable; none_on_pci: NVML gave no count and "
                  "the PCI bus lists no NVIDIA GPU (gpu_count 0); count_unknown: NVML gave no count and the "
                  "PCI bus could not be read or was not reported (gpu_count null); none_recorded: no GPU and "
                  "no NVML status recorded (GPUs read from nvidia-smi -q -x, an older node agent)")
    gpu_status_reason = serializers.SerializerMethodField(
        help_text="NVML's reason when gpu_status is nvml_unavailable, none_on_pci or count_unknown, e.g. "
                  "'NVML Shared Library Not Found', or, with gpu_status found, the NVML calls that failed "
                  "after the count, e.g. 'GPU 1: nvmlDeviceGetName failed: Unknown Error'; null otherwise")
    gpu_summary = serializers.SerializerMethodField(
        help_text="the GPU line the node pages and the wall show, e.g. '8 GPUs', '0 GPUs (NVML found none)', "
                  "'2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: Driver Not Loaded', "
                  "'0 GPUs (no NVIDIA PCI device; NVML not available: NVML Shared Library Not Found)', "
                  "'GPU count unknown — NVML not available: Driver Not Loaded', 'unknown (not reported yet)'")

    @extend_schema_field(serializers.IntegerField(allow_null=True, min_value=0))
    def get_gpu_count(self, obj: Node) -> int | None:
        return node_gpu_status(obj)["count"]

    @extend_schema_field(serializers.ChoiceField(choices=GPU_STATUSES))
    def get_gpu_status(self, obj: Node) -> str:
        return node_gpu_status(obj)["status"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_gpu_status_reason(self, obj: Node) -> str | None:
        return node_gpu_status(obj)["reason"]

    @extend_schema_field(serializers.CharField())
    def get_gpu_summary(self, obj: Node) -> str:
        return node_gpu_status(obj)["text"]

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "hostname",
            "cpu_count",
            "memory_total_bytes",
            "tools",
            "driver_version",
            "cuda_version",
            "gpus",
            "gpu_count",
            "gpu_status",
            "gpu_status_reason",
            "gpu_summary",
            "numa_nodes",
            "discovered_at",
            "agent_heartbeat_at",
            "agent_stopped_at",
            "agent_pid",
            "agent_online",
            "queue_name",
            "local_port_range",
            "reserved_ports",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


# --- recipes -------------------------------------------------------------------------------


class SecretValueHeldSerializer(serializers.Serializer):
    """A stored secret's value found in a recipe's plain value (saved before such values were
    refused): masked in ``spec``; the owner should reference the secret instead."""

    path = serializers.CharField(help_text="Where in the spec, e.g. env.HF_TOKEN or flags.--api-key.")
    secret = serializers.CharField(help_text="The name of the secret whose value it holds.")
    message = serializers.CharField()


class RecipeSerializer(serializers.ModelSerializer):
    """A recipe as the API shows it; ``node`` is the node's name, ``version`` its current
    version (1 on creation, +1 on every change); ``description`` is null when it has none.
    ``spec`` shows a well-known credential shortened and a stored secret's value masked;
    ``secret_values_held`` lists where such a value is (empty for a clean recipe)."""

    description = BlankAsNullCharField(allow_null=True, read_only=True)
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = created_by_field("created the recipe")
    secret_values_held = serializers.SerializerMethodField()

    class Meta:
        model = Recipe
        fields = [
            "id",
            "name",
            "description",
            "engine",
            "topology",
            "node",
            "spec",
            "secret_values_held",
            "version",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(SecretValueHeldSerializer(many=True))
    def get_secret_values_held(self, recipe: Recipe) -> list[dict[str, str]]:
        # read once per serializer (a list shows many recipes), not once per recipe
        if not hasattr(self, "_secret_values"):
            self._secret_values = secret_values()
        return recipe_secret_values_held(recipe.spec, self._secret_values)

    def to_representation(self, instance):
        data = super().to_representation(instance)
        # A stored spec or description from before credentials or secret values were refused
        # shows them masked.
        data["spec"] = credential_mask_json(data.get("spec"))
        data["description"] = free_text_shown(data.get("description"))
        if "name" in data:
            data["name"] = recipe_name_shown(data["name"])
        return data


class SpecField(AnyJSONField):
    """A recipe's ``spec``: any JSON value (the recipe rules judge it). A number too large for a
    float (``1e400``, an infinite :class:`controlplane.api.NonFiniteNumber`) passes, so that the
    rules check the rest of the spec and the 400 names that number at its own path
    (``spec.roles.single.port``) instead of refusing the whole spec as not JSON."""



class _SchemaMaxLength(MaxLengthValidator):
    """The schema's ``maxLength`` of a field whose own validator judges the length: checks nothing."""

    def __call__(self, value: Any) -> None:
        return None


class NameField(StrictCharField):
    """A recipe's name in a body: :func:`deployments.services.recipe_name_validator` judges it (a
    stored secret's value refused first, then :func:`deployments.models.name_validator`), length
    included, so a long name gets one message (``Use at most 63 characters; got 80.``), not that
    and the character rule; the schema still says ``maxLength``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_length=NAME_MAX_LENGTH, validators=[recipe_name_validator], **kwargs)
        self.validators = [_SchemaMaxLength(NAME_MAX_LENGTH) if isinstance(v, MaxLengthValidator) else v
                           for v in self.validators]


class RecipeWriteSerializer(serializers.Serializer):
    """Input for creating (all of ``name``, ``engine``, ``topology``, ``node``, ``spec``) or
    updating (any subset with PATCH) a recipe. A PUT's ``spec`` replaces the stored one whole; a
    PATCH's is a JSON Merge Patch (RFC 7396) of the
    stored spec: objects merge recursively, null removes a key, arrays and other values replace;
    the merged spec is validated whole. ``node`` is a node name. ``change_reason`` is
    stored in the version history; ``expected_version`` (a JSON integer: ``"3"`` is refused as the
    wrong type) makes an update fail with 409 when the recipe moved on since the client read it.
    ``name``, ``description`` (null too: no description, as ``""``), ``change_reason`` and ``node``
    are JSON strings: ``"name": 5`` or
    ``"node": 1`` is a 400 naming the field and the type (``must be a node name (a string), got
    the number 1``), never the text ``"5"``. Any other top-level key is refused.

    An update's spec rules are checked on the merged content (the recipe's stored engine,
    topology, node and spec where the body leaves them out). Every problem comes back at once."""

    # The recipe being updated is passed as ``instance``; every problem at once: to_internal_value.

    name = NameField(example="seed-v4-flash-pd")
    description = OptionalTextField(max_length=DESCRIPTION_MAX_LENGTH, required=False,
                                    validators=[recipe_description_validator],
                                    help_text=f'free text of at most {DESCRIPTION_MAX_LENGTH} characters; "" or null for none')
    engine = FilterChoiceField(choices=Engine.choices)
    topology = FilterChoiceField(choices=Topology.choices)
    node = StrictSlugRelatedField(slug_field="name", queryset=Node.objects.all(), what="a node name (a string)")
    spec = SpecField(help_text=(
        "The typed recipe spec; docs/recipes.md describes every field. A create or a PUT takes it "
        "whole: a spec sent replaces the stored one. A PATCH merges it into the stored spec as a JSON "
        "Merge Patch (RFC 7396): objects merge key by key, recursively; null removes a key (a default "
        "then applies, or it is refused where required); arrays and other values replace. "
        "`{\"spec\": {\"restart\": {\"policy\": \"never\"}}}` changes that one key and keeps the rest. "
        "The merged spec is validated as a whole."))
    change_reason = LimitedTextField(max_length=CHANGE_REASON_MAX_LENGTH, required=False, allow_blank=True,
                                     write_only=True, validators=[text_control_validator,
                                                                  secret_value_validator("change_reason")])
    expected_version = StrictIntegerField(min_value=1, max_value=MAX_INT, required=False, write_only=True)

    def validate_spec(self, value: Any) -> dict:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return value

    def to_internal_value(self, data: Any) -> dict:
        """Check the body and return its fields, or raise one ``ValidationError`` holding every
        problem found, each under its path: unknown top-level keys (``{"foo": ["unknown field
        'foo'; allowed: name, ..."]}``), each field's own errors (the name rule, an unknown
        engine, topology or node, a spec that is not an object), a name another recipe has,
        what no database column can hold in a new spec (NUL characters, nesting deeper than 16
        levels, more than 1024 entries), keys given more than once and numbers that are not finite
        (``context["body_errors"]``, see :func:`controlplane.api.request_body`:
        ``{"expected_version": ["is given 2 times (1, 7): give it once"], "spec.roles.single.port":
        ["1e400 is not a finite number"]}``), and the rules of :func:`deployments.recipes.recipe_validate`
        (``topology``, ``spec.…``) once engine, topology and spec are known, through
        :func:`deployments.services.recipe_spec_validate`: with an unknown node the spec is
        checked without a node's hardware (``node`` says so, unless the node was not given as a
        name at all: then ``node`` holds only that), and with a topology the engine
        does not run, the parts that do not depend on the topology are (``topology`` says so).
        The service the view calls checks everything again when it saves."""
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)
        errors: dict[str, Any] = unknown_field_errors(data, [f.field_name for f in self._writable_fields])
        values: dict[str, Any] = {}
        for field in self._writable_fields:
            check = getattr(self, f"validate_{field.field_name}", None)
            try:
                value = field.run_validation(field.get_value(data))
                if check is not None:
                    value = check(value)
            except SkipField:
                continue
            except serializers.ValidationError as exc:
                errors[field.field_name] = exc.detail
                continue
            except DjangoValidationError as exc:
                errors[field.field_name] = get_error_detail(exc)
                continue
            values[field.field_name] = value
        if self.instance is not None and not self.partial:
            self._hint_put_replaces_whole(data, errors)
        self.spec_patch = None
        if self.partial and isinstance(self.instance, Recipe) and isinstance(values.get("spec"), dict):
            # A PATCH's spec is a merge patch of the stored one; the rules judge the merged spec.
            self.spec_patch = values["spec"]
            values["spec"] = json_merge_patch(self.instance.spec, self.spec_patch)
        rule_errors = self._rule_errors(values, failed=errors)
        if self.spec_patch is not None:
            # "give exactly one of path or name" says which of the two the merge kept from the stored spec
            spec_patch_errors_noted(rule_errors, stored_spec=self.instance.spec, spec_patch=self.spec_patch)
        for path, messages in rule_errors.items():
            errors.setdefault(path, []).extend(messages)
        errors = merge_body_errors(errors, self.context.get("body_errors") or {})
        if errors:
            raise serializers.ValidationError(errors)
        return values

    def _hint_put_replaces_whole(self, data: Mapping[str, Any], errors: dict[str, Any]) -> None:
        """A PUT that leaves out a required field is told why it is required, and what to send
        instead: ``This field is required. A PUT replaces the whole recipe; use PATCH to change
        only spec.`` (naming the fields the body gave)."""
        given = [f.field_name for f in self._writable_fields
                 if f.field_name in data and f.field_name not in {"change_reason", "expected_version"}]
        hint = (f"A PUT replaces the whole recipe; use PATCH to change only {', '.join(given)}." if given
                else "A PUT replaces the whole recipe; use PATCH to change only some fields.")
        for name, messages in errors.items():
            if isinstance(messages, list) and any(getattr(m, "code", None) == "required" for m in messages):
                errors[name] = [serializers.ErrorDetail(f"{m} {hint}", code=m.code)
                                if getattr(m, "code", None) == "required" else m for m in messages]

    def _rule_errors(self, values: dict[str, Any], *, failed: Mapping[str, Any]) -> dict[str, list[str]]:
        """Name uniqueness and the recipe rules on the content ``values`` would give, merged
        over ``self.instance``; fields with errors in ``failed`` (field name → its errors) count as
        unknown. :data:`NO_NODE_NOTE` is added for a node that is missing or names no registered
        node, not for one of the wrong type (``"node": 1``), whose message says what to send."""
        errors: dict[str, list[str]] = {}
        recipe = self.instance if isinstance(self.instance, Recipe) else None
        name = values.get("name")
        if name is not None:
            taken = Recipe.objects.filter(name=name)
            if recipe is not None:
                taken = taken.exclude(pk=recipe.pk)
            if taken.exists():
                errors["name"] = [f"A recipe named {json_spelled(name)} already exists."]
        content: dict[str, Any] = {}
        if recipe is not None:
            content = {"engine": recipe.engine, "topology": recipe.topology, "node": recipe.node, "spec": recipe.spec}
        content.update({k: values[k] for k in ("engine", "topology", "node", "spec") if k in values})
        for key in failed:
            content.pop(key, None)
        stored: dict[str, list[str]] = {}
        if "spec" in values:
            # What a database column cannot hold (NUL, depth, size), as the service checks on save.
            check_json_tree(values["spec"], "spec", stored)
            errors.update(stored)
        if "spec" not in content:
            if "engine" in content and "topology" in content:
                errors.update(engine_topology_errors(engine=content["engine"], topology=content["topology"]))
            return errors
        node_malformed = any(getattr(m, "code", None) == "invalid" for m in failed.get("node", ()))
        if "node" not in content and not node_malformed:
            errors["node"] = [NO_NODE_NOTE]
        # An engine or topology that is missing or refused still leaves the rest of the spec to judge:
        # the service checks what does not depend on it and says what it could not check.
        engine, topology = content.get("engine"), content.get("topology")
        try:
            recipe_spec_validate(engine=engine, topology=topology, spec=content["spec"], node=content.get("node"),
                                 stored_spec=recipe.spec if recipe is not None else None)
        except InvalidInput as exc:
            said = engine_topology_errors(engine=engine, topology=topology)
            for path, messages in exc.errors.items():
                if path in ("engine", "topology") and path not in content:
                    # the field's own error already says what is wrong with it; add only the notes
                    messages = [m for m in messages if m not in said.get(path, [])]
                if path in stored:
                    # a value no column can hold has its one message already (a NUL in a path
                    # would otherwise also read "model path must not contain NUL ..."); what else
                    # is wrong there is added below
                    continue
                if messages:
                    errors.setdefault(path, []).extend(messages)
        # ... and what else is wrong where a text was refused for its characters (an env name
        # outside the allowlist beside its value's NUL): every problem at once
        beside = spec_errors_beside_refused_text(engine=engine, topology=topology, spec=content["spec"],
                                                 node=content.get("node"), stored=stored)
        for path, messages in beside.items():
            errors[path] = list(errors.get(path, [])) + [m for m in messages if m not in errors.get(path, [])]
        return errors


#: Said under ``node`` when the node is unknown, after why: the spec was still checked.
NO_NODE_NOTE = ("The spec was checked without a node: its GPU, NUMA node and CPU ids are checked against "
                "the node's hardware once it names a registered node.")


class RecipeVersionSerializer(serializers.Serializer):
    """One version of a recipe: who changed it (``user``, a username), when (``at``), why
    (``change_reason``) and how (``change``: created or changed)."""

    version = serializers.IntegerField()
    at = serializers.DateTimeField()
    user = serializers.CharField(allow_null=True)
    change_reason = serializers.CharField(allow_null=True)
    change = serializers.CharField(help_text="created or changed")

    def to_representation(self, instance):
        data = super().to_representation(instance)
        # Free text saved before a stored secret's value was refused in it shows the value masked.
        for key in ("change_reason", "description", "name"):
            if key in data:
                data[key] = free_text_shown(data[key])
        return data


class RecipeVersionDetailSerializer(RecipeVersionSerializer):
    """A version with the recipe's content at that version (``node`` by name)."""

    name = serializers.CharField()
    description = BlankAsNullCharField(allow_null=True)
    engine = serializers.CharField()
    topology = serializers.CharField()
    node = serializers.CharField(allow_null=True)
    spec = serializers.JSONField()

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["spec"] = credential_mask_json(data.get("spec"))
        return data


class VersionQuerySerializer(serializers.Serializer):
    """``?version=<n>`` (optional: the current version when absent)."""

    version = IdField(required=False)


def version_number(text: Any) -> int:
    """A recipe version number given as text (a query parameter of the API or of a page, a form
    field, ``manage.py dryrun --version``), judged by the API's own version field
    (:class:`controlplane.api.IdField` of :class:`VersionQuerySerializer`), so that every entry
    point takes the same numbers and refuses the rest with the same words. Raises
    :class:`ValueError` whose text is the API's message, range included: ``must be a whole number
    between 1 and 2147483647, got 'x'`` (the caller puts the parameter's name before it)."""
    try:
        return VersionQuerySerializer().fields["version"].to_internal_value(text)
    except serializers.ValidationError as exc:
        raise ValueError(str(exc.detail[0])) from None


class DiffQuerySerializer(serializers.Serializer):
    """``?a=<n>&b=<m>``: the two versions to compare (old, new)."""

    a = IdField()
    b = IdField()


class DiffEntrySerializer(serializers.Serializer):
    """One difference: ``path`` is a field or dotted spec path, e.g.
    ``spec.roles.decode.flags.mem-fraction-static``; ``change`` is added/removed/changed."""

    path = serializers.CharField()
    change = serializers.CharField(help_text="added, removed or changed")
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class RecipeDiffSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    changes = DiffEntrySerializer(many=True)


class RevertSerializer(StrictInputMixin, serializers.Serializer):
    """Body of ``POST /api/recipes/<id>/revert/``; any other key is refused at its name, and both
    versions are JSON integers (``"1"``, ``1.0`` or ``true`` is a 400 naming the field and the
    type). The view judges the body before the recipe's state: a malformed body is a 400 even
    when ``expected_version`` is stale (409). ``keep_name`` (JSON ``true``/``false``) restores the
    version under the recipe's current name."""

    version = StrictIntegerField(min_value=1, max_value=MAX_INT)
    expected_version = StrictIntegerField(min_value=1, max_value=MAX_INT, required=False)
    keep_name = StrictBooleanField(
        required=False, default=False,
        help_text="true: keep the recipe's current name and restore every other field of the version",
    )


class LaunchPlanSerializer(serializers.Serializer):
    """Documents the dry-run body: the launch plan's JSON form (argv lists, env with secrets
    redacted, GPU ids, CPU lists, NUMA nodes, ports per process), under the recipe's id and name
    (``manage.py dryrun --json`` prints the same keys)."""

    recipe = serializers.IntegerField()
    recipe_name = serializers.CharField(help_text="the recipe's name at `version` (a deployment of it is named so)")
    version = serializers.IntegerField()
    plan = serializers.JSONField()


class RecipeFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/recipes/``."""

    engine = FilterChoiceField(choices=Engine.choices, required=False)
    topology = FilterChoiceField(choices=Topology.choices, required=False)
    node = serializers.CharField(max_length=63, required=False)


# --- secrets -------------------------------------------------------------------------------


#: Why the API's read-only fields of a secret cannot be set.
_SERVER_SET = "it is set by the server"
_SECRET_READ_ONLY = {"id": _SERVER_SET, "created_at": _SERVER_SET, "updated_at": _SERVER_SET}
SECRET_RENAME_REFUSED = ("a secret cannot be renamed: recipes reference it by name (store the value under the new "
                         "name, point the recipes at it, then delete this one)")


class _SecretBodyChecks:
    """The checks a secret's create and update bodies share: the value's own rules, a description
    that may not hold the value the same body gives the secret, and a description stored before
    those refusals shown masked on reads."""

    def validate_value(self, value: str) -> str:
        problem = secret_value_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict) -> dict:
        # The description may not hold the value this same body gives the secret.
        problem = secret_description_problem(attrs.get("description"), value=attrs.get("value"))
        if problem:
            raise serializers.ValidationError({"description": [problem]})
        return attrs

    def to_representation(self, instance):
        data = super().to_representation(instance)
        # A description saved before secret values and credentials were refused in it shows them masked.
        if "description" in data:
            data["description"] = free_text_shown(data["description"])
        return data


class SecretSerializer(_SecretBodyChecks, StrictInputMixin, serializers.ModelSerializer):
    """A named secret. ``value`` is write-only: required on create, optional on update, never
    returned by any endpoint. As input (create), any key but ``name``, ``description`` and
    ``value`` is refused at its name, and each of the three is a JSON string (``"value": 5`` is a
    400 naming the field and the type, never the text ``"5"``; ``description`` may be null, no
    description as ``""``, and an answer gives null for none); a value that is refused (shorter
    than 8 characters, or holding a NUL or a line break) is a 400 on ``value`` with the reason."""

    # The value's refusal: deployments.services.secret_value_problem.

    # The model's text columns (name, description) as JSON strings only, as ``value``.
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.CharField: StrictCharField}
    value = LimitedTextField(write_only=True, trim_whitespace=False, max_length=8192, conceal=True)
    description = OptionalTextField(max_length=255, required=False, help_text='"" or null for none',
                                    validators=[text_control_validator, secret_description_validator])
    read_only_reasons = _SECRET_READ_ONLY

    class Meta:
        model = Secret
        fields = ["id", "name", "description", "value", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        # Uniqueness is reported by the service with the same message on every path.
        extra_kwargs = {"name": {"validators": []}}

    def validate_name(self, name: str) -> str:
        # Checked here too (the service checks again under its lock), so a bad or taken name is
        # reported with the value's and description's problems in one answer.
        errors = secret_name_errors(name)
        if errors:
            raise serializers.ValidationError(errors)
        return name


class SecretUpdateSerializer(_SecretBodyChecks, StrictInputMixin, serializers.Serializer):
    """PATCH/PUT body for a secret: a new value and/or description, each a JSON string. The name
    is fixed (recipes reference secrets by name): a ``name`` key is refused with that reason, as
    any other key is refused at its name; the value is checked as on create."""

    value = LimitedTextField(write_only=True, trim_whitespace=False, max_length=8192, required=False,
                            conceal=True)
    description = OptionalTextField(max_length=255, required=False, help_text='"" or null for none',
                                    validators=[text_control_validator, secret_description_validator])
    read_only_reasons = {"name": SECRET_RENAME_REFUSED, **_SECRET_READ_ONLY}


# --- deployments and processes -------------------------------------------------------------


class RedactedTextField(serializers.CharField):
    """A read-only text that can carry engine log lines or probe answers (reasons, probe
    details, event messages): it goes out through :func:`controlplane.redaction.redact_text`,
    as the pages' log tail does; null when there is nothing to say (``""``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> str | None:
        return redact_text(str(value)) if value else None


class EngineServerLimitsSerializer(serializers.Serializer):
    """What one worker server reported about its capacity; a value it did not report is null."""

    base_url = serializers.CharField(help_text="the server's origin, e.g. http://127.0.0.1:30002")
    read_from = serializers.ListField(
        child=serializers.CharField(),
        help_text="the URLs the values were read from: /get_server_info (or /server_info), and /v1/models "
                  "when the context length came from there (max_model_len: vLLM's, or SGLang's when its "
                  "context_length is null); empty when none answered")
    max_total_num_tokens = serializers.IntegerField(
        allow_null=True, min_value=1, help_text="KV cache pool size, in tokens (SGLang, sim)")
    context_length = serializers.IntegerField(
        allow_null=True, min_value=1,
        help_text="most tokens (input + output) of one request: context_length, else max_model_len from "
                  "/v1/models (vLLM; SGLang without --context-length)")
    max_running_requests = serializers.IntegerField(
        allow_null=True, min_value=1, help_text="most sequences decoded at once, in requests")
    chunked_prefill_size = serializers.IntegerField(
        allow_null=True, min_value=1, help_text="prefill chunk, in tokens (the sim refuses a longer prompt)")
    admission_reserve_tokens = serializers.IntegerField(
        allow_null=True, min_value=0,
        help_text="KV tokens a new request needs beyond its prompt to be admitted, in tokens (sim only)")
    error = serializers.CharField(allow_null=True,
                                  help_text="what each route answered when nothing was read; else null")


class EngineLimitsSerializer(serializers.Serializer):
    """What the deployment's engine servers reported about their capacity when it became ready."""

    read_at = serializers.CharField(help_text="when they were read, UTC, e.g. 2026-12-06T14:02:11Z")
    topology = serializers.CharField(allow_null=True, help_text="single or pd: which servers hold the KV cache")
    servers = serializers.DictField(
        child=EngineServerLimitsSerializer(),
        help_text="per worker server, keyed role and ordinal (single0, prefill0, decode0); never the router")
    error = serializers.CharField(allow_null=True, help_text="why nothing was reported by any server; else null")


class DeploymentSerializer(serializers.ModelSerializer):
    """A deployment of one recipe version on a node; ``status`` follows pending → starting →
    ready → stopping → stopped, or failed with ``reason``. A text it does not have (``reason``,
    ``waiting_reason``, ``state_note``, ``entry_url``) is null, never ``""``."""

    recipe_name = serializers.CharField(
        source="deployed_recipe_name", read_only=True,
        help_text="the recipe's name at recipe_version (what it ran as), not its current name after a rename")
    recipe_current_name = serializers.CharField(
        source="recipe.name_shown", read_only=True,
        help_text="the recipe's name now: the same as recipe_name unless the recipe was renamed since this "
                  "version was deployed (pages then show recipe_name followed by \"(now recipe_current_name)\")")
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = created_by_field("started the deployment")
    waiting_reason = serializers.SerializerMethodField(
        help_text='e.g. "waiting for node agent local (last heartbeat never)"; null when not waiting'
    )
    reason = RedactedTextField(help_text='why it failed or stopped, e.g. "prefill failed: port 31000 on '
                                         '127.0.0.1 is already in use by pid 812 (python3)"; secrets masked; '
                                         'null when there is nothing to say')
    live = serializers.SerializerMethodField(
        help_text="whether the status and processes shown are current, not whether the deployment is running "
                  "(that is `status`: `ready` serves requests): true for a stopped or failed deployment, whose "
                  "rows are final, and for any other while its node agent is online; false for one that has not "
                  "ended (pending included) while its node agent is offline or was never seen: status and "
                  "processes are then as the agent last saw them (`state_as_of`, `state_note`)")
    state_as_of = serializers.SerializerMethodField(
        help_text="while the node agent is offline, when it last confirmed the state (UTC): the latest of its last "
                  "heartbeat, its clean shutdown and what it wrote on the deployment and its processes, never "
                  "before the deployment was created; else null")
    state_note = serializers.SerializerMethodField(
        help_text='e.g. "as last seen by node agent local at 2026-12-05T01:49:30Z; not live: the agent '
                  'is offline", or "not live: node agent local is offline (never seen)"; null when live')
    entry_url = BlankAsNullCharField(allow_null=True, read_only=True,
                                     help_text="where requests are sent once it is ready; null until known")
    engine_limits = serializers.SerializerMethodField(
        help_text="what the engine servers reported about their capacity (KV pool and context in tokens, "
                  "running sequences in requests) as it became ready; sweep creation refuses a length pair one "
                  "request cannot fit alone in them. Null until it is ready (and for deployments ready before "
                  "this was recorded)")

    class Meta:
        model = Deployment
        fields = [
            "id",
            "recipe",
            "recipe_name",
            "recipe_current_name",
            "recipe_version",
            "node",
            "status",
            "reason",
            "cancel_requested",
            "stop_requested",
            "waiting_reason",
            "live",
            "state_as_of",
            "state_note",
            "entry_url",
            "spec_snapshot",
            "created_by",
            "created_at",
            "started_at",
            "ready_at",
            "ended_at",
            "updated_at",
            "engine_limits",
        ]
        read_only_fields = fields

    @extend_schema_field(EngineLimitsSerializer(allow_null=True))
    def get_engine_limits(self, deployment: Deployment) -> dict[str, Any] | None:
        return deployment.engine_limits

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_waiting_reason(self, deployment: Deployment) -> str | None:
        return redact_text(deployment_waiting_reason(deployment=deployment)) or None

    def get_live(self, deployment: Deployment) -> bool:
        return deployment_live(deployment=deployment)

    def get_state_as_of(self, deployment: Deployment) -> str | None:
        at = deployment_as_last_seen(deployment=deployment)
        return serializers.DateTimeField().to_representation(at) if at is not None else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_state_note(self, deployment: Deployment) -> str | None:
        return deployment_state_note(deployment=deployment) or None

    def to_representation(self, instance):
        data = super().to_representation(instance)
        # A recipe saved before credentials or secret values were refused left them in the snapshot.
        if "spec_snapshot" in data:
            data["spec_snapshot"] = credential_mask_json(data["spec_snapshot"])
        return data


class WholePrimaryKeyField(StrictIntegerMixin, serializers.PrimaryKeyRelatedField):
    """A primary key given as a JSON integer (a form body's digits as DRF reads them). DRF takes
    the string ``"1"`` and passes a JSON number such as ``1.5`` on to the database lookup, which
    truncates it to 1 and would act on another row; a string, a float or a boolean is refused as
    the wrong type instead (``must be an integer (e.g. 8), got the string "1"``,
    :class:`controlplane.api.StrictIntegerMixin`)."""


class DeploymentCreateSerializer(StrictInputMixin, serializers.Serializer):
    """Body of ``POST /api/deployments/``: the recipe (id, a JSON integer) whose current version to
    deploy. Any other key is refused at its name: a deployment runs the recipe's current version on the
    recipe's node, and everything else about it is set as it runs
    (``{"node": ["'node' is read-only: a deployment runs on its recipe's node ...; allowed: recipe"]}``)."""

    recipe = WholePrimaryKeyField(queryset=Recipe.objects.select_related("node"))
    read_only_reasons = {
        **{name: "it is set by the server" for name in DeploymentSerializer.Meta.fields},
        "node": "a deployment runs on its recipe's node (change the recipe to deploy elsewhere)",
        "recipe_version": "a deployment runs its recipe's current version",
        "status": "a deployment's status follows its processes (use stop or cancel to end it)",
    }


class ProcessEventSerializer(serializers.ModelSerializer):
    """One entry of a deployment's timeline: ``at`` (UTC), ``kind`` (``created``, ``spawned``,
    ``ready``, ``crashed``, ``restarting``, ``stopped``...), the process role when the entry
    concerns one process, and a message."""

    process_role = serializers.CharField(source="process.role", read_only=True, default=None)
    message = RedactedTextField()

    class Meta:
        model = ProcessEvent
        fields = ["id", "at", "kind", "process", "process_role", "message"]
        read_only_fields = fields


class ProcessLogQuerySerializer(serializers.Serializer):
    """``?lines=<n>``: how many trailing log lines (1-2000, default 100); anything else is a 400
    quoting it (``must be a whole number between 1 and 2000, got 'abc'``)."""

    lines = IdField(min_value=1, max_value=LOG_TAIL_MAX_LINES, required=False, default=100)


class ProcessLogSerializer(serializers.Serializer):
    """A process log tail: the process id, the line count asked for and the text (secrets masked)."""

    process = serializers.IntegerField()
    lines = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True)


class ServerProcessSerializer(serializers.ModelSerializer):
    """One engine process (prefill, decode, router or single). ``argv`` and ``env_redacted``
    pass through the redactor once more on the way out, as a second line of defence. A text it
    does not have (a reason, a probe detail, a CPU list not set or not read back, a URL or log path
    not known yet) is null, never ``""``."""

    argv = serializers.SerializerMethodField()
    env_redacted = serializers.SerializerMethodField()
    reason = RedactedTextField(help_text="why it is not running, with its last log lines when it failed")
    probe_detail = RedactedTextField(help_text="what the last readiness or liveness probe saw")
    end_reason = RedactedTextField()
    cpus = BlankAsNullCharField(allow_null=True, read_only=True, help_text="intended CPU list; null when not pinned")
    mem_nodes = BlankAsNullCharField(allow_null=True, read_only=True)
    pin_method = BlankAsNullCharField(allow_null=True, read_only=True)
    effective_cpus = BlankAsNullCharField(allow_null=True, read_only=True)
    effective_mems = BlankAsNullCharField(allow_null=True, read_only=True)
    health_url = BlankAsNullCharField(allow_null=True, read_only=True)
    generate_url = BlankAsNullCharField(allow_null=True, read_only=True)
    log_path = BlankAsNullCharField(allow_null=True, read_only=True)

    class Meta:
        model = ServerProcess
        fields = [
            "id",
            "deployment",
            "role",
            "ordinal",
            "status",
            "reason",
            "pid",
            "pgid",
            "start_ticks",
            "argv",
            "env_redacted",
            "cpus",
            "numa_node",
            "mem_nodes",
            "gpu_ids",
            "ports",
            "pin_method",
            "effective_cpus",
            "effective_mems",
            "pinning_verified",
            "gpu_verified",
            "health_url",
            "generate_url",
            "readiness",
            "startup_timeout_s",
            "stop_grace_s",
            "last_probe_at",
            "probe_detail",
            "probe_failures",
            "next_restart_at",
            "log_path",
            "restart_count",
            "exit_code",
            "end_reason",
            "started_at",
            "ready_at",
            "ended_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_argv(self, proc: ServerProcess) -> list[str]:
        return [redact_text(str(a)) for a in (proc.argv or [])]

    def get_env_redacted(self, proc: ServerProcess) -> dict[str, str]:
        return {str(k): redact_text(str(v)) for k, v in (proc.env_redacted or {}).items()}


class DeploymentFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/deployments/``."""

    recipe = IdField(required=False)
    # The name as deployed (``Deployment.recipe_name``), not the recipe's current one.
    # Given empty it is refused before this reads it, as every list filter is
    # (controlplane.drf_defaults.empty_filter_errors).
    recipe_name = serializers.CharField(required=False, max_length=63, trim_whitespace=False)
    status = FilterChoiceField(choices=DeploymentStatus.choices, required=False)


class ProcessFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/processes/``."""

    deployment = IdField(required=False)
    role = FilterChoiceField(choices=Role.choices, required=False)


# A number as a query writes it: ASCII digits with an optional sign, point and exponent. ``float()``
# alone also takes "1_000", "١", "nan" and "infinity".
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class UnixSecondsField(serializers.FloatField):
    """An instant given as a query parameter, in unix seconds (a float, ``1767225600.5``), from 0 to
    :attr:`MAX_UNIX_S`. Anything else, a text that is not a decimal number, ``nan``, ``inf``, a
    number too large for a float (``1e400``) or one out of range, is a 400 naming the parameter,
    quoting the value and giving the range in unix seconds (``{"since": ["must be a number of unix
    seconds between 0 and 253402300799, got 'abc'"]}``), the shape of :class:`IdField`'s refusal."""

    #: The last second of year 9999 UTC: Python's datetime cannot hold a later instant.
    MAX_UNIX_S = 253402300799.0

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", self.MAX_UNIX_S)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        refused = serializers.ValidationError(
            f"must be a number of unix seconds between {self.min_value:g} and {int(self.max_value)}, "
            f"got {query_text(data)}", code="invalid")
        if not isinstance(data, str) or not _DECIMAL_RE.fullmatch(data):
            raise refused
        value = float(data)
        # nan passes min/max comparisons (every comparison with nan is false); 1e400 reads as inf.
        if not math.isfinite(value) or not self.min_value <= value <= self.max_value:
            raise refused
        return value


class TelemetryQuerySerializer(QueryProblemsTogetherSerializer):
    """``?since=<unix s>&until=<unix s>&fields=a,b`` of the telemetry re-sync endpoints; a time that
    is not a number of unix seconds in range is refused by :class:`UnixSecondsField`, a ``since``
    after ``until`` under ``since``; a blank ``fields`` is none given, an empty item of it
    (``fields=a,,b``) a 400 (:func:`controlplane.drf_defaults.empty_list_item`). Every problem of the
    three is named in one 400 (``?since=10&until=5&fields=a,,b``: ``since`` and ``fields``)."""

    since = UnixSecondsField(required=False, help_text="unix seconds; default: 10 minutes ago")
    until = UnixSecondsField(required=False, help_text="unix seconds; default: now")
    fields = serializers.CharField(required=False, allow_blank=True, max_length=500,
                                   help_text="comma-separated series names (node history only)")

    def validate_fields(self, value: str) -> list[str]:
        """The series names of ``value``; none for a blank one."""
        if not (value or "").strip():
            return []
        fields = [f.strip() for f in value.split(",")]
        if empty := [i for i, f in enumerate(fields, start=1) if not f]:
            raise serializers.ValidationError([empty_list_item(empty[0], "fields", "power_w,host_cpu_pct")])
        return fields

    def together_errors(self, attrs: dict, refused: set[str]) -> dict[str, list[str]]:
        if "since" in attrs and "until" in attrs and attrs["since"] > attrs["until"]:
            return {"since": ["must not be after until"]}
        return {}

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        if not attrs.get("fields"):
            attrs.pop("fields", None)
        return attrs


class NodeTelemetrySerializer(serializers.Serializer):
    """Documents ``GET /api/nodes/<name or id>/telemetry/``: the group, its current sequence number,
    the last ``node.sample`` message (or null) and the 1 s history as aligned series."""

    group = serializers.CharField(help_text="node-<name>")
    seq = serializers.IntegerField(help_text="sequence number of the group's last message (0: none)")
    latest = serializers.JSONField(help_text='{"node.sample": <wire message or null>}')
    history = serializers.JSONField(
        help_text='{"t": [unix s], "gpus": {"<index>": {"memory_used_bytes": [bytes], "utilization_pct": [%], '
                  '"power_w": [W], "temperature_c": [°C]}}, "host_cpu_pct": [%], "resolution_s": seconds per point}'
    )


class DeploymentTelemetrySerializer(serializers.Serializer):
    """Documents ``GET /api/deployments/<id>/telemetry/``."""

    group = serializers.CharField(help_text="deployment-<id>")
    seq = serializers.IntegerField(help_text="sequence number of the group's last message (0: none)")
    latest = serializers.JSONField(help_text='{"deployment.sample": <message or null>, "deployment.status": <message or null>}')
    history = serializers.JSONField(
        help_text='{"t": [unix s], "tok_s": [tok/s], "processes": {"<process id>": {"gen_tok_s": [tok/s], '
                  '"running": [requests], "queued": [requests], "kv_usage": [0..1], "gpu_memory_bytes": [bytes], '
                  '"cpu_pct": [% of one core]}}, "resolution_s": seconds per point}'
    )
