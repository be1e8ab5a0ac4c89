"""Status enums and fixed vocabularies of the kernels app."""
from django.db import models


class Language(models.TextChoices):
    """How a kernel package is written: the runner compiles Triton with ``triton.compile`` and
    CUDA C++ with ``nvcc``."""

    TRITON = "triton", "Triton"
    CUDA = "cuda", "CUDA C++"


class KernelJobStatus(models.TextChoices):
    """Life of a kernel job: pending → building → benchmarking → done, or failed (``reason`` says
    why) or cancelled. A job on a node without a matching GPU goes building → done with the note
    "no GPU on node <name>: builds only". ``done``, ``failed`` and ``cancelled`` are terminal."""

    PENDING = "pending", "pending"
    BUILDING = "building", "building"
    BENCHMARKING = "benchmarking", "benchmarking"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


JOB_TERMINAL = {KernelJobStatus.DONE, KernelJobStatus.FAILED, KernelJobStatus.CANCELLED}
JOB_ACTIVE = {KernelJobStatus.PENDING, KernelJobStatus.BUILDING, KernelJobStatus.BENCHMARKING}
JOB_RUNNING = {KernelJobStatus.BUILDING, KernelJobStatus.BENCHMARKING}


class TensorCoreEvidence(models.TextChoices):
    """What the compiled code showed: Hopper warp-group MMA (``wgmma``), warp-level MMA (``mma``,
    Ampere and later), or neither."""

    WGMMA = "wgmma", "wgmma (warp-group MMA)"
    MMA = "mma", "mma (warp MMA)"
    NONE = "none", "none"


class Bound(models.TextChoices):
    """Which roofline term is larger for a (shape, batch): bytes / HBM bandwidth (memory) or
    FLOPs / dense bf16 rate (compute)."""

    MEMORY = "memory", "memory-bound"
    COMPUTE = "compute", "compute-bound"
