"""Viewsets of the kernels API: packages (list, retrieve by name), jobs (list, create, retrieve,
cancel, variant table, chart data, export), best variants (list, retrieve, config file) and the
what-if projection of a sweep.

Thin edges: validate the input's shape, call one service or selector, serialise. Roles come from
:class:`controlplane.permissions.RolePermission`: reads need ``viewer``; starting and cancelling
jobs need ``operator``. Domain errors map to HTTP in :func:`controlplane.api.exception_handler`.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api import (
    ERROR_404,
    ERRORS_400,
    DetailSerializer,
    ExportFormatMixin,
    ExportQuerySerializer,
    PAGE_KEYS,
    attachment,
    flatten_errors,
    no_body,
    query_validated,
    request_body,
    unknown_query_errors,
)
from controlplane.drf_defaults import empty_query_value
from controlplane.errors import InvalidInput, NotFound
from controlplane.jsonsafe import json_spelled
from kernels import selectors, services
from kernels.api import serializers as s
from kernels.models import KernelBest, KernelJob, KernelPackage
from kernels.manifest import PACKAGE_NAME_RE


def _blank_texts_as_null(table: dict) -> dict:
    """The variant table's JSON with each row's build and measurement texts that are ``""`` as
    None (null): a text that is absent is null in every JSON answer. The page and the CSV read
    the table as the selector gives it."""
    for row in table["rows"]:
        parts = ([row["build"]] if row.get("build") else []) + list((row.get("shapes") or {}).values())
        for part in parts:
            for key, value in part.items():
                if value == "":
                    part[key] = None
    return table
from kernels.whatif import WHATIF_KEYS


@extend_schema_view(
    list=extend_schema(summary="Registered kernel packages (manifest, grid size after constraints)"),
    retrieve=extend_schema(summary="One kernel package by name"),
)
class PackageViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Kernel packages registered from the ``kernels/packages/`` folder of the checkout, one per
    package folder with its manifest."""

    # registered by manage.py kernel_register

    serializer_class = s.PackageSerializer
    lookup_field = "name"
    # Any key up to a slash or a format suffix's dot: a key no package could be named (``löcal``,
    # ``Local``) is the 404 naming it, ``no kernel package with name 'löcal'``, not "no API endpoint".
    lookup_value_regex = r"[^/.]+"

    def get_queryset(self):
        queryset = KernelPackage.objects.order_by("name")
        key = self.kwargs.get(self.lookup_url_kwarg or self.lookup_field)
        if key is not None and not PACKAGE_NAME_RE.fullmatch(key):
            return queryset.none()   # no package is named so: not asked of the database
        return queryset


@extend_schema_view(
    list=extend_schema(summary="Kernel jobs (filters: package, status, node)", parameters=[s.JobFilterSerializer]),
    retrieve=extend_schema(summary="One kernel job with progress, counts and the device calibration"),
    create=extend_schema(summary="Start a kernel job on a node (operator); it runs on the node's queue",
                         request=s.JobCreateSerializer, responses={201: s.JobSerializer}),
)
class JobViewSet(ExportFormatMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Build-and-benchmark jobs of kernel packages."""

    serializer_class = s.JobSerializer
    action_roles = {"cancel": "operator", "variants": "viewer", "chart": "viewer", "export": "viewer",
                    "best": "viewer"}
    format_actions = ("export", "variants")   # ?format=csv is a download there, not a renderer
    query_keys = {"list": s.JobFilterSerializer, "variants": (s.VariantTableQuerySerializer, "p.<parameter>"),
                  "chart": "shape", "best": PAGE_KEYS, "export": ExportQuerySerializer}
    query_keys_reported_by_action = ("variants", "chart")   # with every other problem of the query

    def get_queryset(self):
        if self.action != "list":
            return selectors.job_list()
        q = query_validated(s.JobFilterSerializer, self.request)
        return selectors.job_list(package=q.get("package") or None, status=q.get("status") or None,
                                  node=q.get("node") or None)


    def create(self, request: Request, *args, **kwargs) -> Response:
        from deployments.models import Node

        body, found = request_body(request)
        ser = s.JobCreateSerializer(data=body, context={"body_errors": found})
        field_errors: dict = {}
        if ser.is_valid():
            data = ser.validated_data
        else:
            # Every problem in one answer: the fields (and the items of shapes and batches) that did
            # parse are still checked against the package below (a bad batch does not hide an
            # unknown shape or a bad cc, a repeated shape does not hide an unknown one).
            field_errors = flatten_errors(ser.errors)
            data = s.fields_that_parse(ser, body, skip=found)
            if isinstance(data.get("params"), dict):
                # a parameter given twice (or with a key given twice inside its values) is named
                # alone: neither value is judged against the grid, the other parameters are
                data["params"] = {key: values for key, values in data["params"].items()
                                  if not any(path == f"params.{key}" or path.startswith(f"params.{key}.")
                                             for path in found)}
        package = KernelPackage.objects.filter(name=data["package"]).first() if "package" in data else None
        node = Node.objects.filter(name=data["node"]).first() if "node" in data else None
        errors: dict[str, list[str]] = {}
        if package is None and "package" in data:
            errors["package"] = [f"no registered kernel package named {json_spelled(data['package'])}"]
        if node is None and "node" in data:
            errors["node"] = [f"no node named {json_spelled(data['node'])}"]
        if package is None and data.get("cc") and (why := services.cc_problem(data["cc"])):
            errors["cc"] = [why]   # judged without the package too, so it is named with the rest
        if (errors or field_errors) and package is not None:
            # every other field's problems in the same answer (a cc is only missing given a node)
            others = services.kernel_job_check(package=package, node=node, cc=data.get("cc") or None,
                                               params_subset=data.get("params") or None, shapes=data.get("shapes"),
                                               batches=data.get("batches"))
            if not data.get("cc") and (node is None or "cc" in field_errors):
                others.pop("cc", None)
            errors = {**{k: v for k, v in others.items() if k != "node" or node is not None}, **errors}
        if field_errors:
            # the serializer's reasons first, then the package's about the same field (the shapes
            # that parse are checked even when one is given twice)
            for key, messages in errors.items():
                field_errors[key] = list(field_errors.get(key, [])) + [
                    m for m in messages if m not in field_errors.get(key, [])]
            raise ValidationError(field_errors)
        if errors:
            raise InvalidInput(errors)
        job = services.kernel_job_create(package=package, node=node, cc=data.get("cc") or None,
                                         params_subset=data.get("params") or None, shapes=data.get("shapes"),
                                         batches=data.get("batches"), user=request.user)
        return Response(s.JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a kernel job (operator): the runner is stopped within a second",
                   request=None, responses={200: s.JobSerializer, 400: ERRORS_400, 404: ERROR_404,
                                            409: OpenApiResponse(DetailSerializer, description="The job already ended.")})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        no_body(request)   # a body with keys is a 400, judged before the job's state (409)
        job = services.kernel_job_cancel(job=job, user=request.user)
        return Response(s.JobSerializer(job).data)

    @extend_schema(summary="The variant table: build facts, correctness, µs and roofline per shape at one batch "
                           "(?format=csv: its rows as CSV)",
                   parameters=[s.VariantTableQuerySerializer,
                               OpenApiParameter("p.<param>", str, description="filter on a parameter value "
                                                "(one per parameter: a parameter given twice is a 400; an unknown "
                                                "parameter or a value outside the grid is a 400 under p.<param>)")],
                   responses={(200, "application/json"): OpenApiTypes.OBJECT,
                              (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description=(
                                  "?format=csv: a header row and one row per variant (params as param.<name>, "
                                  "build facts, per shape <shape>.median_us, <shape>.gbps, ...: units in the "
                                  "names), as an attachment")),
                              400: ERRORS_400, 404: ERROR_404},
                   description="400 for an unknown query key, naming it and the keys taken.")
    @action(detail=True, methods=["get"])
    def variants(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The job's variant table (:func:`kernels.selectors.variant_table`) as JSON, or with
        ``?format=csv`` its rows as a CSV download (:func:`kernels.services.variant_table_csv`):
        every row of the filtered, sorted table from ``offset``, or ``limit`` of them when given.
        A query key the table does not take (``sortt``) is a 400 naming it and the keys taken
        (``{"sortt": ["unknown field 'sortt'; allowed: format, batch, state, sort, limit, offset,
        p.<parameter>"]}``), beside every other problem of the query, never ignored. A row's text
        that is absent (a build's ``error``, ``discard_reason``, a measurement's ``error``, ``bound``,
        ``timing``) is null, never ``""``."""
        # Any other key (sortt=) is a 400 naming it and the keys taken, with every other problem;
        # a p.<name> key is judged by the table (not a parameter of this job: 400 under p.<name>).
        unknown = unknown_query_errors(request, self)
        # a parameter given twice never reaches here (controlplane.drf_defaults.SingleValuedQuery)
        params, _ = selectors.variant_filters(request.query_params)
        try:
            q = query_validated(s.VariantTableQuerySerializer, request)
        except ValidationError as exc:
            errors = {**exc.detail, **unknown}
            # the job's own refusals (a sort key, a parameter, a batch it does not hold) beside them
            try:
                job = self.get_object()
            except Http404:
                job = None   # the query's 400 first, as for a job that exists
            if job is not None:
                given = s.fields_that_parse(s.VariantTableQuerySerializer(), request.query_params.dict(), skip=errors)
                table_errors = selectors.variant_table_query_errors(
                    job=job, batch=given.get("batch"), params=params, sort=given.get("sort", "ordinal"))
                for key, messages in table_errors.items():
                    errors.setdefault(key, messages)
            raise ValidationError(errors) from None
        as_csv = q["format"] == "csv"
        limit = None if as_csv and "limit" not in request.query_params else q["limit"]
        job: KernelJob = self.get_object()
        try:
            table = selectors.variant_table(job=job, batch=q.get("batch"), state=q["state"], params=params,
                                            sort=q["sort"], limit=limit, offset=q["offset"])
        except InvalidInput as exc:
            raise InvalidInput({**exc.errors, **unknown}) from None
        if unknown:
            raise ValidationError(unknown)
        if as_csv:
            return attachment(services.variant_table_csv(table=table), content_type="text/csv",
                             filename=f"kernel-job-{job.pk}-variants-batch-{table.batch}.csv")
        return Response(_blank_texts_as_null(asdict(table)))

    @extend_schema(summary="Time (µs) vs batch per implementation and the roofline, for one shape",
                   description="400 naming every problem of the query at once: a shape the job does not "
                               "benchmark or one given empty, and a query key the chart does not take.",
                   parameters=[OpenApiParameter("shape", str, required=True,
                                                description="one of the shapes the job benchmarks (400 otherwise)")])
    @action(detail=True, methods=["get"])
    def chart(self, request: Request, pk: str | None = None) -> Response:
        """The chart of ``?shape=`` (:func:`kernels.selectors.job_time_chart`). A shape the job does
        not benchmark, one given empty (``query parameter 'shape' is empty: ...``) and a query key
        the chart does not take are named in one 400."""
        problems = unknown_query_errors(request, self)
        if request.query_params.getlist("shape") == [""]:
            problems = {"shape": [empty_query_value("shape")], **problems}
        job: KernelJob = self.get_object()
        if "shape" in problems:
            raise ValidationError(problems)
        try:
            chart = selectors.job_time_chart(job=job, shape=request.query_params.get("shape") or "")
        except InvalidInput as exc:
            raise InvalidInput({**exc.errors, **problems}) from None
        if problems:
            raise ValidationError(problems)
        return Response(chart)

    @extend_schema(summary="The best variants this job holds, paged as every list (limit, offset)",
                   responses={200: s.BestSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def best(self, request: Request, pk: str | None = None) -> Response:
        rows = selectors.best_list(job=self.get_object().pk)
        page = self.paginate_queryset(rows)
        if page is not None:
            return self.get_paginated_response(s.BestSerializer(page, many=True).data)
        return Response(s.BestSerializer(rows, many=True).data)

    @extend_schema(summary="Export every measurement of the job: ?format=csv|json",
                   parameters=[ExportQuerySerializer])
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponse:
        fmt = query_validated(ExportQuerySerializer, request)["format"]
        job: KernelJob = self.get_object()
        if fmt == "csv":
            return attachment(services.kernel_job_export_csv(job=job), content_type="text/csv",
                             filename=f"kernel-job-{job.pk}.csv")
        return attachment(services.kernel_job_export_json(job=job), content_type="application/json",
                         filename=f"kernel-job-{job.pk}.json")


@extend_schema_view(
    list=extend_schema(summary="Best variants per (device, cc, shape, batch, compiler); filters: package, device, "
                               "shape, batch", parameters=[s.BestFilterSerializer]),
    retrieve=extend_schema(summary="One best variant"),
)
class BestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """The chosen variants, and the exported config files engines read."""

    serializer_class = s.BestSerializer
    action_roles = {"config": "viewer"}
    query_keys = {"list": s.BestFilterSerializer}

    def get_queryset(self):
        if self.action != "list":
            return selectors.best_list()
        q = query_validated(s.BestFilterSerializer, self.request)
        return selectors.best_list(package=q.get("package") or None, device=q.get("device") or None,
                                   shape=q.get("shape") or None, batch=q.get("batch"))

    @extend_schema(summary="The exported config JSON (keyed by batch) this best variant is part of")
    @action(detail=True, methods=["get"])
    def config(self, request: Request, pk: str | None = None) -> HttpResponse:
        best: KernelBest = self.get_object()
        from pathlib import Path

        path = Path(best.config_path) if best.config_path else None
        if path is None or not path.is_file():
            raise NotFound(f"best variant #{best.pk} has no exported config file")
        return attachment(path.read_text(encoding="utf-8"), content_type="application/json", filename=path.name)


class WhatIfViewSet(viewsets.ViewSet):
    """``GET /api/kernel-whatif/?sweep=<id>&share=0.63&speedup=<x>`` (or ``&best=<id>``): the
    sweep's projected tok/s and TPOT per concurrency with a faster kernel
    (:func:`kernels.whatif.whatif_compute`). Any other query key (``shares``) is a 400 naming it
    and the keys taken (:data:`kernels.whatif.WHATIF_KEYS`; ``format``, DRF's, as well), never
    ignored; one of those keys given empty (``share=``) is a 400 naming it
    (:func:`controlplane.drf_defaults.empty_query_value`), never read as left out; a ``format`` other than ``json`` or ``api`` (the browsable page) is a 400 naming
    those two (:class:`controlplane.drf_defaults.FormatNegotiation`, as on every endpoint)."""

    query_keys = {"list": WHATIF_KEYS}
    query_serializers = {"list": s.WhatIfQuerySerializer}   # judges their values
    query_keys_reported_by_action = ("list",)   # with every other problem of the query

    @extend_schema(summary="Project a sweep with a faster kernel (decode step × ((1 − share) + share / speedup))",
                   description=("Rows per length pair and concurrency: measured_tok_s, projected_tok_s, model_tok_s and "
                                "model_fast_tok_s are output tokens/s; tok_s_gain is projected / measured output tok/s; "
                                "measured_tpot_ms and measured_ttft_ms are the point's means in ms (its p50 where the "
                                "summary has no mean, named in notes); projected_tpot_ms is the measured mean TPOT "
                                "scaled by the model; model_tpot_ms and model_fast_tpot_ms are the model's TPOT in ms; "
                                "running_batch and measured_running_batch are sequences. 400 for an unknown query key, "
                                "naming it and the keys taken, and for a parameter given empty (share=), naming it."),
                   parameters=[s.WhatIfQuerySerializer], responses={200: OpenApiTypes.OBJECT, 400: ERRORS_400})
    def list(self, request: Request) -> Response:
        from benchmarks.models import BenchmarkSweep
        from kernels.whatif import DEFAULT_SHARE, whatif_compute

        unknown = unknown_query_errors(request, self)
        # A parameter given empty (``share=``, a script whose variable was unset) is refused under
        # its name, as every other read's is, never read as left out: an empty share would
        # otherwise silently be the seed's 0.63.
        empty = {key: [empty_query_value(key)] for key in WHATIF_KEYS if request.query_params.getlist(key) == [""]}
        try:
            q = query_validated(s.WhatIfQuerySerializer, request, left_out=empty)
        except ValidationError as exc:
            raise ValidationError({**exc.detail, **empty, **unknown}) from None   # every problem at once
        if unknown or empty:
            raise ValidationError({**empty, **unknown})
        sweep = BenchmarkSweep.objects.filter(pk=q["sweep"]).first()
        if sweep is None:
            raise NotFound(f"no sweep with id {q['sweep']}")
        speedup, source, best = q.get("speedup"), "given", None
        if "best" in q:
            best = services.kernel_best_for(best_id=q["best"])
            if not best.speedup:
                raise InvalidInput({"best": [f"best variant #{best.pk} has no measured speedup over a baseline"]})
            # the times too: a speedup is over its own package's baseline, which differs between packages
            baseline = f" ({best.baseline_us:.2f} µs)" if best.baseline_us is not None else ""
            speedup, source = best.speedup, f"best variant #{best.pk} ({best.package.name} {best.shape_bucket} on "\
                                            f"{best.device_name}, {best.median_us:.2f} µs, over the package's own "\
                                            f"baseline implementation{baseline})"
        result = whatif_compute(sweep=sweep, share=q["share"], speedup=speedup, best=best)
        result["speedup_source"] = source
        # an omitted share is the seed's measurement, said so rather than silently assumed
        result["share_source"] = "given" if "share" in request.query_params else (
            f"default: {DEFAULT_SHARE:g}, the seed deployment's measured share of decode step time spent in its "
            "sparse-attention decode kernel")
        return Response(json.loads(json.dumps(result, default=str)))
