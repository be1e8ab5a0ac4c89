"""Kernel jobs: create (the grid expanded into variants, the task enqueued on the node's queue after
commit), cancel (a column), execute (the task body: the runner's ``compile``, then ``bench`` on a
node with a GPU of the target), and reaping of jobs whose agent died.

One kernel job runs per node at a time (building or benchmarking; the database's
``kernels_one_running_job_per_node`` constraint): a build uses every core of the node and a
benchmark needs its GPU alone, so two jobs at once would skew each other's timings. A job whose
node is busy stays pending with the note "waiting for kernel job #<id> on node <name> to finish
(...)"; its task is sent again every :data:`NODE_BUSY_RETRY_S` seconds, and a job that ends sends
the oldest pending job of its node at once (:func:`_start_next_on_node`).

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

import json
import time
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, TextField, Value, When
from django.utils import timezone

from controlplane.errors import Conflict, InvalidInput
from controlplane.jsonsafe import json_spelled
from controlplane.redaction import redact_text
from kernels.choices import JOB_RUNNING, JOB_TERMINAL, KernelJobStatus
from kernels.manifest import (
    ManifestError, grid_expand, grid_for_target, grid_refusal, pruned_entry, variant_key, variant_shown,
)
from kernels.models import KernelJob, KernelPackage, KernelVariant
from kernels.runnercall import RunnerError, RunnerStopped, runner_argv, runner_run
from kernels.services.common import (
    CC_RE,
    KNOWN_CCS,
    MAX_JOB_VARIANTS,
    NO_GPU_PREFIX,
    PROGRESS_PERIOD_S,
    _step_timeout,
    _write_json,
    builds_only_plan_note,
    jobs_dir,
    log,
    no_gpu_note,
    package_dir_of,
    package_manifest,
    variants_payload,
)
from kernels.services.progress import (
    NODE_BUSY_NOTE,
    NODE_BUSY_PREFIX,
    _broadcast,
    _Cancelled,
    _check_cancel,
    _finish,
    _progress,
    _status,
    _transition,
    running_job_on_node,
)
from kernels.services.results import kernel_builds_store, kernel_results_store

# A pending job whose node runs another kernel job has its task sent again after this many
# seconds (the job that ends sends the next one at once; this is the fallback when that message
# is lost).
NODE_BUSY_RETRY_S = 60

# How many times a claim refused by the one-job-per-node constraint is tried again when the job
# holding the node ended in between.
_CLAIM_ATTEMPTS = 3

# The note of a job waiting for its node is dropped when it starts or is cancelled; other notes stay.
_NOTE_WITHOUT_WAIT = Case(When(note__startswith=NODE_BUSY_PREFIX, then=Value("")), default=F("note"),
                          output_field=TextField())
# A job cancelled before it started also drops the "builds only" note it was created with: nothing
# will be built.
_NOTE_NOT_STARTED = Case(When(note__startswith=NODE_BUSY_PREFIX, then=Value("")),
                         When(note__startswith=NO_GPU_PREFIX, then=Value("")), default=F("note"),
                         output_field=TextField())
# A job dispatched to its node, to be run there when the node is free: its note is empty, says it
# waits for the node, or says the node has no GPU for it (builds only). A job waiting for builds and
# results measured elsewhere has another note.
_DISPATCHED = Q(note="") | Q(note__startswith=NODE_BUSY_PREFIX) | Q(note__startswith=NO_GPU_PREFIX)


def kernel_job_create(*, package: KernelPackage, node, cc: str | None = None, params_subset: dict | None = None,
                      shapes: list[str] | None = None, batches: list[int] | None = None, user=None,
                      dispatch: bool = True, only: list[dict] | None = None, only_ids: list | None = None) -> KernelJob:
    """Create a job of ``package`` for compute capability ``cc`` on ``node`` and enqueue it.

    ``cc`` defaults to the compute capability of the node's first GPU; a node without GPUs needs
    it given (builds for a named target need no GPU). A job dispatched to a node without a GPU of
    ``cc`` is created with the note that says so (:func:`~kernels.services.common.builds_only_plan_note`:
    "no GPU on node <name>: builds only: N variants are built ... but none is checked against the
    reference or timed, and the job ends done after the builds ..."), so the answer that created it
    already tells what it will do. ``params_subset`` restricts the grid
    (``{"impl": ["split_k"]}``), ``shapes`` and ``batches`` the benchmark (default: all the
    manifest declares; a name or size given twice is kept once, shapes in the order first given,
    batches sorted). The grid is expanded now: one :class:`KernelVariant` per surviving
    combination. With ``dispatch`` the task goes to the node's queue ``node.<name>`` after the
    transaction commits; without it (or with ``node`` None) the job waits for builds and results
    measured elsewhere (:func:`kernel_job_ingest`).

    ``only`` (a list of param dicts) keeps exactly those variants of the (subset) grid, in that
    order: a measured set brought back from another machine. A param set the grid does not hold
    (unknown value, missing parameter, refused by a constraint) is an error naming it, its
    ``only_ids`` entry (the id the measuring machine gave it) and why
    (:func:`kernels.manifest.grid_refusal`); every such entry is reported. The grid variants not in
    ``only`` are counted in the grid summary's ``pruned`` (``"index": null, "source": "variants_file"``), so its counts
    add up to ``combinations``.

    ``cc`` must be one of :data:`kernels.services.common.KNOWN_CCS` (a made-up one such as 99.9
    would only fail later in the compiler). Variants the manifest's ``[cuda].requires`` refuses
    for ``cc`` (e.g. sm_90a-only wgmma code for a 12.0 target) are left out, counted in the grid
    summary's ``pruned``.

    Raises :class:`InvalidInput` with keys ``cc``, ``params.<param>``, ``shapes``, ``batches``,
    ``node`` or ``variants`` (an empty or too large grid, or an ``only`` entry outside the grid).
    """
    cc, shapes, batches, expansion, errors = _job_plan(
        package=package, node=node, cc=cc, params_subset=params_subset, shapes=shapes, batches=batches,
        dispatch=dispatch, only=only, only_ids=only_ids)
    if errors:
        raise InvalidInput(errors)
    assert expansion is not None
    with transaction.atomic():
        job = KernelJob.objects.create(
            package=package, package_hash=package.source_hash, manifest=package.manifest, node=node,
            target_cc=cc, params_subset=expansion.subset or {}, shapes=shapes, batches=batches,
            grid_summary=expansion.as_dict(), variants_total=len(expansion.variants),
            created_by=user if getattr(user, "pk", None) else None,
            note=(builds_only_plan_note(node=node, cc=cc, variants=len(expansion.variants)) or "")
            if dispatch and node is not None else
            "waiting for builds and results measured elsewhere (manage.py kernel_job_export / kernel_job_ingest)",
        )
        KernelVariant.objects.bulk_create([
            KernelVariant(job=job, ordinal=i, key=variant_key(p), params=p) for i, p in enumerate(expansion.variants)
        ])
        if dispatch and node is not None:
            kernel_job_enqueue(job=job)
    return job


def cc_problem(cc) -> str | None:
    """Why ``cc`` is no target compute capability (not written as ``9.0`` or ``12.0``, or not one
    of :data:`KNOWN_CCS`), else None: judged alone, so a job body whose package is unknown still
    has its ``cc`` named."""
    if not isinstance(cc, str) or not CC_RE.match(cc):
        return f"{json_spelled(cc)} is not a compute capability such as 9.0 or 12.0"
    if cc not in KNOWN_CCS:
        return f"{json_spelled(cc)} is not a known compute capability; known (NVIDIA's CUDA GPUs list): {', '.join(KNOWN_CCS)}"
    return None


def kernel_job_check(*, package: KernelPackage, node, cc: str | None = None, params_subset: dict | None = None,
                     shapes: list[str] | None = None, batches: list[int] | None = None,
                     dispatch: bool = True) -> dict[str, list[str]]:
    """Every reason :func:`kernel_job_create` would refuse these arguments for, without creating
    anything: ``{field: [messages]}`` with the keys it raises (``cc``, ``params.<param>``,
    ``shapes``, ``batches``, ``node``, ``variants``), ``{}`` when the job can be created. For forms
    that must report all their problems at once, including when some fields could not be read."""
    return _job_plan(package=package, node=node, cc=cc, params_subset=params_subset, shapes=shapes,
                     batches=batches, dispatch=dispatch, only=None)[4]


def _job_plan(*, package: KernelPackage, node, cc: str | None, params_subset: dict | None,
              shapes: list[str] | None, batches: list[int] | None, dispatch: bool, only: list[dict] | None,
              only_ids: list | None = None):
    """Validate a job's arguments (the rules of :func:`kernel_job_create`) and expand its grid.
    Returns ``(cc, shapes, batches, expansion, errors)``: the target (the node's GPU when none was
    given), the shapes (each once, in the order first given) and the sorted batches (each once), the :class:`~kernels.manifest.GridExpansion` (None when
    the subset is refused) and every problem found."""
    manifest = package_manifest(package)
    errors: dict[str, list[str]] = {}
    if cc in (None, ""):
        first = node.gpus.exclude(compute_capability="").order_by("index").first() if node is not None else None
        if first is None:
            errors["cc"] = ["give the target compute capability (e.g. 9.0): "
                            + (f"node {node.name} has no GPU to take it from" if node is not None else "no node")]
        else:
            cc = first.compute_capability
    elif why := cc_problem(cc):
        errors["cc"] = [why]
    shape_names = [s.name for s in manifest.shapes]
    shapes = _first_seen(shapes or [])
    for s in shapes:
        if s not in shape_names:
            errors.setdefault("shapes", []).append(
                f"{json_spelled(s)} is not a shape of {package.name} ({', '.join(shape_names)})")
    all_batches = sorted({b for s in manifest.shapes for b in s.batches})
    batches = sorted(set(batches or []))
    for b in batches:
        if not isinstance(b, int) or isinstance(b, bool) or b not in all_batches:
            errors.setdefault("batches", []).append(
                f"{json_spelled(b)} is not a batch size of the manifest ({all_batches})")
    if dispatch and node is None:
        errors["node"] = ["a job that runs here needs a node (or create it for results measured elsewhere)"]
    try:
        expansion = grid_expand(manifest, params_subset or None)
        if cc and "cc" not in errors:
            # variants the target cannot build (the manifest's [cuda].requires), left out before building
            grid_for_target(manifest, expansion, cc)
    except ManifestError as exc:
        errors.update(exc.errors)
        expansion = None
    if expansion is not None and only is not None:
        # Matched on sorted params: a manifest read back from PostgreSQL's jsonb has its grid in
        # another key order than the file the variants were written from.
        grid = {_canonical(p): p for p in expansion.variants}
        kept, seen = [], set()
        for i, params in enumerate(only):
            key = _canonical(params) if isinstance(params, dict) else None
            if key is None or key not in grid:
                name = f"variants.{i}" + (f" (variant_id {json_spelled(only_ids[i])})" if only_ids else "")
                shown = variant_shown(params)[:200] if isinstance(params, dict) else str(params)[:200]
                why = grid_refusal(manifest, params, subset=expansion.subset, cc=cc if "cc" not in errors else None)
                errors.setdefault("variants", []).append(
                    f"{name}: {shown} is not in {package.name}'s grid: {why or 'it is not a variant of the grid'}")
            elif key not in seen:
                seen.add(key)
                kept.append(grid[key])
        left_out = len(expansion.variants) - len(kept)
        if left_out:
            # the grid summary adds up: combinations = variants + every pruned count
            expansion.pruned.append(pruned_entry(index=None, source="variants_file",
                                                 constraint="not among the measured variants", pruned=left_out))
        expansion.variants = kept
    if expansion is not None and "variants" not in errors:
        if not expansion.variants:
            req = (manifest.cuda or {}).get("requires")
            errors["variants"] = ["the grid (with this subset) leaves no variant: every combination breaks a constraint"
                                  + (f" or [cuda].requires ({req}) for compute capability {cc}" if req else "")]
        elif len(expansion.variants) > MAX_JOB_VARIANTS:
            errors["variants"] = [f"{len(expansion.variants)} variants; at most {MAX_JOB_VARIANTS} per job "
                                  "(restrict the grid with params)"]
    return cc, shapes, batches, expansion, errors


def _first_seen(items: list) -> list:
    """``items`` with repeats dropped, in the order each first appears (``["v32", "v32", "v8"]``
    gives ``["v32", "v8"]``); items need not be hashable."""
    out: list = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _canonical(params: dict) -> str:
    """Order-independent identity of a param set (JSON with sorted keys)."""
    import json

    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def kernel_job_enqueue(*, job: KernelJob) -> None:
    """Send ``kernel_job_run_task(job.id)`` to ``node.<name>`` once the current transaction commits."""
    from kernels.tasks import kernel_job_run_task

    job_id, queue = job.pk, job.node.queue_name
    transaction.on_commit(lambda: kernel_job_run_task.apply_async(args=[job_id], queue=queue))


def kernel_job_wait_for_node(*, job_id: int, countdown_s: float = NODE_BUSY_RETRY_S) -> bool:
    """Send ``kernel_job_run_task(job_id)`` to its node's queue again in ``countdown_s`` seconds,
    when the job is still pending because its node runs another kernel job. Returns whether a
    message was sent; never raises (a failed send is logged: the job that holds the node sends
    the next one when it ends, :func:`_start_next_on_node`)."""
    job = (KernelJob.objects.select_related("node")
           .filter(pk=job_id, status=KernelJobStatus.PENDING, cancel_requested=False, node__isnull=False).first())
    if job is None:
        return False
    return _send(job, countdown_s=countdown_s, retry_when_busy=True)


def _send(job: KernelJob, *, countdown_s: float | None = None, retry_when_busy: bool = True) -> bool:
    """Publish ``kernel_job_run_task`` for ``job`` on its node's queue now (not on commit).
    ``retry_when_busy`` False marks a message sent by the job that freed the node: when it finds
    the node busy again, the waiting job's own resend (:func:`kernel_job_wait_for_node`) already
    runs, so it sends nothing more. Returns False (logged) when the broker refused it."""
    from kernels.tasks import kernel_job_run_task

    try:
        kernel_job_run_task.apply_async(args=[job.pk], kwargs={} if retry_when_busy else {"retry_when_busy": False},
                                        queue=job.node.queue_name, countdown=countdown_s)
    except Exception:  # the broker is down: the resend or the next job's end will try again
        log.exception("kernel job %s: could not send its task to %s", job.pk, job.node.queue_name)
        return False
    return True


def _start_next_on_node(node_id: int | None) -> int | None:
    """When node ``node_id`` runs no kernel job, send the task of its oldest pending job that
    waits for it (a dispatched job: its note is empty or says it waits for the node) at once, so
    waiting jobs start in the order they were created, without waiting for their resend (a
    "builds only" note counts as empty). Returns
    that job's id, None when nothing was sent. Never raises (called once a job ended)."""
    if node_id is None:
        return None
    try:
        if running_job_on_node(node_id=node_id) is not None:
            return None
        nxt = (KernelJob.objects.select_related("node")
               .filter(node_id=node_id, status=KernelJobStatus.PENDING, cancel_requested=False)
               .filter(_DISPATCHED)
               .order_by("created_at", "id").first())
        if nxt is None or not _send(nxt, retry_when_busy=False):
            return None
        return nxt.pk
    except Exception:
        log.exception("could not start the next kernel job of node %s", node_id)
        return None


def kernel_job_cancel(*, job: KernelJob, user=None) -> KernelJob:
    """Request cancellation: ``cancel_requested`` is set first (the running task ends the runner
    within :data:`kernels.runnercall.POLL_S` s and marks the job cancelled); a job no task has
    claimed yet, one waiting for its node included, is cancelled at once (its note that it waits
    for the node is dropped; a later delivery of its task does nothing). Raises :class:`Conflict`
    for a job that already ended. Who asked is stored with the flag (``cancelled_by``), so the
    reason names them whoever ends the job: ``cancelled by <user>`` for a running job,
    ``cancelled by <user> before it started`` for one that had not started."""
    if job.status in JOB_TERMINAL:
        raise Conflict(f"kernel job #{job.pk} is already {job.status}")
    name = user.get_username() if getattr(user, "pk", None) else ""
    KernelJob.objects.filter(pk=job.pk).update(cancel_requested=True, cancelled_by=name)
    KernelJob.objects.filter(pk=job.pk, status=KernelJobStatus.PENDING).update(
        status=KernelJobStatus.CANCELLED, reason=_cancel_reason(job.pk, "before it started"),
        ended_at=timezone.now(), note=_NOTE_NOT_STARTED)
    job.refresh_from_db()
    _broadcast(job.pk, force=True)
    return job


def _cancel_reason(job_id: int, when: str = "") -> str:
    """``cancelled by <user>`` (with `` <when>`` after it) for a cancel someone asked for
    (:func:`kernel_job_cancel` stores the name with the flag), else ``cancelled on request``, or
    ``cancelled <when>``."""
    name = KernelJob.objects.filter(pk=job_id).values_list("cancelled_by", flat=True).first()
    what = f"cancelled by {name}" if name else ("cancelled" if when else "cancelled on request")
    return f"{what} {when}" if when else what


def kernel_job_execute(*, job_id: int) -> str:
    """Run job ``job_id`` here (the body of :func:`kernels.tasks.kernel_job_run_task`); blocking.

    One kernel job runs per node at a time: a build uses every core and a benchmark needs the GPU
    alone. When another job of the node is building or benchmarking, the job is not claimed: it
    stays pending, its ``note`` says "waiting for kernel job #<id> on node <name> to finish (...)"
    (:data:`NODE_BUSY_NOTE`) and this returns ``"pending"`` (the task sends itself again,
    :func:`kernel_job_wait_for_node`). A claim the database refuses
    (``kernels_one_running_job_per_node``, a race with another claim) is treated the same way.
    When the job ends, the oldest pending job of its node is sent at once (:func:`_start_next_on_node`).

    Claims pending → building with a conditional UPDATE (a second delivery does nothing), writes
    ``variants.json`` in the job's work directory, runs the runner's ``compile`` for the job's
    target (progress on the row and broadcast on ``kernel-job-<id>``), stores the build facts
    (:func:`kernel_builds_store`) as they finish (:class:`_PartialBuilds`; a cancelled or failed
    compile keeps the builds done so far) and then from the whole ``builds.json``. Then, when the node has a GPU of the target compute capability,
    building → benchmarking, runs ``bench`` over the variants that built and were not discarded,
    and stores the results (:func:`kernel_results_store`: best variants and exported configs);
    otherwise it ends done with the note "no GPU on node <name>: builds only" (the longer note the
    job was created with, which said so up front, is replaced by it; notes the builds added stay).
    A job created as builds only whose node has a GPU of the target by now is benchmarked, its
    "builds only" note dropped. Ends done, failed
    (``reason``: the runner's error and last lines) or cancelled. Returns the final status.
    """
    now = timezone.now()
    claimed, running = _claim(job_id, now)
    if not claimed:
        if running is not None:
            _note_waiting(job_id, running)
        KernelJob.objects.filter(pk=job_id, status=KernelJobStatus.PENDING, cancel_requested=True).update(
            status=KernelJobStatus.CANCELLED, reason=_cancel_reason(job_id, "before it started"), ended_at=now,
            note=_NOTE_NOT_STARTED)
        return KernelJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"
    _broadcast(job_id, force=True)
    job = KernelJob.objects.select_related("package", "node").get(pk=job_id)
    try:
        return _execute_claimed(job)
    finally:
        _start_next_on_node(job.node_id)


def _claim(job_id: int, now) -> tuple[bool, int | None]:
    """Claim job ``job_id``: pending → building, unless a cancel was requested or its node runs
    another kernel job. Returns ``(claimed, running)``: ``running`` is the id of the job that holds
    the node when that is why it was not claimed (None otherwise). The constraint's IntegrityError
    (another claim won the node between the check and the UPDATE) counts as "busy"; when the job
    that held the node ended meanwhile, the claim is tried again (:data:`_CLAIM_ATTEMPTS` times)."""
    node_id = KernelJob.objects.filter(pk=job_id).values_list("node_id", flat=True).first()
    claimable = KernelJob.objects.filter(pk=job_id, status=KernelJobStatus.PENDING, cancel_requested=False)
    running = None
    for _ in range(_CLAIM_ATTEMPTS):
        running = running_job_on_node(node_id=node_id, exclude=job_id)
        if running is not None:
            return False, (running if claimable.exists() else None)
        try:
            with transaction.atomic():
                claimed = claimable.update(status=KernelJobStatus.BUILDING, started_at=now, phase="compile",
                                           progress_done=0, reason="", note=_NOTE_WITHOUT_WAIT)
        except IntegrityError:
            continue
        return bool(claimed), None
    running = running_job_on_node(node_id=node_id, exclude=job_id)
    return False, (running if claimable.exists() else None)


def _note_waiting(job_id: int, running: int) -> None:
    """Write on pending job ``job_id`` that it waits for job ``running`` on its node
    (:data:`NODE_BUSY_NOTE`) and broadcast it; another note (e.g. waiting for results measured
    elsewhere, or builds only: the job's ``waiting_reason`` still says what it waits for) is kept."""
    node = KernelJob.objects.filter(pk=job_id).values_list("node__name", flat=True).first()
    text = NODE_BUSY_NOTE.format(running=running, node=node)
    changed = (KernelJob.objects.filter(pk=job_id, status=KernelJobStatus.PENDING)
               .filter(Q(note="") | Q(note__startswith=NODE_BUSY_PREFIX)).exclude(note=text).update(note=text))
    if changed:
        log.info("kernel job %s waits for kernel job %s on node %s", job_id, running, node)
        _broadcast(job_id, force=True)


def _execute_claimed(job: KernelJob) -> str:
    """The body of :func:`kernel_job_execute` once ``job`` is claimed (building): compile, then
    bench; ends the job done, failed or cancelled. Returns the final status."""
    job_id = job.pk
    work = jobs_dir() / str(job.pk)
    stop = lambda: KernelJob.objects.filter(pk=job_id, cancel_requested=True).exists()  # noqa: E731
    try:
        package_dir = package_dir_of(job.package)
        variants_file = _write_json(work / "variants.json", variants_payload(job=job))
        total = job.variants_total
        _progress(job.pk, "compile", 0, total, force=True)
        partial = _PartialBuilds(job.pk, work / "builds.json.partial")

        def on_compile(done: int, total_: int) -> None:
            _progress(job.pk, "compile", done, total_)
            partial.store()

        compile_started = time.monotonic()
        try:
            outcome = runner_run(
                runner_argv("compile", package_dir=package_dir, variants=variants_file, out=work / "builds.json",
                            target=job.target),
                out=work / "builds.json", timeout_s=_step_timeout(), should_stop=stop, log_path=work / "runner.log",
                on_progress=on_compile)
        except (RunnerStopped, RunnerError):
            partial.store(force=True)  # a cancelled or failed compile keeps the builds it finished
            # ... and the time it ran until then (built_at stays empty: the step did not finish)
            KernelJob.objects.filter(pk=job.pk).update(build_s=round(time.monotonic() - compile_started, 3))
            raise
        partial.discard()
        KernelJob.objects.filter(pk=job.pk).update(build_s=round(outcome.wall_s, 3), built_at=timezone.now())
        counts = kernel_builds_store(job_id=job.pk, payload=outcome.payload)
        _progress(job.pk, "compile", total, total, force=True)
        _check_cancel(job.pk)
        no_gpu = no_gpu_note(node=job.node, cc=job.target_cc)
        # the notes the builds added, without the "builds only" one the job was created with
        others = [n for n in (KernelJob.objects.filter(pk=job.pk).values_list("note", flat=True).first() or "").split("; ")
                  if n and not n.startswith(NO_GPU_PREFIX)]
        if no_gpu is not None:
            _finish(job.pk, KernelJobStatus.DONE, "", note="; ".join([no_gpu, *others]))
            return _status(job.pk)
        KernelJob.objects.filter(pk=job.pk, note__startswith=NO_GPU_PREFIX).update(note="; ".join(others))
        if counts["ok"] - counts["discarded"] <= 0:
            _finish(job.pk, KernelJobStatus.FAILED,
                    f"no variant is left to benchmark: {counts['failed']} failed to build, "
                    f"{counts['discarded']} discarded")
            return _status(job.pk)
        if not _transition(job.pk, {KernelJobStatus.BUILDING}, KernelJobStatus.BENCHMARKING, phase="bench",
                           progress_done=0):
            return _status(job.pk)
        bench_file = _write_json(work / "variants-bench.json", variants_payload(job=job, only_buildable=True))
        bench_started = time.monotonic()
        try:
            outcome = runner_run(
                runner_argv("bench", package_dir=package_dir, variants=bench_file, out=work / "results.json",
                            shapes=job.shapes or None, batches=job.batches or None),
                out=work / "results.json", timeout_s=_step_timeout(), should_stop=stop, log_path=work / "runner.log",
                on_progress=lambda d, t: _progress(job.pk, "bench", d, t))
        except (RunnerStopped, RunnerError):
            KernelJob.objects.filter(pk=job.pk).update(bench_s=round(time.monotonic() - bench_started, 3))
            raise
        KernelJob.objects.filter(pk=job.pk).update(bench_s=round(outcome.wall_s, 3))
        kernel_results_store(job_id=job.pk, payload=outcome.payload)
        _finish(job.pk, KernelJobStatus.DONE, "")
    except (_Cancelled, RunnerStopped):
        _finish(job.pk, KernelJobStatus.CANCELLED, _cancel_reason(job.pk))
    except RunnerError as exc:
        _finish(job.pk, KernelJobStatus.FAILED, redact_text(str(exc)))
    except InvalidInput as exc:
        _finish(job.pk, KernelJobStatus.FAILED, redact_text(f"the runner's output was refused: {exc}"))
    except Exception as exc:  # the row must say why; the traceback goes to the log
        log.exception("kernel job %s failed", job_id)
        _finish(job.pk, KernelJobStatus.FAILED, redact_text(f"{type(exc).__name__}: {exc}"))
    return _status(job.pk)


class _PartialBuilds:
    """Builds stored while the runner's ``compile`` still works: it appends one JSON line per
    finished variant to ``builds.json.partial`` (:func:`kernels.runner.__main__.partial_path`);
    :meth:`store` reads the lines added since the last call and stores them
    (:func:`kernel_builds_store`, idempotent), at most every :data:`PROGRESS_PERIOD_S` seconds
    unless ``force``. So the variant table fills as builds finish, and a cancelled job keeps them."""

    def __init__(self, job_id: int, path) -> None:
        self.job_id, self.path, self.offset, self.last = job_id, path, 0, 0.0

    def store(self, *, force: bool = False) -> int:
        """Store the complete lines added since the last call; returns how many were stored.
        Never raises: a line the store refuses is logged (the final ``builds.json`` still counts)."""
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_PERIOD_S:
            return 0
        self.last = now
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return 0
        end = data.rfind(b"\n") + 1
        self.offset += end
        items = []
        for line in data[:end].splitlines():
            try:
                items.append(json.loads(line))
            except ValueError:
                log.warning("kernel job %s: unreadable line in %s", self.job_id, self.path)
        if not items:
            return 0
        try:
            kernel_builds_store(job_id=self.job_id, payload=items)
        except InvalidInput as exc:
            log.warning("kernel job %s: partial builds refused: %s", self.job_id, exc)
            return 0
        return len(items)

    def discard(self) -> None:
        """Remove the partial file once the whole ``builds.json`` was read."""
        try:
            self.path.unlink()
        except OSError:
            pass


def kernel_jobs_reap(*, stale_after_s: float | None = None) -> int:
    """Fail jobs stuck in building or benchmarking whose row has not changed for
    ``stale_after_s`` seconds (default: the step timeout + 10 minutes), e.g. after the node agent
    running them died; each failed job's node then gets its oldest waiting job sent
    (:func:`_start_next_on_node`: one kernel job per node, so the node was held until now).
    Returns how many were failed."""
    limit = stale_after_s if stale_after_s is not None else _step_timeout() + 600
    cutoff = timezone.now() - timedelta(seconds=limit)
    stale = list(KernelJob.objects.filter(status__in=list(JOB_RUNNING), updated_at__lt=cutoff)
                 .values_list("pk", "node_id"))
    for job_id, node_id in stale:
        _finish(job_id, KernelJobStatus.FAILED, f"no progress for {limit:.0f} s: the node agent running it stopped")
        _start_next_on_node(node_id)
    return len(stale)
