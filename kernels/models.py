"""Rows of the kernels app: packages, jobs, variants, their builds and benchmarks, and the best
variant per (device, compute capability, shape bucket, compiler).

Rows are the truth: a job's status, progress, failure reason and timings live on its row and are
driven by :mod:`kernels.services`; Celery state is never consulted. Units are in the field names
(``_us`` microseconds, ``_s`` seconds, ``_bytes`` bytes, ``gbps`` GB/s = 1e9 bytes/s, ``tflops``
1e12 FLOP/s).
"""
from __future__ import annotations

import re
import sys

from django.conf import settings
from django.db import models
from simple_history.models import HistoricalRecords

from kernels.choices import Bound, KernelJobStatus, Language, TensorCoreEvidence

# The text of a whole number as JSON writes one (``str()`` of an ``int``): a variants file's id
# stored as this text may have been a JSON number (:meth:`KernelJob.source_ids`).
_WHOLE_NUMBER = re.compile(r"0|-?[1-9][0-9]*")


class KernelPackage(models.Model):
    """A kernel package registered from ``kernels/packages/<name>/`` (``manage.py
    kernel_register`` or ``seed``): ``manifest`` is the validated manifest
    (:meth:`kernels.manifest.Manifest.as_dict`), ``source_hash`` the SHA-256 over the manifest and
    every listed file (:func:`kernels.manifest.package_source_hash`), ``path`` the directory
    (relative to the repository root when inside it). Each re-registration that changes the
    manifest or the sources is a new history row."""

    name = models.CharField(max_length=63, unique=True)
    title = models.CharField(max_length=200)
    language = models.CharField(max_length=16, choices=Language.choices)
    description = models.TextField(blank=True)
    manifest = models.JSONField(default=dict)
    source_hash = models.CharField(max_length=64)
    path = models.CharField(max_length=1024)
    registered_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    history = HistoricalRecords(excluded_fields=["updated_at"])

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class KernelJob(models.Model):
    """One build-and-benchmark job of a package for one target (``target_cc``, e.g. ``"9.0"``).

    States (:class:`kernels.choices.KernelJobStatus`): pending → building → benchmarking → done,
    or failed / cancelled; ``reason`` says why a job failed or was cancelled and ``note`` adds
    what a done job did not do ("no GPU on node <name>: builds only"). ``node`` is where the job
    runs (its agent's queue ``node.<name>``); null for a job whose builds and measurements are
    made elsewhere and ingested (``manage.py kernel_job_export`` / ``kernel_job_ingest``).
    ``params_subset`` restricts the grid; ``shapes`` / ``batches`` restrict the benchmark (empty =
    all). ``grid_summary`` is :meth:`kernels.manifest.GridExpansion.as_dict`. Progress: ``phase``
    (``compile`` / ``bench``), ``progress_done`` / ``progress_total`` of that phase. Device
    calibration, measured by the benchmark itself: ``hbm_gbps`` (GB/s), ``bf16_tflops``
    (TFLOP/s), with device name, compute capability, SM count, L2 size (bytes) and the driver,
    CUDA, torch and Triton versions. ``compiler`` is what built the variants ("triton 3.6.0",
    "nvcc 13.0"). ``config_paths`` lists the best-config files exported when the job finished.
    """

    package = models.ForeignKey(KernelPackage, on_delete=models.PROTECT, related_name="jobs")
    package_hash = models.CharField(max_length=64, blank=True, help_text="source hash when the job was created")
    manifest = models.JSONField(default=dict, help_text="the manifest when the job was created")
    node = models.ForeignKey("deployments.Node", null=True, blank=True, on_delete=models.PROTECT,
                             related_name="kernel_jobs")
    target_cc = models.CharField(max_length=8, help_text="compute capability, e.g. 9.0")
    params_subset = models.JSONField(default=dict, blank=True)
    shapes = models.JSONField(default=list, blank=True)
    batches = models.JSONField(default=list, blank=True)
    grid_summary = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=KernelJobStatus.choices, default=KernelJobStatus.PENDING)
    reason = models.TextField(blank=True)
    note = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    cancelled_by = models.CharField(max_length=150, blank=True,
                                    help_text="the name of the user who asked for the cancel, for the reason it records")
    phase = models.CharField(max_length=16, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    variants_total = models.PositiveIntegerField(default=0)
    builds_ok = models.PositiveIntegerField(default=0)
    builds_failed = models.PositiveIntegerField(default=0)
    builds_discarded = models.PositiveIntegerField(default=0)
    benchmarks_total = models.PositiveIntegerField(default=0)
    benchmarks_correct = models.PositiveIntegerField(default=0)
    benchmarks_wrong = models.PositiveIntegerField(default=0)
    compiler = models.CharField(max_length=64, blank=True)
    device_name = models.CharField(max_length=128, blank=True)
    device_cc = models.CharField(max_length=8, blank=True)
    sm_count = models.PositiveIntegerField(null=True, blank=True)
    l2_bytes = models.BigIntegerField(null=True, blank=True)
    hbm_gbps = models.FloatField(null=True, blank=True, help_text="measured HBM bandwidth, GB/s")
    bf16_tflops = models.FloatField(null=True, blank=True, help_text="measured dense bf16 rate, TFLOP/s")
    driver_version = models.CharField(max_length=64, blank=True)
    cuda_version = models.CharField(max_length=32, blank=True)
    torch_version = models.CharField(max_length=64, blank=True)
    triton_version = models.CharField(max_length=64, blank=True)
    config_paths = models.JSONField(default=list, blank=True)
    source_variants_sha256 = models.CharField(
        max_length=64, blank=True,
        help_text="variants_sha256 of the variants file a job created from measurements was made from")
    source_results_sha256 = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="sha256 of the canonical JSON of the results file a job created from measurements stored "
                  "(the same file is refused a second job)")
    source_variant_ids = models.JSONField(
        default=dict, blank=True,
        help_text="that file's variant ids -> this job's variant ids (results and builds carrying the "
                  "file's fingerprint are renumbered with it)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    built_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    build_s = models.FloatField(null=True, blank=True, help_text="wall time of the compile step, s")
    bench_s = models.FloatField(null=True, blank=True, help_text="wall time of the benchmark step, s")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]
        constraints = [
            # One kernel job per node building or benchmarking at a time: a build uses every core
            # and a benchmark needs the GPU alone, so two at once skew each other's timings. A job
            # whose node is busy stays pending (kernels.services.jobs.kernel_job_execute). Jobs
            # without a node (results measured elsewhere) never collide: NULLs are distinct.
            models.UniqueConstraint(
                fields=["node"],
                condition=models.Q(status__in=[KernelJobStatus.BUILDING.value, KernelJobStatus.BENCHMARKING.value]),
                name="kernels_one_running_job_per_node",
                violation_error_message="the node already runs a kernel job (building or benchmarking)",
            ),
        ]

    def __str__(self) -> str:
        return f"kernel job #{self.pk} ({self.package_id})"

    def source_ids(self) -> dict[int, int | str]:
        """``{variant row id: the variant_id the measuring machine's variants.json gave it}`` for a
        job made from a measurement, in that file's JSON type (a number an ``int``, a text a
        ``str``); empty for any other job. One query (the job's variants).

        :attr:`source_variant_ids` keys the file's ids as text (JSON object keys are text, and ``1``
        and ``"1"`` name one variant when results are renumbered), so the type is read back from
        :attr:`source_variants_sha256`, the file's fingerprint, which hashes every id with its JSON
        type (:func:`kernels.runner.package.variants_sha256`): when the job's variants with each
        whole-number id as a number give that fingerprint, the file wrote those ids as numbers.
        Other ids, and every id when no reading gives the fingerprint (a file mixing ``1`` and
        ``"2"``), are text, as the file wrote them or as the stored map holds them."""
        ids = {str(file_id): int(pk) for file_id, pk in (self.source_variant_ids or {}).items()}
        typed: dict[int, int | str] = {pk: file_id for file_id, pk in ids.items()}
        # an id of more digits than int() reads (4300; 0 is no limit) was text: no JSON number is that long
        limit = sys.get_int_max_str_digits()
        numbers = {file_id: int(file_id) for file_id in ids if _WHOLE_NUMBER.fullmatch(file_id)
                   and (not limit or len(file_id.removeprefix("-")) <= limit)}
        if numbers and self.source_variants_sha256:
            from kernels.runner.package import variants_sha256

            params = dict(self.variants.filter(pk__in=ids.values()).values_list("pk", "params"))
            read = [{"variant_id": numbers.get(file_id, file_id), "params": params.get(pk)}
                    for file_id, pk in ids.items()]
            if variants_sha256(read) == self.source_variants_sha256:
                typed = {pk: numbers.get(file_id, file_id) for file_id, pk in ids.items()}
        return typed

    @property
    def known_triton_version(self) -> str:
        """The job's Triton version: :attr:`triton_version`, else the version a Triton
        :attr:`compiler` names (``"3.6.0"`` of ``"triton 3.6.0"``, for a job stored before builds
        set it); ``""`` when neither names one."""
        name, _, version = self.compiler.partition(" ")
        return self.triton_version or (version if name.lower() == "triton" else "")

    @property
    def target(self) -> str:
        """The runner's target string: ``cuda:90`` for compute capability 9.0."""
        return "cuda:" + self.target_cc.replace(".", "")


class KernelVariant(models.Model):
    """One parameter set of a job's grid: ``params`` (manifest order) and its canonical ``key``
    (:func:`kernels.manifest.variant_key`). The row id is the ``variant_id`` of the runner's
    ``variants.json``."""

    job = models.ForeignKey(KernelJob, on_delete=models.CASCADE, related_name="variants")
    ordinal = models.PositiveIntegerField()
    key = models.CharField(max_length=512)
    params = models.JSONField(default=dict)

    class Meta:
        ordering = ["job", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["job", "key"], name="uniq_variant_key_per_job")]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.key}"


class KernelBuild(models.Model):
    """Build facts of one variant for its job's target, as the runner's ``compile`` reported them:
    ``ok`` and the compiler ``error``; registers per thread, bytes spilled to local memory,
    static + dynamic shared memory per block (bytes); tensor-core use and the instruction that
    showed it (``wgmma``/``mma`` in PTX or SASS); build time (s); compiler and a truncated log.
    ``discarded`` with ``discard_reason`` when the variant may not be benchmarked: it spills, or it
    needs more shared memory per block than the target allows (:data:`kernels.services.SHARED_MEM_LIMIT_BYTES`).
    """

    variant = models.OneToOneField(KernelVariant, on_delete=models.CASCADE, related_name="build")
    ok = models.BooleanField()
    error = models.TextField(blank=True)
    registers = models.PositiveIntegerField(null=True, blank=True)
    spills_bytes = models.PositiveIntegerField(null=True, blank=True)
    shared_bytes = models.PositiveIntegerField(null=True, blank=True)
    tensor_core = models.BooleanField(null=True)
    tensor_core_evidence = models.CharField(max_length=8, choices=TensorCoreEvidence.choices, blank=True)
    build_s = models.FloatField(null=True, blank=True)
    compiler = models.CharField(max_length=64, blank=True)
    log = models.TextField(blank=True)
    discarded = models.BooleanField(default=False)
    discard_reason = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"build of {self.variant_id}"


class KernelBenchmark(models.Model):
    """One (shape, batch) measurement of a variant on its job's device.

    ``correct`` against the package's PyTorch reference within its tolerance (max absolute and
    relative error kept); a wrong variant has no timing. Times in µs over ``reps`` repetitions
    (median, p10, p90, min); ``gbps`` = bytes / median (GB/s), ``tflops`` = FLOPs / median
    (TFLOP/s), both from the manifest's cost formulas; ``roofline_us`` = max(bytes / measured HBM
    bandwidth, FLOPs / measured bf16 rate), ``roofline_fraction`` = roofline_us / median_us (0-1)
    and ``bound`` which term is larger. ``timing`` is the runner's note on the method (CUDA graph
    replays of rotated input sets, or eager launches when capture failed).
    """

    variant = models.ForeignKey(KernelVariant, on_delete=models.CASCADE, related_name="benchmarks")
    shape = models.CharField(max_length=63)
    batch = models.PositiveIntegerField()
    correct = models.BooleanField(null=True)
    max_abs_err = models.FloatField(null=True, blank=True)
    max_rel_err = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    median_us = models.FloatField(null=True, blank=True, db_index=True)
    p10_us = models.FloatField(null=True, blank=True)
    p90_us = models.FloatField(null=True, blank=True)
    min_us = models.FloatField(null=True, blank=True)
    reps = models.PositiveIntegerField(null=True, blank=True)
    gbps = models.FloatField(null=True, blank=True)
    tflops = models.FloatField(null=True, blank=True)
    roofline_us = models.FloatField(null=True, blank=True)
    roofline_fraction = models.FloatField(null=True, blank=True)
    bound = models.CharField(max_length=8, choices=Bound.choices, blank=True)
    timing = models.CharField(max_length=255, blank=True, help_text="how it was timed, as the runner says")
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["variant", "shape", "batch"]
        constraints = [
            models.UniqueConstraint(fields=["variant", "shape", "batch"], name="uniq_benchmark_per_variant_point"),
        ]

    def __str__(self) -> str:
        return f"{self.variant_id} {self.shape} b={self.batch}"


class KernelBest(models.Model):
    """The fastest correct variant of a package for one bucket: (device name, compute capability,
    shape bucket = shape name and batch, compiler version). Unique per bucket; replaced when a
    later job measures a faster variant or when the package's sources changed since
    (:func:`kernels.services.kernel_best_select`). ``speedup`` is the baseline implementation's
    best median over this one's (None when the grid has no ``impl = "baseline"``);
    ``config_path`` the exported JSON file holding this bucket."""

    package = models.ForeignKey(KernelPackage, on_delete=models.CASCADE, related_name="best")
    device_name = models.CharField(max_length=128)
    cc = models.CharField(max_length=8)
    shape = models.CharField(max_length=63)
    batch = models.PositiveIntegerField()
    compiler = models.CharField(max_length=64)
    job = models.ForeignKey(KernelJob, on_delete=models.CASCADE, related_name="best")
    variant = models.ForeignKey(KernelVariant, on_delete=models.CASCADE, related_name="+")
    benchmark = models.ForeignKey(KernelBenchmark, on_delete=models.CASCADE, related_name="+")
    package_hash = models.CharField(max_length=64, blank=True)
    median_us = models.FloatField()
    roofline_fraction = models.FloatField(null=True, blank=True)
    baseline_us = models.FloatField(null=True, blank=True)
    speedup = models.FloatField(null=True, blank=True)
    config_path = models.CharField(max_length=1024, blank=True)
    selected_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["package", "device_name", "shape", "batch"]
        constraints = [
            models.UniqueConstraint(fields=["package", "device_name", "cc", "shape", "batch", "compiler"],
                                    name="uniq_best_per_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.package_id} {self.device_name} {self.shape_bucket}"

    @property
    def shape_bucket(self) -> str:
        """``v4-flash/batch=8``: the shape and batch this row is the best for."""
        return f"{self.shape}/batch={self.batch}"
