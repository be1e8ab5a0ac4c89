"""Viewsets of the benchmarks API: sweeps (list, create, retrieve, cancel, analysis, export) and
runs (list, retrieve, records, export, original file, import, compare).

Thin edges: validate the input's shape, call one service or selector, serialise. Roles come from
:class:`controlplane.permissions.RolePermission`: reads need ``viewer``; creating, cancelling and
importing need ``operator``. Domain errors map to HTTP in :func:`controlplane.api.exception_handler`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from benchmarks import selectors, services
from benchmarks.api import serializers as s
from benchmarks.models import BenchmarkRun, BenchmarkSweep
from benchmarks.services.runs import runs_compare_csv
from benchmarks.sweeps import grid_validate
from controlplane.api import (
    ERROR_404, ERRORS_400, DetailSerializer, ExportFormatMixin, ExportQuerySerializer, SafeJSONParser, attachment,
    flatten_errors, merge_body_errors, no_body, query_validated, request_body,
)
from controlplane.drf_defaults import nonfinite_number_errors
from controlplane.errors import InvalidInput, NotFound
from controlplane.jsonsafe import query_text

PARSERS = [SafeJSONParser, FormParser, MultiPartParser]

CSV_EXPORT = OpenApiResponse(OpenApiTypes.STR, description=(
    "?format=csv: a header row and one row per run (latencies ms, throughputs per second), as an attachment."))


def _field_value(ser: s.SweepCreateSerializer, name: str):
    """The valid value of field ``name`` of a create request, or None when it is absent or bad
    (the serializer's own errors name that)."""
    field = ser.fields[name]
    try:
        return field.run_validation(field.get_value(ser.initial_data))
    except ValidationError:
        return None


def _grid_errors(ser: s.SweepCreateSerializer, *, engine: str | None,
                 spec: Mapping[str, Any] | None = None,
                 reported: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """The grid's own errors (:func:`benchmarks.sweeps.grid_validate`, ``{"grid.<field>": [...]}``)
    of a create request, judged for ``engine`` and against the capacity the deployment's engine
    ``reported`` (its ``engine_limits``), else the context length of ``spec`` (the deployment's,
    None when it is not known), to
    answer them together with its other errors; ``{}`` when the grid is valid, or absent or not
    JSON (the serializer names that)."""
    grid = _field_value(ser, "grid")
    if grid is None:
        return {}
    try:
        grid_validate(grid, **({"engine": engine} if engine else {}), spec=spec, reported=reported)
    except InvalidInput as exc:
        return dict(exc.errors)
    return {}


@extend_schema_view(
    list=extend_schema(summary="List benchmark sweeps (filters: deployment, status, model)",
                       parameters=[s.SweepFilterSerializer]),
    retrieve=extend_schema(summary="One sweep with live progress columns"),
    create=extend_schema(
        summary="Create a sweep of a deployment (operator); it runs on the control worker",
        description="400 lists every problem at once: unknown keys, the deployment, each bad grid field "
                    "(an `api` the deployment's engine does not serve included). 409, only for a body without "
                    "any of those problems: the deployment is stopped or failed, or already has a pending, "
                    "waiting or running sweep (one at a time: concurrent sweeps would skew each other).",
        request=s.SweepCreateSerializer,
        responses={201: s.SweepSerializer, 400: ERRORS_400,
                   409: OpenApiResponse(DetailSerializer, description="The deployment is not sweepable now, "
                                        "or sweep #N is already active on it.")}),
)
class SweepViewSet(ExportFormatMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Sweeps: one deployment driven through a grid of concurrency x lengths."""

    serializer_class = s.SweepSerializer
    parser_classes = PARSERS
    action_roles = {"cancel": "operator", "analysis": "viewer", "export": "viewer"}
    query_keys = {"list": s.SweepFilterSerializer, "export": ExportQuerySerializer}

    def get_queryset(self):
        if self.action != "list":
            return selectors.sweep_list()
        q = query_validated(s.SweepFilterSerializer, self.request)
        return selectors.sweep_list(deployment_id=q.get("deployment"), status=q.get("status"),
                                    served_model_name=q.get("model"))

    def create(self, request: Request, *args, **kwargs) -> Response:
        from deployments.models import Deployment

        # Every error in one answer: the body's shape, the deployment and the whole grid (judged
        # for the deployment's engine when the deployment exists). The body is judged in full
        # before the deployment's state: a bad grid is a 400 even when the deployment is stopped
        # or busy, which the service answers with 409 only for a valid body.
        # A key given twice or a number that is not finite is named at its path beside the rest
        # (request_body), not in a 400 of its own.
        data, found = request_body(request)
        if not isinstance(data, Mapping):
            kind = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
                    type(None): "null"}.get(type(data), type(data).__name__)
            raise InvalidInput({"non_field_errors": [
                f"expected a JSON object with deployment, grid and optionally name; got {kind}"]})
        # A number of the grid that is not finite is named by the grid's validation, as the sweep
        # form and manage.py sweep name it (benchmarks.sweeps.non_finite_text: "must be a finite
        # number, got 1e400 (too large for a 64-bit float)"), not in the words of any other body.
        grid_nonfinite = {path for path in nonfinite_number_errors(data) if path.startswith("grid.")}
        found = {path: messages for path, messages in found.items() if path not in grid_nonfinite}
        ser = s.SweepCreateSerializer(data=data, context={"body_errors": found})
        errors = {} if ser.is_valid() else flatten_errors(ser.errors)
        deployment_id = _field_value(ser, "deployment")
        deployment = None
        if deployment_id is not None:
            deployment = Deployment.objects.select_related("recipe").filter(pk=deployment_id).first()
            if deployment is None:
                errors["deployment"] = [f"no deployment with id {deployment_id}"]
        engine = deployment.recipe.engine if deployment is not None else None
        spec = (deployment.spec_snapshot or {}) if deployment is not None else None
        reported = deployment.engine_limits if deployment is not None else None
        errors = merge_body_errors({**errors, **_grid_errors(ser, engine=engine, spec=spec, reported=reported)},
                                   found)
        if errors:
            raise InvalidInput(errors)
        sweep = services.sweep_create(deployment=deployment, user=request.user, grid=ser.validated_data["grid"],
                                      name=ser.validated_data.get("name", ""))
        return Response(s.SweepSerializer(sweep).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a sweep (operator): the running point stops, no further point starts",
                   description="Takes no body: an empty one or `{}`; any key is a 400 under its own name, also for "
                               "a sweep that already ended (409 otherwise).",
                   request=None,
                   responses={200: s.SweepSerializer, 400: ERRORS_400, 404: ERROR_404,
                              409: OpenApiResponse(DetailSerializer, description="The sweep already ended.")})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the sweep through :func:`benchmarks.services.sweep_cancel` (409 for one that
        already ended); a body with keys is a 400 (:func:`controlplane.api.no_body`), judged first."""
        sweep = self.get_object()
        no_body(request)
        sweep = services.sweep_cancel(sweep=sweep, user=request.user)
        return Response(s.SweepSerializer(sweep).data)

    @extend_schema(summary="The ceiling analysis (stored when the sweep finished; provisional before)",
                   responses={200: s.SweepAnalysisSerializer, 404: ERROR_404})
    @action(detail=True, methods=["get"])
    def analysis(self, request: Request, pk: str | None = None) -> Response:
        return Response(services.sweep_analysis(sweep=self.get_object()))

    @extend_schema(summary="Export the sweep's runs: ?format=csv|json", parameters=[ExportQuerySerializer],
                   responses={(200, "application/json"): s.SweepExportSerializer, (200, "text/csv"): CSV_EXPORT,
                              400: ERRORS_400, 404: ERROR_404})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponse:
        fmt = query_validated(ExportQuerySerializer, request)["format"]
        sweep: BenchmarkSweep = self.get_object()
        if fmt == "csv":
            return attachment(services.sweep_export_csv(sweep=sweep), content_type="text/csv",
                             filename=f"sweep-{sweep.pk}.csv")
        return attachment(services.sweep_export_json(sweep=sweep), content_type="application/json",
                         filename=f"sweep-{sweep.pk}.json")


def _text_problems(text: str) -> dict[str, list[str]]:
    """What :func:`benchmarks.services.run_import` would refuse pasted ``text`` for, under
    ``text`` (:func:`_under_text`), without storing anything; ``{}`` when it could be imported."""
    from benchmarks.importers import import_results

    if len(text.encode()) > services.MAX_IMPORT_BYTES:
        return {"text": [f"larger than {services.MAX_IMPORT_BYTES} bytes"]}
    try:
        import_results(text)
    except InvalidInput as exc:
        return _under_text(exc.errors)
    return {}


def _skipped_data(skipped) -> list[dict[str, Any]]:
    """The skipped runs of an import (:class:`benchmarks.services.SkippedRecord`) as the API gives
    them (:class:`benchmarks.api.serializers.ImportSkippedSerializer`)."""
    return [{"line": k.line, "item": k.item, "where": k.where, "run": k.run.pk, "in_this_file": k.in_this_file}
            for k in skipped]


def _under_text(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """An import's errors with the whole file's (``file``, ``file.duration``) moved to ``text``
    (``text``, ``text.duration``): the field a pasted result was sent in. Lines keep theirs."""
    return {("text" + path[4:] if path == "file" or path.startswith("file.") else path): messages
            for path, messages in errors.items()}


@extend_schema_view(
    list=extend_schema(summary="List runs (filters: sweep, source, status; order)",
                       description="Newest first (`-created_at`, ties by id descending), measured and imported "
                                   "runs together, as the runs page lists them; `?order=` picks another order.",
                       parameters=[s.RunFilterSerializer]),
    retrieve=extend_schema(summary="One run: point, summary, flags, metrics (ms), snapshot"),
)
class RunViewSet(ExportFormatMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Runs: grid points of sweeps, and runs imported from other harnesses' files."""

    serializer_class = s.RunSerializer
    parser_classes = PARSERS
    action_roles = {"import_results": "operator", "records": "viewer", "export": "viewer", "original": "viewer",
                    "compare": "viewer"}
    format_actions = ("export", "compare")   # ?format=csv is a download there, not a renderer
    query_keys = {"list": s.RunFilterSerializer, "records": s.RecordsQuerySerializer, "export": ExportQuerySerializer,
                  "compare": s.CompareQuerySerializer}
    # The comparison page takes the runs as runs=1,2 or its checkboxes' run=1&run=2; the API as ids=.
    query_key_hints = {"compare": {key: f"the comparison page's {key}= is ids= here" for key in ("run", "runs")}}

    def judges_own_format(self) -> bool:
        """True for the original file too, which refuses any ``?format=`` with its own message."""
        return self.action == "original" or super().judges_own_format()

    def perform_content_negotiation(self, request, force=False):
        # The original is served as stored whatever the client accepts; its errors are JSON.
        return super().perform_content_negotiation(request, force=force or self.action == "original")

    def get_queryset(self):
        if self.action != "list":
            return selectors.run_list()
        q = query_validated(s.RunFilterSerializer, self.request)
        return selectors.run_list(sweep_id=q.get("sweep"), source=q.get("source"), status=q.get("status"),
                                  order=q.get("order"))

    @extend_schema(summary="Per-request records (paginated: offset, limit <= 5000)",
                   description="400 for a bad offset/limit. 404 for a run without records (imported, or its file "
                               "is missing), naming the run: `{\"detail\": \"run #12 has no per-request records "
                               "(imported: see its original file)\"}`. 409 for a run still running: its records "
                               "are written when it ends.",
                   parameters=[s.RecordsQuerySerializer],
                   responses={200: s.RunRecordsPageSerializer, 400: ERRORS_400, 404: ERROR_404,
                              409: OpenApiResponse(DetailSerializer, description="The run is still running; its "
                                                   "records are written when it ends.")})
    @action(detail=True, methods=["get"])
    def records(self, request: Request, pk: str | None = None) -> Response:
        """A page of the run's records (:func:`benchmarks.services.run_records_rows`); a run that has
        none is a 404 whose ``detail`` gives the reason, one still running a 409 (its records are
        written when it ends), as the page's ``export.records.csv``."""
        q = query_validated(s.RecordsQuerySerializer, request)
        run = self.get_object()
        try:
            return Response(services.run_records_rows(run=run, offset=q["offset"], limit=q["limit"]))
        except InvalidInput as exc:
            if set(exc.errors) != {"records"}:
                raise
            raise NotFound("; ".join(exc.errors["records"])) from None

    @extend_schema(summary="Export the run: ?format=csv|json", parameters=[ExportQuerySerializer],
                   responses={(200, "application/json"): s.RunExportSerializer, (200, "text/csv"): CSV_EXPORT,
                              400: ERRORS_400, 404: ERROR_404})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponse:
        fmt = query_validated(ExportQuerySerializer, request)["format"]
        run: BenchmarkRun = self.get_object()
        if fmt == "csv":
            return attachment(services.run_export_csv(run=run), content_type="text/csv", filename=f"run-{run.pk}.csv")
        return attachment(services.run_export_json(run=run), content_type="application/json",
                         filename=f"run-{run.pk}.json")

    @extend_schema(summary="The original an imported run came from, verbatim: its file, "
                           "or its own line of a file of several runs",
                   responses={(200, "application/octet-stream"): OpenApiResponse(
                       OpenApiTypes.BINARY, description="the file's bytes, as an attachment under its name"),
                       400: ERRORS_400, 404: ERROR_404},
                   description="Served as stored, in one format: any `?format=` (or a format suffix) is a 400. "
                               "A stored secret's value in it (a file imported before such files were refused) "
                               "is masked as `***redacted***`, and a well-known credential shortened to its "
                               "prefix and length (`hf_…(37 chars)`).")
    @action(detail=True, methods=["get"])
    def original(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The stored original; it answers in one format, so any ``?format=`` is a 400 naming it
        rather than ignored."""
        fmt = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE)
        if fmt is not None:
            raise ValidationError({api_settings.URL_FORMAT_OVERRIDE: [
                f"the original file is served as stored only: leave format out; got {query_text(fmt)}"]})
        run: BenchmarkRun = self.get_object()
        if not run.original_text:
            raise NotFound(f"run #{run.pk} was not imported; it has no original file")
        body, name = services.run_original_download(run=run, default_name=f"run-{run.pk}.json")
        return attachment(body, content_type="application/octet-stream", filename=name.replace('"', "_"))

    @extend_schema(summary="Import SGLang bench_serving JSONL or vLLM bench serve JSON (operator); "
                           "runs already imported are skipped and listed; "
                           "400 lists every problem of the file by path; "
                           "409 when no run of the file is new, naming the runs holding them, unless allow_duplicate",
                   description="201: `{\"created\": [run, ...], \"skipped\": [{\"line\": 1, \"item\": null, "
                               "\"where\": \"line 1\", \"run\": 5, \"in_this_file\": false}, ...]}`. A run is "
                               "recognised by its record (its line, or its object) read as JSON, whatever white "
                               "space, line endings or key order: importing a grown SGLang output file stores its "
                               "new lines and skips the others. `allow_duplicate` stores them all. A file that cannot be "
                               "imported answers 400 with every problem found, at most 50 places, then a count "
                               "under `file`.",
                   request=s.RunImportSerializer,
                   responses={201: s.RunImportResultSerializer, 400: ERRORS_400,
                              409: OpenApiResponse(s.RunImportConflictSerializer, description=(
                                  "Every run of the file was imported before: the runs holding them are named "
                                  "(runs), and each run of the file with the run holding it (skipped); sha256 is "
                                  "the refused file's SHA-256, which the message gives too where the file has the "
                                  "same bytes as the one the runs came from."))})
    @action(detail=False, methods=["post"], url_path="import", pagination_class=None)
    def import_results(self, request: Request) -> Response:
        """Runs created from the file and runs of it skipped as already imported (201); 409 when
        none is new, with the runs holding them.
        A file that cannot be imported answers 400 with every
        problem found, ``{"line 3.duration": [...], "file.output_throughput": [...]}`` (at most
        50 places, then a count under ``file``). The
        whole file's problems are under the field sent: ``file`` for an upload, ``text``
        (``text.duration``) for pasted text."""
        # at most benchmarks.importers.MAX_REPORTED_PROBLEMS places, the 50 the description says
        data, found = request_body(request)
        ser = s.RunImportSerializer(data=data, context={"body_errors": found, "request": request})
        if not ser.is_valid():
            errors = flatten_errors(ser.errors)
            text = data.get("text") if isinstance(data, Mapping) and "file" not in data else None
            if isinstance(text, str) and text and not any(p == "text" or p.startswith("text.") for p in errors):
                # pasted text that was read is judged too: a bad allow_duplicate does not hide its problems
                errors.update(_text_problems(text))
            raise ValidationError(errors)
        upload = ser.validated_data.get("file")
        if upload is not None:
            raw = upload.read(services.MAX_IMPORT_BYTES + 1)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInput({"file": [f"not UTF-8 text (byte {exc.start})"]}) from None
            filename = ser.validated_data.get("filename") or upload.name
        else:
            text = ser.validated_data["text"]
            filename = ser.validated_data.get("filename") or "pasted.json"
        try:
            outcome = services.run_import(text=text, filename=filename, user=request.user,
                                          allow_duplicate=ser.validated_data["allow_duplicate"])
        except InvalidInput as exc:
            if upload is not None:
                raise
            # Pasted text: its problems are the text's, under the field that was sent.
            raise InvalidInput(_under_text(exc.errors)) from None
        except services.AlreadyImported as exc:
            return Response({"detail": str(exc), "code": "conflict", "runs": [r.pk for r in exc.runs],
                             "skipped": _skipped_data(exc.skipped), "sha256": exc.sha256},
                            status=status.HTTP_409_CONFLICT)
        return Response({"created": s.RunSerializer(outcome, many=True).data,
                         "skipped": _skipped_data(outcome.skipped)}, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Compare runs side by side: ?ids=1,2,3 and/or ?sweeps=4,5 (?format=csv: as CSV)",
                   description="400: ids that are not comma-separated integers, an id given twice (named), ids "
                               "of runs or sweeps that do not exist (all named, under `ids` and `sweeps`), fewer "
                               "than two runs (under `sweeps` when the sweeps alone were given; a run given by "
                               "id that the sweeps given already hold is named as such, `run 1 is already in "
                               "sweep 1; give at least two runs to compare`), or a format "
                               "other than json, csv or api (the browsable page). A run given by id that a "
                               "given sweep also holds, with another run besides, is compared once, and `notes` "
                               "says so: `run 2 is also in sweep 2; compared once`. The problems of the "
                               "values given are named together (`ids=1,2&baseline=x&sweeps=abc`: both "
                               "`sweeps` and `baseline`), and so are run ids that name no run and a baseline "
                               "that is none of the runs asked for; ids and sweeps that exist are looked up "
                               "once the values given have no other problem.",
                   parameters=[s.CompareQuerySerializer],
                   responses={(200, "application/json"): s.RunCompareSerializer, (200, "text/csv"): OpenApiResponse(
                       OpenApiTypes.STR, description="?format=csv: one row per run (values with their units in "
                                                     "the column names, deltas against the baseline in percent, "
                                                     "workload_differs_from_baseline, and notes: every note, one a "
                                                     "line of the quoted cell, on every row), as "
                                                     "an attachment, the comparison page's download"),
                              400: ERRORS_400})
    @action(detail=False, methods=["get"])
    def compare(self, request: Request) -> HttpResponse:
        q = query_validated(s.CompareQuerySerializer, request)
        ids = services.runs_compare_pick(run_ids=q["ids"], sweep_ids=q["sweeps"])
        try:
            runs = selectors.runs_by_ids(ids=ids)
        except InvalidInput as exc:
            # ids that name no run do not hide a baseline that is none of the runs asked for
            if q["baseline"] is not None and q["baseline"] not in ids:
                raise InvalidInput({**exc.errors, "baseline": [
                    services.compare_baseline_not_among(q["baseline"], ids)]}) from None
            raise
        comparison = services.runs_compare(
            runs=runs, baseline_id=q["baseline"],
            leading_notes=services.runs_compare_overlap_notes(run_ids=q["ids"], sweep_ids=q["sweeps"]))
        if q["format"] == "csv":
            return attachment(runs_compare_csv(comparison=comparison), content_type="text/csv",
                              filename="compare-" + "-".join(map(str, ids[:20])) + ".csv")
        return Response(comparison)
