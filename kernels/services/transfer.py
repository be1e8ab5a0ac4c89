"""Jobs that travel: export for a machine without Django and ingest of what it measured (through
the same store functions), a job's measurements as CSV or JSON, and its variant table as CSV.

Part of :mod:`kernels.services`, which lists the rules and where they come from.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.csvsafe import csv_text
from controlplane.errors import Conflict, InvalidInput, NotFound
from controlplane.jsonsafe import json_safe, json_spelled
from kernels.choices import JOB_RUNNING, KernelJobStatus
from kernels.manifest import grid_summary_read
from kernels.models import KernelBest, KernelJob
from kernels.runner.package import variants_sha256
from kernels.selectors import VariantTable
from kernels.services.common import _write_json, device_cc_problem, job_manifest, package_dir_of, variants_payload
from kernels.services.jobs import _canonical, kernel_job_create
from kernels.services.progress import _broadcast, _finish, _transition
from kernels.services.results import kernel_best_export, kernel_best_select, kernel_builds_store, kernel_results_store


def kernel_job_export(*, job: KernelJob, out_dir: str | Path) -> dict[str, str]:
    """Write what a machine without Django needs to build and benchmark ``job``: ``variants.json``
    (every variant, less those whose build here failed or was discarded), ``package/<name>/`` (the manifest and the files it lists, copied from the
    package directory), and ``job.json`` (job id, package, target, shapes and batches, the
    ``variants_sha256`` fingerprint of ``variants.json`` that ``bench`` writes into its results, and
    the runner command lines to run there). Returns ``{"variants", "package", "job"}`` paths. Raises
    :class:`InvalidInput` when ``out_dir`` exists and is not an empty directory."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput({"out": [f"{out} exists and is not an empty directory"]})
    out.mkdir(parents=True, exist_ok=True)
    manifest = job_manifest(job)
    src = package_dir_of(job.package)
    dest = out / "package" / job.package.name
    files = {"manifest.toml", *manifest.sources, manifest.reference.partition(":")[0], manifest.entry}
    for rel in sorted(files):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target)
    # Variants whose build failed or was discarded here are not sent: they are never benchmarked.
    sent = variants_payload(job=job, only_buildable=True)
    variants = _write_json(out / "variants.json", sent)
    pkg_arg = f"package/{job.package.name}"
    shapes = f" --shapes {','.join(job.shapes)}" if job.shapes else ""
    batches = f" --batches {','.join(map(str, job.batches))}" if job.batches else ""
    info = {
        "job": job.pk, "package": job.package.name, "package_hash": job.package_hash, "target": job.target,
        "target_cc": job.target_cc, "shapes": job.shapes, "batches": job.batches,
        "variants_sha256": variants_sha256(sent),
        "commands": [
            f"python -m kernels.runner compile --package {pkg_arg} --variants variants.json --target {job.target} "
            "--out builds.json",
            f"python -m kernels.runner bench --package {pkg_arg} --variants variants.json --out results.json"
            f"{shapes}{batches}",
            f"manage.py kernel_job_ingest {job.pk} results.json --builds builds.json",
        ],
    }
    job_file = _write_json(out / "job.json", info)
    return {"variants": str(variants), "package": str(dest), "job": str(job_file)}


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def results_sha256(results: Any, *, params_of: dict[str, Any] | None = None) -> str:
    """sha256 hex digest of a results payload's measurements, whatever the file's layout: the
    canonical JSON (sorted keys, ``(",", ":")`` separators) of the payload with each row's
    ``variant_id`` as text (``1`` and ``"1"`` name one variant) or, given ``params_of`` (the
    variants file's ``{str(variant_id): params}``), as the variant's parameters (a file whose ids
    were renumbered is the same measurement); every number as a float (``17`` and ``17.0`` are
    one value); the rows sorted by (variant, shape, batch); and the device's free-text facts
    (``driver``, ``torch``) and the fingerprint left out, so none of these make a stored file look
    new. Values JSON cannot carry (NaN) are written as Python's ``json`` writes them."""
    return _digest(_normalised(results, params_of=params_of))


def legacy_results_sha256(results: Any) -> str:
    """The digest jobs stored before :func:`results_sha256` normalised the payload (the canonical
    JSON as given): still compared, so a file stored then is still recognised."""
    return _digest(results)


def _digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Device keys of a results file that describe the software around a run, not its measurements.
_FREE_TEXT_DEVICE_KEYS = ("driver", "torch")


def _normalised(value: Any, *, row: bool = False, params_of: dict[str, Any] | None = None) -> Any:
    """``value`` with numbers as floats and, in a result row (``row``), ``variant_id`` as text
    (or its parameters, through ``params_of``); a payload's ``results`` list sorted by (variant,
    shape, batch), its fingerprint and the device's :data:`_FREE_TEXT_DEVICE_KEYS` dropped."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    if not isinstance(value, dict):
        return value
    # the fingerprint names the variants list, not a measurement: with or without it, one file
    out = {k: _normalised(v) for k, v in value.items() if row or k != "variants_sha256"}
    vid = value.get("variant_id")
    if row and isinstance(vid, (int, str)) and not isinstance(vid, bool):
        out["variant_id"] = str(vid)
        if params_of is not None and str(vid) in params_of:
            out["variant_id"] = json.dumps(params_of[str(vid)], sort_keys=True, default=str)
    if not row and isinstance(value.get("device"), dict):
        out["device"] = {k: v for k, v in out["device"].items() if k not in _FREE_TEXT_DEVICE_KEYS}
    if not row and isinstance(value.get("results"), list):
        rows = [_normalised(r, row=True, params_of=params_of) for r in value["results"]]
        out["results"] = sorted(rows, key=lambda r: json.dumps(
            [r.get("variant_id"), r.get("shape"), r.get("batch")] if isinstance(r, dict) else [r], default=str))
    return out


def _fingerprint_of(results: Any) -> str | None:
    """The ``variants_sha256`` a results payload carries (None when it has none: results written
    before the runner recorded it). Raises :class:`InvalidInput` (``variants_sha256``) when the
    value is not a sha256 hex digest."""
    if not isinstance(results, dict) or results.get("variants_sha256") is None:
        return None
    given = results["variants_sha256"]
    if isinstance(given, str):
        given = given.lower()   # hex digits: the case carries nothing
    if not isinstance(given, str) or not SHA256_RE.match(given):
        raise InvalidInput({"variants_sha256": [
            f"must be the sha256 hex digest (64 lowercase hex digits) of the variants the results were "
            f"measured from, got {json_spelled(given)}"]})
    return given


def job_variants_sha256(*, job: KernelJob) -> list[str]:
    """The fingerprints (:func:`kernels.runner.package.variants_sha256`) a ``results.json``
    measured from one of ``job``'s exported variants files can carry: first that of every variant
    of the job, then, when it differs, that of the variants :func:`kernel_job_export` sends once
    some builds failed or were discarded here."""
    every = variants_sha256(variants_payload(job=job))
    buildable = variants_sha256(variants_payload(job=job, only_buildable=True))
    return [every] if buildable == every else [every, buildable]


def _check_results_fingerprint(*, job: KernelJob, results: Any) -> None:
    """Refuse results whose ``variants_sha256`` is not one of :func:`job_variants_sha256`: their
    variant ids number another variants list, and would pair with other parameters here. Results
    without the key are let through (their rows are still matched to this job's variant ids, and
    an id the job does not hold is refused by :func:`kernel_results_store`). Raises
    :class:`InvalidInput` (``variants_sha256``) naming both fingerprints."""
    given = _fingerprint_of(results)
    if given is None:
        return
    expected = job_variants_sha256(job=job)
    if given in expected:
        return
    ours = expected[0] + (f" ({expected[1]} without the variants whose build failed or was discarded)"
                          if len(expected) > 1 else "")
    raise InvalidInput({"variants_sha256": [
        f"the results file was measured from a different variants list: it carries variants_sha256 {given}, "
        f"while the variants of kernel job #{job.pk} give {ours}. Its variant ids belong to that other list "
        "and would be stored against the wrong parameters; ingest it into the job whose export wrote its "
        "variants.json, or create a job from that file (kernel_job_ingest --new PACKAGE --variants variants.json)"]})


def _check_measured_from(given: str | None, listed: str | None) -> None:
    """Refuse results carrying ``variants_sha256`` ``given`` with a variants file whose fingerprint
    is ``listed``: their ids number another list. Results without one (None) pass. Raises
    :class:`InvalidInput` (``variants_sha256``) naming both."""
    if given is not None and given != listed:
        raise InvalidInput({"variants_sha256": [
            f"the results file was measured from a different variants list: it carries variants_sha256 {given}, "
            f"while the variants file given has {listed}; give the variants.json the results were measured from"]})


def _kind(payload: Any) -> str:
    """What a file that is not the runner's payload holds, for the refusal: ``a list``, ``an
    object``, or a scalar's type and JSON text (``str "x"``)."""
    if isinstance(payload, list):
        return "a list"
    if isinstance(payload, dict):
        return "an object"
    return f"{type(payload).__name__} {json.dumps(payload, default=str)[:40]}"


def _results_shape_check(results: Any) -> None:
    """Refuse a results payload that is not the object ``python -m kernels.runner bench`` writes
    (``{"device": {...}, "results": [...], "variants_sha256": ...}``) before anything reads it, so a
    bare list or an empty object is told so rather than about its fingerprint. Raises
    :class:`InvalidInput` (``results``)."""
    if not isinstance(results, dict):
        raise InvalidInput({"results": [
            f"a results file is the JSON object python -m kernels.runner bench writes, {{\"device\": {{...}}, "
            f"\"results\": [...]}}; this one is {_kind(results)}"]})
    missing = [k for k in ("device", "results") if k not in results]
    if missing:
        raise InvalidInput({f"results.{k}": ["is required (python -m kernels.runner bench writes it)"] for k in missing})


def _builds_shape_check(builds: Any) -> None:
    """Refuse a builds payload that is not the non-empty list of build facts ``python -m
    kernels.runner compile`` writes (an object, a scalar or ``[]``) before anything reads it, so
    it is told so rather than about the variants' numbering. Raises :class:`InvalidInput`
    (``builds``)."""
    if not isinstance(builds, list):
        raise InvalidInput({"builds": [
            f"a builds file is the JSON list of build facts python -m kernels.runner compile writes; this one is "
            f"{_kind(builds)}"]})
    if not builds:
        raise InvalidInput({"builds": ["the builds file holds no build: there is nothing to store"]})


def _renumber(payload: Any, key: str | None, ids: dict[str, int], errors: dict[str, list[str]]) -> Any:
    """``payload`` with each row's ``variant_id`` replaced through ``ids`` (the source file's id ->
    this job's); ``key`` names the list in an object payload (None: the payload is the list). An id
    ``ids`` lacks goes into ``errors`` (``<key>.<i>.variant_id``). The fingerprint is dropped: the
    renumbered rows carry this job's ids."""
    rows = payload.get(key) if isinstance(payload, dict) and key else payload
    if not isinstance(rows, list):
        return payload
    out_rows = []
    for i, r in enumerate(rows):
        if isinstance(r, dict) and "variant_id" in r:
            vid = ids.get(str(r["variant_id"]))
            if vid is None:
                errors.setdefault(f"{key or 'builds'}.{i}.variant_id", []).append(
                    f"variant_id {json_spelled(r['variant_id'])} is not in the variants file this job was created from")
            else:
                r = {**r, "variant_id": vid}
        out_rows.append(r)
    if isinstance(payload, dict) and key:
        return {**{k: v for k, v in payload.items() if k != "variants_sha256"}, key: out_rows}
    return out_rows


def kernel_job_ingest(*, job: KernelJob, results: Any = None, builds: Any = None,
                      ids_from_source: bool = False, source_variants: Any = None) -> dict[str, Any]:
    """Store builds and/or results measured elsewhere for ``job`` through the same code path as a
    job run here (:func:`kernel_builds_store`, :func:`kernel_results_store`).

    A pending job waiting for external results is claimed (pending → building → benchmarking →
    done); a done job (e.g. builds only) takes the results and stays done with a note naming the
    device. The progress columns say what was ingested (compile: builds of the variants; bench: the
    measurements), as a job run here leaves them.

    Results carrying ``variants_sha256`` (the runner's fingerprint of the variants it measured)
    must come from this job's variants (:func:`job_variants_sha256`) or, for a job created from
    measurements (:func:`kernel_job_from_measurement`), from the variants file it was made from:
    those rows, and the builds given with them, are renumbered to this job's ids. Results without
    it are paired by ``variant_id`` alone, and a row whose id is not a variant of this job is
    refused; for a job whose ids differ from its source file's, results without it and builds
    without such results are refused (their ids could be either). ``ids_from_source``: the
    payloads use the source file's ids (the creating call). ``source_variants``: the variants
    file (the runner's ``variants.json``) the job was created from, given again to say that the
    payloads use its ids when the results carry no fingerprint (refused unless its
    ``variants_sha256`` is the job's ``source_variants_sha256``).

    Builds stored into a job that already holds measurements re-pick its best variants (a
    variant qualifies only with its build facts, :func:`kernel_best_select`).

    Raises :class:`Conflict` for a job a task is running or one that failed or was cancelled, and
    :class:`InvalidInput` for malformed payloads, results of another variants list, or a results
    file whose ``results`` list is empty (it would store nothing, as :func:`kernel_job_from_measurement`
    refuses it a new job); nothing is stored then.
    """
    if results is None and builds is None:
        raise InvalidInput({"detail": ["give results and/or builds to ingest"]})
    if results is not None:
        _results_shape_check(results)
    job.refresh_from_db()
    if job.status in JOB_RUNNING:
        raise Conflict(f"kernel job #{job.pk} is {job.status} on node {job.node}; wait for it or cancel it first")
    if job.status in (KernelJobStatus.FAILED, KernelJobStatus.CANCELLED):
        raise Conflict(f"kernel job #{job.pk} is {job.status}; create a new job for new measurements")
    if isinstance(results, dict) and results.get("results") == []:
        raise InvalidInput({"results": [
            f"the results file holds no measurement: there is nothing to store into kernel job #{job.pk}"
            + ("; to store the builds alone, leave the results file out" if builds is not None else "")]})
    if builds is not None:
        _builds_shape_check(builds)
    mapping = {str(k): int(v) for k, v in (job.source_variant_ids or {}).items()}
    given = _fingerprint_of(results) if results is not None else None
    if source_variants is not None:
        named = variants_sha256(source_variants) if isinstance(source_variants, list) else None
        if not mapping:
            raise InvalidInput({"variants": [
                f"kernel job #{job.pk} was not created from a variants file (its variant ids are its own): "
                "leave out --variants"]})
        if named != job.source_variants_sha256:
            raise InvalidInput({"variants": [
                f"this variants file (variants_sha256 {named}) is not the one kernel job #{job.pk} was created from "
                f"({job.source_variants_sha256})"]})
        _check_measured_from(given, named)
        ids_from_source = True
    from_source = ids_from_source or (bool(mapping) and given is not None and given == job.source_variants_sha256)
    if results is not None and not from_source:
        # Before the builds are stored: they may change which variants the export would have sent.
        _check_results_fingerprint(job=job, results=results)
    if not from_source and any(k != str(v) for k, v in mapping.items()) and given is None:
        what = "results" if results is not None else "builds"
        raise InvalidInput({what: [
            f"kernel job #{job.pk} was created from a variants file whose ids are not the job's own "
            f"(variants_sha256 {job.source_variants_sha256}); {what} without a variants_sha256 could use either "
            "numbering: give results that carry that fingerprint (the runner writes it) with their builds, or "
            "create a job from the file they were measured from (kernel_job_ingest --new PACKAGE --variants ...)"]})
    if from_source:
        errors: dict[str, list[str]] = {}
        if results is not None:
            results = _renumber(results, "results", mapping, errors)
        if builds is not None:
            builds = _renumber(builds, "builds" if isinstance(builds, dict) else None, mapping, errors)
        if errors:
            raise InvalidInput(errors)
    was_pending = job.status == KernelJobStatus.PENDING
    if was_pending and not _transition(job.pk, {KernelJobStatus.PENDING}, KernelJobStatus.BUILDING,
                                       started_at=timezone.now()):
        raise Conflict(f"kernel job #{job.pk} was claimed by a task meanwhile")
    out: dict[str, Any] = {}
    try:
        with transaction.atomic():  # results refused after the builds were stored: nothing stays
            if builds is not None:
                out["builds"] = kernel_builds_store(job_id=job.pk, payload=builds)
                KernelJob.objects.filter(pk=job.pk, built_at__isnull=True).update(built_at=timezone.now())
                built = out["builds"]["ok"] + out["builds"]["failed"]
                KernelJob.objects.filter(pk=job.pk).update(phase="compile", progress_done=built,
                                                           progress_total=max(built, job.variants_total))
            if results is not None:
                if was_pending:
                    _transition(job.pk, {KernelJobStatus.BUILDING}, KernelJobStatus.BENCHMARKING)
                out["results"] = kernel_results_store(job_id=job.pk, payload=results)
                measured = out["results"]["stored"]
                KernelJob.objects.filter(pk=job.pk).update(phase="bench", progress_done=measured, progress_total=measured)
    except Exception:
        if was_pending:  # back to waiting: a malformed file must not strand the job
            KernelJob.objects.filter(pk=job.pk, status__in=list(JOB_RUNNING)).update(
                status=KernelJobStatus.PENDING, started_at=None)
        raise
    job.refresh_from_db()
    if builds is not None and results is None and job.device_name and job.device_cc:
        # build facts decide which measured variants may be the best: re-pick with them
        kernel_best_select(job=job)
        kernel_best_export(job=job)
    if results is not None:
        note = (f"results measured on {job.device_name} (cc {job.device_cc}) were ingested" if job.device_name
                else "a results file without measurements was ingested")
        if was_pending:
            _finish(job.pk, KernelJobStatus.DONE, "", note=note)
        else:
            if note not in (job.note or ""):  # the same device's results ingested again add nothing new
                KernelJob.objects.filter(pk=job.pk).update(note="; ".join(filter(None, [job.note, note])))
    elif was_pending:
        KernelJob.objects.filter(pk=job.pk, status=KernelJobStatus.BUILDING).update(
            status=KernelJobStatus.PENDING, note="builds ingested; waiting for results measured elsewhere")
    _broadcast(job.pk, force=True)
    job.refresh_from_db()
    out["status"] = job.status
    return out


def kernel_job_export_rows(*, job: KernelJob) -> list[dict[str, Any]]:
    """One flat row per (variant, shape, batch) measurement, plus one row per variant without a
    measurement: variant id (and ``source_variant_id``, the id in the variants.json the job was
    made from, empty otherwise), key, params (``param.<name>``), build facts, discard reason, and the
    benchmark (correctness, errors, times in µs, GB/s, TFLOP/s, roofline µs and fraction, bound).
    A text that is absent (no build error, no discard reason, no bound) is None, never ``""``: null
    in the JSON export, an empty cell in the CSV."""
    manifest = job_manifest(job)
    rows: list[dict[str, Any]] = []
    variants = job.variants.select_related("build").prefetch_related("benchmarks").order_by("ordinal")
    measured_as = job.source_ids()
    for v in variants:
        build = getattr(v, "build", None)
        base: dict[str, Any] = {"variant_id": v.pk, "source_variant_id": measured_as.get(v.pk), "key": v.key}
        base.update({f"param.{p}": v.params.get(p) for p in manifest.params})
        base.update({
            "build_ok": build.ok if build else None, "build_error": build.error if build else None,
            "registers": build.registers if build else None, "spills_bytes": build.spills_bytes if build else None,
            "shared_bytes": build.shared_bytes if build else None,
            "tensor_core": build.tensor_core if build else None,
            "tensor_core_evidence": build.tensor_core_evidence if build else None,
            "build_s": build.build_s if build else None, "compiler": build.compiler if build else None,
            "discarded": build.discarded if build else None, "discard_reason": build.discard_reason if build else None,
        })
        benches = list(v.benchmarks.all())
        if not benches:
            rows.append({**base, **{k: None for k in BENCH_COLUMNS}})
        for b in benches:
            rows.append({**base, **{k: getattr(b, k) for k in BENCH_COLUMNS}})
    return [{k: None if v == "" else v for k, v in row.items()} for row in rows]


BENCH_COLUMNS = ("shape", "batch", "correct", "max_abs_err", "max_rel_err", "error", "median_us", "p10_us",
                 "p90_us", "min_us", "reps", "gbps", "tflops", "roofline_us", "roofline_fraction", "bound", "timing")


def kernel_job_export_csv(*, job: KernelJob) -> str:
    """The job's measurements as CSV (:func:`kernel_job_export_rows`; empty cells for absent values;
    times µs, GB/s, TFLOP/s, bytes); text cells a spreadsheet would read as a formula (an error
    message starting with ``=``) are quoted by :func:`controlplane.csvsafe.csv_cell`."""
    rows = kernel_job_export_rows(job=job)
    return csv_text(rows, list(rows[0])) if rows else ""


#: The variant table's build facts as CSV columns (named as in :func:`kernel_job_export_rows`):
#: column → key of a table row's ``build``.
TABLE_BUILD_COLUMNS = {"build_ok": "ok", "build_error": "error", "registers": "registers",
                       "spills_bytes": "spills_bytes", "shared_bytes": "shared_bytes", "tensor_core": "tensor_core",
                       "tensor_core_evidence": "tensor_core_evidence", "build_s": "build_s", "compiler": "compiler",
                       "discarded": "discarded", "discard_reason": "discard_reason"}


def variant_table_csv(*, table: VariantTable) -> str:
    """The rows of a variant table (:func:`kernels.selectors.variant_table`, filtered and sorted)
    as CSV, one line per variant, its JSON row flattened: ``variant_id``, ``source_variant_id``,
    ``ordinal``, ``key``, ``param.<name>`` per grid parameter, ``state``, ``batch`` (the batch the
    per-shape columns are measured at), the build facts (:data:`TABLE_BUILD_COLUMNS`), then per
    shape ``<shape>.best`` (the job's best there at that batch) and ``<shape>.<measurement>`` for
    each of :data:`BENCH_COLUMNS` but shape and batch (``small.median_us``). Units are in the
    names: µs, s, bytes, GB/s, TFLOP/s; ``roofline_fraction`` is 0-1. Absent values are empty
    cells; text cells a spreadsheet would read as a formula are quoted
    (:func:`controlplane.csvsafe.csv_cell`)."""
    measures = BENCH_COLUMNS[2:]
    columns = ["variant_id", "source_variant_id", "ordinal", "key", *(f"param.{p}" for p in table.params), "state",
               "batch", *TABLE_BUILD_COLUMNS]
    for shape in table.shapes:
        columns += [f"{shape}.best", *(f"{shape}.{m}" for m in measures)]
    rows = []
    for r in table.rows:
        build = r["build"] or {}
        row = {"variant_id": r["id"], "source_variant_id": r["source_variant_id"], "ordinal": r["ordinal"],
               "key": r["key"], "state": r["state"], "batch": table.batch,
               **{f"param.{p}": r["params"].get(p) for p in table.params},
               **{column: build.get(key) for column, key in TABLE_BUILD_COLUMNS.items()}}
        for shape in table.shapes:
            cell = r["shapes"].get(shape) or {}
            row[f"{shape}.best"] = shape in r["best_in"]
            row.update({f"{shape}.{m}": cell.get(m) for m in measures})
        rows.append(row)
    return csv_text(rows, columns)


def kernel_job_export_json(*, job: KernelJob) -> str:
    """The job as indented JSON: ``{"job": {...status, target, device calibration...}, "grid":
    {...}, "best": [...], "rows": [...]}`` (rows as :func:`kernel_job_export_rows`); a text the job
    does not have (``reason``, ``note``, the device texts before a benchmark ran) is null, never ``""``."""
    def text(value: str) -> str | None:
        return value or None

    body = {
        "job": {
            "id": job.pk, "package": job.package.name, "package_hash": text(job.package_hash), "status": job.status,
            "reason": text(job.reason), "note": text(job.note), "target_cc": job.target_cc,
            "node": job.node.name if job.node else None, "compiler": text(job.compiler),
            "device": {"name": text(job.device_name), "cc": text(job.device_cc), "sm_count": job.sm_count,
                       "l2_bytes": job.l2_bytes, "hbm_gbps": job.hbm_gbps, "bf16_tflops": job.bf16_tflops,
                       "driver": text(job.driver_version), "cuda": text(job.cuda_version),
                       "torch": text(job.torch_version), "triton": text(job.triton_version)},
            "build_s": job.build_s, "bench_s": job.bench_s, "config_paths": job.config_paths,
        },
        "grid": grid_summary_read(job.grid_summary),
        "best": [{"shape": b.shape, "batch": b.batch, "variant_id": b.variant_id, "key": b.variant.key,
                  "median_us": b.median_us, "speedup": b.speedup, "roofline_fraction": b.roofline_fraction,
                  "config_path": text(b.config_path)}
                 for b in KernelBest.objects.filter(job=job).select_related("variant")],
        "rows": kernel_job_export_rows(job=job),
    }
    return json.dumps(json_safe(body), indent=2, default=str)


def kernel_best_for(*, best_id: int) -> KernelBest:
    """The :class:`KernelBest` row ``best_id``; :class:`NotFound` when there is none."""
    row = KernelBest.objects.select_related("package", "variant").filter(pk=best_id).first()
    if row is None:
        raise NotFound(f"no best kernel variant with id {best_id}")
    return row


def kernel_job_from_measurement(*, package, variants: Any, results: Any, builds: Any = None, user=None) -> KernelJob:
    """Create a job holding exactly the variants of a ``variants.json`` run elsewhere (the runner's
    input: ``[{"variant_id", "params"}]``) and store that run's ``results.json`` (and
    ``builds.json``) through :func:`kernel_job_ingest`, so measurements from a GPU host without
    Django land exactly as a job run on a node would store them.

    The runner's variant ids are mapped to this database's rows by their params (the variant key);
    the job keeps that mapping and the file's fingerprint, so results or builds of the same file
    ingested later are renumbered the same way (:func:`kernel_job_ingest`).
    Raises :class:`InvalidInput` for a malformed ``variants`` list, a param set outside the
    package's grid, results whose ``variants_sha256`` is not that of ``variants`` (they were
    measured from another list), a result or build whose ``variant_id`` is not in ``variants``, or
    a results file already stored as a job of this package (same canonical JSON,
    :func:`results_sha256`); nothing is stored then.
    """
    if not isinstance(variants, list) or not all(
            isinstance(v, dict) and isinstance(v.get("params"), dict) and "variant_id" in v for v in variants):
        raise InvalidInput({"variants": ['expected the runner\'s variants.json: [{"variant_id": ..., "params": {...}}]']})
    if not variants:
        raise InvalidInput({"variants": ["the variants file lists no variant: give the variants.json the results "
                                         "were measured from"]})
    bad_ids = {f"variants.{i}.variant_id": [
                   f"must be a whole number or a non-empty text, got {json_spelled(v['variant_id'])}"]
               for i, v in enumerate(variants)
               if isinstance(v["variant_id"], bool) or not isinstance(v["variant_id"], (int, str))
               or v["variant_id"] == ""}
    if bad_ids:
        raise InvalidInput(bad_ids)
    seen_ids: dict[str, int] = {}
    seen_params: dict[str, int] = {}
    for i, v in enumerate(variants):
        first = seen_ids.setdefault(str(v["variant_id"]), i)
        if first != i:
            raise InvalidInput({f"variants.{i}.variant_id": [
                f"variant_id {json_spelled(v['variant_id'])} repeats variants.{first}: each variant needs its own id"]})
        first = seen_params.setdefault(_canonical(v["params"]), i)
        if first != i:
            raise InvalidInput({f"variants.{i}.params": [
                f"repeat the params of variants.{first} (variant_id {json_spelled(variants[first]['variant_id'])}): "
                "one variant, two ids, whose results could not be told apart"]})
    device = results.get("device") if isinstance(results, dict) else None
    if not isinstance(device, dict):
        raise InvalidInput({"device" if isinstance(results, dict) else "results": [
            'expected the runner\'s results.json: {"device": {"name", "cc", ...}, "results": [...]}']})
    if not isinstance(device.get("cc"), str) or not device["cc"]:
        raise InvalidInput({"device.cc": ["is required: the compute capability the results were measured on "
                                          "(e.g. 9.0), the job's target"]})
    # before the job is made for that target: its variants would be chosen for the wrong GPU
    if problem := device_cc_problem(str(device.get("name") or ""), device["cc"]):
        raise InvalidInput({"device.cc": [problem]})
    if not isinstance(results.get("results"), list) or not results["results"]:
        raise InvalidInput({"results": ["the results file holds no measurement: a job made from it would be done "
                                         "with nothing to show"]})
    given, listed = _fingerprint_of(results), variants_sha256(variants)
    digest = results_sha256(results, params_of={str(v["variant_id"]): v["params"] for v in variants})
    earlier = KernelJob.objects.filter(package=package, source_results_sha256__in=[
        digest, results_sha256(results), legacy_results_sha256(results)]).order_by("pk").first()
    if earlier is not None:
        again = (f"kernel_job_ingest {earlier.pk} results.json" if given is not None else
                 f"kernel_job_ingest {earlier.pk} results.json --variants variants.json (the results carry no "
                 "variants_sha256: the variants file says their ids are its own)")
        raise InvalidInput({"results": [
            f"this results file is already stored as kernel job #{earlier.pk} ({earlier.status}); a second job would "
            f"hold the same measurements twice: to store it again into that job, run {again}"]})
    _check_measured_from(given, listed)
    known = {str(v["variant_id"]) for v in variants}
    unknown: dict[str, list[str]] = {}
    for key, rows in (("results", results.get("results") if isinstance(results, dict) else None),
                      ("builds", builds if isinstance(builds, list) else
                       builds.get("builds") if isinstance(builds, dict) else None)):
        for i, row in enumerate(rows if isinstance(rows, list) else []):
            if isinstance(row, dict) and "variant_id" in row and str(row["variant_id"]) not in known:
                unknown[f"{key}.{i}.variant_id"] = [
                    f"variant_id {json_spelled(row['variant_id'])} is not in the variants file"]
    # The job's shapes and batches are those measured (the file's rows), not "all the manifest's".
    measured = [r for r in (results.get("results") or []) if isinstance(r, dict)] \
        if isinstance(results.get("results"), list) else []
    shapes = [s for s in dict.fromkeys(r.get("shape") for r in measured) if isinstance(s, str)]
    batches = sorted({b for r in measured if isinstance(b := r.get("batch"), int) and not isinstance(b, bool)})
    with transaction.atomic():  # a refused file leaves no job behind
        try:
            job = kernel_job_create(package=package, node=None, cc=device["cc"], shapes=shapes, batches=batches,
                                    only=[v["params"] for v in variants], only_ids=[v["variant_id"] for v in variants],
                                    dispatch=False, user=user)
        except InvalidInput as exc:
            raise InvalidInput({**exc.errors, **unknown}) from None
        if unknown:
            raise InvalidInput(unknown)
        rows = {_canonical(v.params): v.pk for v in job.variants.all()}
        ids = {str(v["variant_id"]): rows[_canonical(v["params"])] for v in variants}
        # The file's ids stay usable: later results or builds carrying its fingerprint are renumbered.
        KernelJob.objects.filter(pk=job.pk).update(source_variants_sha256=listed, source_variant_ids=ids,
                                                   source_results_sha256=digest)
        job.refresh_from_db()
        kernel_job_ingest(job=job, results=results, builds=builds, ids_from_source=True)
    job.refresh_from_db()
    return job
