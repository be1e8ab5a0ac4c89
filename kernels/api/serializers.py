"""Serializers of the kernels API: shapes in and out; no business rules (those are in
:mod:`kernels.services`). Units are in field names: ``_us`` µs, ``_s`` s, ``_bytes`` bytes,
``gbps`` GB/s, ``tflops`` TFLOP/s; ``roofline_fraction`` is 0-1."""
from __future__ import annotations

import math
from collections.abc import Mapping

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api import (
    MAX_INT, AnyJSONField, BlankAsNullCharField, created_by_field, FilterChoiceField, IdField, query_text,
    QueryProblemsTogetherSerializer, JSONTextDictField, StrictCharField, StrictInputMixin, StrictIntegerField, StrictListField,
    flatten_errors,
)
from controlplane.jsonsafe import json_spelled

from kernels.choices import KernelJobStatus
from kernels.manifest import PRUNED_SOURCES, grid_summary_read
from kernels.selectors import MAX_TABLE_OFFSET
from kernels.models import KernelBest, KernelBuild, KernelJob, KernelPackage
from kernels.whatif import DEFAULT_SHARE, MAX_SPEEDUP, MIN_SPEEDUP, NUMBER_RE, whatif_input_errors


class PrunedSerializer(serializers.Serializer):
    """One entry of a grid summary's ``pruned``: what left combinations out and how many it was
    the first to refuse (schema only)."""

    index = serializers.IntegerField(
        allow_null=True, help_text="the constraint's position in the manifest's grid.constraints, from 0; null when "
                                   "source is not constraint")
    source = serializers.ChoiceField(
        choices=PRUNED_SOURCES,
        help_text="constraint: one of the manifest's grid.constraints (index names it); cuda.requires: the "
                  "manifest's [cuda] requires for the job's target; variants_file: the grid variants the variants "
                  "file a job made from measurements was created with does not list")
    constraint = serializers.CharField(help_text="the constraint's text (or what else left them out)")
    pruned = serializers.IntegerField(help_text="combinations it was the first to refuse")


class GridSummarySerializer(serializers.Serializer):
    """A grid's size after its constraints (schema only): variants + every pruned count =
    combinations."""

    variants = serializers.IntegerField()
    combinations = serializers.IntegerField(help_text="the product of the grid's value lists (of the subset, if any)")
    pruned = PrunedSerializer(many=True)
    pruned_total = serializers.IntegerField()
    subset = serializers.JSONField(allow_null=True, help_text='the grid subset, {"impl": ["split_k"]}; null for none')


class PackageSerializer(serializers.ModelSerializer):
    """A registered package with its validated manifest and the grid's size after constraints
    (``grid``: variants, combinations, pruned per constraint); ``dtype`` is the manifest's cache
    element type (``bf16``, ``fp8_e4m3``), the one its exported configs are named for;
    ``description`` is null when the manifest gives none."""

    grid = serializers.SerializerMethodField()
    description = BlankAsNullCharField(allow_null=True, read_only=True)
    dtype = serializers.SerializerMethodField(help_text='the KV cache element type the package is for, e.g. "bf16"')

    class Meta:
        model = KernelPackage
        fields = ["id", "name", "title", "language", "dtype", "description", "manifest", "source_hash", "path", "grid",
                  "registered_at", "updated_at"]
        read_only_fields = fields

    def get_dtype(self, obj: KernelPackage) -> str:
        return str((obj.manifest or {}).get("dtype") or "")

    @extend_schema_field(GridSummarySerializer)
    def get_grid(self, obj: KernelPackage) -> dict:
        from kernels.services import package_grid

        return package_grid(package=obj).as_dict()


class JobSerializer(serializers.ModelSerializer):
    """A kernel job: target, status, progress, counts, timings and the device calibration
    snapshot measured by the benchmark (HBM GB/s, dense bf16 TFLOP/s). A text the job does not
    have is null, never ``""``: ``reason``, ``note``, ``waiting_reason``, ``phase`` before it
    starts, and what is known only once it ran (``compiler``, the device and version texts)."""

    package = serializers.SlugRelatedField(slug_field="name", read_only=True)
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = created_by_field("started the job")
    waiting_reason = serializers.SerializerMethodField(
        help_text='e.g. "waiting for node agent local (last heartbeat never)"; null when not waiting')
    phase = serializers.SerializerMethodField(
        help_text='what the job is doing: "compile" or "bench" while it runs (null before it starts), then '
                  'its final status ("done", "failed", "cancelled"), as the job page shows it; '
                  'progress_done / progress_total stay those of the last phase it ran')
    progress_total = serializers.SerializerMethodField(
        help_text="the total of the phase (variants to build, then measurements), as the job page shows it: "
                  "before any phase has reported one (a pending job), the variants the job holds")
    reason = BlankAsNullCharField(allow_null=True, read_only=True,
                                  help_text="why the job failed or was cancelled; null when there is nothing to say")
    note = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null when there is nothing to say")
    package_hash = BlankAsNullCharField(allow_null=True, read_only=True,
                                        help_text="source hash when the job was created; null when not known")
    compiler = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until a build reports it")
    device_name = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until the benchmark runs")
    device_cc = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until the benchmark runs")
    driver_version = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until known")
    cuda_version = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until known")
    torch_version = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null until known")
    grid_summary = serializers.SerializerMethodField(
        help_text="the grid's size when the job was created: variants, combinations, pruned per constraint (and "
                  "per [cuda] requires or variants file), subset")
    triton_version = BlankAsNullCharField(
        source="known_triton_version", allow_null=True, read_only=True,
        help_text='the Triton that built the variants ("3.6.0" of the compiler "triton 3.6.0") or the one '
                  "the results were measured with; null until known (a CUDA package's job without Triton)")

    class Meta:
        model = KernelJob
        fields = ["id", "package", "package_hash", "node", "target_cc", "params_subset", "shapes", "batches",
                  "grid_summary", "status", "reason", "waiting_reason", "note", "cancel_requested", "phase", "progress_done",
                  "progress_total", "variants_total", "builds_ok", "builds_failed", "builds_discarded",
                  "benchmarks_total", "benchmarks_correct", "benchmarks_wrong", "compiler", "device_name",
                  "device_cc", "sm_count", "l2_bytes", "hbm_gbps", "bf16_tflops", "driver_version", "cuda_version",
                  "torch_version", "triton_version", "config_paths", "created_by", "created_at", "started_at",
                  "built_at", "ended_at", "build_s", "bench_s"]
        read_only_fields = fields

    @extend_schema_field(GridSummarySerializer)
    def get_grid_summary(self, job: KernelJob) -> dict:
        return grid_summary_read(job.grid_summary)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_phase(self, job: KernelJob) -> str | None:
        from kernels.choices import JOB_TERMINAL

        return str(job.status) if job.status in JOB_TERMINAL else (job.phase or None)

    def get_progress_total(self, job: KernelJob) -> int:
        from kernels.services import job_progress_total

        return job_progress_total(job)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_waiting_reason(self, job: KernelJob) -> str | None:
        from kernels.services import kernel_job_waiting_reason

        return kernel_job_waiting_reason(job=job) or None


class ParamValuesField(AnyJSONField):
    """The values of one parameter of a job body's ``params``: any JSON value (the grid judges
    it). A number that is not finite inside it (``[1e400]``, ``[NaN]``) passes here, so that the
    400 names it at its own path alone (``{"params.BLOCK.0": ["1e400 is not a finite number"]}``,
    :class:`~controlplane.api.StrictInputMixin`) and never also refuses the whole list as
    ``Value must be valid JSON.`` (DRF's check, which refuses infinities and NaN)."""



#: What an empty ``shapes`` or ``batches`` list of a job body is told.
LEAVE_OUT = "give at least one value, or leave the key out for the package's list"


class JobCreateSerializer(StrictInputMixin, serializers.Serializer):
    """``{"package": name, "node": name, "cc": "9.0" (optional when the node has a GPU),
    "params": {param: [values]} (optional grid subset), "shapes": [...], "batches": [...]}``;
    any other key is refused at its name. Texts must be JSON strings and batches JSON integers
    (``"cc": 9.0``, ``"batches": ["1"]`` or ``[true]`` are a 400 naming the field and the type
    expected, never coerced); ``cc`` is taken as written, never trimmed (``" 9.0"`` is a 400 naming
    it, as the job's own checks judge it); ``shapes`` and ``batches``, when
    given, hold at least one value and each value once (``[]`` or ``[1, 1]`` is a 400; a batch is
    1..2147483647, refused at its item, ``batches.0``, outside it; leave the
    key out for the package's list). Every value given more than once is named beside the list's
    other problems (an item of the wrong type, at ``batches.2``)."""

    # cc's checks: kernels.services.kernel_job_check; every repeat named: to_internal_value.

    package = StrictCharField(max_length=63, example="sparse_mla_decode")
    node = StrictCharField(max_length=63, example="local")
    cc = StrictCharField(max_length=8, required=False, allow_blank=True, trim_whitespace=False, example="9.0")
    params = JSONTextDictField(child=ParamValuesField(), required=False, example={"impl": ["split_k"]})
    shapes = StrictListField(child=StrictCharField(max_length=63, example="v4-flash"), required=False,
                             min_length=1, max_length=32, error_messages={"min_length": LEAVE_OUT},
                             what="a list of shape names", example=["v4-flash"])
    # At most MAX_INT, as a result's batch is (kernels.services.results): a larger batch is refused
    # at its item, ``batches.0``, like one below 1.
    batches = StrictListField(child=StrictIntegerField(min_value=1, max_value=MAX_INT), required=False, min_length=1,
                              max_length=32, error_messages={"min_length": LEAVE_OUT}, what="a list of integers",
                              example=[1, 8])

    #: The list fields that take each value once, with the word a message names a value by.
    DISTINCT = {"shapes": "shape", "batches": "batch"}

    def to_internal_value(self, data):
        """The fields, or one ``ValidationError`` with every problem: those of
        :class:`~controlplane.api.StrictInputMixin` and the fields, and under ``shapes`` and
        ``batches`` each value given more than once among the items that parse (``batch 1 is given
        twice: give each once``, ``shape 'wide' is given 3 times: ...``), beside what is wrong with
        another item (``batches.2``) instead of in its place. A list whose key the body gives twice
        is not looked into (its values are not taken)."""
        repeated = self._repeated_values(data)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not repeated or not isinstance(exc.detail, Mapping):
                raise
            errors = flatten_errors(exc.detail)
            for key, messages in repeated.items():
                errors[key] = messages + [m for m in errors.get(key, []) if m not in messages]
            raise serializers.ValidationError(errors) from None
        if repeated:
            raise serializers.ValidationError(repeated)
        return value

    def _repeated_values(self, data) -> dict[str, list[str]]:
        """``{field: [message]}``, one message per value of :attr:`DISTINCT`'s lists given more
        than once (items that do not parse left out; they have their own error)."""
        found = self.context.get("body_errors") or {}
        out: dict[str, list[str]] = {}
        if not isinstance(data, Mapping):
            return out
        for name, what in self.DISTINCT.items():
            field = self.fields[name]
            items = field.get_value(data)
            if name in found or not isinstance(items, list):
                continue
            counts: dict = {}
            for item in items:
                try:
                    parsed = field.child.run_validation(item)
                except serializers.ValidationError:
                    continue
                counts[parsed] = counts.get(parsed, 0) + 1
            messages = [f"{what} {json_spelled(v)} is given {'twice' if n == 2 else f'{n} times'}: give each once"
                        for v, n in counts.items() if n > 1]
            if messages:
                out[name] = messages
        return out


def fields_that_parse(serializer: serializers.Serializer, body, *, skip=()) -> dict:
    """The values of ``serializer``'s fields that ``body`` gives and that parse on their own,
    leaving out those named in ``skip`` (keys whose values are not taken: a key the body gives
    twice); of a list field that does not parse as a whole (an item of the wrong type, too few or
    too many items), the items that do. What a create view can still check further after the
    serializer as a whole refused ``body``."""
    values: dict = {}
    if not isinstance(body, dict):
        return values
    for name, field in serializer.fields.items():
        if name in skip or name not in body or field.read_only:
            continue
        try:
            values[name] = field.run_validation(body[name])
        except serializers.ValidationError:
            if isinstance(field, serializers.ListField) and isinstance(body[name], list):
                values[name] = []
                for item in body[name]:
                    try:
                        values[name].append(field.child.run_validation(item))
                    except serializers.ValidationError:
                        continue
    return values


class BuildSerializer(serializers.ModelSerializer):
    class Meta:
        model = KernelBuild
        fields = ["ok", "error", "registers", "spills_bytes", "shared_bytes", "tensor_core", "tensor_core_evidence",
                  "build_s", "compiler", "discarded", "discard_reason"]
        read_only_fields = fields


class JobFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/kernel-jobs/``: a status that cannot match is a 400 naming
    the allowed ones, never a filter left out (an unknown package or node name matches no job)."""

    package = serializers.CharField(max_length=64, required=False, help_text="only this package name")
    status = FilterChoiceField(choices=KernelJobStatus.choices, required=False, help_text="only this status")
    node = serializers.CharField(max_length=63, required=False, help_text="only jobs of this node name")


class VariantTableQuerySerializer(serializers.Serializer):
    """Filters and sort of the variant table: ``batch``, ``state`` (all, built, failed,
    discarded, correct, wrong, timed), ``sort`` (``ordinal``, ``key``, ``registers``,
    ``spills_bytes``, ``shared_bytes``, ``tensor_core``, ``build_s``, ``param:<name>``,
    ``us:<shape>``, ``roof:<shape>``; ``-`` prefix for descending), ``limit`` and ``offset`` (a
    page of the sorted rows; ``total`` in the answer counts them all); parameter filters as
    ``p.<name>=<value>``; ``format`` json (the default) or csv (a download of the rows,
    :func:`kernels.services.variant_table_csv`: every row from ``offset`` unless ``limit`` is
    given). An unknown sort key or parameter, a parameter value outside the grid, a batch the job
    does not hold, or another format, is a 400 naming the valid ones (a parameter's under its own
    key, ``p.<name>``)."""

    format = FilterChoiceField(choices=["json", "csv"], default="json",
                               help_text="json, or csv: the table's rows as a CSV download")

    batch = IdField(required=False)
    state = FilterChoiceField(choices=["all", "built", "failed", "discarded", "correct", "wrong", "timed"],
                              default="all")
    sort = serializers.CharField(max_length=80, default="ordinal")
    limit = IdField(min_value=1, max_value=2000, default=500)
    offset = IdField(min_value=0, max_value=MAX_TABLE_OFFSET, default=0,
                     help_text="rows of the sorted, filtered table to skip")


class BestFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/kernel-best/``: a value that cannot match (a batch that is not
    a whole number >= 1, a text longer than the column) is a 400 naming the parameter, never a
    filter left out (an unknown package or shape name, or a batch no row holds, matches no row)."""

    package = serializers.CharField(max_length=63, required=False, help_text="only this package name")
    device = serializers.CharField(max_length=128, required=False,
                                   help_text="only devices whose name contains this (case-insensitive)")
    shape = serializers.CharField(max_length=63, required=False, help_text="only this shape name")
    batch = IdField(required=False, help_text="only this batch size (requests)")


class BestSerializer(serializers.ModelSerializer):
    """The best variant of one bucket (device, cc, shape, batch, compiler): its parameters, median
    (µs), roofline fraction, the baseline's median and the speedup over it, the exported file.
    Each package has its own baseline implementation, and their times differ: compare the best
    variants of different packages by ``median_us``, not by ``speedup``."""

    package = serializers.SlugRelatedField(slug_field="name", read_only=True)
    params = serializers.JSONField(source="variant.params", read_only=True)
    key = serializers.CharField(source="variant.key", read_only=True)
    shape_bucket = serializers.CharField(read_only=True)
    package_hash = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null when not known")
    config_path = BlankAsNullCharField(allow_null=True, read_only=True, help_text="null when none was written")

    class Meta:
        model = KernelBest
        fields = ["id", "package", "device_name", "cc", "shape", "batch", "shape_bucket", "compiler", "job",
                  "variant", "key", "params", "median_us", "roofline_fraction", "baseline_us", "speedup",
                  "config_path", "package_hash", "selected_at"]
        read_only_fields = fields
        extra_kwargs = {
            "median_us": {"help_text": "the variant's median time in µs: what compares packages with each other"},
            "baseline_us": {"help_text": "the median time in µs of this package's own baseline implementation for "
                                         "the same bucket; null when its grid has none"},
            "speedup": {"help_text": "baseline_us / median_us (×): over this package's own baseline, which differs "
                                     "from another package's; null without a baseline"},
        }


class _DecimalTextFloatField(serializers.FloatField):
    """A float written the way numbers are written in a query: ASCII digits, an optional sign,
    point and exponent (:data:`kernels.whatif.NUMBER_RE`); ``float()`` alone also takes
    ``1_000``, ``١`` and ``infinity``. A refusal quotes the text, as the what-if page does:
    ``'abc' is not a number``; ``'1e400' is not a finite number`` (also ``NaN``, ``inf``)."""

    def to_internal_value(self, data):
        if not isinstance(data, str) or not NUMBER_RE.fullmatch(data.strip()):
            raise serializers.ValidationError(f"{query_text(data)} is not a number", code="invalid")
        try:
            number = super().to_internal_value(data)
        except serializers.ValidationError:
            raise serializers.ValidationError(f"{query_text(data)} is not a number", code="invalid") from None
        if not math.isfinite(number):
            raise serializers.ValidationError(f"{query_text(data)} is not a finite number", code="invalid")
        return number


class WhatIfQuerySerializer(QueryProblemsTogetherSerializer):
    """``sweep`` id, ``share`` of the decode step time the kernel takes (0 < share <= 1, default
    0.63, the seed's), and either ``speedup`` (×, 0.001 <= speedup <= 1000) or ``best`` (a best-variant
    id whose speedup over the baseline is used). A share or speedup out of range gets the one
    message :mod:`kernels.whatif` gives for it (:data:`kernels.whatif.SHARE_RANGE`,
    :data:`kernels.whatif.SPEEDUP_RANGE`), whatever the value."""

    sweep = IdField()
    share = _DecimalTextFloatField(default=DEFAULT_SHARE, help_text="0 < share <= 1")
    speedup = _DecimalTextFloatField(required=False, help_text=f"{MIN_SPEEDUP:g} <= speedup <= {MAX_SPEEDUP:g}")
    best = IdField(required=False)

    def validate_share(self, value: float) -> float:
        return _in_range("share", value, self.initial_data)

    def validate_speedup(self, value: float) -> float:
        return _in_range("speedup", value, self.initial_data)

    def together_errors(self, attrs: dict, refused: set[str]) -> dict[str, list[str]]:
        """Both ``speedup`` and ``best`` given, or neither (named once the query has no other
        problem, as a key a read needs that is not given is), under ``speedup``."""
        both = "speedup" in attrs and "best" in attrs
        neither = not refused and "speedup" not in attrs and "best" not in attrs
        if both or neither:
            return {"speedup": ["give speedup (a number) or best (a best-variant id), exactly one"]}
        return {}


def _in_range(name: str, value: float, given: Mapping | None) -> float:
    """``value`` of the what-if's ``share`` or ``speedup``; a ValidationError with
    :func:`kernels.whatif.whatif_input_errors`' message, quoting the query's text of it
    (``got 1e9``), when it is out of range."""
    raw = given.get(name) if isinstance(given, Mapping) else None
    shown = {name: raw.strip()} if isinstance(raw, str) and raw.strip() else None
    errors = whatif_input_errors(shown=shown, **{name: value})
    if errors:
        raise serializers.ValidationError(errors[name])
    return value
