"""Rows of the benchmarks app: a sweep (one deployment, one grid) and its runs (one grid point each).

Rows are the truth: status columns are driven by :mod:`benchmarks.services`; Celery state is never
consulted. Per-request records live in ``.npz`` files under ``VAR_DIR/benchmarks/`` (see
:class:`benchmarks.loadgen.RecordStore`), never in the database; summaries are JSON columns plus a
few indexed scalars for sorting.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from benchmarks.choices import SWEEP_ACTIVE, SWEEP_TERMINAL, ImportFormat, RunSource, RunStatus, SweepStatus

# Name of the partial unique index that allows one pending, waiting or running sweep per deployment.
ONE_ACTIVE_SWEEP_CONSTRAINT = "benchmarks_one_active_sweep_per_deployment"
# Name of the partial unique index that allows one imported run per result record (its
# ``record_sha256``), copies imported on purpose (``allowed_duplicate``) aside.
ONE_IMPORT_PER_RECORD_CONSTRAINT = "benchmarks_one_imported_run_per_record"


def gpus_are_modelled(*, engine: str | None, num_gpus: int | None) -> bool:
    """Whether ``num_gpus`` of a sweep or run of ``engine`` are GPUs a sim profile models
    (``spec.sim.gpus_modelled``, :func:`benchmarks.sweeps.recipe_gpu_count`), not GPUs it ran on:
    the sim takes none, so its count is only what tok/s per GPU divides by. False without a count."""
    return bool(num_gpus) and engine == "sim"


def snapshot_shown(snapshot):
    """A sweep's or run's ``snapshot`` as every read shows it (the API, the exports, the pages,
    the admin and comparisons): a copy with a stored secret's value masked and a well-known
    credential shortened in every string of it, keys included
    (:func:`controlplane.redaction.credential_mask_json`, as ``GET /api/deployments/<id>/`` shows
    the deployment's ``spec_snapshot``): the recipe's name, the ``spec``, what the servers said
    about themselves. Each process's ``argv`` items and ``env_redacted`` values go through
    :func:`controlplane.redaction.redact_text` besides, as ``GET /api/processes/<id>/`` shows them.
    A snapshot stores what ran as it was then, so a value stored as a secret only later (or a
    recipe saved before such values were refused) is masked here, at read time. Anything that is
    not JSON text (numbers, null) is returned as it is."""
    from controlplane.redaction import credential_mask_json, redact_text

    shown = credential_mask_json(snapshot)
    if not isinstance(shown, dict) or not isinstance(shown.get("processes"), list):
        return shown
    processes = []
    for process in shown["processes"]:
        if isinstance(process, dict):
            process = dict(process)
            if isinstance(process.get("argv"), list):
                process["argv"] = [redact_text(a) if isinstance(a, str) else a for a in process["argv"]]
            if isinstance(process.get("env_redacted"), dict):
                process["env_redacted"] = {k: redact_text(v) if isinstance(v, str) else v
                                           for k, v in process["env_redacted"].items()}
        processes.append(process)
    return {**shown, "processes": processes}


def served_model_name_shown(name):
    """A ``served_model_name`` as it is shown: made of the recipe's name where the spec gives
    none, so a stored secret's value in that name (saved before it was refused there) is masked
    here too (:func:`deployments.models.recipe_name_shown`)."""
    from deployments.models import recipe_name_shown

    return recipe_name_shown(name)


class BenchmarkSweep(models.Model):
    """A benchmark sweep: one deployment driven through a grid of points, point by point.

    ``grid`` is the validated grid (see :func:`benchmarks.sweeps.grid_validate`): concurrencies,
    ``[input_len, output_len]`` pairs, optional request rates, requests and/or a duration (seconds)
    per point, SLOs (seconds) and the wait for ready (seconds). ``deployment`` is the deployment it
    measured (``PROTECT``: a deployment with sweeps cannot be deleted, so measured results never lose
    what they measured; delete the sweeps first to delete it); null only on rows whose deployment
    was deleted before that rule, whose ``snapshot`` still names it (``deployment_id``, ``recipe``,
    ``recipe_version``) once the sweep started.
    Progress columns are for the UI: points and requests done / total (for points limited by time
    alone the column grows as they finish: how many requests fit is not known in advance, so it
    is shown only through :attr:`requests_total_known`) and the running point's output tok/s,
    from the load generator's own counts, written at most once a second. ``snapshot`` is what was running when the sweep started
    (recipe version, argv, env redacted, engine versions, pinning, node, client host, Ceiling
    version); ``analysis`` the ceiling report stored when the sweep finished (its ``version`` the
    analysis that made it; read it through :func:`benchmarks.services.sweep_stored_analysis`, which
    computes a report of another version again); ``num_gpus`` the GPU
    count used for per-GPU numbers (from the recipe, or ``spec.sim.gpus_modelled`` for sim).
    ``served_model_name`` and ``topology`` are copied so comparisons need no join.
    ``worker`` is ``host:pid`` of the process running the sweep (set when a task claims it) and
    ``heartbeat_at`` the last time that process said it was alive (every few seconds while it
    waits or runs); :func:`benchmarks.services.sweeps_reconcile` fails a sweep whose worker is gone.
    A deployment has at most one pending, waiting or running sweep (:data:`ONE_ACTIVE_SWEEP_CONSTRAINT`,
    enforced by the database).
    """

    deployment = models.ForeignKey(
        "deployments.Deployment", null=True, blank=True, on_delete=models.PROTECT, related_name="sweeps"
    )
    name = models.CharField(max_length=200, blank=True)
    grid = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=SweepStatus.choices, default=SweepStatus.PENDING)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    cancelled_by = models.CharField(max_length=150, blank=True,
                                    help_text="the name of the user who asked for the cancel, for the reason it records")
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True,
        help_text="when the cancel was first asked for (null before one was, and on rows older than this column): "
                  "a new sweep of the deployment refused meanwhile is told the running one is being cancelled")
    points_total = models.PositiveIntegerField(default=0)
    points_done = models.PositiveIntegerField(default=0)
    requests_total = models.PositiveIntegerField(default=0)
    requests_done = models.PositiveIntegerField(default=0)
    current_tok_s = models.FloatField(null=True, blank=True, help_text="output tok/s of the running point")
    current_point = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=255, blank=True, help_text="host:pid of the process running it")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    held_at = models.DateTimeField(
        null=True, blank=True,
        help_text="when its task last found it held back by a sweep of a deployment sharing a CPU or GPU with its "
                  "own (it stays pending); newer sweeps sharing with it queue behind it while this is recent")
    num_gpus = models.PositiveIntegerField(null=True, blank=True)
    served_model_name = models.CharField(max_length=255, blank=True, db_index=True)
    topology = models.CharField(max_length=16, blank=True)
    engine = models.CharField(max_length=16, blank=True)
    analysis = models.JSONField(default=dict, blank=True)
    snapshot = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]
        constraints = [
            # One active sweep per deployment: two at once would each measure the other's load.
            # A partial unique index, so the database refuses the second of two concurrent
            # creates (SQLite and PostgreSQL alike); sweep_create answers it with 409.
            models.UniqueConstraint(
                fields=["deployment"], condition=models.Q(status__in=sorted(s.value for s in SWEEP_ACTIVE)),
                name=ONE_ACTIVE_SWEEP_CONSTRAINT,
                violation_error_message="the deployment already has a pending, waiting or running sweep",
            ),
        ]

    def __str__(self) -> str:
        # a stored secret's value in the name (saved before it was refused there) shows masked
        from deployments.services import free_text_shown

        return free_text_shown(self.name) or f"sweep #{self.pk}"

    @property
    def name_renamed_parts(self) -> tuple[str, str, str]:
        """The name split where its deployment's recipe was renamed since it was deployed and the
        name leads with the name as deployed (as one made up from the recipe and grid does):
        ``("t1b", "t1b-renamed", " c=1 16/16")``, so the heading reads ``t1b (now t1b-renamed) c=1
        16/16`` as every other place naming the deployment does; else ``(name, "", "")``."""
        deployment = self.deployment
        renamed = deployment.recipe_renamed_to if deployment is not None else ""
        lead = deployment.deployed_recipe_name if renamed else ""
        if renamed and (self.name == lead or self.name.startswith(lead + " ")):
            return lead, renamed, self.name[len(lead):]
        return self.name, "", ""

    @property
    def name_label(self) -> str:
        """The name as the terminal heads the sweep: ``t1b (now t1b-renamed) c=1 16/16`` after a
        rename (:attr:`name_renamed_parts`), else the name."""
        lead, renamed, rest = self.name_renamed_parts
        return f"{lead} (now {renamed}){rest}" if renamed else lead

    @property
    def gpus_modelled(self) -> bool:
        """Whether :attr:`num_gpus` are modelled by a sim profile (:func:`gpus_are_modelled`)."""
        return gpus_are_modelled(engine=self.engine, num_gpus=self.num_gpus)

    @property
    def ending_text(self) -> str:
        """How the sweep ended, as a clause for a note on a cancelled or failed one: "the sweep
        was cancelled", "the sweep failed (<reason>)" ("the sweep failed" with no reason recorded);
        "the sweep is <status>" for any other status. ``failed`` is what happened to it, not
        something done to it, so it never reads "was failed"."""
        if self.status == SweepStatus.CANCELLED:
            return "the sweep was cancelled"
        if self.status == SweepStatus.FAILED:
            return f"the sweep failed ({self.reason})" if self.reason else "the sweep failed"
        return f"the sweep is {self.get_status_display()}"

    @property
    def has_open_ended_points(self) -> bool:
        """Whether a point of the grid is limited by time alone (``duration_s`` and no request
        count: a closed-loop point without ``requests`` or ``requests_per_concurrency``, an
        open-loop point without ``requests``), so the sweep's request total is not known before
        those points have run."""
        grid = self.grid or {}
        if grid.get("duration_s") is None or grid.get("requests") is not None:
            return False
        return bool(grid.get("request_rates")) or (bool(grid.get("concurrency"))
                                                   and grid.get("requests_per_concurrency") is None)

    @property
    def warmup_requests(self) -> int | None:
        """Warm-up requests each point sends at its load before it is measured (the grid's
        ``warmup``; 0 when the grid leaves it out), never counted in any figure of the point; None
        for a sweep without a grid (imported runs)."""
        grid = self.grid if isinstance(self.grid, dict) else None
        if not grid:
            return None
        warmup = grid.get("warmup")
        return warmup if isinstance(warmup, int) and not isinstance(warmup, bool) and warmup > 0 else 0

    @property
    def requests_total_known(self) -> int | None:
        """The requests the sweep sends in all, as far as it is known: ``requests_total`` (the
        planned count; a point that also has a time limit may end sooner, and then the total
        follows what it sent), but None while a point limited by time alone
        (:attr:`has_open_ended_points`) may still run, i.e. until such a sweep has ended (done,
        failed or cancelled): its count is what fits in its time, and a total that grows behind
        the requests done would read ``265/224``. Once it has ended the total is known: a done
        sweep's is its planned count (each point sent it, a time-limited one what fitted in its
        time); a sweep that failed, was stopped with its deployment or was cancelled counts for each
        point that ran what it sent and 0 for one that never ran (limited by time alone or with a
        request count alike), so it gives the requests it sent, aborted ones included. None too
        when that is not known (:attr:`requests_sent_unknown`: a point's worker was lost before
        any report counted what it sent), rather than a total that reads as complete."""
        if self.has_open_ended_points and self.status not in SWEEP_TERMINAL:
            return None
        if self.requests_sent_unknown:
            return None
        return self.requests_total

    @property
    def requests_sent_unknown(self) -> bool:
        """Whether the ended sweep's requests sent are unknown: a point was running when the
        worker running the sweep was lost, and its last progress report did not count the requests
        it had sent (written before that count was kept, or none came), so the process took how
        many it had in flight with it (its progress's ``requests_sent`` is null,
        :func:`benchmarks.services.sweeps.lost_point_progress`). ``requests_total`` then counts
        only what is known to have been sent. Reads the runs only for a failed or cancelled sweep
        whose reason names a lost worker."""
        from benchmarks.sweeps import WORKER_LOST

        if self.status not in (SweepStatus.FAILED, SweepStatus.CANCELLED) or "worker lost" not in (self.reason or ""):
            return False
        return self.runs.filter(progress__ended_by=WORKER_LOST, progress__requests_sent=None).exists()


# Fields of a run a list never shows and that can be large: an imported run's text (up to the
# 16 MB import cap). Lists defer them so a page of runs does not read megabytes per row.
RUN_LIST_DEFERRED = ("original_text",)
# What admin defers besides: the JSON a changelist or a delete confirmation never shows (a
# summary with its error counts, the deployment snapshot, the live progress).
RUN_ADMIN_DEFERRED = (*RUN_LIST_DEFERRED, "summary", "snapshot", "progress")


class BenchmarkRun(models.Model):
    """One grid point of a sweep (or one imported run).

    Point parameters: ``concurrency`` (closed-loop slots, null for open loop), ``request_rate``
    (requests/s, null for closed loop), ``input_len`` / ``output_len`` (requested tokens; null when
    an imported run's lengths varied), ``num_requests`` (requests sent, once the run is done),
    ``api`` (``generate``, ``completions``,
    ``chat``). ``summary`` is :func:`benchmarks.loadgen.run_summary` for measured runs (latencies in
    seconds, ``ttft_s``) and :meth:`benchmarks.importers.ImportedRun.as_dict` with the measured-run
    keys added for imported ones (latencies in ms, ``ttft_ms``): each value in the unit its key names.
    ``flags`` lists the raised flags (``output_length_mismatch`` ...). Indexed scalars copy the
    summary for sorting: ``output_tok_s`` (tok/s), ``ttft_p99_ms`` / ``tpot_mean_ms`` (ms).
    ``records_path`` is the ``.npz`` of per-request records (measured runs only). Imported runs
    keep their part of the original file in ``original_text`` (the whole file when it held one run,
    else the run's own line: :func:`benchmarks.services.runs.run_original_text`), the file's name in
    ``original_filename`` and the SHA-256 of the whole file's UTF-8 bytes in ``original_sha256``
    (hex), and in ``record_sha256`` the SHA-256 of the run's own record read as JSON and written
    canonically (:func:`benchmarks.importers.record_digest`; "" where it could not be read): how a
    second import of the same result is recognised, whatever file holds it
    (:func:`benchmarks.services.run_import`). The database holds one imported run per record
    (:data:`ONE_IMPORT_PER_RECORD_CONSTRAINT`) besides those imported again on purpose
    (``allowed_duplicate``: an import with ``allow_duplicate`` of a record an earlier run held).
    Lists defer ``original_text`` (:data:`RUN_LIST_DEFERRED`).

    ``started_at`` / ``ended_at`` are when a measured run ran. An imported run has neither (null):
    the import is not when the benchmark ran, and its file gives at most a local time without a
    zone (vLLM's ``date``, kept in the summary and read by
    :func:`benchmarks.importers.result_date`); ``created_at`` is when it was imported.

    ``duration_s`` is the point's time limit in seconds (null: it ends when its requests are
    done; with both, whichever comes first). ``progress`` is the live state of a running point as
    the load generator reports it: ``{"done", "total", "failed", "aborted", "output_tokens", "elapsed_s",
    "tok_s", "tok_s_mean", "duration_s", "updated_at"}`` (counts of measured requests: ``done`` those
    that finished, ``failed`` those of them that failed, ``aborted`` those a stop ended in flight,
    in neither; seconds,
    output tok/s over the last report window of about 0.5 s, output tok/s since the point's first
    request (null before any token), ISO time of the write), written at most once per second.
    Before that, while the point's prompts are built, it is ``{"phase": "preparing prompts",
    "prepared", "total", "duration_s", "total_sent_so_far", "updated_at"}`` (prompts built so far
    and to build, warmup prompts included), written as often; then, while its warm-up requests
    run, ``{"phase": "warming up", "warmup_done", "warmup_total", "warmup_elapsed_s", "duration_s",
    "total_sent_so_far", "updated_at"}`` (warm-up requests that ended and to send, seconds since
    the warm-up began; never counted in ``done`` or the sweep's ``requests_done``), written as often.
    A point stopped (a cancel, its deployment going down) in either phase, before its first measured
    request, keeps that phase's last counts with ``phase`` replaced by ``"ended_during": <the phase>``
    and ``"requests_sent": 0``, so a stopped point never reads as still in it.
    """

    sweep = models.ForeignKey(BenchmarkSweep, null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    ordinal = models.PositiveIntegerField(default=0, help_text="position in the sweep's grid")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=RunSource.choices, default=RunSource.MEASURED)
    import_format = models.CharField(max_length=32, choices=ImportFormat.choices, blank=True)
    original_filename = models.CharField(max_length=255, blank=True)
    original_text = models.TextField(blank=True)
    original_sha256 = models.CharField(max_length=64, blank=True, db_index=True,
                                       help_text="SHA-256 (hex) of the imported file's UTF-8 bytes")
    record_sha256 = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="SHA-256 (hex) of an imported run's own record as canonical JSON; how a result imported again is "
                  "recognised")
    allowed_duplicate = models.BooleanField(
        default=False, help_text="imported with allow_duplicate while an earlier run held the same record")
    source_line = models.PositiveIntegerField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    request_rate = models.FloatField(null=True, blank=True, help_text="requests/s; null = closed loop")
    input_len = models.PositiveIntegerField(null=True, blank=True)
    output_len = models.PositiveIntegerField(null=True, blank=True)
    num_requests = models.PositiveIntegerField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True, help_text="time limit of the point in seconds")
    api = models.CharField(max_length=32, blank=True)
    served_model_name = models.CharField(max_length=255, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    flags = models.JSONField(default=list, blank=True)
    num_gpus = models.PositiveIntegerField(null=True, blank=True)
    snapshot = models.JSONField(default=dict, blank=True)
    records_path = models.CharField(max_length=1024, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    output_tok_s = models.FloatField(null=True, blank=True, db_index=True)
    request_rate_achieved = models.FloatField(null=True, blank=True, help_text="successful requests/s")
    ttft_p99_ms = models.FloatField(null=True, blank=True, db_index=True)
    tpot_mean_ms = models.FloatField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep_id", "ordinal", "id"]
        indexes = [models.Index(fields=["source", "status"])]
        constraints = [
            # One imported run per result record: two copies of one result would count twice in
            # every comparison. A partial unique index, so the database refuses the second of two
            # concurrent imports of one record (SQLite and PostgreSQL alike); run_import skips it
            # then as it skips a record found imported before.
            models.UniqueConstraint(
                fields=["record_sha256"],
                condition=models.Q(source=RunSource.IMPORTED, allowed_duplicate=False) & ~models.Q(record_sha256=""),
                name=ONE_IMPORT_PER_RECORD_CONSTRAINT,
                violation_error_message="this result record was already imported",
            ),
        ]

    def __str__(self) -> str:
        return f"run #{self.pk}"

    @property
    def label(self) -> str:
        """``c=8 256/256`` or ``2 req/s 256/256``: the point in words. A run with a request rate
        and a concurrency cap (an imported file's ``request_rate`` and ``max_concurrency``: an open
        loop sending at that rate, a request due while the cap is in flight waiting for one to end)
        is ``4 req/s (at most 8 in flight) 256/256``, never ``c=8``: it was not a closed loop.
        Without fixed lengths it says why: ``variable lengths`` when the lengths were drawn from a
        range (flag ``variable_lengths``), ``lengths unknown`` when the source did not record them
        (flag ``lengths_unknown``, or no flag saying they varied)."""
        if self.request_rate is not None:
            load = f"{self.request_rate:g} req/s" + (
                f" (at most {self.concurrency} in flight)" if self.concurrency is not None else "")
        else:
            load = f"c={self.concurrency}" if self.concurrency is not None else "unbounded"
        if self.input_len and self.output_len:
            lengths = f"{self.input_len}/{self.output_len}"
        elif "variable_lengths" in (self.flags or []) and "lengths_unknown" not in (self.flags or []):
            lengths = "variable lengths"
        else:
            lengths = "lengths unknown"
        return f"{load} {lengths}"
