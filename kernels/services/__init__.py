"""Business logic of kernel packages and jobs: register, create, cancel, execute (the task body),
store build facts and benchmark results, pick the best variant per bucket, export configs, and
move jobs to and from machines without Django (export / ingest).

Rules and where they come from:

* A job expands its package's grid when it is created (:func:`kernels.manifest.grid_expand`), so
  its variants exist before anything is built; the task runs on the node's queue ``node.<name>``
  (the node agent, like deployments) and calls the runner as a subprocess
  (:mod:`kernels.runnercall`).
* A variant that spills registers to local memory, or needs more shared memory per block than the
  target allows, is discarded before benchmarking, with the reason. Limits per compute capability:
  :data:`SHARED_MEM_LIMIT_BYTES`.
* Benchmarks run only when the node has a GPU of the job's compute capability (a ``Gpu`` row);
  otherwise the job ends ``done`` after the builds with the note "no GPU on node <name>: builds
  only". A wrong variant is never timed (any timing sent with ``correct: false`` is dropped).
* The best variant per (device name, compute capability, shape bucket = shape and batch, compiler
  version) is the correct, non-discarded variant with the lowest median; a stored best is replaced
  when a later job measures a lower median, or when the package's sources changed since.
* Best configs are exported as JSON keyed by batch size, one file per (device, shape, dtype), in
  the layout SGLang and vLLM use for tuned Triton kernel configs (SGLang
  ``python/sglang/srt/layers/moe/fused_moe_triton/configs/*/E=..,N=..,device_name=NVIDIA_H100_80GB_HBM3.json``,
  vLLM ``vllm/model_executor/layers/fused_moe/configs/``: ``{"1": {"BLOCK_SIZE_M": 16, ...},
  "2": {...}}``, device name with spaces as underscores).
* Cancellation is a column: :func:`kernel_job_cancel` sets ``cancel_requested``; the running task
  sees it within half a second and ends the runner's process group.

Modules: :mod:`.common` (directories, limits, stored manifests, ``variants.json``),
:mod:`.packages` (registration), :mod:`.progress` (status transitions, progress, broadcasts),
:mod:`.jobs` (create, cancel, execute, reap), :mod:`.results` (build facts, results, best variants,
exported configs), :mod:`.transfer` (export / ingest, CSV and JSON of a job, CSV of its variant
table). Everything public is importable from ``kernels.services``.
"""
from __future__ import annotations

from kernels.services.common import (  # noqa: F401
    BUILD_LOG_CHARS,
    CC_RE,
    DEFAULT_STEP_TIMEOUT_S,
    KNOWN_CCS,
    MAX_JOB_VARIANTS,
    NO_GPU_NOTE,
    NO_GPU_PREFIX,
    PROGRESS_PERIOD_S,
    SHARED_MEM_LIMIT_BYTES,
    configs_dir,
    job_manifest,
    jobs_dir,
    builds_only_plan_note,
    no_gpu_note,
    node_gpu_names,
    package_dir_of,
    package_grid,
    package_manifest,
    packages_dir,
    variants_payload,
)
from kernels.services.packages import (  # noqa: F401
    kernel_package_register,
    kernel_packages_register_all,
)
from kernels.services.progress import (  # noqa: F401
    job_progress_data,
    job_progress_total,
    kernel_job_waiting_reason,
)
from kernels.services.jobs import (  # noqa: F401
    cc_problem,
    kernel_job_cancel,
    kernel_job_check,
    kernel_job_create,
    kernel_job_enqueue,
    kernel_job_execute,
    kernel_jobs_reap,
)
from kernels.services.results import (  # noqa: F401
    build_discard_reason,
    config_filename,
    kernel_best_export,
    kernel_best_select,
    kernel_builds_store,
    kernel_results_store,
    roofline_point,
    shared_limit_bytes,
)
from kernels.services.transfer import (  # noqa: F401
    BENCH_COLUMNS,
    job_variants_sha256,
    kernel_best_for,
    kernel_job_export,
    kernel_job_export_csv,
    kernel_job_export_json,
    kernel_job_export_rows,
    kernel_job_ingest,
    kernel_job_from_measurement,
    variant_table_csv,
)
