"""Status enums and fixed vocabularies of the benchmarks app."""
from django.db import models


class SweepStatus(models.TextChoices):
    """Life of a sweep: pending → waiting (for the deployment to be ready) → running → done,
    or failed (``reason`` says why) or cancelled. ``done``, ``failed`` and ``cancelled`` are terminal."""

    PENDING = "pending", "pending"
    WAITING = "waiting", "waiting for the deployment"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


SWEEP_TERMINAL = {SweepStatus.DONE, SweepStatus.FAILED, SweepStatus.CANCELLED}
SWEEP_ACTIVE = {SweepStatus.PENDING, SweepStatus.WAITING, SweepStatus.RUNNING}


class RunStatus(models.TextChoices):
    """One grid point: running → done | failed (``reason``) | cancelled. Imported runs are done."""

    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


class RunSource(models.TextChoices):
    """Where a run's numbers came from: measured by Ceiling's load generator, or imported."""

    MEASURED = "measured", "measured"
    IMPORTED = "imported", "imported"


class ImportFormat(models.TextChoices):
    """Other harnesses' result files :mod:`benchmarks.importers` reads."""

    SGLANG_BENCH_SERVING = "sglang-bench-serving", "SGLang bench_serving JSONL"
    VLLM_BENCH_SERVE = "vllm-bench-serve", "vLLM bench serve JSON"
