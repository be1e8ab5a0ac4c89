"""Serializers of the benchmarks API: shapes in and out; no business rules (those are in
:mod:`benchmarks.services`)."""
from __future__ import annotations

import json

from rest_framework import serializers

from benchmarks.choices import RunSource, RunStatus, SweepStatus
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.sweeps import DIGITS_RE
from controlplane.api import FilterChoiceField, IdField


class SweepSerializer(serializers.ModelSerializer):
    """A sweep with its grid, status, progress columns, GPU count and snapshot; ``worker``
    (``host:pid`` running it) and ``heartbeat_at`` (its last sign of life); ``run_ids`` in
    grid order; ``queue_note``: why an active sweep is not measuring yet
    (:func:`benchmarks.selectors.sweep_queue_note`, empty once it runs). The analysis is served by
    ``/api/sweeps/<id>/analysis/``."""

    run_ids = serializers.SerializerMethodField()
    queue_note = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = BenchmarkSweep
        fields = ["id", "name", "deployment", "grid", "status", "reason", "cancel_requested", "points_total",
                  "points_done", "requests_total", "requests_done", "current_tok_s", "current_point", "num_gpus",
                  "served_model_name", "topology", "engine", "snapshot", "created_by", "created_at", "started_at",
                  "ended_at", "worker", "heartbeat_at", "run_ids", "queue_note"]
        read_only_fields = fields

    def to_representation(self, instance: BenchmarkSweep):
        # A worker may have taken a pending sweep since this row was read (a create's response is
        # serialised after the task was sent): read it again so status and queue_note agree.
        if instance.status == "pending":
            instance.refresh_from_db()
        return super().to_representation(instance)

    def get_queue_note(self, obj: BenchmarkSweep) -> str:
        from benchmarks.selectors import sweep_queue_note

        return sweep_queue_note(sweep=obj)

    def get_run_ids(self, obj: BenchmarkSweep) -> list[int]:
        return [r.pk for r in obj.runs.all()]


class GridField(serializers.JSONField):
    """A sweep grid as sent: any JSON value, numbers that are not finite included.

    A JSON number too large for a double (``1e400``) parses as ``inf``, which DRF's ``JSONField``
    refuses only as "Value must be valid JSON."; here it passes through to
    :func:`benchmarks.sweeps.grid_validate`, which names it at its path
    (``{"grid.duration_s": ["must be a finite number, got inf (too large for a 64-bit float)"]}``)
    together with every other error of the grid. (``NaN`` and ``Infinity`` literals never get
    here: the JSON parser refuses them with 400.)
    """

    def to_internal_value(self, data):
        if self.binary or getattr(data, "is_json_string", False):
            return super().to_internal_value(data)  # a form field's JSON text: parsed as DRF does
        try:
            json.dumps(data, allow_nan=True)  # the check DRF makes, with inf let through
        except (TypeError, ValueError):
            self.fail("invalid")
        return data


class SweepCreateSerializer(serializers.Serializer):
    """``{"deployment": id, "grid": {...}, "name": optional}``; the grid's own rules are checked by
    :func:`benchmarks.sweeps.grid_validate`, which reports every bad grid field at once (errors
    name ``grid.<field>``, a number that is not finite such as ``1e400`` included)."""

    deployment = serializers.IntegerField(min_value=1)
    grid = GridField()
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)


class SweepFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/sweeps/``: a value that cannot match is a 400 naming the
    parameter, never a filter left out."""

    deployment = IdField(required=False, help_text="only this deployment id")
    status = FilterChoiceField(choices=SweepStatus.choices, required=False, help_text="only this status")
    model = serializers.CharField(max_length=255, required=False, help_text="only this served model name")


class RunSerializer(serializers.ModelSerializer):
    """A run: point parameters (``duration_s``: the point's time limit, seconds), status, source,
    summary (seconds for measured runs, the importer's ms fields for imported ones), flags,
    ``metrics`` (one vocabulary, ms), snapshot, ``progress`` (the running point's live counts, see
    :class:`benchmarks.models.BenchmarkRun`). The original imported file is served by
    ``/api/runs/<id>/original/``; ``original_sha256`` is its hash."""

    metrics = serializers.SerializerMethodField()
    label = serializers.CharField(read_only=True)
    has_records = serializers.SerializerMethodField()

    class Meta:
        model = BenchmarkRun
        fields = ["id", "sweep", "ordinal", "label", "status", "reason", "source", "import_format",
                  "original_filename", "original_sha256", "source_line", "concurrency", "request_rate", "input_len",
                  "output_len", "num_requests", "duration_s", "api", "served_model_name", "num_gpus", "flags",
                  "output_tok_s", "ttft_p99_ms", "tpot_mean_ms", "metrics", "summary", "snapshot", "progress",
                  "has_records", "created_at", "started_at", "ended_at"]
        read_only_fields = fields

    def get_metrics(self, obj: BenchmarkRun) -> dict:
        from benchmarks.services import run_metrics

        return run_metrics(run=obj)

    def get_has_records(self, obj: BenchmarkRun) -> bool:
        return bool(obj.records_path)


class RunImportSerializer(serializers.Serializer):
    """Either a multipart ``file`` or JSON ``{"text": ..., "filename": ...}``; ``allow_duplicate``
    (default false) imports a file whose content was imported before instead of answering 409."""

    file = serializers.FileField(required=False)
    text = serializers.CharField(required=False, trim_whitespace=False, allow_blank=False)
    filename = serializers.CharField(required=False, max_length=255, allow_blank=True)
    allow_duplicate = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict) -> dict:
        if bool(attrs.get("file")) == bool(attrs.get("text")):
            raise serializers.ValidationError({"file": ["give a file (multipart) or text (JSON), exactly one"]})
        return attrs


class RunFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/runs/`` (``order`` is checked by
    :func:`benchmarks.selectors.run_list`): a value that cannot match is a 400 naming the
    parameter, never a filter left out."""

    sweep = IdField(required=False, help_text="only the runs of this sweep id")
    source = FilterChoiceField(choices=RunSource.choices, required=False, help_text="measured or imported")
    status = FilterChoiceField(choices=RunStatus.choices, required=False, help_text="only this status")
    order = serializers.CharField(max_length=50, required=False,
                                  help_text="output_tok_s, ttft_p99_ms or created_at, '-' first for descending")


class RecordsQuerySerializer(serializers.Serializer):
    offset = serializers.IntegerField(min_value=0, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=5000, default=1000)


class CompareQuerySerializer(serializers.Serializer):
    """``ids=1,2,3`` (runs) and/or ``sweeps=4,5`` (all runs of those sweeps), ids in ASCII digits.
    An id no row can have (however large) is not found like any other unknown id: the view's 404."""

    ids = serializers.CharField(required=False, allow_blank=True)
    sweeps = serializers.CharField(required=False, allow_blank=True)

    def _ints(self, value: str, field: str) -> list[int]:
        parts = [x.strip() for x in value.split(",") if x.strip()]
        try:
            if not all(DIGITS_RE.fullmatch(x) for x in parts):
                raise ValueError(value)
            return [int(x) for x in parts]  # more than 4300 digits: ValueError too
        except ValueError:
            raise serializers.ValidationError({field: ["must be comma-separated integer ids"]}) from None

    def validate(self, attrs: dict) -> dict:
        attrs["ids"] = self._ints(attrs.get("ids") or "", "ids")
        attrs["sweeps"] = self._ints(attrs.get("sweeps") or "", "sweeps")
        if len(attrs["ids"]) + len(attrs["sweeps"]) == 0:
            raise serializers.ValidationError({"ids": ["give run ids (ids=1,2) or sweep ids (sweeps=3,4)"]})
        if len(attrs["ids"]) > 100 or len(attrs["sweeps"]) > 20:
            raise serializers.ValidationError({"ids": ["at most 100 runs and 20 sweeps"]})
        return attrs
