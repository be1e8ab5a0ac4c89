"""Serializers of the benchmarks API: shapes in and out; no business rules (those are in
:mod:`benchmarks.services`)."""
from __future__ import annotations


from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from benchmarks.choices import ImportFormat, RunSource, RunStatus, SweepStatus
from benchmarks.importers import empty_upload_message
from benchmarks.models import BenchmarkRun, BenchmarkSweep, served_model_name_shown, snapshot_shown
from benchmarks.services.runs import BEST_METRICS, runs_compare_ids, runs_compare_too_many, unquoted
from benchmarks.selectors import HELD_STALE_S, PK_MAX, run_order_problem
from benchmarks.services.sweeps import SHARED_RECHECK_S
from benchmarks.sweeps import DEFAULT_LENGTHS, DIGITS_RE, repeats_text, DURATION_RULE, MAX_DURATION_S, MIN_DURATION_S
from controlplane.api import (
    AnyJSONField, BlankAsNullCharField, created_by_field, MAX_PAGE_OFFSET, CONTROL_CHARACTERS_RE, FilterChoiceField, IdField,
    LimitedTextField, QueryProblemsTogetherSerializer, StrictBooleanField, StrictCharField, StrictInputMixin,
    StrictIntegerField,
)
from controlplane.errors import InvalidInput
from controlplane.jsonsafe import query_text
from deployments.services import free_text_shown, one_line_text_validator, secret_value_validator


def _nullable(kind: str, description: str) -> dict:
    return {"type": kind, "nullable": True, "description": description}


#: The ``progress`` of a sweep: the data of its last ``sweep.progress`` message
#: (:meth:`benchmarks.services.sweeps._PointProgress.message`), as the running point's rows hold it.
SWEEP_PROGRESS_SCHEMA = {
    "type": "object", "nullable": True, "additionalProperties": True,
    "properties": {
        "sweep_id": {"type": "integer", "description": "the sweep"},
        "run_id": {"type": "integer", "description": "the running point's run"},
        "point_index": {"type": "integer", "description": "the point's place in the grid, from 0"},
        "points_total": {"type": "integer", "description": "points in the sweep"},
        "point": {"type": "string", "description": "the point, e.g. c=8 256/256"},
        "phase": _nullable("string", "'preparing prompts' while the point builds its prompts before any "
                                     "request, then 'warming up' while its warm-up requests run (before the "
                                     "measured ones); absent once it sends the measured requests"),
        "prepared": _nullable("integer", "prompts built so far (while preparing), warmup prompts included"),
        "warmup_done": _nullable("integer", "warm-up requests that ended, succeeded or failed (while warming up "
                                            "only); never counted in done, failed, aborted or requests_done"),
        "warmup_total": _nullable("integer", "warm-up requests the point sends before its measured ones (while "
                                             "warming up only)"),
        "warmup_elapsed_s": _nullable("number", "seconds since the point's warm-up began (while warming up only)"),
        "done": _nullable("integer", "requests of the point that finished (succeeded, or failed with an answer)"),
        "total": _nullable("integer", "requests of the point to send; for a closed loop limited by time "
                                      "(total_sent_so_far) those sent so far; prompts to build while preparing"),
        "failed": _nullable("integer", "requests of the point that failed (an error answer, a timeout, a broken "
                                       "stream), counted among done; never one a stop aborted"),
        "aborted": _nullable("integer", "requests of the point a stop (the cancel, the deployment going down) "
                                        "ended in flight: neither done nor failed; absent from a report made "
                                        "before it was counted apart"),
        "output_tokens": _nullable("integer", "output tokens of the point so far of the requests that "
                                              "succeeded, are in flight or were aborted in flight by a stop "
                                              "(never a failed one's), tokens"),
        "elapsed_s": _nullable("number", "seconds since the point's first request"),
        "tok_s": _nullable("number", "output tok/s of the point over its last report window (about 0.5 s)"),
        "tok_s_mean": _nullable("number", "output tok/s of the point since its first request, over the "
                                          "output_tokens counted; the point's last report gives its stored "
                                          "output_throughput_tok_s"),
        "duration_s": _nullable("number", "the point's time limit, seconds; null when it has none"),
        "total_sent_so_far": {"type": "boolean", "description": "true for a closed loop limited by time: total "
                                                                 "is the requests sent so far, not a planned count"},
        "requests_done": {"type": "integer", "description": "requests of the whole sweep that finished"},
        "updated_at": _nullable("string", "when the report was made, ISO 8601 UTC; null for a row stored "
                                          "before it was kept"),
    },
}


#: The API's help text of a sweep's ``held_at``, with the intervals it depends on taken from their
#: constants: its task looks again every :data:`benchmarks.services.sweeps.SHARED_RECHECK_S` and
#: renews the mark each time; a mark older than :data:`benchmarks.selectors.HELD_STALE_S` no
#: longer keeps newer sweeps in line.
HELD_AT_HELP = (
    "when (date-time) its task last found it held back by a sweep of a deployment sharing a CPU or GPU with its "
    f"own (it stays pending); renewed every {SHARED_RECHECK_S:g} s while it stays held; newer sweeps sharing with "
    f"it queue behind it while the mark is less than {HELD_STALE_S:g} s old; null when it never was held or "
    "once it runs")


# The texts of the description below come from: queue_note, benchmarks.selectors.sweep_queue_note;
# requests_total, BenchmarkSweep.requests_total_known; held_at, HELD_AT_HELP and
# benchmarks.services.sweeps.SHARED_RECHECK_S; progress, benchmarks.views.sweep_pages.progress_message.
class SweepSerializer(serializers.ModelSerializer):
    """A sweep with its grid, status, progress columns (``current_tok_s``: the running point's
    output tok/s over the last report window of about 0.5 s, null unless the sweep is running; the
    mean since the point's first request is its run's ``progress.tok_s_mean``), GPU count and snapshot; ``worker``
    (``host:pid`` running it) and ``heartbeat_at`` (its last sign of life); ``run_ids`` in
    grid order; ``queue_note``: why an active sweep is not measuring yet
    (null once it runs); ``load_notes``: where its closed-loop loads exceed what the engine runs at
    once, so the rest wait in its queue (in the create response too); ``requests_done``: the
    requests that finished (succeeded, or failed with an answer); ``requests_total``: the requests
    the sweep sends in all, null while that is not known (a grid with points limited by time
    alone, until the sweep has ended, done, failed or cancelled; a failed or cancelled sweep counts for each point that ran what it sent and 0 for one that never ran),
    never below ``requests_done``; ``warmup_requests``: the grid's warm-up requests per point
    (never counted; null without a grid); ``requests_aborted``: those a stop ended in flight, the cancel,
    the deployment going down under a point or the loss of the worker running the sweep (the pages say
    "aborted in flight by the cancel", "when the deployment went down" or "when the worker was lost"),
    0 when none; ``requests_cancelled``: the aborted ones the
    cancel ended, also in ``requests_aborted``, 0 when no point was cut by a cancel; ``held_at``:
    when its task last found it held back by a sweep of a deployment sharing a CPU or GPU with its
    own (pending), renewed every 5 s while it stays held, null when it never was or once it runs;
    ``progress``: the running point's last progress report as its rows hold it, the
    same data the sweep page embeds and its last ``sweep.progress`` websocket message carried,
    null when no point is running or it has not reported yet. The analysis is served by ``/api/sweeps/<id>/analysis/``.

    A text the sweep does not have is null, never ``""`` (``reason``, ``current_point``,
    ``served_model_name``, ``topology``, ``engine``, ``worker``, ``queue_note``), as the sweep's
    JSON export gives them."""

    run_ids = serializers.SerializerMethodField()
    requests_total = serializers.IntegerField(
        source="requests_total_known", read_only=True, allow_null=True,
        help_text="requests the sweep sends in all (a point with a time limit as well as a request count may end "
                  "sooner: the total then follows what it sent); null while not known: points limited by time "
                  "alone (duration_s without a request count) send what fits in their time, so a sweep with such "
                  "points has a total only once it has ended (done, failed or cancelled). A sweep that failed (its "
                  "deployment stopped or went down included) or was cancelled counts for each point that ran what it "
                  "sent, aborted requests included, and 0 for one that never ran, whatever limits its points; a "
                  "point whose worker was lost counts what its last progress report counted as sent, those in "
                  "flight then included, and the total is null when that report did not count them (unknown, "
                  "never the plan). Never below requests_done.")
    warmup_requests = serializers.IntegerField(
        read_only=True, allow_null=True,
        help_text="warm-up requests each point sends at its load before it is measured (the grid's warmup; 0 when "
                  "it has none): never counted in requests_total, requests_done or any figure of the point; null for "
                  "a sweep without a grid (imported runs)")
    requests_cancelled = serializers.SerializerMethodField(
        help_text="requests aborted in flight by the cancel, the sweep page's \"aborted in flight by the cancel\" "
                  "(also counted in requests_aborted; not in requests_done); 0 when none was, never null")
    requests_aborted = serializers.SerializerMethodField(
        help_text="requests aborted in flight by a stop: the cancel (those are requests_cancelled too), the "
                  "deployment going down under a point, or the loss of the worker running the sweep (the requests "
                  "the point had in flight as its last progress report counted them); not failures and not in "
                  "requests_done; 0 when none was, never null")
    queue_note = serializers.SerializerMethodField(
        help_text="why an active sweep is not measuring yet; null once it runs or is over")
    load_notes = serializers.SerializerMethodField(
        help_text="one sentence per length pair whose closed-loop points keep more requests in flight than the "
                  "deployment's engine runs at once (its max_running_requests, or the requests of that length its "
                  "KV cache holds together, as its servers reported once ready, else as its sim profile states): "
                  "such points are measured, the engine queueing the rest, but their TTFT includes that wait; "
                  "empty when every point fits or nothing is known")
    reason = BlankAsNullCharField(allow_null=True, read_only=True,
                                  help_text="why the sweep failed or was cancelled; null when there is nothing to say")
    current_point = BlankAsNullCharField(allow_null=True, read_only=True,
                                         help_text="the point being measured; null when none is")
    served_model_name = BlankAsNullCharField(allow_null=True, read_only=True,
                                             help_text="the model name the requests named; null until known")
    topology = BlankAsNullCharField(allow_null=True, read_only=True,
                                    help_text="the deployment's topology; null until known")
    engine = BlankAsNullCharField(allow_null=True, read_only=True, help_text="the deployment's engine; null until known")
    worker = BlankAsNullCharField(allow_null=True, read_only=True,
                                  help_text="host:pid of the process running it; null when none has taken it")
    created_by = created_by_field("started the sweep")
    progress = serializers.SerializerMethodField(
        help_text="the running point's last progress report, the data of the sweep.progress websocket message "
                  "(the sweep page embeds the same): request counts of the point, seconds, output tok/s, and "
                  "updated_at, when it was made; a page re-syncing after a lost socket draws it unless it shows a "
                  "newer report. While the point builds its prompts (phase 'preparing prompts'), total and prepared count "
                  "prompts and the request counts are absent; while it sends its warm-up requests (phase 'warming "
                  "up'), warmup_done, warmup_total and warmup_elapsed_s count those and the request counts are "
                  "absent (warm-up requests are never counted as done). Null when no point is running or the running one has not reported "
                  "yet.")

    class Meta:
        model = BenchmarkSweep
        fields = ["id", "name", "deployment", "grid", "status", "reason", "cancel_requested", "points_total",
                  "points_done", "requests_total", "requests_done", "requests_cancelled", "requests_aborted",
                  "warmup_requests", "current_tok_s",
                  "current_point", "num_gpus", "served_model_name", "topology", "engine", "snapshot", "created_by",
                  "created_at", "started_at", "ended_at", "worker", "heartbeat_at", "held_at", "run_ids",
                  "queue_note", "load_notes", "progress"]
        read_only_fields = fields
        extra_kwargs = {"held_at": {"help_text": HELD_AT_HELP}, "num_gpus": {"help_text": (
            "GPUs the per-GPU figures (tok/s per GPU) divide by: the deployment's, all roles together; for a sim "
            "deployment (engine sim) the GPUs its sim profile models (spec.sim.gpus_modelled), not GPUs it ran on; "
            "0 for a deployment that runs on CPUs only, which has no per-GPU figures; null when unknown")}}

    def to_representation(self, instance: BenchmarkSweep):
        # A worker may have taken a pending sweep since this row was read (a create's response is
        # serialised after the task was sent): read it again so status and queue_note agree.
        if instance.status == "pending":
            instance.refresh_from_db()
        data = super().to_representation(instance)
        if instance.status != SweepStatus.RUNNING:
            data["current_tok_s"] = None  # a rate "now" only while a point runs, as on the sweep's page
        # a name saved before a stored secret's value was refused in it shows the value masked, and
        # so do the recipe's name in the snapshot and a served model name made of it
        data["name"] = free_text_shown(data.get("name"))
        for key, shown in (("snapshot", snapshot_shown), ("served_model_name", served_model_name_shown)):
            if key in data:
                data[key] = shown(data[key])
        return data

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_queue_note(self, obj: BenchmarkSweep) -> str | None:
        from benchmarks.selectors import sweep_queue_note

        return sweep_queue_note(sweep=obj) or None

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_load_notes(self, obj: BenchmarkSweep) -> list[str]:
        from benchmarks.selectors import sweep_load_notes

        return sweep_load_notes(sweep=obj)

    @extend_schema_field(serializers.IntegerField())
    def get_requests_cancelled(self, obj: BenchmarkSweep) -> int:
        from benchmarks.selectors import sweep_requests_cancelled

        return sweep_requests_cancelled(sweep=obj)

    @extend_schema_field(serializers.IntegerField())
    def get_requests_aborted(self, obj: BenchmarkSweep) -> int:
        from benchmarks.selectors import sweep_requests_aborted

        return sweep_requests_aborted(sweep=obj)

    def get_run_ids(self, obj: BenchmarkSweep) -> list[int]:
        return [r.pk for r in obj.runs.all()]

    @extend_schema_field(SWEEP_PROGRESS_SCHEMA)
    def get_progress(self, obj: BenchmarkSweep) -> dict | None:
        # The page's own builder (status block and embedded message), so the API, the page and
        # the websocket carry one report: only a running sweep has one.
        if obj.status != SweepStatus.RUNNING:
            return None
        from benchmarks.views.sweep_pages import sweep_progress

        return sweep_progress(obj)["message"]


@extend_schema_field({
    "type": "object", "additionalProperties": True,
    "description": "The sweep grid (docs/benchmarks.md); every key but concurrency or request_rates is optional.",
    "properties": {
        "lengths": {
            "oneOf": [{"type": "array", "items": {"oneOf": [
                {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
                {"type": "string"}]}}, {"type": "string"}],
            "default": DEFAULT_LENGTHS,
            "description": "[input_len, output_len] pairs or 'in:out' strings, or one text of 'in:out' pairs "
                           "separated by commas as the sweep form takes it ('16:16,8:8'), tokens; absent: "
                           f"{DEFAULT_LENGTHS}, as the sweep form and manage.py sweep --lengths default to"},
        "duration_s": {"type": "number", "minimum": MIN_DURATION_S, "maximum": MAX_DURATION_S,
                       "description": f"time limit per point: {DURATION_RULE}"},
    },
})
class GridField(AnyJSONField):
    """A sweep grid as sent: any JSON value, numbers that are not finite included.

    A JSON number too large for a double (``1e400``) parses as ``inf``, which DRF's ``JSONField``
    refuses only as "Value must be valid JSON."; here it passes through to
    :func:`benchmarks.sweeps.grid_validate`, which names it at its path
    as it was written (``{"grid.duration_s": ["must be a finite number, got 1e400 (too large for a
    64-bit float)"]}``, as the sweep form and ``manage.py sweep`` name it) together with every
    other error of the grid; so are ``NaN`` and ``Infinity`` literals, which are not JSON
    (``{"grid.duration_s": ["must be a finite number, got NaN (not a number)"]}``).
    """



class SweepCreateSerializer(StrictInputMixin, serializers.Serializer):
    """``{"deployment": id, "grid": {...}, "name": optional}`` (the id a JSON integer: ``"7"`` is a
    400 naming ``deployment`` and the type, judged with the rest of the body before the
    deployment's state; the name a JSON string: ``5`` is a 400, never the name ``"5"``); any other
    key is refused at its name (``{"extra": ["unknown field 'extra'; allowed: deployment, grid,
    name"]}``, the wording of every body), as unknown grid keys are.
    The grid's own rules are checked with the body, and every bad grid field is reported at once (errors name ``grid.<field>``, a number that is not finite such as
    ``1e400`` included)."""

    deployment = StrictIntegerField(min_value=1)
    grid = GridField()
    name = LimitedTextField(max_length=200, required=False, allow_blank=True,
                            validators=[one_line_text_validator, secret_value_validator("name")])


class SweepFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/sweeps/``: a value that cannot match is a 400 naming the
    parameter, never a filter left out."""

    deployment = IdField(required=False, help_text="only this deployment id")
    status = FilterChoiceField(choices=SweepStatus.choices, required=False, help_text="only this status")
    model = serializers.CharField(max_length=255, required=False, help_text="only this served model name")


# Also the shape of RunSerializer.metrics, hence before it.
_LATENCY_HELP = "ms by statistic (mean, p50, p90, p99, ...); null when no request succeeded"


# benchmarks.services.run_metrics
class RunMetricsSerializer(serializers.Serializer):
    """A run's metrics: one vocabulary for measured and imported runs (latencies in ms)."""

    output_throughput_tok_s = serializers.FloatField(allow_null=True, help_text=(
        "output tok/s over the measured duration: the successful requests' output tokens, plus, for a run a stop "
        "cut short, those the requests it aborted in flight had streamed (output_throughput_basis says which); "
        "the run's output_tok_s, the pages and the exports give the same figure; null when no request succeeded, "
        "except a run a stop aborted with every request in flight after they had streamed tokens, which counts "
        "those tokens"))
    output_throughput_basis = serializers.ChoiceField(
        choices=["completed", "completed_and_aborted", "completed_only"], help_text=(
            "which tokens output_throughput_tok_s counts: completed (no request was aborted), completed_and_aborted "
            "(the aborted requests' streamed tokens too: what the server delivered), completed_only (a run with "
            "aborted requests stored before their tokens were counted: below what the server delivered)"))
    output_throughput_completed_tok_s = serializers.FloatField(allow_null=True, help_text=(
        "output tok/s of the successful requests' tokens alone over the measured duration; equal to "
        "output_throughput_tok_s when no request was aborted in flight; 0 when a stop aborted every request "
        "after they had streamed tokens"))
    output_tokens_aborted = serializers.IntegerField(allow_null=True, help_text=(
        "output tokens the requests a stop aborted in flight had streamed, tokens; null where the summary does "
        "not say (stored before it was counted, or imported)"))
    tok_s_per_gpu = serializers.FloatField(allow_null=True, help_text="output tok/s per GPU; null without a GPU count")
    request_throughput_req_s = serializers.FloatField(allow_null=True, help_text=(
        "successful requests/s; null when no request succeeded, 0 when a stop aborted every request after they "
        "had streamed tokens"))
    total_token_throughput_tok_s = serializers.FloatField(
        allow_null=True, help_text="input + output tok/s; null when no request succeeded or the server did not "
                                   "report every success's input tokens")
    goodput_req_s = serializers.FloatField(allow_null=True, help_text="requests/s within the SLOs")
    slo_attainment = serializers.FloatField(allow_null=True, help_text="share of requests within the SLOs (0-1)")
    ttft_ms = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                    help_text=_LATENCY_HELP)
    tpot_ms = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                    help_text=_LATENCY_HELP)
    itl_ms = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                   help_text=_LATENCY_HELP)
    e2e_ms = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                   help_text=_LATENCY_HELP)
    requests = serializers.IntegerField(allow_null=True, help_text=(
        "measured requests sent, aborted ones included; 0 for a point that ended before its first measured "
        "request (stopped while it built its prompts or warmed up)"))
    successes = serializers.IntegerField(allow_null=True, help_text=(
        "requests that succeeded; 0 for a point that ended having sent nothing"))
    failures = serializers.IntegerField(allow_null=True, help_text=(
        "requests the server failed (an error answer, a timeout, a broken stream); requests a stop ended "
        "in flight are counted in aborted instead; 0 for a point that ended having sent nothing"))
    aborted = serializers.IntegerField(allow_null=True, help_text=(
        "requests a stop (a cancel, or the deployment going down) ended in flight: no failure of the server "
        "and no success; 0 for a point that ended having sent nothing; null where the source does not say "
        "(an imported file)"))
    input_tokens_mean = serializers.FloatField(allow_null=True, help_text="tokens")
    output_tokens_mean = serializers.FloatField(allow_null=True, help_text="tokens")
    measured_duration_s = serializers.FloatField(allow_null=True, help_text=(
        "how long the run took in seconds, first request sent to last response: the run's "
        "measured_duration_s, the summary's duration_s and measured_duration_s, the CSV export's "
        "measured_duration_s; null while it runs or when an imported file gave none"))
    duration_s = serializers.FloatField(allow_null=True, help_text=(
        "the same measured seconds as measured_duration_s, under the summary's name, kept for readers of it; "
        "not the point's time limit, which is the run's own duration_s"))
    errors = serializers.DictField(child=serializers.IntegerField(), help_text=(
        "error text -> count of every request that did not succeed: the failures' reasons and, for the aborted "
        "ones, 'aborted: <what stopped them>'"))


class _BlankAsNullChoiceField(serializers.ChoiceField):
    """A choice read from a blank-able model field, written as null where the field is ``""``."""

    def to_representation(self, value):
        return None if value in ("", None) else super().to_representation(value)


class RunSerializer(serializers.ModelSerializer):
    """A run: point parameters (``duration_s``: the point's time limit, seconds, null for a point
    limited by its request count alone; ``measured_duration_s``: how long it ran, seconds, the
    summary's ``duration_s`` (and ``measured_duration_s``), the metrics' and the exports'
    ``measured_duration_s``), status, source,
    summary (each value in the unit its key names: ``_s`` seconds, ``_ms`` milliseconds), flags,
    ``metrics`` (one vocabulary, ms), snapshot, ``progress`` (the point's live counts as the load
    generator last reported them: requests done, failed and aborted, seconds, output tok/s). The
    original imported file is served by ``/api/runs/<id>/original/``; ``original_sha256`` is its
    hash, ``record_sha256`` that of the run's own record as canonical JSON. ``started_at`` /
    ``ended_at`` are when a measured run ran; an imported run has neither (null), ``imported_at``
    when it was imported and ``result_date`` the local time its file states, zone not recorded.

    A text the run does not have or that is not known is null, never ``""``: ``reason`` (nothing to
    explain), ``import_format``, ``original_filename`` and ``original_sha256`` (a measured run),
    ``api`` and ``served_model_name`` (an imported file that did not say), as the run's JSON export
    gives them and the CSV export leaves the cell empty."""

    metrics = serializers.SerializerMethodField()
    # Two durations: the grid's limit (``duration_s``, the field kept under its name) and the
    # measured one, which the summary and the metrics also give under their older name duration_s.
    duration_s = serializers.FloatField(read_only=True, allow_null=True, help_text=(
        "the point's time limit in seconds, as the sweep's grid set it (grid.duration_s); null for a "
        "point limited by its request count alone. Not how long the run took: see measured_duration_s"))
    measured_duration_s = serializers.SerializerMethodField(help_text=(
        "how long the run took in seconds, first request sent to last response (summary.duration_s and "
        "summary.measured_duration_s, metrics.measured_duration_s, the measured_duration_s column of the CSV "
        "export, the same keys of the JSON exports); null while it runs or when an imported file gave none"))
    label = serializers.CharField(read_only=True)
    has_records = serializers.SerializerMethodField()
    # Null rather than "" for a run that was not imported, as the run's JSON export and the
    # comparison's config give them.
    import_format = _BlankAsNullChoiceField(
        choices=ImportFormat.choices, allow_null=True, read_only=True,
        help_text="The harness format an imported run was read from; null for a run measured by a sweep.")
    original_filename = BlankAsNullCharField(
        allow_null=True, read_only=True,
        help_text="The name of the file an imported run was read from; null for a run measured by a sweep.")
    original_sha256 = BlankAsNullCharField(
        allow_null=True, read_only=True,
        help_text="SHA-256 (hex) of the imported file's UTF-8 bytes; null for a run measured by a sweep.")
    record_sha256 = BlankAsNullCharField(
        allow_null=True, read_only=True,
        help_text="SHA-256 (hex) of the imported run's own record (its line or object of the file) read as JSON and "
                  "written canonically (keys sorted, no white space): an import skips a run whose record an imported "
                  "run already has. Null for a run measured by a sweep.")
    imported_at = serializers.SerializerMethodField(help_text=(
        "when an imported run was imported (its created_at), ISO 8601 UTC; null for a run measured by a sweep. "
        "Not when the benchmark ran: see result_date"))
    result_date = serializers.SerializerMethodField(help_text=(
        "when the harness saved an imported run's result, as its file states it: vLLM's date "
        "(%Y%m%d-%H%M%S, the benchmarking host's local time) as ISO 8601 without an offset, since the zone is "
        "not recorded (2026-07-22T04:18:43); null when the file has none (SGLang bench_serving writes none) "
        "and for a measured run. The summary's date keeps the text as the file has it"))
    started_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text=(
        "when a measured run started, UTC; null before it starts and for an imported run (its file does not "
        "record it)"))
    ended_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text=(
        "when a measured run ended, UTC; null while it runs and for an imported run (its file does not record "
        "it; imported_at is when it was imported)"))
    reason = BlankAsNullCharField(allow_null=True, read_only=True,
                                   help_text="Why the run failed or was cut short; null when there is nothing to say.")
    api = BlankAsNullCharField(allow_null=True, read_only=True,
                                help_text="The API the requests were sent to (chat, completions, generate); null when "
                                          "an imported file did not say.")
    served_model_name = BlankAsNullCharField(allow_null=True, read_only=True,
                                              help_text="The model name the requests named; null when not known.")

    class Meta:
        model = BenchmarkRun
        fields = ["id", "sweep", "ordinal", "label", "status", "reason", "source", "import_format",
                  "original_filename", "original_sha256", "source_line", "concurrency", "request_rate", "input_len",
                  "output_len", "num_requests", "duration_s", "measured_duration_s", "api", "served_model_name", "num_gpus", "flags",
                  "output_tok_s", "ttft_p99_ms", "tpot_mean_ms", "metrics", "summary", "snapshot", "progress",
                  "has_records", "created_at", "started_at", "ended_at", "imported_at", "result_date", "record_sha256"]
        read_only_fields = fields
        extra_kwargs = {"output_tok_s": {"help_text": (
            "output tok/s, the same figure as metrics.output_throughput_tok_s (for a run a stop cut short, the "
            "aborted requests' streamed tokens counted too: metrics.output_throughput_basis)")},
            "progress": {"help_text": (
            "the point's live counts as the load generator last reported them: done (requests that finished, "
            "succeeded or failed), failed (those of them that failed), aborted (requests a stop, the cancel or "
            "the deployment going down, ended in flight: neither done nor failed), total, output_tokens, "
            "elapsed_s (seconds), tok_s and tok_s_mean (output tok/s); {} before its first report. While the "
            "point builds its prompts or sends its warm-up requests, its phase and those counts (see the sweep's "
            "progress). A point stopped (the sweep cancelled, its deployment going down) before its first measured "
            "request keeps that phase's last counts without phase, with ended_during ('preparing prompts' or "
            "'warming up') and requests_sent 0")}}

    @extend_schema_field(RunMetricsSerializer)
    def get_metrics(self, obj: BenchmarkRun) -> dict:
        from benchmarks.services import run_metrics

        return run_metrics(run=obj)

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_measured_duration_s(self, obj: BenchmarkRun) -> float | None:
        """Seconds the run took (its summary's ``duration_s``); None when not a finite number."""
        from benchmarks.services.runs import run_measured_duration_s

        return run_measured_duration_s(run=obj)

    def get_has_records(self, obj: BenchmarkRun) -> bool:
        return bool(obj.records_path)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_imported_at(self, obj: BenchmarkRun):
        """An imported run's ``created_at`` (written as ``created_at`` is), None for a measured run."""
        return obj.created_at if obj.source == RunSource.IMPORTED else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_result_date(self, obj: BenchmarkRun) -> str | None:
        from benchmarks.services.runs import run_result_date

        return run_result_date(run=obj)

    def to_representation(self, instance: BenchmarkRun) -> dict:
        from benchmarks.services.runs import run_filename_shown, run_summary_read

        data = super().to_representation(instance)
        data["summary"] = run_summary_read(run=instance)  # input_tokens_source read for older runs too
        if data.get("original_filename"):
            data["original_filename"] = run_filename_shown(data["original_filename"])
        for key, shown in (("snapshot", snapshot_shown), ("served_model_name", served_model_name_shown)):
            if key in data:
                data[key] = shown(data[key])
        return data


class ImportSkippedSerializer(serializers.Serializer):
    """A run of an imported file that was not stored: a run already holds its result."""

    line = serializers.IntegerField(allow_null=True, help_text="its line of the file, from 1; null for a file that "
                                                                "is one object")
    item = serializers.IntegerField(allow_null=True, help_text="its place in a file that is a JSON array, from 1; "
                                                                "else null")
    where = serializers.CharField(help_text="where it is, in words: 'line 2', 'item 2 (line 14)', 'the file' (a file "
                                            "that is one object)")
    run = serializers.IntegerField(help_text="the run that already holds this result")
    in_this_file = serializers.BooleanField(help_text="true when that run was created by this import, from an "
                                                      "earlier record of this file with the same result")


class RunImportResultSerializer(serializers.Serializer):
    """What an import did: the runs it created and the runs of the file it skipped."""

    created = RunSerializer(many=True, help_text="the runs created, in file order")
    skipped = ImportSkippedSerializer(many=True, help_text="the runs of the file already imported (from this or "
                                                           "another file: the same record read as JSON), not stored "
                                                           "again; empty when every run was new or allow_duplicate "
                                                           "was set")


class RunImportConflictSerializer(serializers.Serializer):
    """The 409 of an import none of whose runs is new."""

    detail = serializers.CharField(help_text="the refusal in words, naming the runs and how to import anyway (set "
                                             "allow_duplicate to true); a file with the same bytes as the one the "
                                             "runs came from is named with its SHA-256 in full")
    code = serializers.CharField(help_text="'conflict'")
    sha256 = serializers.CharField(help_text="the SHA-256 of the refused file's bytes (64 hexadecimal digits), as the "
                                             "runs' original_sha256 gives the file each came from")
    runs = serializers.ListField(child=serializers.IntegerField(), help_text="the runs that hold the file's results, "
                                                                              "by id")
    skipped = ImportSkippedSerializer(many=True, help_text="each run of the file and the run holding its result")


class RunImportSerializer(StrictInputMixin, serializers.Serializer):
    """Either a multipart ``file`` or JSON ``{"text": ..., "filename": ...}``; ``allow_duplicate``
    (default false; in a JSON body only ``true`` or ``false``)
    stores every run of the file, also those already imported, instead of skipping them (and
    answering 409 when none is new).
    ``text`` and ``filename`` are JSON strings: ``{"text": 5}`` is a 400 under ``text`` naming the
    type, not a file holding ``5``. ``filename`` (at most 255 characters) may not hold a control
    character, a line break or a Unicode line or paragraph separator
    (U+2028, U+2029): it is sent back in the
    ``Content-Disposition`` header of every download of the file. Any other key is refused at its
    name (``{"zzz": ["unknown field 'zzz'; allowed: file, text, filename,
    allow_duplicate"]}``, the wording of every body), before the
    file is read. An uploaded file of 0 bytes is refused under ``file`` naming it."""

    # allow_empty_file: an empty upload is named by validate_file, not DRF's "The submitted file is empty."
    file = serializers.FileField(required=False, allow_empty_file=True)
    text = StrictCharField(required=False, trim_whitespace=False, allow_blank=False)
    filename = StrictCharField(required=False, max_length=255, allow_blank=True)
    allow_duplicate = StrictBooleanField(required=False, default=False, help_text=(
        "store every run of the file, also those already imported; by default they are skipped (listed in the "
        "answer's skipped) and a file with no new run is refused (409)"))

    def validate_file(self, value):
        """Refuse an upload of 0 bytes naming it (``{"file": ["the file 'bench.json' is empty (0
        bytes)"]}``), as the import form does."""
        if value is not None and value.size == 0:
            raise serializers.ValidationError(empty_upload_message(value.name))
        return value

    def validate_filename(self, value: str) -> str:
        found = CONTROL_CHARACTERS_RE.search(value)
        if found:
            raise serializers.ValidationError(
                f"must not contain control characters or line breaks; found U+{ord(found.group()):04X} at "
                f"character {found.start() + 1}")
        return value

    def validate(self, attrs: dict) -> dict:
        if not attrs.get("file") and not attrs.get("text"):
            empty = _empty_body_message(self.context.get("request"))
            if empty:
                raise serializers.ValidationError({"file": [empty]})
        if bool(attrs.get("file")) == bool(attrs.get("text")):
            raise serializers.ValidationError({"file": ["give a file (multipart) or text (JSON), exactly one"]})
        return attrs


def _empty_body_message(request) -> str:
    """Why a multipart import brought no file, where the request says: a multipart body of 0
    bytes; ``""`` otherwise. (A body sent in chunks never gets here: it is refused with 411 before
    any view reads it, :mod:`controlplane.body_length`.)"""
    meta = getattr(request, "META", None) or {}
    if str(meta.get("CONTENT_TYPE", "")).startswith("multipart/form-data") and str(meta.get("CONTENT_LENGTH") or "0") == "0":
        return "the request body is empty (0 bytes): no file arrived; an empty file has nothing to import"
    return ""


class RunFilterSerializer(serializers.Serializer):
    """Optional filters of ``GET /api/runs/`` and its ``order``: a value that cannot match, or an
    order it does not sort by (:func:`benchmarks.selectors.run_order_problem`), is a 400 naming the
    parameter, never a filter left out, every one at once (``?order=zzz&status=bogus``: both)."""

    sweep = IdField(required=False, help_text="only the runs of this sweep id")
    source = FilterChoiceField(choices=RunSource.choices, required=False, help_text="measured or imported")
    status = FilterChoiceField(choices=RunStatus.choices, required=False, help_text="only this status")
    order = serializers.CharField(required=False,
                                  help_text="output_tok_s, ttft_p99_ms or created_at, '-' first for descending; "
                                            "default -created_at (newest first, as the runs page); ties by id in "
                                            "the same direction (by id descending for the default); by "
                                            "output_tok_s or ttft_p99_ms the done runs come first and the others "
                                            "(failed, cancelled, running: not a measurement to rank) after them")

    def validate_order(self, value: str) -> str:
        if value and (problem := run_order_problem(value)):
            raise serializers.ValidationError([problem])
        return value


class RecordsQuerySerializer(serializers.Serializer):
    """``?offset=&limit=`` of ``GET /api/runs/<id>/records/``: a page of a run's per-request records,
    ``limit`` rows (1 to 5000, default 1000) from ``offset`` (0 to :data:`MAX_PAGE_OFFSET`, the bound
    of every list's ``offset``). A value that is not a whole number in range is a 400 naming the
    parameter, quoting the value and giving the range (``{"limit": ["must be a whole number between 1 and 5000, got '9999'"]}``)."""

    offset = IdField(min_value=0, max_value=MAX_PAGE_OFFSET, default=0,
                     help_text=f"records to skip, 0 to {MAX_PAGE_OFFSET} (default 0)")
    limit = IdField(min_value=1, max_value=5000, default=1000,
                    help_text="records to return, 1 to 5000 (default 1000)")


class CompareQuerySerializer(QueryProblemsTogetherSerializer):
    """``ids=1,2,3`` (runs) and/or ``sweeps=4,5`` (all runs of those sweeps), ids in ASCII digits,
    each given once (``ids=1,1``: ``repeated run id: 1 (2 times); give each once``, the words of
    :func:`benchmarks.services.runs_compare_pick`, which the comparison page shares), and
    ``format`` json (the default), csv (a download) or api (the browsable page of the JSON, as every
    endpoint offers). Every problem of the four is named in one 400
    (``?ids=1,2&baseline=x&sweeps=abc``: ``baseline`` and ``sweeps``). An id no row can have
    (however large) is not found like any other unknown id: the view's 400 naming it."""

    ids = serializers.CharField(required=False, allow_blank=True)
    sweeps = serializers.CharField(required=False, allow_blank=True)
    baseline = serializers.CharField(required=False, allow_blank=True,
                                     help_text="one run id, the run deltas are against (one of the compared runs; default the first)")
    format = FilterChoiceField(choices=["json", "csv", "api"], default="json",
                               help_text="json, csv: the comparison as a CSV download, one row per run, or api: "
                                         "the JSON on the browsable page")

    @staticmethod
    def _ints(value: str, field: str, noun: str) -> list[int]:
        """The ids of ``value``; a refusal naming the first part that is not one (``got 'abc'``), in
        the comparison page's words (:func:`benchmarks.services.runs_compare_ids`), or every id
        given more than once (``repeated sweep id: 4 (2 times); give each once``)."""
        try:
            ids = runs_compare_ids(value, field=field)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.errors[field]) from None
        if repeated := repeats_text(ids, noun):
            raise serializers.ValidationError([repeated])
        return ids

    def validate_ids(self, value: str) -> list[int]:
        return self._ints(value, "ids", "run id")

    def validate_sweeps(self, value: str) -> list[int]:
        return self._ints(value, "sweeps", "sweep id")

    def validate_baseline(self, value: str) -> int | None:
        # As an id of ids: "3" in quotes is run 3.
        baseline = unquoted(value or "")
        if baseline and not DIGITS_RE.fullmatch(baseline):
            raise serializers.ValidationError([f"takes one run id (e.g. 3), got {query_text(baseline)}"])
        # An id longer than any row's is kept as one no compared run has (the view says so).
        return (None if not baseline else
                PK_MAX + 1 if len(baseline.lstrip("0")) > len(str(PK_MAX)) else int(baseline))

    def together_errors(self, attrs: dict, refused: set[str]) -> dict[str, list[str]]:
        """More runs and sweeps than a comparison takes, or none (named once the query has no other
        problem, as a key a read needs that is not given is), under ``ids``."""
        if refused & {"ids", "sweeps"}:
            return {}
        run_ids, sweep_ids = attrs.get("ids") or [], attrs.get("sweeps") or []
        if len(run_ids) + len(sweep_ids) == 0:
            return {} if refused else {"ids": ["give run ids (ids=1,2) or sweep ids (sweeps=3,4)"]}
        if too_many := runs_compare_too_many(run_ids=run_ids, sweep_ids=sweep_ids):
            return {"ids": [too_many]}
        return {}

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        attrs.setdefault("ids", [])
        attrs.setdefault("sweeps", [])
        attrs.setdefault("baseline", None)
        return attrs


# --- response shapes ---------------------------------------------------------------------------
# What the actions that answer a service's dict return, for the OpenAPI schema; the views never
# serialise through these (the services build the dicts).

# Plain strings here (the Run and Sweep components carry the enums): one choice set used by
# several components would get a hashed enum name in the schema.
_RUN_STATUS_HELP = f"one of {', '.join(RunStatus.values)}"
_SWEEP_STATUS_HELP = f"one of {', '.join(SweepStatus.values)}"
_RUN_SOURCE_HELP = f"one of {', '.join(RunSource.values)}"


# benchmarks.services.run_records_rows
class RunRecordSerializer(serializers.Serializer):
    """One request of a measured run (times in ms from the run's first request start)."""

    index = serializers.IntegerField(help_text="position in the point's dataset")
    ok = serializers.BooleanField()
    http_status = serializers.IntegerField()
    input_tokens = serializers.IntegerField(allow_null=True, help_text="server usage; null when it gave none")
    output_tokens = serializers.IntegerField(allow_null=True, help_text="null when not known")
    tokens_estimated = serializers.BooleanField(help_text="output_tokens counted from output events (no usage)")
    requested_input = serializers.IntegerField(allow_null=True)
    requested_output = serializers.IntegerField(allow_null=True)
    start_ms = serializers.FloatField(help_text="ms after the run's first request started")
    end_ms = serializers.FloatField(help_text="ms after the run's first request started: response read or failed")
    duration_ms = serializers.FloatField(help_text="end_ms - start_ms, failures included")
    ttft_ms = serializers.FloatField(allow_null=True, help_text="ms; null for a failed request")
    e2e_ms = serializers.FloatField(allow_null=True, help_text="ms; null for a failed request")
    tpot_ms = serializers.FloatField(allow_null=True, help_text="ms; null below 2 output tokens or failed")
    events = serializers.IntegerField(help_text="streamed output events")
    finish_reason = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    event_ms = serializers.ListField(child=serializers.FloatField(), required=False,
                                     help_text="each output event's time, ms after this request's start")
    event_tokens = serializers.ListField(child=serializers.IntegerField(allow_null=True), required=False,
                                         help_text="tokens each event carried; null where the server did not say")


class RunRecordsPageSerializer(serializers.Serializer):
    """``GET /api/runs/<id>/records/``: ``count`` requests in all, ``rows`` from ``offset``."""

    count = serializers.IntegerField(help_text="requests in the run")
    offset = serializers.IntegerField()
    limit = serializers.IntegerField()
    rows = RunRecordSerializer(many=True)


# benchmarks.services.runs_compare's config
class RunCompareConfigSerializer(serializers.Serializer):
    """What a compared run measured: its source, the deployment, recipe and node it ran against, its
    GPU count, its point (concurrency, request rate, lengths, requests) and the SLO it is judged by."""

    source = serializers.CharField()
    import_format = serializers.CharField(allow_null=True)
    served_model_name = serializers.CharField(allow_null=True)
    engine = serializers.CharField(allow_null=True)
    topology = serializers.CharField(allow_null=True)
    deployment_id = serializers.IntegerField(allow_null=True, help_text="the deployment the sweep measured; null "
                                             "for an imported run")
    recipe = serializers.CharField(allow_null=True)
    recipe_id = serializers.IntegerField(allow_null=True, help_text="null for an imported run")
    recipe_version = serializers.IntegerField(allow_null=True)
    node = serializers.CharField(allow_null=True)
    num_gpus = serializers.IntegerField(allow_null=True)
    concurrency = serializers.IntegerField(allow_null=True)
    request_rate = serializers.FloatField(allow_null=True, help_text="requests/s")
    input_len = serializers.IntegerField(allow_null=True, help_text="tokens")
    output_len = serializers.IntegerField(allow_null=True, help_text="tokens")
    num_requests = serializers.IntegerField(allow_null=True)
    api = serializers.CharField(allow_null=True)
    slo = serializers.DictField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                help_text="ttft_s, tpot_s, e2e_s in seconds; null: no SLO or not recorded")
    sim_profile = serializers.CharField(allow_null=True)
    engine_version = serializers.CharField(allow_null=True)
    router_version = serializers.CharField(allow_null=True)
    ceiling_version = serializers.CharField(allow_null=True)
    roles = serializers.DictField(allow_null=True, help_text="the recipe's roles (spec.roles)")
    env = serializers.DictField(allow_null=True, help_text="the recipe's environment (spec.env)")


class RunCiStatsSerializer(serializers.Serializer):
    """One latency's 95 % confidence intervals, ``[low, high]`` in ms; a bound the run's requests
    cannot give is null (a p99 needs 368 requests to be bounded above)."""

    mean = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True, min_length=2,
                                 max_length=2, help_text="Student's t interval of the mean, ms")
    p50 = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True, min_length=2,
                                max_length=2, help_text="order-statistic interval of the median, ms")
    p90 = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True, min_length=2,
                                max_length=2, help_text="order-statistic interval, ms")
    p99 = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True, min_length=2,
                                max_length=2, help_text="order-statistic interval, ms")


# benchmarks.services.runs.run_ci95_ms
class RunCiSerializer(serializers.Serializer):
    """A run's 95 % confidence intervals of its per-request latencies (ms); ITL has none."""

    ttft_ms = RunCiStatsSerializer(required=False)
    tpot_ms = RunCiStatsSerializer(required=False)
    e2e_ms = RunCiStatsSerializer(required=False)


class RunCompareWorkloadSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="the CSV column: input_len, output_len, concurrency, request_rate_req_s, "
                                            "served_model_name, engine, topology, num_gpus or deployment_id")
    label = serializers.CharField()
    unit = serializers.CharField(help_text="tokens, requests in flight, req/s, GPUs; empty for a name or an id")
    value = serializers.JSONField(allow_null=True, help_text="this run's")
    baseline_value = serializers.JSONField(allow_null=True, help_text="the baseline run's (a null request rate: "
                                                                      "a closed loop)")


class RunCompareEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    label = serializers.CharField()
    sweep_id = serializers.IntegerField(allow_null=True)
    status = serializers.CharField(help_text=_RUN_STATUS_HELP)
    flags = serializers.ListField(child=serializers.CharField())
    metrics = RunMetricsSerializer()
    ci95_ms = RunCiSerializer(allow_null=True, help_text="null for an imported run (no per-request samples)")
    config = RunCompareConfigSerializer()
    lengths = serializers.CharField(allow_null=True, help_text=(
        "the requested lengths in words: 1024/1024 (input/output tokens), random [1, 1024]/[1, 1024] (each "
        "request's lengths drawn uniformly from these token ranges); null when not recorded"))
    rankable = serializers.BooleanField()
    refusal = serializers.CharField(allow_null=True, help_text="why the run is not ranked")
    measured = serializers.BooleanField(help_text="false: failed, cancelled, unfinished or no successful request")
    workload_differs = RunCompareWorkloadSerializer(many=True, help_text=(
        "how this run's workload is not the baseline run's (its deltas compare unlike workloads); empty for the "
        "baseline and a run of its workload"))


class RunCompareFieldSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    unit = serializers.CharField()
    values = serializers.ListField(child=serializers.FloatField(allow_null=True), help_text="one per run, in order")
    deltas_pct = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                       help_text="each run's value vs the baseline's, % of the baseline's; 0 for 0 "
                                                 "against 0, null for another value against 0")


class RunCompareDifferenceSerializer(serializers.Serializer):
    field = serializers.CharField()
    values = serializers.ListField(child=serializers.JSONField(allow_null=True), help_text="one per run, in order")


class RunCompareExcludedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    reason = serializers.CharField()


# One property per ranked metric, named as the answer keys it (dotted: a statistic of a latency).
RunCompareBestSerializer = type("RunCompareBestSerializer", (serializers.Serializer,), {
    "__doc__": ("The id of the best rankable run for each metric; null when none is named (``notes`` says why: "
                "among others a tie, or a best or runner-up that completed fewer than 10 requests, too few to judge "
                "the difference)."),
    **{key: serializers.IntegerField(allow_null=True, help_text=f"{'highest' if higher else 'lowest'} wins")
       for key, higher in BEST_METRICS},
})


# benchmarks.services.runs_compare
class RunCompareSerializer(serializers.Serializer):
    """The comparison of runs ``GET /api/runs/compare/`` answers: each run with its metrics, and notes."""

    runs = RunCompareEntrySerializer(many=True)
    fields = RunCompareFieldSerializer(many=True)
    config_differs = RunCompareDifferenceSerializer(many=True)
    best = RunCompareBestSerializer()
    ties = serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()),
                                 help_text="metric -> run ids within tie_threshold_pct of the best (no best named)")
    uncertain = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="latency metric -> [best run id, runner-up id] whose 95 % confidence intervals overlap: the best "
                  "is named, but the difference may be sampling noise (a note gives both intervals); where either "
                  "run has no interval, or completed fewer than 10 requests, no best is named and the metric is "
                  "not listed here")
    baseline = serializers.IntegerField(help_text="the run deltas_pct are against: baseline=ID, else the first id, "
                                                  "else (the first run not rankable) the first ranked run")
    baseline_note = serializers.CharField(allow_null=True, help_text=(
        "why the baseline is not the first id, when baseline= was not given and the first run is not rankable "
        "(also in notes); null otherwise"))
    workload_note = serializers.CharField(allow_null=True, help_text=(
        "the runs whose workload (lengths, concurrency, request rate, model, engine, topology, GPUs, deployment) is "
        "not the baseline run's, with the values and units (also in notes); null when every run measured the "
        "baseline's"))
    tie_threshold_pct = serializers.FloatField(help_text="percent of the larger value")
    excluded = RunCompareExcludedSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())


# benchmarks.services.run_export_dict
class RunExportSerializer(serializers.Serializer):
    """One run as exported; a text the run does not have or that is not known is null, as in a
    run's JSON from ``GET /api/runs/<id>/``."""

    id = serializers.IntegerField()
    sweep_id = serializers.IntegerField(allow_null=True)
    ordinal = serializers.IntegerField()
    status = serializers.CharField(help_text=_RUN_STATUS_HELP)
    reason = serializers.CharField(allow_null=True, help_text="null when there is nothing to say")
    source = serializers.CharField(help_text=_RUN_SOURCE_HELP)
    import_format = serializers.CharField(allow_null=True)
    original_filename = serializers.CharField(allow_null=True)
    concurrency = serializers.IntegerField(allow_null=True)
    request_rate_req_s = serializers.FloatField(allow_null=True,
                                                help_text="requests/s of an open-loop point (the CSV column's name)")
    input_len = serializers.IntegerField(allow_null=True, help_text="tokens")
    output_len = serializers.IntegerField(allow_null=True, help_text="tokens")
    num_requests = serializers.IntegerField(allow_null=True)
    duration_s = serializers.FloatField(allow_null=True, help_text=(
        "the point's time limit in seconds, as the sweep's grid set it (grid.duration_s), as the run's own "
        "duration_s; null for a point limited by its request count alone. Not how long the run took: see "
        "measured_duration_s"))
    measured_duration_s = serializers.FloatField(allow_null=True, help_text=(
        "how long the run took in seconds, first request sent to last response, as the run's own "
        "measured_duration_s (the summary's duration_s); null while it runs or when an imported file gave none"))
    api = serializers.CharField(allow_null=True, help_text="null when not known")
    served_model_name = serializers.CharField(allow_null=True, help_text="null when not known")
    num_gpus = serializers.IntegerField(allow_null=True)
    flags = serializers.ListField(child=serializers.CharField())
    metrics = RunMetricsSerializer()
    summary = serializers.JSONField(help_text="each value in the unit its key names (_s seconds, _ms milliseconds, "
                                              "_tok_s tokens/s, _req_s requests/s): the load generator's for measured "
                                              "runs, the importer's fields for imported ones")
    snapshot = serializers.JSONField()
    created_at = serializers.DateTimeField(help_text="when the run was made, UTC, as the run's created_at: a measured "
                                                     "point as it started, an imported run when it was imported")
    started_at = serializers.DateTimeField(allow_null=True, help_text="when a measured run started, UTC; null for an "
                                                                      "imported run")
    ended_at = serializers.DateTimeField(allow_null=True, help_text="when a measured run ended, UTC; null for an "
                                                                    "imported run")
    imported_at = serializers.DateTimeField(allow_null=True, help_text="when an imported run was imported, UTC, as "
                                                                       "the run's imported_at; null for a measured run")
    result_date = serializers.CharField(allow_null=True, help_text="as the run's result_date: the local time the "
                                                                   "file states, zone not recorded; null without one")
    record_sha256 = serializers.CharField(allow_null=True, help_text="as the run's record_sha256; null for a measured "
                                                                     "run")
    records = RunRecordSerializer(many=True, allow_null=True, required=False,
                                  help_text="every request (run export only); null without records")
    records_note = serializers.CharField(allow_null=True, required=False, help_text="why records is null")


class SweepExportSweepSerializer(serializers.Serializer):
    """The sweep of its JSON export; a text it does not have is null, as in a sweep's JSON from
    ``GET /api/sweeps/<id>/``."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    deployment_id = serializers.IntegerField(allow_null=True)
    status = serializers.CharField(help_text=_SWEEP_STATUS_HELP)
    reason = serializers.CharField(allow_null=True, help_text="null when there is nothing to say")
    grid = serializers.JSONField()
    num_gpus = serializers.IntegerField(allow_null=True)
    served_model_name = serializers.CharField(allow_null=True, help_text="null when not known")
    topology = serializers.CharField(allow_null=True, help_text="null when not known")
    engine = serializers.CharField(allow_null=True, help_text="null when not known")
    points_total = serializers.IntegerField()
    points_done = serializers.IntegerField()
    requests_total = serializers.IntegerField(allow_null=True, help_text="as GET /api/sweeps/<id>/ gives it: requests "
                                                                          "sent in all, null while not known")
    requests_done = serializers.IntegerField(help_text="as GET /api/sweeps/<id>/ gives it: requests that finished")
    requests_cancelled = serializers.IntegerField(help_text="as GET /api/sweeps/<id>/ gives it: requests aborted in "
                                                            "flight by the cancel")
    requests_aborted = serializers.IntegerField(help_text="as GET /api/sweeps/<id>/ gives it: requests aborted in "
                                                          "flight by a stop, the cancel's among them")
    warmup_requests = serializers.IntegerField(
        allow_null=True, help_text="as GET /api/sweeps/<id>/ gives it: warm-up requests each point sends before it is "
                                   "measured (0 when the grid has none), null for a sweep without a grid")
    snapshot = serializers.JSONField()
    created_at = serializers.DateTimeField(help_text="when the sweep was created, UTC")
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)


# benchmarks.services.sweep_analysis
class SweepAnalysisSerializer(serializers.Serializer):
    """The ceiling report of a sweep: one report per length pair, the findings and the notes."""

    lengths = serializers.DictField(child=serializers.JSONField(),
                                    help_text='one report per "input/output" length pair')
    findings = serializers.ListField(child=serializers.CharField())
    compared_with = serializers.IntegerField(allow_null=True, help_text="the other topology's sweep id")
    errors = serializers.DictField(child=serializers.CharField(), help_text="length pair -> why it has no report")
    notes = serializers.ListField(child=serializers.CharField())
    provisional = serializers.BooleanField(help_text="computed from the runs so far: the sweep has not finished")
    # benchmarks.analysis.ANALYSIS_VERSION
    version = serializers.IntegerField(help_text="the version of the analysis that made the report (a whole "
                                                 "number, raised when the analysis changes); a stored report of "
                                                 "an older version is computed again when it is read")


# benchmarks.services.sweep_export_json
class SweepExportSerializer(serializers.Serializer):
    """``GET /api/sweeps/<id>/export/?format=json``: the sweep and each of its runs."""

    sweep = SweepExportSweepSerializer()
    runs = RunExportSerializer(many=True)
    analysis = SweepAnalysisSerializer(help_text="the ceiling report, the object GET /api/sweeps/<id>/analysis/ "
                                                 "answers (provisional before the end)")
